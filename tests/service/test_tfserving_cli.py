"""`tensorflow_model_server`: TensorFlow Serving's command line on tensorgate, the flags parsed as
TensorFlow's parser does and mapped onto settings, TensorFlow Serving's refusals with its words, and the
exit statuses and texts its tests and scripts read (a bad config file, a model that cannot load, an
unknown argument, --version)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from service.settings import Settings
from service.tfserving_cli import FLAGS, FlagError, parse_flags, settings_from_flags, usage
from tests.golden import FIXTURES
from tests.service.served_process import console_command

HALF_PLUS_TWO = FIXTURES / "saved_models" / "half_plus_two_serving" / "model"


def server_command() -> list[str]:
    return console_command("tensorflow_model_server", "service.tfserving_cli")


def run_server(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The server run to its end (the cases here never get as far as listening)."""
    return subprocess.run([*server_command(), *args], capture_output=True, text=True, timeout=timeout, check=False,
                          env={"PATH": "/usr/bin:/bin", "TENSORGATE_HOST": "127.0.0.1"})


def fields(*args: str, environ: dict | None = None) -> dict:
    given, unknown = parse_flags(list(args))
    assert not unknown
    return settings_from_flags(given, environ if environ is not None else {})


# --- parsing, as TensorFlow's Flags::Parse ------------------------------------------------------------------


def test_flags_take_tensorflow_servings_defaults():
    f = fields("--model_base_path=/models/m")
    assert f["grpc_port"] == 8500 and f["http"] is False  # REST is off unless --rest_api_port is given
    assert f["model_name"] == "default" and f["model_base_path"] == Path("/models/m")
    assert f["request_timeout_s"] == 30.0 and f["poll_interval_s"] == 1
    assert f["load_retries"] == 5 and f["load_retry_interval_s"] == 60.0
    assert f["saved_model_tags"] == ["serve"] and f["warmup"] is True and f["batching"] is False
    assert f["host"] == "0.0.0.0"  # every interface, as TensorFlow Serving


def test_the_last_of_a_repeated_flag_wins_and_bools_take_every_form():
    f = fields("--model_base_path=/a", "--rest_api_port=8501", "--rest_api_port=0", "--enable_batching",
               "--enable_model_warmup=false", "--rest_api_enable_cors_support=true")
    assert f["http"] is False and f["batching"] is True and f["warmup"] is False and f["cors"] is True


@pytest.mark.parametrize("arg, message", [
    ("--port=http", "Couldn't interpret value =http for flag port."),
    ("--enable_batching=yes", "Couldn't interpret value =yes for flag enable_batching."),
    ("--port", "Couldn't interpret value  for flag port."),
])
def test_a_value_a_flag_cannot_take_is_refused_in_tensorflows_words(arg, message):
    with pytest.raises(FlagError) as e:
        parse_flags([arg])
    assert str(e.value) == message


def test_what_is_not_a_flag_of_tensorflow_serving_is_returned_as_unknown():
    given, unknown = parse_flags(["--port=1", "--model-base-path=/m", "-port=2", "extra", "--nope=1"])
    assert given == {"port": 1} and unknown == ["--model-base-path=/m", "-port=2", "extra", "--nope=1"]


def test_usage_lists_every_flag_with_its_default():
    text = usage()
    for flag in FLAGS:
        assert f"--{flag.name}=" in text
    assert '--model_name="default"\tstring' in text and "--port=8500\tint32" in text


# --- mapping onto settings -------------------------------------------------------------------------------


def test_ports_socket_and_files_map_onto_settings(tmp_path):
    f = fields("--port=9000", "--rest_api_port=9001", "--grpc_socket_path=/tmp/s.sock", "--model_config_file=/c.cfg",
               "--model_name=ignored", "--model_base_path=/ignored", "--monitoring_config_file=/m.txt",
               "--enable_batching", "--batching_parameters_file=/b.txt", "--model_config_file_poll_wait_seconds=5",
               "--saved_model_tags=serve,gpu", "--num_request_iterations_for_warmup=3", "--file_system_poll_wait_seconds=-1",
               "--grpc_channel_arguments=grpc.max_connection_age_ms=2000", "--enable_signature_method_name_check",
               "--enable_serialization_as_tensor_content", "--rest_api_timeout_in_ms=2500", "--num_load_threads=4",
               "--max_num_load_retries=0", "--load_retry_interval_micros=250000")
    assert (f["grpc_port"], f["port"], f["http"]) == (9000, 9001, True)
    assert f["grpc_socket_path"] == Path("/tmp/s.sock") and f["model_config_file"] == Path("/c.cfg")
    assert "model_base_path" not in f  # the config file wins, as in TensorFlow Serving
    assert f["batching_parameters_file"] == Path("/b.txt") and f["monitoring_config_file"] == Path("/m.txt")
    assert f["model_config_file_poll_wait_seconds"] == 5 and f["poll_interval_s"] == 0
    assert f["saved_model_tags"] == ["serve", "gpu"] and f["warmup_iterations"] == 3
    assert f["grpc_channel_arguments"] == "grpc.max_connection_age_ms=2000"
    assert f["signature_method_name_check"] is True and f["predict_tensor_content"] is True
    assert f["request_timeout_s"] == 2.5 and f["load_threads"] == 4
    assert f["load_retries"] == 0 and f["load_retry_interval_s"] == 0.25


