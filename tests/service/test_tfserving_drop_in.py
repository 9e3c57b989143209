"""A TensorFlow Serving deployment with only the binary's name changed: `tensorflow_model_server`
started with TensorFlow Serving's flags, in a process of its own, and talked to as TensorFlow Serving's
clients and its acceptance test (`tensorflow_model_server_test.py`) do: readiness probed with a Predict
for a missing model until the answer says "Servable", then PredictionService and ModelService over gRPC
(TCP and a Unix socket), the REST API with TensorFlow Serving's exact bodies, the Prometheus path of a
monitoring config, a model config file with two models, its reload, and TF2 SavedModels (unknown-rank
inputs, several signatures). Models are our own fixtures of the same kinds (tests/fixtures/saved_models)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import grpc
import httpx
import pytest
import trustme
from google.protobuf import text_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine.proto import types_pb2
from service.protocols.grpc.services import MODEL_SERVICE, PREDICTION_SERVICE, Stub
from service.protocols.proto import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    predict_pb2,
    regression_pb2,
)
from service.protocols.proto.ssl_config_pb2 import SSLConfig
from tests.golden import FIXTURES
from tests.service.served_process import free_port
from tests.service.test_tfserving_cli import server_command

SAVED = FIXTURES / "saved_models"
VERSION = 123


def base_path(root: Path, case: str, version: int = VERSION) -> Path:
    """`root/<case>/<version>/`: the fixture's SavedModel as a TensorFlow Serving base path."""
    path = root / case
    if not path.exists():
        shutil.copytree(SAVED / case / "model", path / str(version))
    return path


