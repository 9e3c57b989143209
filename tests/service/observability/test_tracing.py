"""OpenTelemetry traces from a live server, received over OTLP/HTTP by a collector of the test's own: the span
tree of a batched REST request and of a gRPC request (tritonclient), each continuing the caller's
traceparent; the batch's span linked both ways; errors on the span; when tracing is on or off."""

from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pytest

from service.observability.tracing import tracing_wanted
from tests.service.conftest import EXAMPLES
from tests.service.local_http import LocalHTTPServer, QuietHandler

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
SERVER, INTERNAL = 2, 1  # the span kinds' numbers in OTLP


class Collector:
    """An OTLP/HTTP traces receiver: POST /v1/traces with an ExportTraceServiceRequest (protobuf)."""

    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()
        collector = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service.ExportTraceServiceRequest.FromString(body)
                with collector.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            collector.spans.extend(scope.spans)
                reply = trace_service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.http = LocalHTTPServer(Handler)
        self.url = f"http://127.0.0.1:{self.http.port}/v1/traces"

    def wait_for(self, predicate, timeout_s: float = 15.0) -> list:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                spans = list(self.spans)
            if predicate(spans):
                return spans
            time.sleep(0.05)
        raise AssertionError(f"spans not received: {[s.name for s in spans]}")

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


def _attributes(span) -> dict:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def _children(spans, parent) -> dict:
    return {s.name: s for s in spans if s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id}


def _traced_server(tmp_path, make_server, collector, monkeypatch, **settings):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export within 50 ms, not 5 s
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    return make_server(repo, tracing_endpoint=collector.url, **settings)


def test_a_batched_rest_request_and_a_grpc_request_continue_the_callers_trace(tmp_path, make_server, client,
                                                                              collector, monkeypatch):
    triton_grpc = pytest.importorskip("tritonclient.grpc")
    server = _traced_server(tmp_path, make_server, collector, monkeypatch, batching=True,
                            batching_batch_timeout_micros=2000)
    traceparent = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
    r = client(server).post("/v2/models/half_plus_two/infer", headers={"traceparent": traceparent},
                            json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]})
    assert r.status_code == 200, r.text

    grpc_client = triton_grpc.InferenceServerClient(server.grpc_target)
    x = triton_grpc.InferInput("x", [3], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], np.float32))
    grpc_parent = "b7ad6b7169203331"
    result = grpc_client.infer("half_plus_two", [x], headers={"traceparent": f"00-{TRACE_ID}-{grpc_parent}-01"})
    assert result.as_numpy("y").tolist() == [2.5, 3.0, 4.5]

    def complete(spans) -> bool:
        names = [s.name for s in spans]
        return names.count("compute") >= 2 and names.count("encode") >= 2 and "batch" in names and any(
            s.name.endswith("/ModelInfer") for s in spans) and any(s.name.startswith("POST ") for s in spans)

    spans = collector.wait_for(complete)

    rest = next(s for s in spans if s.name == "POST /v2/models/{model}/infer")
    assert rest.kind == SERVER and rest.trace_id.hex() == TRACE_ID and rest.parent_span_id.hex() == CALLER_SPAN
    attributes = _attributes(rest)
    assert attributes["http.request.method"] == "POST" and attributes["http.route"] == "/v2/models/{model}/infer"
    assert attributes["http.response.status_code"] == 200 and attributes["url.path"] == "/v2/models/half_plus_two/infer"
    assert attributes["tensorgate.model"] == "half_plus_two" and attributes["tensorgate.signature"] == "serving_default"
    children = _children(spans, rest)
    assert {"decode", "queue", "compute", "encode"} <= set(children)
    assert children["decode"].end_time_unix_nano <= children["queue"].start_time_unix_nano + 1_000_000
    assert children["queue"].end_time_unix_nano <= children["compute"].start_time_unix_nano + 1
    compute = children["compute"]
    assert _attributes(compute)["tensorgate.signature"] == "serving_default"
    assert _attributes(compute)["tensorgate.batch_size"] >= 2
    # The batch: a trace of its own, linked to the request; the request's compute linked to it.
    (link,) = compute.links
    batch = next(s for s in spans if s.name == "batch" and s.span_id == link.span_id)
    assert batch.kind == INTERNAL and batch.trace_id != rest.trace_id and not batch.parent_span_id
    assert any(lk.span_id == rest.span_id and lk.trace_id == rest.trace_id for lk in batch.links)
    assert _attributes(batch)["tensorgate.batch.rows"] == 2

    call = next(s for s in spans if s.name == "inference.GRPCInferenceService/ModelInfer")
    assert call.kind == SERVER and call.trace_id.hex() == TRACE_ID and call.parent_span_id.hex() == grpc_parent
    attributes = _attributes(call)
    assert attributes["rpc.system"] == "grpc" and attributes["rpc.method"] == "ModelInfer"
    assert attributes["rpc.grpc.status_code"] == 0 and attributes["tensorgate.model.version"] == "1"
    assert {"decode", "queue", "compute", "encode"} <= set(_children(spans, call))


def test_errors_are_recorded_on_the_request_span(tmp_path, make_server, client, collector, monkeypatch):
    triton_grpc = pytest.importorskip("tritonclient.grpc")
    server = _traced_server(tmp_path, make_server, collector, monkeypatch)
    r = client(server).post("/v1/models/nope:predict", json={"instances": [1.0]})
    assert r.status_code == 404
    grpc_client = triton_grpc.InferenceServerClient(server.grpc_target)
    x = triton_grpc.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], np.float32))
    with pytest.raises(triton_grpc.InferenceServerException):
        grpc_client.infer("nope", [x])
    spans = collector.wait_for(lambda spans: any(s.name.endswith("/ModelInfer") for s in spans)
                               and any(s.name.startswith("POST ") for s in spans))
    rest = next(s for s in spans if s.name == "POST /v1/models/{model}:predict")
    assert _attributes(rest)["http.response.status_code"] == 404 and _attributes(rest)["error.type"] == "404"
    (event,) = [e for e in rest.events if e.name == "exception"]
    assert "nope" in _attributes(event)["exception.message"]
    call = next(s for s in spans if s.name.endswith("/ModelInfer"))
    assert _attributes(call)["rpc.grpc.status_code"] == 5 and _attributes(call)["error.type"] == "NOT_FOUND"
    assert call.status.code == 0  # a client's error (NOT_FOUND) is not the server's: status unset


def test_tracing_is_on_when_configured_and_off_otherwise(tmp_path, make_server):
    assert not tracing_wanted(None, {})
    assert tracing_wanted(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing_wanted(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing_wanted(None, {"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_wanted(None, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert tracing_wanted(True, {}) and not tracing_wanted(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not tracing_wanted(True, {"OTEL_SDK_DISABLED": "true"})
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", repo / "half_plus_two")
    server = make_server(repo)
    assert server.app.tracing is None and server.app.state.plane.tracing is None