def test_tuning_variables_stand_where_their_flags_are_not_given():
    environ = {"TENSORGATE_POLL_INTERVAL_S": "7", "TENSORGATE_LOAD_RETRIES": "0", "TENSORGATE_GRPC_PORT": "9"}
    f = fields("--model_base_path=/m", "--max_num_load_retries=2", environ=environ)
    assert "poll_interval_s" not in f  # Settings reads the variable
    assert f["load_retries"] == 2 and f["grpc_port"] == 8500  # a flag given, a listener: the flags decide
    assert Settings(**f).poll_interval_s == 2.0  # this process's environment has no such variable


def test_a_host_from_the_environment_is_kept():
    assert "host" not in fields("--model_base_path=/m", environ={"TENSORGATE_HOST": "127.0.0.1"})


@pytest.mark.parametrize("args, expected", [
    (["--tensorflow_session_parallelism=3"], {"kernel_threads": 3, "inference_threads": 3}),
    (["--tensorflow_intra_op_parallelism=2"], {"kernel_threads": 2}),
    (["--tensorflow_inter_op_parallelism=5", "--tensorflow_session_parallelism=9"], {"inference_threads": 5}),
    ([], {}),
])
def test_tensorflows_parallelism_maps_onto_the_kernel_pool_and_the_inference_threads(args, expected):
    f = fields("--model_base_path=/m", *args)
    assert {k: f[k] for k in ("kernel_threads", "inference_threads") if k in f} == expected


def test_the_same_port_for_rest_and_grpc_serves_grpc_alone(caplog):
    f = fields("--model_base_path=/m", "--port=8500", "--rest_api_port=8500")
    assert f["http"] is False and f["grpc_port"] == 8500
    assert "http_port cannot be same as grpc_port" in caplog.text