class TFServing:
    """`tensorflow_model_server` with TensorFlow Serving's flags on free ports of 127.0.0.1."""

    def __init__(self, tmp: Path, *flags: str, rest: bool = True, wait: bool = True):
        self.port, self.rest_port = free_port(), free_port() if rest else 0
        self.socket = tmp / f"tfs-{self.port}.sock"
        self.log_path = tmp / f"tfs-{self.port}.log"
        self.args = [*server_command(), f"--port={self.port}", f"--rest_api_port={self.rest_port}",
                     "--rest_api_timeout_in_ms=5000", f"--grpc_socket_path={self.socket}", *flags]
        with open(self.log_path, "wb") as log:
            env = {**os.environ, "TENSORGATE_HOST": "127.0.0.1"}  # tests bind loopback only
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.target = f"127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.rest_port}"
        self.channel = grpc.insecure_channel(self.target)
        self.predictions = Stub(self.channel, PREDICTION_SERVICE)
        self.models = Stub(self.channel, MODEL_SERVICE)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = 60) -> None:
        """TensorFlow Serving's test harness's probe: a Predict for a missing model, until the answer's
        details say "Servable" (the server is up and answering)."""
        deadline = time.monotonic() + timeout_s
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "intentionally_missing_model"
        while True:
            assert self.proc.poll() is None, f"the server exited:\n{self.log()}"
            try:
                self.predictions.Predict(request, timeout=5)
            except grpc.RpcError as e:
                if "Servable" in (e.details() or ""):
                    return
            assert time.monotonic() < deadline, f"the server did not become ready:\n{self.log()}"
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def predict(stub: Stub, model: str, value: float, *, signature: str = "serving_default", output_filter: bool = True,
            batch: bool = False) -> predict_pb2.PredictResponse:
    """TensorFlow Serving's test request: x = [value] (shape [1], or [1, 1] with `batch`), as DT_FLOAT."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model, signature
    x = request.inputs["x"]
    x.dtype = types_pb2.DT_FLOAT
    x.float_val.append(value)
    x.tensor_shape.dim.add().size = 1
    if batch:
        x.tensor_shape.dim.add().size = 1
    if output_filter:
        request.output_filter.append("y")
    return stub.Predict(request, timeout=20)


def assert_y(response: predict_pb2.PredictResponse, expected: float, model: str, signature: str = "serving_default"):
    y = response.outputs["y"]
    assert y.dtype == types_pb2.DT_FLOAT and list(y.float_val) == [expected]  # typed values, as TF Serving sends
    assert (response.model_spec.name, response.model_spec.signature_name) == (model, signature)
    assert response.model_spec.version.value == VERSION


def example_input(request, value: float) -> None:
    request.input.example_list.examples.add().features.feature["x"].float_list.value.append(value)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tfserving")
    for case in ("half_plus_two_serving", "half_plus_three_serving", "half_plus_two_tf2_serving",
                 "tf2_scaled_unknown_rank", "tf2_two_constant_signatures"):
        base_path(root, case)
    (root / "monitoring.txt").write_text('prometheus_config: {\n  enable: true,\n  path: "/monitoring/prometheus/metrics"\n}\n')
    return root


@pytest.fixture(scope="module")
def half_plus_two(models):
    server = TFServing(models, "--model_name=default", f"--model_base_path={models / 'half_plus_two_serving'}",
                       f"--monitoring_config_file={models / 'monitoring.txt'}",
                       "--grpc_channel_arguments=grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb,grpc.so_reuseaddr=1")
    yield server
    server.stop()


# --- one model, --model_name / --model_base_path -------------------------------------------------------------


def test_predict_over_grpc_with_and_without_an_output_filter(half_plus_two):
    assert_y(predict(half_plus_two.predictions, "default", 2.0), 3.0, "default")
    assert_y(predict(half_plus_two.predictions, "default", 2.0, output_filter=False), 3.0, "default")


def test_predict_over_the_unix_socket(half_plus_two):
    with grpc.insecure_channel(f"unix:{half_plus_two.socket}") as channel:
        assert_y(predict(Stub(channel, PREDICTION_SERVICE), "default", 2.0, output_filter=False), 3.0, "default")


def test_model_status_and_metadata_over_grpc(half_plus_two):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "default"
    status = half_plus_two.models.GetModelStatus(request, timeout=20)
    assert [(s.version, s.status.error_code) for s in status.model_version_status] == [(VERSION, 0)]
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "default"
    request.metadata_field.append("signature_def")
    metadata = half_plus_two.predictions.GetModelMetadata(request, timeout=20)
    assert metadata.model_spec.name == "default" and metadata.model_spec.version.value == VERSION
    assert list(metadata.metadata) == ["signature_def"]


def test_classify_regress_and_multi_inference_over_grpc(half_plus_two):
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = "default", "classify_x_to_y"
    example_input(request, 2.0)
    result = half_plus_two.predictions.Classify(request, timeout=20)
    assert [[c.score for c in cs.classes] for cs in result.result.classifications] == [[3.0]]
    assert result.model_spec.signature_name == "classify_x_to_y" and result.model_spec.version.value == VERSION

    request = regression_pb2.RegressionRequest()
    request.model_spec.name, request.model_spec.signature_name = "default", "regress_x_to_y"
    example_input(request, 2.0)
    result = half_plus_two.predictions.Regress(request, timeout=20)
    assert [r.value for r in result.result.regressions] == [3.0]

    request = inference_pb2.MultiInferenceRequest()
    for signature, method in (("regress_x_to_y", "tensorflow/serving/regress"), ("classify_x_to_y", "tensorflow/serving/classify")):
        task = request.tasks.add()
        task.model_spec.name, task.model_spec.signature_name, task.method_name = "default", signature, method
    example_input(request, 2.0)
    result = half_plus_two.predictions.MultiInference(request, timeout=20)
    assert result.results[0].regression_result.regressions[0].value == 3.0
    assert result.results[1].classification_result.classifications[0].classes[0].score == 3.0
    assert [r.model_spec.signature_name for r in result.results] == ["regress_x_to_y", "classify_x_to_y"]


@pytest.mark.parametrize("path, body, expected", [
    ("/v1/models/default:predict", {"instances": [2.0, 3.0, 4.0]}, {"predictions": [3.0, 3.5, 4.0]}),
    ("/v1/models/default:predict", {"inputs": [2.0, 3.0, 4.0]}, {"outputs": [3.0, 3.5, 4.0]}),
    ("/v1/models/default:classify", {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]},
     {"results": [[["", 3.0]]]}),
    ("/v1/models/default:regress", {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}, {"results": [3.0]}),
])
def test_rest_answers_with_tensorflow_servings_bodies(half_plus_two, path, body, expected):
    response = httpx.post(half_plus_two.url + path, json=body, timeout=20)
    assert response.status_code == 200 and response.json() == expected


def test_rest_model_status_is_tensorflow_servings_document(half_plus_two):
    response = httpx.get(f"{half_plus_two.url}/v1/models/default", timeout=20)
    assert response.json() == {"model_version_status": [
        {"version": "123", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}


def test_rest_metadata_lists_every_signature(half_plus_two):
    document = httpx.get(f"{half_plus_two.url}/v1/models/default/metadata", timeout=20).json()
    assert document["model_spec"] == {"name": "default", "signature_name": "", "version": "123"}
    signatures = document["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == sorted(["serving_default", "classify_x_to_y", "regress_x_to_y", "regress_x_to_y2",
                                         "regress_x2_to_y3"])
    x = signatures["serving_default"]["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and x["tensor_shape"]["unknown_rank"] is False


def test_prometheus_metrics_where_the_monitoring_config_says(half_plus_two):
    text = httpx.get(f"{half_plus_two.url}/monitoring/prometheus/metrics", timeout=20).text
    assert "# TYPE" in text


def test_the_start_up_lines_scripts_wait_for(half_plus_two):
    log = half_plus_two.log()
    assert f"Running gRPC ModelServer at 0.0.0.0:{half_plus_two.port} ..." in log
    assert f"Running gRPC ModelServer at UNIX socket {half_plus_two.socket} ..." in log
    assert f"Exporting HTTP/REST API at:localhost:{half_plus_two.rest_port} ..." in log


# --- gRPC alone, TF2 SavedModels ----------------------------------------------------------------------------


def test_rest_is_off_unless_a_port_is_given_and_tf2_models_serve(models):
    server = TFServing(models, "--model_name=scaled", f"--model_base_path={models / 'tf2_scaled_unknown_rank'}", rest=False)
    try:
        assert_y(predict(server.predictions, "scaled", 2.0, output_filter=False), 12.0, "scaled")  # v1 * v2 * x
        assert "Exporting HTTP/REST API" not in server.log() and "Uvicorn running" not in server.log()
    finally:
        server.stop()


def test_several_signatures_of_a_tf2_model(models):
    server = TFServing(models, "--model_name=constants", f"--model_base_path={models / 'tf2_two_constant_signatures'}",
                       rest=False)
    try:
        response = predict(server.predictions, "constants", 5.0, signature="custom_signature_key")
        assert list(response.outputs["y"].float_val) == [2.0]
        assert list(predict(server.predictions, "constants", 5.0).outputs["y"].float_val) == [1.0]
    finally:
        server.stop()


def test_classify_and_regress_on_the_tf2_half_plus_two(models):
    server = TFServing(models, "--model_name=tf2", f"--model_base_path={models / 'half_plus_two_tf2_serving'}", rest=False)
    try:
        request = regression_pb2.RegressionRequest()
        request.model_spec.name, request.model_spec.signature_name = "tf2", "regress_x_to_y"
        example_input(request, 2.0)
        assert [r.value for r in server.predictions.Regress(request, timeout=20).result.regressions] == [3.0]
        request = classification_pb2.ClassificationRequest()
        request.model_spec.name, request.model_spec.signature_name = "tf2", "classify_x_to_y"
        example_input(request, 2.0)
        result = server.predictions.Classify(request, timeout=20).result
        assert [[c.score for c in cs.classes] for cs in result.classifications] == [[3.0]]
    finally:
        server.stop()


# --- a model config file -------------------------------------------------------------------------------------


def config_text(*models: tuple[str, Path]) -> str:
    entries = "".join(f'  config: {{\n    name: "{name}",\n    base_path: "{path}",\n    model_platform: "tensorflow"\n  }}\n'
                      for name, path in models)
    return f"model_config_list: {{\n{entries}}}\n"


def test_a_model_config_file_serves_both_of_its_models(models, tmp_path):
    config = tmp_path / "good.cfg"
    config.write_text(config_text(("half_plus_two", models / "half_plus_two_serving"),
                                  ("half_plus_three", models / "half_plus_three_serving")))
    server = TFServing(tmp_path, f"--model_config_file={config}", rest=False)
    try:
        assert_y(predict(server.predictions, "half_plus_two", 2.0), 3.0, "half_plus_two")
        assert_y(predict(server.predictions, "half_plus_three", 2.0, output_filter=False), 4.0, "half_plus_three")
    finally:
        server.stop()


@pytest.mark.parametrize("poll_seconds", [1, 0])
def test_a_polled_config_file_is_reloaded_and_an_unpolled_one_is_not(models, tmp_path, poll_seconds):
    config = tmp_path / "model_config.txt"
    config.write_text(config_text(("half_plus_two", models / "half_plus_two_serving")))
    server = TFServing(tmp_path, f"--model_config_file={config}", f"--model_config_file_poll_wait_seconds={poll_seconds}",
                       rest=False)
    try:
        assert_y(predict(server.predictions, "half_plus_two", 2.0, output_filter=False), 3.0, "half_plus_two")
        config.write_text(config_text(("half_plus_three", models / "half_plus_three_serving")))
        deadline = time.monotonic() + (15 if poll_seconds else poll_seconds + 2)
        while time.monotonic() < deadline:
            try:
                assert_y(predict(server.predictions, "half_plus_three", 2.0, output_filter=False), 4.0, "half_plus_three")
                break
            except grpc.RpcError:
                time.sleep(0.2)
        if poll_seconds:
            assert_y(predict(server.predictions, "half_plus_three", 2.0, output_filter=False), 4.0, "half_plus_three")
        else:
            assert_y(predict(server.predictions, "half_plus_two", 2.0, output_filter=False), 3.0, "half_plus_two")
            with pytest.raises(grpc.RpcError) as e:
                predict(server.predictions, "half_plus_three", 2.0)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND and "Servable" in e.value.details()
    finally:
        server.stop()


def test_the_server_listens_only_once_its_models_have_loaded(models, tmp_path):
    """A base path with no version yet: nothing listens (TensorFlow Serving waits for its models) and the
    log says what TensorFlow Serving says; the version's arrival starts the server."""
    empty = tmp_path / "later"
    empty.mkdir()
    server = TFServing(tmp_path, "--model_name=later", f"--model_base_path={empty}", "--file_system_poll_wait_seconds=1",
                       rest=False, wait=False)
    try:
        deadline = time.monotonic() + 30
        while "No versions of servable later found under base path" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        with pytest.raises(grpc.RpcError) as e:
            predict(server.predictions, "later", 2.0)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # nothing listening yet
        shutil.copytree(SAVED / "half_plus_two_serving" / "model", empty / str(VERSION))
        server.wait_ready()
        assert_y(predict(server.predictions, "later", 2.0), 3.0, "later")
    finally:
        server.stop()


