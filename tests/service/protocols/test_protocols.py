"""Both protocols against TensorFlow's own numbers: every golden model fixture served over HTTP,
called with TensorFlow Serving REST (row and columnar) and with tritonclient (binary and JSON)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as triton

from service.protocols.codecs.v2_tensors import datatype_of
from tests.golden import assert_matches, load_case
from tests.service.conftest import alias, model_cases, start_server, write_fixture_model

CASES = model_cases()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    for case_dir in CASES:
        write_fixture_model(root, case_dir)
    server = start_server(root, poll_interval_s=0)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def triton_client(server):
    c = triton.InferenceServerClient(server.url.removeprefix("http://"))
    yield c
    c.close()


def _to_expected(value, expected: np.ndarray) -> np.ndarray:
    if expected.dtype == object:
        return np.asarray([v.encode() for v in np.ravel(value)], dtype=object).reshape(np.shape(value))
    return np.asarray(value, dtype=expected.dtype)


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_matches_tensorflow(triton_client, case_dir, binary):
    case = load_case(case_dir)
    inputs = []
    for tensor, value in case.feeds.items():
        i = triton.InferInput(alias(tensor), list(value.shape), datatype_of(value.dtype))
        i.set_data_from_numpy(value, binary_data=binary)
        inputs.append(i)
    outputs = [triton.InferRequestedOutput(alias(t), binary_data=binary) for t in case.fetches]
    result = triton_client.infer(case_dir.name, inputs, outputs=outputs)
    assert result.get_response()["model_version"] == "1"
    for tensor, want in case.fetches.items():
        assert_matches(tensor, result.as_numpy(alias(tensor)), want, case.rtol, case.atol)


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_tfserving_columnar_matches_tensorflow(client, server, case_dir):
    case = load_case(case_dir)
    body = {"inputs": {alias(t): v.tolist() for t, v in case.feeds.items()}}
    response = client(server).post(f"/v1/models/{case_dir.name}:predict", json=body)
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    if len(case.fetches) == 1:
        outputs = {alias(next(iter(case.fetches))): outputs}
    for tensor, want in case.fetches.items():
        assert_matches(tensor, _to_expected(outputs[alias(tensor)], want), want, case.rtol, case.atol)


def _batched(case) -> bool:
    sizes = {v.shape[0] if v.ndim else None for v in [*case.feeds.values(), *case.fetches.values()]}
    return len(sizes) == 1 and None not in sizes


@pytest.mark.parametrize("case_dir", [c for c in CASES if _batched(load_case(c))], ids=lambda p: p.name)
def test_tfserving_row_format_matches_tensorflow(client, server, case_dir):
    case = load_case(case_dir)
    batch = next(iter(case.feeds.values())).shape[0]
    if len(case.feeds) == 1:
        instances = next(iter(case.feeds.values())).tolist()
    else:
        instances = [{alias(t): v[i].tolist() for t, v in case.feeds.items()} for i in range(batch)]
    response = client(server).post(f"/v1/models/{case_dir.name}/versions/1:predict", json={"instances": instances})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == batch
    for tensor, want in case.fetches.items():
        rows = predictions if len(case.fetches) == 1 else [p[alias(tensor)] for p in predictions]
        assert_matches(tensor, _to_expected(rows, want), want, case.rtol, case.atol)


def test_any_graph_tensor_can_be_fed_and_fetched(triton_client):
    """Names that are not signature aliases address graph tensors; each set gets its own executor."""
    case = load_case(next(c for c in CASES if c.name == "feed_intermediate"))
    hidden = case.feeds["hidden/Relu:0"]
    i = triton.InferInput("hidden/Relu:0", list(hidden.shape), "FP32")
    i.set_data_from_numpy(hidden)
    result = triton_client.infer("feed_intermediate", [i], outputs=[triton.InferRequestedOutput("out_a:0")])
    assert_matches("out_a:0", result.as_numpy("out_a:0"), case.fetches["out_a:0"], case.rtol, case.atol)


def test_metadata_reports_signature(client, server, triton_client):
    meta = triton_client.get_model_metadata("mlp")
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 20]}]
    assert meta["outputs"] == [{"name": "Identity", "datatype": "FP32", "shape": [-1, 10]}]
    assert meta["versions"] == ["1"]
    tf = client(server).get("/v1/models/mlp/metadata").json()
    sig = tf["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["x"] == {
        "dtype": "DT_FLOAT",
        "tensor_shape": {"dim": [{"size": "-1", "name": ""}, {"size": "20", "name": ""}], "unknown_rank": False},
        "name": "x:0",
    }
    assert sig["outputs"]["Identity"]["tensor_shape"]["dim"][1]["size"] == "10"
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert tf["model_spec"] == {"name": "mlp", "signature_name": "", "version": "1"}
    config = triton_client.get_model_config("mlp")
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 20]}]


def test_server_health_and_status(client, server, triton_client):
    assert triton_client.is_server_live() and triton_client.is_server_ready()
    assert triton_client.is_model_ready("mlp")
    assert "binary_tensor_data" in triton_client.get_server_metadata()["extensions"]
    status = client(server).get("/v1/models/mlp").json()
    assert status == {"model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}
    index = triton_client.get_model_repository_index()
    assert {"name": "mlp", "version": "1", "state": "READY", "reason": ""} in index


def test_openapi_docs(client, server):
    c = client(server)
    assert c.get("/docs").status_code == 200
    paths = c.get("/openapi.json").json()["paths"]
    assert "/v2/models/{model}/infer" in paths and "/v1/models/{model}:predict" in paths
