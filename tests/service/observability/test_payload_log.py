"""The payload log against live sinks: CloudEvents (KServe's logger format) received by an HTTP server of the
test's own for REST JSON, v2 binary (tritonclient) and gRPC requests (tritonclient, TensorFlow Serving's
Predict); JSON lines in a file; sampling; a dead or slow sink costing requests nothing but dropped events."""

from __future__ import annotations

import base64
import json
import shutil
import threading
import time

import grpc
import httpx
import numpy as np
import pytest

from service.observability.payload_log import JsonBody, PayloadLogger, PayloadRecord, V2BinaryBody
from service.protocols.grpc.services import PREDICTION_SERVICE, Stub
from service.protocols.proto import model_pb2, predict_pb2
from tests.service.conftest import EXAMPLES
from tests.service.local_http import LocalHTTPServer, QuietHandler
from tests.service.test_many_models import _metric as metric


class Sink:
    """An HTTP server that keeps every CloudEvent POSTed to it (binary content mode), optionally slowly."""

    def __init__(self, delay_s: float = 0.0, port: int = 0) -> None:
        self.events: list[tuple[dict, bytes]] = []
        self.lock = threading.Lock()
        sink = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay_s)
                with sink.lock:
                    sink.events.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.http = LocalHTTPServer(Handler, port)
        self.url = f"http://127.0.0.1:{self.http.port}/events"

    def wait_for(self, count: int, timeout_s: float = 10.0) -> list[tuple[dict, bytes]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.events) >= count:
                    return list(self.events)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.events)} events received, {count} expected")

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.close()


def _repository(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    return repo


def _pairs(events) -> dict[str, dict[str, tuple[dict, object]]]:
    """Events by id, then by kind (request/response), each with its headers and parsed data."""
    by_id: dict[str, dict] = {}
    for headers, body in events:
        kind = headers["ce-type"].rsplit(".", 1)[1]
        by_id.setdefault(headers["ce-id"], {})[kind] = (headers, json.loads(body))
    return by_id


def test_rest_v2_binary_and_grpc_requests_reach_a_live_sink(tmp_path, make_server, client, sink):
    triton_http = pytest.importorskip("tritonclient.http")
    triton_grpc = pytest.importorskip("tritonclient.grpc")
    server = make_server(_repository(tmp_path), payload_log_url=sink.url)
    http = client(server)
    r = http.post("/v1/models/half_plus_two:predict", json={"instances": [1.0, 2.0]}, headers={"x-request-id": "req-1"})
    assert r.status_code == 200
    x = triton_http.InferInput("x", [3], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], np.float32), binary_data=True)
    out = triton_http.InferRequestedOutput("y", binary_data=True)
    triton = triton_http.InferenceServerClient(server.url.split("://", 1)[1])
    result = triton.infer("half_plus_two", [x], outputs=[out], request_id="req-2")
    assert result.as_numpy("y").tolist() == [2.5, 3.0, 4.5]
    g = triton_grpc.InferInput("x", [1], "FP32")
    g.set_data_from_numpy(np.array([4.0], np.float32))
    assert triton_grpc.InferenceServerClient(server.grpc_target).infer(
        "half_plus_two", [g], request_id="req-3").as_numpy("y").tolist() == [4.0]
    with grpc.insecure_channel(server.grpc_target) as channel:
        request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name="half_plus_two"))
        request.inputs["x"].dtype = 1
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.inputs["x"].float_val.append(6.0)
        assert list(Stub(channel, PREDICTION_SERVICE).Predict(request).outputs["y"].float_val) == [5.0]

    pairs = _pairs(sink.wait_for(8))
    assert len(pairs) == 4 and all(set(p) == {"request", "response"} for p in pairs.values())
    headers, data = pairs["req-1"]["request"]
    assert headers["ce-specversion"] == "1.0" and headers["ce-type"] == "org.kubeflow.serving.inference.request"
    assert headers["ce-inferenceservicename"] == "half_plus_two" and headers["ce-model"] == "half_plus_two"
    assert headers["ce-modelversion"] == "1" and headers["ce-signature"] == "serving_default"
    assert headers["ce-protocol"] == "v1" and headers["ce-endpoint"] == "/v1/models/half_plus_two:predict"
    assert headers["content-type"] == "application/json" and headers["ce-time"].endswith("Z") and headers["ce-source"]
    assert data == {"instances": [1.0, 2.0]} and pairs["req-1"]["response"][1] == {"predictions": [2.5, 3.0]}

    # The binary extension: the JSON header, each binary tensor's bytes base64-encoded beside it.
    (tensor,) = pairs["req-2"]["request"][1]["inputs"]
    assert np.frombuffer(base64.b64decode(tensor["data_base64"]), np.float32).tolist() == [1.0, 2.0, 5.0]
    (output,) = pairs["req-2"]["response"][1]["outputs"]
    assert np.frombuffer(base64.b64decode(output["data_base64"]), np.float32).tolist() == [2.5, 3.0, 4.5]
    assert pairs["req-2"]["request"][0]["ce-protocol"] == "v2"

    # gRPC: protobuf's JSON mapping (bytes base64).
    headers, data = pairs["req-3"]["request"]
    assert headers["ce-protocol"] == "grpc" and headers["ce-endpoint"] == "/inference.GRPCInferenceService/ModelInfer"
    assert data["modelName"] == "half_plus_two" and data["id"] == "req-3"
    response = pairs["req-3"]["response"][1]
    assert np.frombuffer(base64.b64decode(response["rawOutputContents"][0]), np.float32).tolist() == [4.0]
    (predict,) = [p for i, p in pairs.items() if i not in ("req-1", "req-2", "req-3")]
    assert predict["request"][1]["inputs"]["x"]["floatVal"] == [6.0]
    assert predict["response"][1]["outputs"]["y"]["floatVal"] == [5.0]
    metrics = http.get("/metrics").text
    assert 'tensorgate_payload_log_events_total{outcome="sent"} 8.0' in metrics