# --- credentials, CORS, health, labels --------------------------------------------------------------------


def test_an_ssl_config_file_makes_grpc_speak_tls_with_client_certificates(models, tmp_path):
    ca = trustme.CA()
    server_cert, client_cert = ca.issue_cert("127.0.0.1", "localhost"), ca.issue_cert("client@example.com")
    ssl_config = tmp_path / "ssl.cfg"
    ssl_config.write_text(text_format.MessageToString(SSLConfig(
        server_key=server_cert.private_key_pem.bytes().decode(), server_cert=server_cert.cert_chain_pems[0].bytes().decode(),
        custom_ca=ca.cert_pem.bytes().decode(), client_verify=True)))
    server = TFServing(tmp_path, "--model_name=default", f"--model_base_path={models / 'half_plus_two_serving'}",
                       f"--ssl_config_file={ssl_config}", rest=False, wait=False)
    try:
        credentials = grpc.ssl_channel_credentials(ca.cert_pem.bytes(), client_cert.private_key_pem.bytes(),
                                                   client_cert.cert_chain_pems[0].bytes())
        deadline = time.monotonic() + 60
        with grpc.secure_channel(server.target, credentials) as channel:
            while True:
                try:
                    assert_y(predict(Stub(channel, PREDICTION_SERVICE), "default", 2.0), 3.0, "default")
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline and server.proc.poll() is None, server.log()
                    time.sleep(0.2)
        # Without a client certificate, or in plain text, nothing gets through.
        for channel in (grpc.secure_channel(server.target, grpc.ssl_channel_credentials(ca.cert_pem.bytes())),
                        grpc.insecure_channel(server.target)):
            with channel, pytest.raises(grpc.RpcError) as e:
                predict(Stub(channel, PREDICTION_SERVICE), "default", 2.0)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


