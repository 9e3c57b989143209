"""The helm chart with TensorFlow Serving's command line (server.interface=tfserving), as the
tensorflow/serving image runs it: `tensorflow_model_server --port=8500 --rest_api_port=8501 --model_name
--model_base_path` (or --model_config_file), its ports in the pod and on the Service, probes on its REST
port, settings passed as the flags tensorflow_model_server takes them from, user flags last, and what the
chart refuses. The rendered command line and variables go through the servers' own parsers, so what is
asserted is the Settings the server would start with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.tfserving_cli import parse_flags, settings_from_flags
from tests.deploy.conftest import CHART, GRPC_PROBES, PROFILES, environment, find, notes, run_helm, server, settings_of

TFSERVING = tuple(PROFILES["tfserving"])
# A value for every setting of values.schema.json, none of them the default of `tensorgate serve` or of
# tensorflow_model_server's flags where that can be (a boolean whose defaults differ takes the opposite
# of the flag's), so that a value lost on its way to the server shows.
SAMPLE_SETTINGS = {
    "allow_version_labels_for_unavailable_models": True, "access_log": True, "archive_max_bytes": 123456,
    "archive_max_files": 11, "archive_max_ratio": 4.5, "batching": True, "batching_allowed_batch_sizes": [4, 8, 16],
    "batching_batch_timeout_micros": 500, "batching_max_batch_size": 16, "batching_max_enqueued_batches": 10,
    "batching_num_batch_threads": 2, "batching_parameters_file": "/models/batching.config", "check_input_shapes": False,
    "compile_kernels_in_background": False, "compiled_kernels": False, "cors": True, "cuda_graphs": False,
    "device": "cpu:0", "executor_cache_capacity": 5,
    "grpc_alts": True, "grpc_channel_arguments": "grpc.max_connection_age_ms=2000", "grpc_socket_path": "/tmp/grpc.sock",
    "grpc_ssl_config_file": "/models/ssl.config", "inference_threads": 3, "inline_compute_us": 25.5,
    "kernel_cache_dir": "/tmp/kernels", "kernel_threads": 2, "load_retries": 3, "load_retry_interval_s": 1.5,
    "load_threads": 3, "load_on_demand": True, "log_level": "warning", "max_loop_iterations": 999, "max_queued_requests": 9,
    "max_request_bytes": 1000001, "max_request_memory_bytes": 4000004, "max_response_bytes": 3000003,
    "max_upload_bytes": 2000002, "model_idle_unload_s": 30.5, "model_memory_bytes": 5000005, "model_config_file": "/models/models.config", "model_config_file_poll_wait_seconds": 7,
    "monitoring_config_file": "/models/monitoring.config", "poll_interval_s": 3, "predict_tensor_content": True, "per_version_batching_parameters": True,
    "prun_max_handles": 7, "prun_timeout_s": 12.5, "request_timeout_s": 2.5, "saved_model_tags": ["serve", "tpu"],
    "shutdown_grace_s": 12.5, "signature_method_name_check": True, "single_threaded_blas": False, "tune_allocator": False,
    "warmup": False, "warmup_iterations": 3,
    "cors_allow_origins": ["https://app.example.com"], "cors_allow_methods": ["GET", "POST"],
    "cors_allow_headers": ["content-type"], "cors_allow_credentials": True, "cors_max_age_s": 60,
    "tracing": True, "tracing_endpoint": "http://collector:4318/v1/traces", "payload_log_url": "http://sink:8080/",
    "payload_log_file": "/tmp/payloads.jsonl", "payload_log_mode": "request", "payload_log_sample_rate": 0.5,
    "payload_log_queue_size": 10, "payload_log_timeout_s": 1.5,
}


def test_default_interface_runs_tensorgate_serve(render):
    """The image's entrypoint runs TensorFlow Serving's command line; the chart names its own."""
    container = server(render())
    assert container["command"] == ["tensorgate", "serve"] and "args" not in container
    settings = settings_of(render())
    assert (settings.port, settings.grpc_port, str(settings.model_repository)) == (8000, 8001, "/models")


def test_tfserving_interface_runs_tensorflow_serving_command_line_on_its_ports(render):
    objects = render(*TFSERVING)
    container = server(objects)
    # As the tensorflow/serving image's entrypoint runs it, with MODEL_NAME=half_plus_two.
    assert container["command"] == ["tensorflow_model_server"]
    assert container["args"][:4] == ["--port=8500", "--rest_api_port=8501", "--model_name=half_plus_two",
                                     "--model_base_path=/models/half_plus_two"]
    assert container["ports"] == [{"name": "http", "containerPort": 8501, "protocol": "TCP"},
                                  {"name": "grpc", "containerPort": 8500, "protocol": "TCP"}]
    http, grpc = find(objects, "Service")["spec"]["ports"]
    assert http == {"name": "http", "port": 8501, "targetPort": "http", "protocol": "TCP", "appProtocol": "http"}
    assert grpc == {"name": "grpc", "port": 8500, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"}
    # Ports and models are the command line's: no variable of tensorgate serve's says otherwise (the
    # repository variable would serve every model of /models beside the one).
    env = environment(objects)
    assert not {"TENSORGATE_PORT", "TENSORGATE_GRPC_PORT", "TENSORGATE_MODEL_REPOSITORY"} & set(env)
    settings = settings_of(objects)
    assert (settings.port, settings.grpc_port, settings.http, settings.host) == (8501, 8500, True, "0.0.0.0")
    assert settings.model_name == "half_plus_two" and str(settings.model_base_path) == "/models/half_plus_two"
    assert not settings.serves_repository()
    # The repository volume is where the base path points, as in the image.
    assert {"name": "models", "mountPath": "/models"} in container["volumeMounts"]
    # The HTTP probes ask TensorFlow Serving's REST port, which serves tensorgate's health endpoints; it
    # listens only once the model has loaded, within the startup probe's budget.
    assert container["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    container = server(render(*TFSERVING, *GRPC_PROBES))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 8500, "service": ""}, probe


def test_tfserving_service_ports_are_configurable(render):
    objects = render(*TFSERVING, "--set", "service.port=80", "--set", "grpc.port=9000")
    http, grpc = find(objects, "Service")["spec"]["ports"]
    assert (http["port"], http["targetPort"], grpc["port"], grpc["targetPort"]) == (80, "http", 9000, "grpc")
    assert [p["containerPort"] for p in server(objects)["ports"]] == [8501, 8500]  # the container's stay


def test_tfserving_model_config_file_replaces_the_model_flags(render):
    objects = render(*TFSERVING, "--set", "settings.model_config_file=/models/models.config")
    args = server(objects)["args"]
    assert args[:3] == ["--port=8500", "--rest_api_port=8501", "--model_config_file=/models/models.config"]
    assert not any(a.startswith(("--model_name=", "--model_base_path=")) for a in args)
    assert "TENSORGATE_MODEL_CONFIG_FILE" not in environment(objects)
    settings = settings_of(objects)
    assert str(settings.model_config_file) == "/models/models.config" and settings.model_base_path is None
    assert not settings.serves_repository()  # the config file's models alone, as TensorFlow Serving
    (script,) = find(objects, "Pod", "-test-health")["spec"]["containers"][0]["args"]
    assert "/v1/models/" not in script


def test_tfserving_args_come_after_the_charts_flags_and_win(render):
    objects = render(*TFSERVING, "--set", "settings.batching=true", "--set", "server.tfserving.modelBasePath=/models/hpt/",
                     "--set-json", 'server.tfserving.args=["--enable_batching=false", "--tensorflow_intra_op_parallelism=2"]')
    args = server(objects)["args"]
    assert args[-2:] == ["--enable_batching=false", "--tensorflow_intra_op_parallelism=2"]
    assert "--enable_batching=true" in args and "--model_base_path=/models/hpt/" in args
    settings = settings_of(objects)
    assert settings.batching is False and settings.kernel_threads == 2


@pytest.mark.parametrize("interface", ["tensorgate", "tfserving"])
def test_every_setting_reaches_the_server_with_either_interface(render, interface):
    """settings mean the same with either command line: rendered, then parsed as the server parses its
    command line and variables, every one arrives. With tfserving, those tensorflow_model_server sets
    itself (its flags, whose defaults would override a variable) are flags, and only those."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["settings"]["properties"]
    assert set(SAMPLE_SETTINGS) == set(schema)
    samples = dict(SAMPLE_SETTINGS)
    if interface == "tfserving":
        # Its own test (it replaces --model_name and --model_base_path), and one the chart refuses.
        del samples["model_config_file"], samples["check_input_shapes"]
    # gRPC credentials come one way at a time, and the payload log goes to one sink.
    groups = [{k: v for k, v in samples.items() if k not in ("grpc_alts", "payload_log_file")},
              {"grpc_alts": True, "payload_log_file": "/tmp/payloads.jsonl"}]
    own = set(settings_from_flags(parse_flags(["--model_base_path=/m"])[0], environ={}))
    for group in groups:
        objects = render("--set", f"server.interface={interface}", "--set-json", f"settings={json.dumps(group)}")
        settings, env = settings_of(objects), environment(objects)
        for name, value in group.items():
            got = getattr(settings, name)
            assert (str(got) if isinstance(got, Path) else got) == value, name
            as_variable = f"TENSORGATE_{name.upper()}" in env
            assert as_variable == (interface == "tensorgate" or name not in own), name


