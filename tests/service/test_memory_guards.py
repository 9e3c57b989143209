"""Memory guards of a real server: a request-sized memory bomb (Fill with fed dims) is refused with 413
naming the node, the size and the limit (RESOURCE_EXHAUSTED over gRPC) before anything is allocated; a
response over TENSORGATE_MAX_RESPONSE_BYTES is refused with 413 before it is sent, on every protocol; a
MemoryError is a 503 (UNAVAILABLE) with a clear message; and the server goes on serving after each."""

from __future__ import annotations

import dataclasses
import json
import struct

import grpc
import httpx
import numpy as np
import pytest
import yaml

import engine.builder as gb
import kernels
from engine.graph.tensors import from_array
from kernels import registry
from service.protocols.codecs import v2
from service.protocols.grpc.services import PREDICTION_SERVICE, Stub
from service.protocols.proto import predict_pb2
from tests.service.conftest import start_server

triton = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

MiB = 1 << 20
MEMORY_LIMIT = 64 * MiB
RESPONSE_LIMIT = 1 * MiB
BOMB = [30000, 30000]  # 7.2 GB of float64
BOMB_BYTES = 30000 * 30000 * 8
THIRD = 1 / 3  # 18 characters in JSON: the encoded body is far larger than the values' bytes
WIDE = [200000]  # 1.6 MB of float64: over the response limit in binary, and once encoded as JSON


