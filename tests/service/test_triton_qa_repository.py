"""A Triton repository of TensorFlow models (tests/fixtures/triton: the kinds Triton's QA generated for its
TensorFlow backend, written by TensorFlow, with Triton's config.pbtxt files), copied as it is and served:
every request answered through tritonclient (HTTP JSON, HTTP binary, gRPC) as TensorFlow answered it, the
versions a version policy serves, classification with the model's label file, a raw binary request to the
identity model, and statistics counting it all."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import requests

from tests.golden import FIXTURES
from tests.service.conftest import start_server

triton_http = pytest.importorskip("tritonclient.http")
triton_grpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException, np_to_triton_dtype  # noqa: E402

TRITON = FIXTURES / "triton"
CASES = json.loads((TRITON / "cases.json").read_text())["cases"]
DATA = np.load(TRITON / "data.npz")


def array(key: str) -> np.ndarray:
    value = DATA[key]
    return value.astype(object) if value.dtype.kind == "S" else value


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton_qa") / "models"
    shutil.copytree(TRITON / "repository", root)
    server = start_server(root, poll_interval_s=0)
    yield server
    server.stop()


TRANSPORTS = [("http", False), ("http", True), ("grpc", None)]


def make_client(server, transport):
    if transport == "http":
        return triton_http, triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    return triton_grpc, triton_grpc.InferenceServerClient(server.grpc_target)


@pytest.mark.parametrize("transport, binary", TRANSPORTS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-v{c['version']}")
def test_every_request_is_answered_as_tensorflow_answered_it(server, transport, binary, case):
    module, client = make_client(server, transport)
    try:
        inputs = []
        for name, key in case["inputs"].items():
            value = array(key)
            tensor = module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value, **({} if binary is None else {"binary_data": binary}))
            inputs.append(tensor)
        options = {} if binary is None else {"binary_data": binary}
        outputs = [module.InferRequestedOutput(name, **options) for name in case["outputs"]]
        result = client.infer(case["model"], inputs, model_version=str(case["version"]), outputs=outputs)
    finally:
        client.close()
    for name, key in case["outputs"].items():
        got, want = result.as_numpy(name), array(key)
        if want.dtype == object:
            got = np.array([v.encode() if isinstance(v, str) else v for v in got.reshape(-1)], dtype=object).reshape(got.shape)
        assert got.shape == want.shape and got.dtype == want.dtype, (name, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


def test_the_version_policy_serves_the_latest_two(server):
    _, client = make_client(server, "http")
    try:
        assert client.is_model_ready("graphdef_float32_float32_float32", "1")
        assert client.is_model_ready("graphdef_float32_float32_float32", "3")
        assert not client.is_model_ready("graphdef_float32_float32_float32", "2")
        index = {(m["name"], m.get("version")) for m in client.get_model_repository_index()}
        assert {("graphdef_float32_float32_float32", "1"), ("savedmodel_nobatch_object_object_object", "1")} <= index
    finally:
        client.close()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_classification_uses_the_label_file(server, transport):
    module, client = make_client(server, transport)
    case = next(c for c in CASES if c["model"] == "graphdef_float32_float32_float32" and c["version"] == 1
                and array(c["inputs"]["INPUT0"]).shape[0] == 4)
    labels = (TRITON / "repository" / case["model"] / "output0_labels.txt").read_text().splitlines()
    try:
        inputs = []
        for name, key in case["inputs"].items():
            value = array(key)
            tensor = module.InferInput(name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        result = client.infer(case["model"], inputs, model_version="1",
                              outputs=[module.InferRequestedOutput("OUTPUT0", class_count=3)])
    finally:
        client.close()
    classes = result.as_numpy("OUTPUT0")
    want = array(case["outputs"]["OUTPUT0"])
    assert classes.shape == (4, 3)
    for row, values in zip(classes, want):
        order = sorted(range(16), key=lambda i: values[i], reverse=True)[:3]
        texts = [c.decode() if isinstance(c, bytes) else c for c in row]
        assert [int(t.split(":")[1]) for t in texts] == order
        assert [t.split(":")[2] for t in texts] == [labels[i] for i in order]
        np.testing.assert_allclose([float(t.split(":")[0]) for t in texts], values[order])


def test_a_raw_binary_request_to_the_identity_model(server):
    x = np.arange(32, dtype=np.float32)
    response = requests.post(f"{server.url}/v2/models/graphdef_zero_1_float32/infer", data=x.tobytes(),
                             headers={"Inference-Header-Content-Length": "0"}, timeout=30)
    response.raise_for_status()
    header = int(response.headers["Inference-Header-Content-Length"])
    assert response.content[header:] == x.tobytes()


def test_statistics_count_the_requests(server):
    _, client = make_client(server, "http")
    try:
        before = client.get_inference_statistics("graphdef_nobatch_int32_int8_int8", "1")["model_stats"][0]
        case = next(c for c in CASES if c["model"] == "graphdef_nobatch_int32_int8_int8")
        inputs = []
        for name, key in case["inputs"].items():
            tensor = triton_http.InferInput(name, [16], "INT32")
            tensor.set_data_from_numpy(array(key))
            inputs.append(tensor)
        client.infer(case["model"], inputs)
        with pytest.raises(InferenceServerException):
            client.infer(case["model"], inputs[:1])
        after = client.get_inference_statistics("graphdef_nobatch_int32_int8_int8", "1")["model_stats"][0]
    finally:
        client.close()
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    assert after["execution_count"] == before["execution_count"] + 1
