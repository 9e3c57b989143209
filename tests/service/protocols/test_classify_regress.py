"""TensorFlow Serving's REST Classify and Regress APIs over HTTP: `POST /v1/models/{m}[...]:classify|:regress`.

The referees: TensorFlow Serving's own REST tests, run word for word on its test model (half_plus_two, written
again by TensorFlow 2.21), TensorFlow's numbers for an Estimator-style export (`serving_examples`'s rest.json),
and TensorFlow Serving's error texts, each a 400, for bodies, signatures and outputs that do not fit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from service.server import BackgroundServer
from tests.engine.graphs import GraphBuilder
from tests.golden import FIXTURES
from tests.service.conftest import start_server

SAVED_MODELS = FIXTURES / "saved_models"
HALF_PLUS_TWO = SAVED_MODELS / "half_plus_two_serving"
SERVING_EXAMPLES = SAVED_MODELS / "serving_examples"
F32 = np.dtype(np.float32)

pytestmark = pytest.mark.skipif(
    not (HALF_PLUS_TWO / "model").is_dir() or not (SERVING_EXAMPLES / "model").is_dir(),
    reason="no classify/regress fixtures under tests/fixtures/saved_models")


def shapes_graph() -> bytes:
    """A GraphDef whose outputs follow the batch of a string `inputs` vector, in shapes and dtypes that
    TensorFlow Serving's classify and regress accept or refuse."""
    g = GraphBuilder()
    g.placeholder("inputs", object, [None])
    g.placeholder("extra", np.float32, [None])
    g.node("n", "Shape", ["inputs"], T=np.dtype(object), out_type=np.dtype(np.int32))
    g.const("axis", np.int32(0))
    for k in (1, 2, 3):
        g.const(f"k{k}", np.array([k], np.int32))
        g.node(f"dims{k}", "ConcatV2", ["n", f"k{k}", "axis"], T=np.dtype(np.int32), N=2, Tidx=np.dtype(np.int32))

    def fill(name: str, dims: str, value) -> None:
        value = np.asarray(value)
        g.const(f"{name}_value", value)
        g.node(name, "Fill", [dims, f"{name}_value"], T=value.dtype, index_type=np.dtype(np.int32))

    fill("scores_ok", "dims3", np.float32(0.25))
    fill("classes_ok", "dims3", np.array(b"c", dtype=object))
    fill("classes_k2", "dims2", np.array(b"c", dtype=object))
    fill("scores_1d", "n", np.float32(0.5))
    fill("scores_f64", "dims3", np.float64(0.5))
    g.const("scores_b1", np.array([[0.1, 0.2, 0.3]], np.float32))
    fill("value_1d", "n", np.float32(1.5))
    fill("value_b2", "dims2", np.float32(1.5))
    fill("value_int", "dims1", np.int32(7))
    g.const("value_one", np.array([2.5], np.float32))
    return g.bytes()


def _signature(outputs: dict[str, str], **inputs: str) -> dict:
    return {"inputs": {"inputs": "inputs:0", **inputs}, "outputs": outputs}


SHAPES_SIGNATURES = {
    "classify_ok": _signature({"classes": "classes_ok:0", "scores": "scores_ok:0"}),
    "classify_1d": _signature({"scores": "scores_1d:0"}),
    "classify_f64": _signature({"scores": "scores_f64:0"}),
    "classify_batch": _signature({"scores": "scores_b1:0"}),
    "classify_k": _signature({"classes": "classes_k2:0", "scores": "scores_ok:0"}),
    "classify_three": _signature({"classes": "classes_ok:0", "scores": "scores_ok:0", "other": "value_1d:0"}),
    "classify_two_inputs": _signature({"scores": "scores_ok:0"}, extra="extra:0"),
    "regress_ok": _signature({"outputs": "value_1d:0"}),
    "regress_wide": _signature({"outputs": "value_b2:0"}),
    "regress_int": _signature({"outputs": "value_int:0"}),
    "regress_batch": _signature({"outputs": "value_one:0"}),
}


def write_repository(root: Path) -> None:
    for case, name in ((HALF_PLUS_TWO, "half_plus_two"), (SERVING_EXAMPLES, "serving_examples")):
        shutil.copytree(case / "model", root / name / "1")
        (root / name / "config.yaml").write_text(yaml.safe_dump({"labels": {"stable": 1}}))
    (root / "shapes" / "1").mkdir(parents=True)
    (root / "shapes" / "1" / "model.pb").write_bytes(shapes_graph())
    (root / "shapes" / "config.yaml").write_text(yaml.safe_dump({"signatures": SHAPES_SIGNATURES}))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> BackgroundServer:
    root = tmp_path_factory.mktemp("classify") / "repo"
    write_repository(root)
    server = start_server(root)
    yield server
    server.stop()