def test_tfserving_helm_test_asks_for_the_models_status(render):
    pod = find(render(*TFSERVING), "Pod", "-test-health")
    (script,) = pod["spec"]["containers"][0]["args"]
    assert '"http://tg-tensorgate:8501"' in script
    assert "/v2/health/ready" in script and "/v1/models/half_plus_two" in script
    compile(script, "test-health", "exec")


def test_notes_name_tensorflow_serving_ports_and_model(helm, tmp_path):
    text = notes(helm, tmp_path, *TFSERVING)
    assert "serving the model half_plus_two from /models/half_plus_two (image)" in text
    assert "http://tg-tensorgate.serving.svc:8501 (REST)" in text
    assert "tg-tensorgate.serving.svc:8500 (gRPC, plaintext" in text
    assert "port-forward svc/tg-tensorgate 8501:8501 8500:8500" in text
    assert "curl -s http://127.0.0.1:8501/v1/models/half_plus_two" in text
    assert "grpcurl -plaintext 127.0.0.1:8500 grpc.health.v1.Health/Check" in text
    text = notes(helm, tmp_path / "config", *TFSERVING, "--set", "settings.model_config_file=/models/models.config")
    assert "serving the models of /models/models.config (image)" in text and "/v1/models/" not in text


def test_tfserving_values_that_cannot_work_fail_with_a_reason(helm):
    cases = {
        (*TFSERVING, "--set", "grpc.port=8501"): "grpc.port and service.port",
        # TensorFlow Serving's command line always serves gRPC.
        (*TFSERVING, "--set", "grpc.enabled=false"): "server.interface=tfserving needs grpc.enabled=true",
        # The probes and the Service rely on the container's ports; the model has values of its own.
        (*TFSERVING, "--set-json", 'server.tfserving.args=["--rest_api_port=0"]'): "server.tfserving.args cannot set --rest_api_port",
        (*TFSERVING, "--set-json", 'server.tfserving.args=["--model_base_path=/x"]'): "use server.tfserving.modelName",
        (*TFSERVING, "--set-json", 'server.tfserving.args=["enable_batching"]'): "server.tfserving.args",
        (*TFSERVING, "--set", "server.tfserving.modelBasePath=/models/a", "--set", "settings.model_config_file=/models/models.config"): "set one",
        (*TFSERVING, "--set-json", "settings.poll_interval_s=0.5"): "its --file_system_poll_wait_seconds takes a whole number",
        (*TFSERVING, "--set", "settings.check_input_shapes=true"): "settings.check_input_shapes cannot be set with server.interface=tfserving",
    }
    for args, reason in cases.items():
        result = run_helm(helm, "template", "tg", str(CHART), *args)
        assert result.returncode != 0 and reason in result.stderr, (args, result.stderr)