def test_modes_sampling_and_a_file_of_json_lines(tmp_path, make_server, client):
    path = tmp_path / "payloads.jsonl"
    server = make_server(_repository(tmp_path), payload_log_file=path, payload_log_mode="response")
    http = client(server)
    for i in range(3):
        assert http.post("/v1/models/half_plus_two:predict", json={"instances": [float(i)]}).status_code == 200
    server.stop()  # flushes the log
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["org.kubeflow.serving.inference.response"] * 3
    assert [line["data"] for line in lines] == [{"predictions": [2.0]}, {"predictions": [2.5]}, {"predictions": [3.0]}]
    assert lines[0]["datacontenttype"] == "application/json" and lines[0]["modelversion"] == "1"

    logger = PayloadLogger(path=tmp_path / "sampled.jsonl", sample_rate=0.25)
    logger._random.seed(1)
    assert 150 < sum(logger.sampled() for _ in range(1000)) < 350
    logger.close()


def test_a_dead_sink_costs_requests_nothing_but_dropped_events(tmp_path, make_server, client):
    with httpx.Client() as probe:  # a port nobody listens on
        dead = f"http://127.0.0.1:{_free_port()}/events"
        with pytest.raises(httpx.ConnectError):
            probe.post(dead)
    server = make_server(_repository(tmp_path), payload_log_url=dead)
    http = client(server)
    for _ in range(20):
        assert http.post("/v1/models/half_plus_two:predict", json={"instances": [1.0]}).status_code == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = http.get("/metrics").text
        failed = metric(text, "tensorgate_payload_log_events_total", outcome="sink_error")
        down = metric(text, "tensorgate_payload_log_events_total", outcome="sink_down")
        if failed + down == 40:
            break
        time.sleep(0.05)
    # Every event dropped and counted: the first failed send, then the sink left alone (its requests not even
    # sampled) for a second.
    assert failed + down == 40 and 1 <= failed < 40 and down > 0
    assert metric(text, "tensorgate_payload_log_events_total", outcome="sent") == 0


def test_a_slow_sink_fills_the_queue_and_events_are_dropped_not_requests(tmp_path):
    slow = Sink(delay_s=0.5)
    dropped: list[str] = []
    try:
        logger = PayloadLogger(url=slow.url, queue_size=2, on_outcome=dropped.append)
        start = time.perf_counter()
        for i in range(10):
            record = PayloadRecord("v2", "/v2/models/m/infer", "m", id=str(i), version="1")
            record.request = JsonBody(b'{"inputs": []}')
            header = b'{"outputs":[{"name":"y","parameters":{"binary_data_size":4}}]}'
            record.response = V2BinaryBody(header + np.float32(1.0).tobytes(), len(header))
            logger.emit(record)
        assert time.perf_counter() - start < 0.1  # emit never waits for the sink
        assert dropped.count("queue_full") >= 15
        logger.close(timeout_s=3)
        assert "sent" in dropped
    finally:
        slow.close()


def test_a_sink_that_comes_back_gets_events_again(tmp_path):
    port = _free_port()
    outcomes: list[str] = []
    logger = PayloadLogger(url=f"http://127.0.0.1:{port}/events", mode="request", on_outcome=outcomes.append)

    def send(i: int) -> None:
        if logger.sampled():
            record = PayloadRecord("v1", "/v1/models/m:predict", "m", id=str(i), version="1")
            record.request = JsonBody(b'{"instances": [1.0]}')
            logger.emit(record)

    send(0)
    deadline = time.monotonic() + 5
    while "sink_error" not in outcomes and time.monotonic() < deadline:
        time.sleep(0.01)
    send(1)  # within the back-off: not sampled, counted
    assert outcomes == ["sink_error", "sink_down"]
    sink = Sink(port=port)
    try:
        time.sleep(1.1)  # the first back-off is 1 s
        send(2)
        (headers, body), = sink.wait_for(1)
        assert headers["ce-id"] == "2" and json.loads(body) == {"instances": [1.0]}
    finally:
        logger.close()
        sink.close()


def test_bad_settings_are_refused():
    from pydantic import ValidationError

    from service.settings import Settings

    with pytest.raises(ValidationError, match="two sinks"):
        Settings(payload_log_url="http://sink/", payload_log_file="/tmp/x.jsonl")
    with pytest.raises(ValidationError, match="http:// or https://"):
        Settings(payload_log_url="sink:8080")
    with pytest.raises(ValidationError):
        Settings(payload_log_mode="everything")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