def test_cors_support_answers_preflights_and_tensorflow_servings_health_names(models, tmp_path):
    server = TFServing(tmp_path, "--model_name=default", f"--model_base_path={models / 'half_plus_two_serving'}",
                       "--rest_api_enable_cors_support", "--enable_grpc_healthcheck_service")
    try:
        preflight = httpx.options(f"{server.url}/v1/models/default:predict", timeout=20, headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"
        response = httpx.post(f"{server.url}/v1/models/default:predict", json={"instances": [2.0]}, timeout=20,
                              headers={"Origin": "https://app.example.com"})
        assert response.json() == {"predictions": [3.0]} and response.headers["access-control-allow-origin"] == "*"
        health = health_pb2_grpc.HealthStub(server.channel)
        for service in ("", "ModelService", "PredictionService", "tensorflow.serving.PredictionService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop()


def test_a_label_on_a_version_that_did_not_load_stops_the_start_unless_allowed(models, tmp_path):
    config = tmp_path / "labels.cfg"
    config.write_text(f'model_config_list {{ config {{ name: "m" base_path: "{models / "half_plus_two_serving"}" '
                      'model_platform: "tensorflow" version_labels { key: "canary" value: 7 } } }\n')
    refused = TFServing(tmp_path, f"--model_config_file={config}", rest=False, wait=False)
    assert refused.proc.wait(timeout=60) == 255
    assert ("Failed to start server. Error: UNKNOWN: Request to assign label to version 7 of model m, which is not "
            "currently available for inference") in refused.log()
    refused.stop()
    allowed = TFServing(tmp_path, f"--model_config_file={config}", "--allow_version_labels_for_unavailable_models",
                        rest=False)
    try:
        assert_y(predict(allowed.predictions, "m", 2.0), 3.0, "m")
    finally:
        allowed.stop()