@pytest.mark.parametrize("args, message", [
    (["--model_base_path=/m", "--port=0"], "At least one of server_options.grpc_port or server_options.grpc_socket_path"),
    ([], "Both server_options.model_base_path and server_options.model_config_file are empty!"),
    (["--model_base_path=/m", "--batching_parameters_file=/b"], ("batching_parameters_file is set without setting "
                                                                  "server_options.enable_batching to true")),
    (["--model_base_path=/m", "--use_alts_credentials", "--ssl_config_file=/s"], "Either use_alts_credentials must be false"),
    (["--model_base_path=/m", "--tensorflow_session_parallelism=1", "--tensorflow_intra_op_parallelism=1",
      "--tensorflow_inter_op_parallelism=1"], "You cannot configure all."),
    (["--model_base_path=/m", "--platform_config_file=/p"], "--platform_config_file is not supported"),
    (["--model_base_path=/m", "--rest_api_port=70000"], "between 0 and 65535"),
    (["--model_base_path=gs://bucket/models/m"], "is a URL; tensorgate reads local directories only"),
])
def test_combinations_tensorflow_serving_refuses_are_refused_with_its_words(args, message):
    given, _ = parse_flags(args)
    with pytest.raises(FlagError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings_from_flags(given, {})


def test_the_fields_make_valid_settings(tmp_path):
    settings = Settings(**fields("--model_base_path=/m", "--grpc_socket_path=/tmp/x.sock", "--rest_api_port=8501"))
    assert settings.model_base_path == Path("/m") and not settings.serves_repository()
    assert settings.grpc_socket_path == Path("/tmp/x.sock") and settings.http and settings.port == 8501


# --- the process: what TensorFlow Serving's tests and scripts read -----------------------------------------


def test_version_names_the_tensorflow_serving_release():
    result = run_server("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("TensorFlow ModelServer: 2.21.0") and "TensorFlow Library:" in result.stdout


def test_an_unknown_argument_stops_the_start():
    result = run_server("--model_base_path=/m", "--model-name=x")
    assert result.returncode == 255
    assert result.stderr.startswith("unknown argument: --model-name=x\n") and "--model_name=" in result.stderr


def test_a_bad_model_config_file_stops_the_start_with_protobufs_words(tmp_path):
    config = tmp_path / "bad.cfg"
    config.write_text("improperly formatted file\n")
    result = run_server(f"--model_config_file={config}", "--port=0", f"--grpc_socket_path={tmp_path}/s.sock")
    assert result.returncode == 255
    assert "Failed to start server. Error: " in result.stderr
    assert "Error parsing text-format tensorflow.serving.ModelServerConfig" in result.stderr and str(config) in result.stderr


def test_a_model_that_cannot_load_stops_the_start_after_its_retries(tmp_path):
    base = tmp_path / "broken"
    shutil.copytree(HALF_PLUS_TWO, base / "123")
    (base / "123" / "variables" / "variables.index").write_bytes(b"not a table")
    result = run_server(f"--model_base_path={base}", "--model_name=broken", "--port=0", f"--grpc_socket_path={tmp_path}/s",
                        "--max_num_load_retries=1", "--load_retry_interval_micros=1000")
    assert result.returncode == 255
    assert "Failed to start server. Error: UNKNOWN: 1 model(s) did not become available: {{broken due to error:" in result.stderr
    assert "retrying in 0.001 s (retry 1 of 1)" in result.stderr


def test_a_flag_without_effect_is_named_once_in_a_warning(tmp_path):
    result = run_server("--xla_cpu_compilation_enabled", "--per_process_gpu_memory_fraction=0.5", "--port=0",
                        f"--grpc_socket_path={tmp_path}/s", f"--model_config_file={tmp_path}/missing.cfg")
    assert result.returncode == 255  # the config file is missing: the warnings come before
    assert result.stderr.count("--xla_cpu_compilation_enabled is accepted and has no effect") == 1
    assert result.stderr.count("--per_process_gpu_memory_fraction is accepted and has no effect") == 1


# --- --enable_per_model_batching_parameters ---------------------------------------------------------------


@pytest.mark.parametrize("file_text, expected", [
    ("max_batch_size { value: 8 }\nbatch_timeout_micros { value: 250 }\n", (8, 250)),
    (None, None),  # no file: that version is not batched
])
def test_a_versions_own_batching_parameters_decide_its_batching(tmp_path, file_text, expected):
    from engine import SessionOptions
    from service.inference.batching import BatchingOptions
    from service.repository.config import ModelConfig
    from service.repository.loading import PER_VERSION_BATCHING_FILE, VersionLoader

    version = tmp_path / "123"
    shutil.copytree(HALF_PLUS_TWO, version)
    if file_text is not None:
        (version / PER_VERSION_BATCHING_FILE).write_text(file_text)
    loader = VersionLoader(SessionOptions(), batching_defaults=BatchingOptions(max_batch_size=32, num_batch_threads=2),
                           batching_by_default=True, per_version_batching=True)
    servable = loader.load("m", 123, version, ModelConfig())
    try:
        if expected is None:
            assert servable.scheduler is None
        else:
            options = servable.scheduler.options
            assert (options.max_batch_size, options.batch_timeout_micros) == expected
            assert options.num_batch_threads == 2  # a field the file leaves out: the server's
    finally:
        servable.close()


def test_a_bad_per_version_batching_file_fails_that_versions_load(tmp_path):
    from engine import SessionOptions
    from service.repository.config import ModelConfig
    from service.repository.loading import PER_VERSION_BATCHING_FILE, VersionLoader
    from service.repository.servable import LoadError

    version = tmp_path / "123"
    shutil.copytree(HALF_PLUS_TWO, version)
    (version / PER_VERSION_BATCHING_FILE).write_text("max_batch_size: 8\n")
    loader = VersionLoader(SessionOptions(), batching_by_default=True, per_version_batching=True)
    with pytest.raises(LoadError, match="batching_params.pbtxt: Error parsing text-format tensorflow.serving.BatchingParameters"):
        loader.load("m", 123, version, ModelConfig())


def test_the_flag_maps_onto_the_setting():
    assert fields("--model_base_path=/m", "--enable_batching", "--enable_per_model_batching_parameters")[
        "per_version_batching_parameters"] is True