def write_fill_model(root, name: str = "bomb") -> None:
    """y = Fill(dims, value): the size of the answer is whatever the client asks for."""
    graph = gb.GraphBuilder()
    with graph.as_default():
        dims = gb.placeholder("int32", [None], name="dims")
        value = gb.placeholder("float64", [], name="value")
        gb.fill(dims, value, name="y")
    (root / name / "1").mkdir(parents=True)
    graph.save(str(root / name / "1" / "model.pb"))
    config = {"signatures": {"serving_default": {"inputs": {"dims": "dims:0", "value": "value:0"},
                                                 "outputs": {"y": "y:0"}}}}
    (root / name / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory") / "repo"
    root.mkdir()
    write_fill_model(root)
    server = start_server(root, poll_interval_s=0, max_request_memory_bytes=MEMORY_LIMIT,
                          max_response_bytes=RESPONSE_LIMIT)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def v2_body(dims: list[int], value: float = 1.0, binary_output: bool | None = None) -> dict:
    body = {"inputs": [{"name": "dims", "shape": [len(dims)], "datatype": "INT32", "data": dims},
                       {"name": "value", "shape": [], "datatype": "FP64", "data": [value]}]}
    if binary_output is not None:
        body["parameters"] = {"binary_data_output": binary_output}
    return body


def tfserving_body(dims: list[int], value: float = 1.0) -> dict:
    return {"inputs": {"dims": dims, "value": value}}


def predict_request(dims: list[int], value: float = 1.0) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest(model_spec={"name": "bomb"})
    request.inputs["dims"].CopyFrom(from_array(np.int32(dims)))
    request.inputs["value"].CopyFrom(from_array(np.float64(value)))
    return request


def triton_inputs(dims: list[int], value: float = 1.0) -> list:
    d = triton.InferInput("dims", [len(dims)], "INT32")
    d.set_data_from_numpy(np.int32(dims))
    v = triton.InferInput("value", [], "FP64")
    v.set_data_from_numpy(np.array(value, np.float64))
    return [d, v]


def assert_serves(http: httpx.Client) -> None:
    """The server answers a normal request right after a refused one."""
    response = http.post("/v2/models/bomb/infer", json=v2_body([2, 3], 2.5))
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [2.5] * 6
    response = http.post("/v1/models/bomb:predict", json=tfserving_body([2], 2.5))
    assert response.status_code == 200 and response.json() == {"outputs": [2.5, 2.5]}


def assert_names_the_bomb(message: str) -> None:
    for part in ("{{node y}}", "Fill", f"{BOMB_BYTES} bytes", f"limit of {MEMORY_LIMIT} bytes",
                 "TENSORGATE_MAX_REQUEST_MEMORY_BYTES"):
        assert part in message, (part, message)


# --- the request memory budget -----------------------------------------------------------------------


def test_the_bomb_over_tfserving_rest_is_413(http):
    response = http.post("/v1/models/bomb:predict", json=tfserving_body(BOMB))
    assert response.status_code == 413, response.text
    assert_names_the_bomb(response.json()["error"])
    assert_serves(http)


def test_the_bomb_over_v2_json_is_413(http):
    response = http.post("/v2/models/bomb/infer", json=v2_body(BOMB))
    assert response.status_code == 413, response.text
    assert_names_the_bomb(response.json()["error"])
    assert_serves(http)


def assert_grpc_refused(server, dims: list[int], check_message) -> None:
    """TF Serving's Predict and tritonclient's ModelInfer both end with RESOURCE_EXHAUSTED, their messages
    passing `check_message`; the next gRPC request is served."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            Stub(channel, PREDICTION_SERVICE).Predict(predict_request(dims), timeout=60)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    check_message(raised.value.details())
    client = triton.InferenceServerClient(server.grpc_target)
    try:
        with pytest.raises(InferenceServerException) as error:
            client.infer("bomb", triton_inputs(dims))
        assert error.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        check_message(error.value.message())
        result = client.infer("bomb", triton_inputs([3], 4.0))
        np.testing.assert_array_equal(result.as_numpy("y"), [4.0, 4.0, 4.0])
    finally:
        client.close()


def test_the_bomb_over_grpc_is_resource_exhausted(server, http):
    assert_grpc_refused(server, BOMB, assert_names_the_bomb)
    assert_serves(http)


def test_a_tensor_proto_claiming_a_huge_shape_is_refused_before_decoding(server, http):
    """A TensorProto of a few bytes may claim 30000x30000 values (zeros, or its one value repeated):
    the request's memory budget bounds what decoding it may allocate (RESOURCE_EXHAUSTED, 413)."""
    request = predict_request([2], 1.0)
    claimed = request.inputs["value"]
    claimed.tensor_shape.dim.add(size=30000)
    claimed.tensor_shape.dim.add(size=30000)
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            Stub(channel, PREDICTION_SERVICE).Predict(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for part in ("input 'value'", "[30000,30000]", f"{BOMB_BYTES} bytes", f"limit of {MEMORY_LIMIT} bytes",
                 "TENSORGATE_MAX_REQUEST_MEMORY_BYTES"):
        assert part in raised.value.details(), (part, raised.value.details())
    assert_serves(http)


# --- the response limit ----------------------------------------------------------------------------------


def assert_response_refused(message: str) -> None:
    assert "TENSORGATE_MAX_RESPONSE_BYTES" in message and f"limit of {RESPONSE_LIMIT} bytes" in message, message


def test_a_response_over_the_limit_is_413_on_v2_json(http):
    response = http.post("/v2/models/bomb/infer", json=v2_body(WIDE, THIRD))
    assert response.status_code == 413, response.text
    assert_response_refused(response.json()["error"])
    assert_serves(http)


def test_a_response_over_the_limit_is_413_on_v2_binary(http):
    response = http.post("/v2/models/bomb/infer", json=v2_body(WIDE, binary_output=True))
    assert response.status_code == 413, response.text
    message = response.json()["error"]
    assert_response_refused(message)
    assert "'y' (1600000 bytes)" in message  # exact: the binary size, counted before encoding
    # Just under the limit in binary: served, as the client asked.
    fits = RESPONSE_LIMIT // 8 - 1024
    response = http.post("/v2/models/bomb/infer", json=v2_body([fits], binary_output=True))
    assert response.status_code == 200
    json_length = int(response.headers["Inference-Header-Content-Length"])
    assert len(response.content) - json_length == fits * 8


def test_a_response_over_the_limit_is_413_on_tfserving_rest(http):
    response = http.post("/v1/models/bomb:predict", json=tfserving_body(WIDE, THIRD))
    assert response.status_code == 413, response.text
    assert_response_refused(response.json()["error"])
    assert_serves(http)


def test_a_response_over_the_limit_is_refused_on_grpc(server, http):
    assert_grpc_refused(server, WIDE, assert_response_refused)
    assert_serves(http)


def test_a_json_response_whose_values_fit_but_whose_text_does_not_is_refused_once_encoded(http):
    """100k float64 thirds: 800 KB as values, 1.9 MB as JSON text."""
    response = http.post("/v2/models/bomb/infer", json=v2_body([100000], THIRD))
    assert response.status_code == 413
    assert "response of" in response.json()["error"]
    assert_response_refused(response.json()["error"])
    binary = http.post("/v2/models/bomb/infer", json=v2_body([100000], THIRD, binary_output=True))
    assert binary.status_code == 200  # the same values in binary fit


# --- MemoryError ----------------------------------------------------------------------------------------


@pytest.fixture
def fill_runs_out_of_memory(monkeypatch):
    """Fill's CPU kernel raising MemoryError past 1000 elements, as numpy does when malloc fails."""
    kdef = kernels.lookup("Fill", "cpu")

    def out_of_memory_when_large(xp, dims, value, *, memory_limit=None):
        if np.prod(dims) > 1000:
            raise MemoryError("Unable to allocate 68.7 MiB for an array with shape (3000, 3000)")
        return kdef.fn(xp, dims, value, memory_limit=memory_limit)

    monkeypatch.setitem(registry._REGISTRY, ("Fill", "cpu"), dataclasses.replace(kdef, fn=out_of_memory_when_large))


def test_a_memory_error_is_503_and_the_server_goes_on(tmp_path, fill_runs_out_of_memory, monkeypatch):
    root = tmp_path / "repo"
    root.mkdir()
    write_fill_model(root)
    server = start_server(root, poll_interval_s=0)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            response = http.post("/v2/models/bomb/infer", json=v2_body([3000, 3000]))
            assert response.status_code == 503, response.text
            message = response.json()["error"]
            assert "out of memory" in message and "{{node y}}" in message
            response = http.post("/v1/models/bomb:predict", json=tfserving_body([3000, 3000]))
            assert response.status_code == 503 and "out of memory" in response.json()["error"]
            with grpc.insecure_channel(server.grpc_target) as channel:
                with pytest.raises(grpc.RpcError) as raised:
                    Stub(channel, PREDICTION_SERVICE).Predict(predict_request([3000, 3000]), timeout=60)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "out of memory" in raised.value.details()
            assert_serves(http)

            # A MemoryError outside any kernel (here: while encoding) is a 503 too, never a 500.
            def encode_out_of_memory(*args, **kwargs):
                raise MemoryError()

            monkeypatch.setattr(v2, "encode_infer_response", encode_out_of_memory)
            response = http.post("/v2/models/bomb/infer", json=v2_body([2]))
            assert response.status_code == 503
            assert response.json()["error"].startswith("out of memory while handling POST /v2/models/bomb/infer")
            monkeypatch.undo()
            assert_serves(http)
    finally:
        server.stop()


def test_binary_request_framing_still_works_under_the_limits(http):
    """A v2 binary request (the binary extension's framing) is held to the same budget."""
    header = json.dumps({"inputs": [
        {"name": "dims", "shape": [2], "datatype": "INT32", "parameters": {"binary_data_size": 8}},
        {"name": "value", "shape": [], "datatype": "FP64", "data": [1.0]}]}).encode()
    body = header + struct.pack("<ii", *BOMB)
    response = http.post("/v2/models/bomb/infer", content=body,
                         headers={"Inference-Header-Content-Length": str(len(header))})
    assert response.status_code == 413
    assert_names_the_bomb(response.json()["error"])


def test_a_partial_run_step_over_the_response_limit_is_413(http):
    """Partial-run steps encode their outputs themselves: the same limit, before and after encoding."""
    created = http.post("/v1/models/bomb/partial_runs", json={"feeds": ["dims", "value"], "fetches": ["y"]})
    assert created.status_code == 201, created.text
    handle = created.json()["handle"]
    response = http.post(f"/v1/models/bomb/partial_runs/{handle}",
                         json={"inputs": {"dims": WIDE, "value": THIRD}, "outputs": ["y"]})
    assert response.status_code == 413, response.text
    assert_response_refused(response.json()["error"])
    assert_serves(http)