@pytest.fixture
def c(server, client):
    return client(server)


def error_of(r) -> str:
    assert r.status_code == 400, r.text
    return r.json()["error"]


# --- TensorFlow Serving's own tests -------------------------------------------------------------


def test_tensorflow_servings_rest_tests_word_for_word(c):
    # model_servers/http_rest_api_handler_test.cc: Classify and Regress on saved_model_half_plus_two_cpu
    for path in ("/v1/models/half_plus_two:classify", "/v1/models/half_plus_two/versions/1:classify"):
        r = c.post(path, content='{"signature_name": "classify_x_to_y", "examples": [ { "x": 20.0 } ] }')
        assert r.status_code == 200, r.text
        assert r.json() == {"results": [[["", 12]]]}
        assert r.headers["content-type"] == "application/json"
    r = c.post("/v1/models/half_plus_two/labels/stable:classify",
               content='{"signature_name": "classify_x_to_y", "examples": [ { "x": 10.0 } ] }')
    assert r.json() == {"results": [[["", 7]]]}
    for path in ("/v1/models/half_plus_two:regress", "/v1/models/half_plus_two/versions/1:regress",
                 "/v1/models/half_plus_two/labels/stable:regress"):
        r = c.post(path, content='{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }')
        assert r.status_code == 200, r.text
        assert r.json() == {"results": [42]}
    # model_servers/tensorflow_model_server_test.py: testClassifyREST and testRegressREST
    r = c.post("/v1/models/half_plus_two:classify", json={"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]})
    assert r.json() == {"results": [[["", 3.0]]]}
    r = c.post("/v1/models/half_plus_two:regress", json={"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]})
    assert r.json() == {"results": [3.0]}


def test_scores_are_written_as_tensorflow_serving_writes_float32(c):
    # WriteDecimal: a whole number gets ".0"; a float32 is written with 6 digits when they read back as it.
    r = c.post("/v1/models/half_plus_two:regress",
               json={"signature_name": "regress_x_to_y2", "examples": [{"x": 20.0}, {"x": 0.2}, {"x": 1e-7}]})
    assert r.text == '{"results":[13.0,3.1,3.0]}'
    r = c.post("/v1/models/half_plus_two:classify", json={"signature_name": "classify_x_to_y", "examples": [{"x": 0.1}]})
    assert r.text == '{"results":[[["",2.05]]]}'


# --- TensorFlow's numbers ------------------------------------------------------------------------


def rest_cases() -> list[dict]:
    path = SERVING_EXAMPLES / "rest.json"
    return json.loads(path.read_text())["cases"] if path.exists() else []


@pytest.mark.parametrize("case", rest_cases(), ids=lambda case: case["name"])
def test_replies_are_tensorflows(c, case):
    """Features of every kind (float, int64, bytes and b64, defaulted, var-length, empty, a context whose
    features an example overrides), classes and scores, scores only (labels ""), classes only (scores 0)."""
    r = c.post(f"/v1/models/serving_examples:{case['method']}", json=case["request"])
    assert r.status_code == 200, r.text
    got, expected = r.json()["results"], case["response"]["results"]
    if case["method"] == "regress":
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        return
    assert [[label for label, _ in row] for row in got] == [[label for label, _ in row] for row in expected]
    np.testing.assert_allclose([[s for _, s in row] for row in got], [[s for _, s in row] for row in expected],
                               rtol=1e-6, atol=1e-7)


def test_versions_and_labels_route_like_predict(c):
    body = rest_cases()[0]["request"]
    replies = [c.post(p, json=body).json() for p in ("/v1/models/serving_examples:classify",
                                                     "/v1/models/serving_examples/versions/1:classify",
                                                     "/v1/models/serving_examples/labels/stable:classify")]
    assert replies[0] == replies[1] == replies[2]
    assert c.post("/v1/models/serving_examples/versions/7:classify", json=body).status_code == 404
    assert c.post("/v1/models/nope:regress", json=body).status_code == 404


def test_metadata_lists_classify_and_regress_signatures_with_their_methods(c):
    signatures = c.get("/v1/models/serving_examples/metadata").json()["metadata"]["signature_def"]["signature_def"]
    assert signatures["serving_default"]["method_name"] == "tensorflow/serving/classify"
    assert signatures["classify_scores"]["method_name"] == "tensorflow/serving/classify"
    assert signatures["regression"]["method_name"] == "tensorflow/serving/regress"
    assert signatures["predict"]["method_name"] == "tensorflow/serving/predict"
    assert signatures["serving_default"]["inputs"]["inputs"]["dtype"] == "DT_STRING"
    assert set(signatures["serving_default"]["outputs"]) == {"classes", "scores"}


def test_a_predict_signature_of_the_right_shape_classifies_and_regresses(c):
    # Without --enable_signature_method_name_check, TensorFlow Serving looks at the shape, not the method name.
    body = {"examples": [{"a": 1}, {"a": 2}]}
    r = c.post("/v1/models/shapes:classify", json={"signature_name": "classify_ok", **body})
    assert r.status_code == 200, r.text
    assert r.json() == {"results": [[["c", 0.25]] * 3] * 2}
    r = c.post("/v1/models/shapes:regress", json={"signature_name": "regress_ok", **body})
    assert r.json() == {"results": [1.5, 1.5]}  # an output of shape [batch]


def test_the_method_name_check_refuses_other_signatures(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_repository(root)
    c = client(make_server(root, signature_method_name_check=True))
    body = {"examples": [{"a": 1}]}
    assert error_of(c.post("/v1/models/shapes:classify", json={"signature_name": "classify_ok", **body})) == (
        "Expected classification signature method_name to be tensorflow/serving/classify. Was: tensorflow/serving/predict")
    assert error_of(c.post("/v1/models/shapes:regress", json={"signature_name": "regress_ok", **body})) == (
        "Expected regression signature method_name to be tensorflow/serving/regress. Was: tensorflow/serving/predict")
    r = c.post("/v1/models/half_plus_two:classify", json={"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]})
    assert r.json() == {"results": [[["", 3.0]]]}


# --- errors: TensorFlow Serving's texts, each a 400 ----------------------------------------------


BODY_ERRORS = [
    (b"{", "JSON Parse error: "),
    (b"[1]", "JSON Value: [1] Is not object"),
    (b'{"signature_name": 1, "examples": [{}]}', "not formatted correctly. 'signature_name' key must be a string value."),
    (b"{}", "JSON Value: {} When method is classify, key 'examples' is expected and was not found"),
    (b'{"examples": {}}', "Expecting 'examples' value to be an list/array"),
    (b'{"examples": []}', "'examples' value is an empty array"),
    (b'{"examples": [1]}', "Example must be JSON object but got JSON Number"),
    (b'{"context": [], "examples": [{}]}', "Example must be JSON object but got JSON Array"),
    (b'{"examples": [{"x": [1, 2.5]}]}', "Unexpected element type in feature: x expecting type: int64"),
    (b'{"examples": [{"x": [2.5, "a"]}]}', "Unexpected element type in feature: x expecting type: float"),
    (b'{"examples": [{"x": ["a", true]}]}', "Unexpected element type in feature: x expecting type: bytes"),
    (b'{"examples": [{"x": null}]}', "Feature: x has element with unexpected JSON type: Null"),
    (b'{"examples": [{"x": [[1]]}]}', "Feature: x has element with unexpected JSON type: Array"),
    (b'{"examples": [{"x": {"b64": "YQ==", "y": 1}}]}', "Feature: x has element with unexpected JSON type: Object"),
    (b'{"examples": [{"x": 18446744073709551615}]}', "Feature: x has uint64_t element. Only int64_t is supported."),
    (b'{"examples": [{"x": {"b64": "!!"}}]}', "Unable to base64 decode"),
]


@pytest.mark.parametrize("method", ["classify", "regress"])
@pytest.mark.parametrize(("body", "message"), BODY_ERRORS, ids=[m for _, m in BODY_ERRORS])
def test_bodies_that_do_not_fit_are_400s(c, method, body, message):
    error = error_of(c.post(f"/v1/models/serving_examples:{method}", content=body))
    assert error.startswith(message) if message.startswith("JSON") else error.endswith(message), error


SIGNATURE_ERRORS = [
    ("serving_examples", "classify", "nope", "No signature was found with the name: nope"),
    ("serving_examples", "regress", "", "Expected one output Tensor."),
    ("serving_examples", "classify", "predict", "No classification inputs found in SignatureDef: inputs {\n  key: \"examples\""),
    ("serving_examples", "classify", "regression",
     'Expected classification signature outputs to contain at least one of "classes" or "scores". Signature was: '),
    ("serving_examples", "regress", "classify_scores", "No regression outputs found in SignatureDef: "),
    ("half_plus_two", "regress", "", "No regression inputs found in SignatureDef: "),
    ("shapes", "classify", "classify_three", "Expected one or two output Tensors, found 3"),
    ("shapes", "classify", "classify_two_inputs", "Expected one input Tensor."),
    ("shapes", "classify", "classify_1d", "Expected Tensor shape: [batch_size num_classes] but got [2]"),
    ("shapes", "classify", "classify_f64", "Expected scores Tensor of DT_FLOAT. Got: DT_DOUBLE"),
    ("shapes", "classify", "classify_batch", "Expected scores output batch size of 2. Got: 1"),
    ("shapes", "classify", "classify_k", "Tensors class and score should match in dim_size(1). Got 2 vs. 3"),
    ("shapes", "regress", "regress_wide",
     "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got [2,2]"),
    ("shapes", "regress", "regress_int", "Expected output Tensor of DT_FLOAT.  Got: DT_INT32"),
    ("shapes", "regress", "regress_batch", "Input batch size did not match output batch size: 2 vs. 1"),
]


@pytest.mark.parametrize(("model", "method", "signature", "message"), SIGNATURE_ERRORS, ids=[e[3][:50] for e in SIGNATURE_ERRORS])
def test_signatures_and_outputs_that_do_not_fit_are_400s(c, model, method, signature, message):
    body = {"signature_name": signature, "examples": [{"x": 1.0}, {"x": 2.0}]}
    assert error_of(c.post(f"/v1/models/{model}:{method}", json=body)).startswith(message)


def test_the_signature_is_printed_as_tensorflow_serving_prints_it(c):
    error = error_of(c.post("/v1/models/serving_examples:classify", json={"signature_name": "predict", "examples": [{}]}))
    signature = error.removeprefix("No classification inputs found in SignatureDef: ")
    assert 'key: "examples"' in signature and 'name: "input_example_tensor:0"' in signature
    assert "dtype: DT_STRING" in signature and 'method_name: "tensorflow/serving/predict"' in signature


def test_examples_the_model_cannot_parse_are_400s(c):
    r = c.post("/v1/models/half_plus_two:classify", json={"signature_name": "classify_x_to_y", "examples": [{"x2": 1.0}]})
    assert "Feature: x (data type: float) is required but could not be found." in error_of(r)
    # regress_x2_to_y3 takes x2 itself, a float tensor: examples cannot feed it
    r = c.post("/v1/models/half_plus_two:regress", json={"signature_name": "regress_x2_to_y3", "examples": [{"x": 1.0}]})
    assert error_of(r) == "input 'inputs' expects dtype float32, got string"


def test_classify_and_regress_are_counted_as_requests(c):
    c.post("/v1/models/half_plus_two:regress", json={"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}]})
    c.post("/v1/models/half_plus_two:regress", json={"signature_name": "nope", "examples": [{"x": 1.0}]})
    metrics = c.get("/metrics").text
    ok = [line for line in metrics.splitlines() if line.startswith("tensorgate_requests_total{")
          and 'model="half_plus_two"' in line and 'outcome="success"' in line]
    bad = [line for line in metrics.splitlines() if line.startswith("tensorgate_requests_total{")
           and 'model="half_plus_two"' in line and 'outcome="client_error"' in line]
    assert ok and float(ok[0].split()[-1]) >= 1 and bad and float(bad[0].split()[-1]) >= 1


def test_classify_runs_through_the_batcher(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_repository(root)
    c = client(make_server(root, batching=True))
    body = rest_cases()[0]["request"]
    r = c.post("/v1/models/serving_examples:classify", json=body)
    assert r.status_code == 200, r.text
    expected = rest_cases()[0]["response"]["results"]
    np.testing.assert_allclose([[s for _, s in row] for row in r.json()["results"]],
                               [[s for _, s in row] for row in expected], rtol=1e-6, atol=1e-7)


def test_results_over_the_response_limit_are_413_and_resource_exhausted(tmp_path, make_server, client):
    """Classify and regress build their responses from the outputs after the model ran: held to
    TENSORGATE_MAX_RESPONSE_BYTES by the fewest bytes any encoding takes, on REST and gRPC alike."""
    import grpc

    from service.protocols.grpc.services import PREDICTION_SERVICE, Stub
    from service.protocols.proto import regression_pb2

    root = tmp_path / "repo"
    write_repository(root)
    server = make_server(root, max_response_bytes=256)  # gRPC on a free port too
    c = client(server)
    few, many = [{"x": 1.5}] * 4, [{"x": 1.5}] * 200  # 200 float32 scores: at least 800 bytes however encoded
    for method, signature in (("classify", "classify_x_to_y"), ("regress", "regress_x_to_y")):
        assert c.post(f"/v1/models/half_plus_two:{method}",
                      json={"signature_name": signature, "examples": few}).status_code == 200
        r = c.post(f"/v1/models/half_plus_two:{method}", json={"signature_name": signature, "examples": many})
        assert r.status_code == 413, r.text
        assert "limit of 256 bytes (TENSORGATE_MAX_RESPONSE_BYTES)" in r.json()["error"]
    example = {"features": {"feature": {"x": {"float_list": {"value": [1.5]}}}}}
    request = regression_pb2.RegressionRequest(model_spec={"name": "half_plus_two", "signature_name": "regress_x_to_y"},
                                               input={"example_list": {"examples": [example] * 200}})
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            Stub(channel, PREDICTION_SERVICE).Regress(request, timeout=30)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "TENSORGATE_MAX_RESPONSE_BYTES" in raised.value.details()
