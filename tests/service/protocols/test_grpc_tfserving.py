"""TensorFlow Serving's gRPC API (PredictionService, ModelService) through stubs over our schemas, against
TensorFlow's numbers: Predict on the golden model fixtures, Classify/Regress/MultiInference on the
Estimator-style tf.Example export, metadata and status as TensorFlow Serving fills them, config reloads,
and each failure with its status code and TensorFlow Serving's words."""

from __future__ import annotations

import shutil

import grpc
import httpx
import numpy as np
import pytest
import yaml

from engine.graph.tensors import from_array, to_array
from engine.proto import example_pb2
from service.protocols.grpc.services import MODEL_SERVICE, PREDICTION_SERVICE, Stub
from service.protocols.proto import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    predict_pb2,
    regression_pb2,
)
from tests.golden import FIXTURES, assert_matches, load_case
from tests.service.conftest import EXAMPLES, alias, model_cases, start_server, write_fixture_model

CASES = model_cases()
SERVING_EXAMPLES = FIXTURES / "saved_models" / "serving_examples"
HALF_PLUS_TWO = FIXTURES / "saved_models" / "half_plus_two_serving"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc") / "repo"
    root.mkdir()
    for case_dir in CASES:
        write_fixture_model(root, case_dir)
    shutil.copytree(SERVING_EXAMPLES / "model", root / "serving_examples" / "1")
    shutil.copytree(HALF_PLUS_TWO / "model", root / "half_plus_two" / "1")
    (root / "half_plus_two" / "config.yaml").write_text(yaml.safe_dump({"labels": {"stable": 1}}))
    server = start_server(root, poll_interval_s=0)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield channel


@pytest.fixture(scope="module")
def predictions(channel):
    return Stub(channel, PREDICTION_SERVICE)


@pytest.fixture(scope="module")
def models(channel):
    return Stub(channel, MODEL_SERVICE)


def code_of(call, *args, **kwargs) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, **kwargs)
    return raised.value.code(), raised.value.details()


def predict_request(model: str, inputs: dict, **spec) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest(model_spec={"name": model, **spec})
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(from_array(value))
    return request


# --- Predict ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_predict_matches_tensorflow(predictions, case_dir):
    case = load_case(case_dir)
    response = predictions.Predict(predict_request(case_dir.name, {alias(t): v for t, v in case.feeds.items()}), timeout=30)
    assert response.model_spec.name == case_dir.name and response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"
    for tensor, want in case.fetches.items():
        assert_matches(tensor, to_array(response.outputs[alias(tensor)]), want, case.rtol, case.atol)


def test_predict_replies_in_typed_fields_as_tensorflow_serving(predictions):
    response = predictions.Predict(predict_request("half_plus_two", {"x": np.array([[1.0], [2.0]], np.float32)},
                                                   signature_name="serving_default"))
    y = response.outputs["y"]
    assert list(y.float_val) == [2.5, 3.0] and not y.tensor_content  # as clients read it: outputs["y"].float_val
    assert [d.size for d in y.tensor_shape.dim] == [2, 1]


def test_predict_routes_by_version_and_label_and_filters_outputs(predictions):
    x = {"x": np.array([[4.0]], np.float32)}
    for spec in ({"version": {"value": 1}}, {"version_label": "stable"}, {}):
        response = predictions.Predict(predict_request("half_plus_two", x, **spec))
        assert response.model_spec.version.value == 1 and list(response.outputs["y"].float_val) == [4.0]
    assert code_of(predictions.Predict, predict_request("half_plus_two", x, version={"value": 7}))[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(predictions.Predict, predict_request("half_plus_two", x, version_label="nope"))[0] == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("request_, code, message", [
    (predict_pb2.PredictRequest(), grpc.StatusCode.INVALID_ARGUMENT, "Missing ModelSpec"),
    (predict_pb2.PredictRequest(model_spec={}), grpc.StatusCode.INVALID_ARGUMENT, "ModelSpec has no name specified."),
    (predict_request("nope", {}), grpc.StatusCode.NOT_FOUND, "model 'nope' not found"),
    (predict_request("half_plus_two", {"x": np.ones((1, 1), np.float32)}, signature_name="nope"),
     grpc.StatusCode.INVALID_ARGUMENT, 'Serving signature key "nope" not found.'),
    (predict_request("half_plus_two", {"z": np.ones((1, 1), np.float32)}), grpc.StatusCode.INVALID_ARGUMENT,
     "input size does not match signature"),
    (predict_request("half_plus_two", {"x": np.ones((1, 1), np.int32)}), grpc.StatusCode.INVALID_ARGUMENT,
     "input 'x' expects dtype"),
], ids=["no-spec", "no-name", "unknown-model", "unknown-signature", "unknown-input", "wrong-dtype"])
def test_predict_errors_have_tensorflow_servings_codes(predictions, request_, code, message):
    got_code, details = code_of(predictions.Predict, request_)
    assert got_code == code and message in details


def test_predict_output_filter(predictions):
    request = predict_request("half_plus_two", {"x": np.array([[1.0]], np.float32)})
    request.output_filter.append("nope")
    code, details = code_of(predictions.Predict, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "output tensor alias not found in signature: nope" in details
    request.output_filter[:] = ["y"]
    assert set(predictions.Predict(request).outputs) == {"y"}


def test_malformed_bytes_are_invalid_argument(channel):
    call = channel.unary_unary(f"/{PREDICTION_SERVICE}/Predict")
    with pytest.raises(grpc.RpcError) as raised:
        call(b"\xff\xff\xff")
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "PredictRequest" in raised.value.details()


# --- Classify, Regress, MultiInference ---------------------------------------------------------------


def examples_input(serialized: np.ndarray):
    examples = [example_pb2.Example.FromString(bytes(s)) for s in serialized]
    return {"example_list": {"examples": examples}}


def test_classify_and_regress_match_tensorflow(predictions):
    data = np.load(SERVING_EXAMPLES / "data.npz")
    response = predictions.Classify(classification_pb2.ClassificationRequest(
        model_spec={"name": "serving_examples"}, input=examples_input(data["s0_in0"])))
    labels = [[c.label for c in row.classes] for row in response.result.classifications]
    scores = [[c.score for c in row.classes] for row in response.result.classifications]
    assert labels == [[v.decode() for v in row] for row in data["s0_out0"]]
    np.testing.assert_allclose(scores, data["s0_out1"], rtol=1e-6, atol=1e-7)
    assert response.model_spec.name == "serving_examples" and response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"
    response = predictions.Regress(regression_pb2.RegressionRequest(
        model_spec={"name": "serving_examples", "signature_name": "regression"}, input=examples_input(data["s3_in0"])))
    np.testing.assert_allclose([r.value for r in response.result.regressions], data["s3_out0"].ravel(), rtol=1e-6)


def test_tensorflow_servings_grpc_tests_word_for_word(predictions):
    # model_servers/tensorflow_model_server_test.py: testClassify and testRegress on half_plus_two
    example = {"features": {"feature": {"x": {"float_list": {"value": [2.0]}}}}}
    response = predictions.Classify(classification_pb2.ClassificationRequest(
        model_spec={"name": "half_plus_two", "signature_name": "classify_x_to_y"},
        input={"example_list": {"examples": [example]}}))
    assert response.result.classifications[0].classes[0].score == 3.0
    response = predictions.Regress(regression_pb2.RegressionRequest(
        model_spec={"name": "half_plus_two", "signature_name": "regress_x_to_y"},
        input={"example_list": {"examples": [example]}}))
    assert response.result.regressions[0].value == 3.0
    code, details = code_of(predictions.Classify, classification_pb2.ClassificationRequest(
        model_spec={"name": "half_plus_two", "signature_name": "classify_x_to_y"}, input={}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "Input is empty."


def test_multi_inference_runs_several_signatures_over_one_input(predictions):
    data = np.load(SERVING_EXAMPLES / "data.npz")
    request = inference_pb2.MultiInferenceRequest(input=examples_input(data["s0_in0"]))
    request.tasks.add(model_spec={"name": "serving_examples"}, method_name="tensorflow/serving/classify")
    request.tasks.add(model_spec={"name": "serving_examples", "signature_name": "classify_scores"},
                      method_name="tensorflow/serving/classify")
    response = predictions.MultiInference(request)
    scores = [[c.score for c in row.classes] for row in response.results[0].classification_result.classifications]
    np.testing.assert_allclose(scores, data["s0_out1"], rtol=1e-6, atol=1e-7)
    assert [r.model_spec.signature_name for r in response.results] == ["serving_default", "classify_scores"]
    request.tasks.add(model_spec={"name": "serving_examples"}, method_name="tensorflow/serving/classify")
    code, details = code_of(predictions.MultiInference, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "Duplicate evaluation of signature: serving_default"


# --- metadata and status ----------------------------------------------------------------------------


def test_metadata_packs_a_signature_def_map_as_tensorflow_serving(predictions):
    response = predictions.GetModelMetadata(get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec={"name": "serving_examples"}, metadata_field=["signature_def"]))
    packed = response.metadata["signature_def"]
    assert packed.type_url == "type.googleapis.com/tensorflow.serving.SignatureDefMap"
    signatures = get_model_metadata_pb2.SignatureDefMap.FromString(packed.value).signature_def
    assert signatures["regression"].method_name == "tensorflow/serving/regress"
    assert signatures["serving_default"].inputs["inputs"].name == "input_example_tensor:0"
    assert response.model_spec.name == "serving_examples" and response.model_spec.version.value == 1
    for fields, message in (([], "GetModelMetadataRequest must specify at least one metadata_field"),
                            (["signature_def", "nope"], "Metadata field nope is not supported")):
        code, details = code_of(predictions.GetModelMetadata, get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec={"name": "serving_examples"}, metadata_field=fields))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details == message
    code, details = code_of(predictions.GetModelMetadata, get_model_metadata_pb2.GetModelMetadataRequest(
        metadata_field=["signature_def"]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "Missing ModelSpec"


def test_model_status(models):
    response = models.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "half_plus_two"}))
    (status,) = response.model_version_status
    assert status.version == 1 and status.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert status.status.error_code == 0 and status.status.error_message == ""
    code, details = code_of(models.GetModelStatus, get_model_status_pb2.GetModelStatusRequest(
        model_spec={"name": "half_plus_two", "version": {"value": 3}}))
    assert code == grpc.StatusCode.NOT_FOUND and "version 3" in details
    assert code_of(models.GetModelStatus, get_model_status_pb2.GetModelStatusRequest())[1] == "Missing ModelSpec"


def test_grpc_requests_are_counted_under_their_protocol(server, predictions):
    predictions.Predict(predict_request("half_plus_two", {"x": np.array([[1.0]], np.float32)}))
    text = httpx.get(f"{server.url}/metrics").text
    assert ('tensorgate_requests_total{model="half_plus_two",outcome="success",protocol="grpc",'
            'signature="serving_default",version="1"}') in text


# --- reloading the model server config ---------------------------------------------------------------


def reload_request(models: dict[str, str]) -> model_management_pb2.ReloadConfigRequest:
    request = model_management_pb2.ReloadConfigRequest()
    request.config.model_config_list.SetInParent()  # an empty list unloads every model; no list changes nothing
    for name, base_path in models.items():
        request.config.model_config_list.config.add(name=name, base_path=base_path, model_platform="tensorflow")
    return request


def test_reload_config_adds_and_removes_models(tmp_path, make_server):
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    shutil.copytree(HALF_PLUS_TWO / "model", tmp_path / "elsewhere" / "3")
    server = make_server(root)
    with grpc.insecure_channel(server.grpc_target) as channel:
        models, predictions = Stub(channel, MODEL_SERVICE), Stub(channel, PREDICTION_SERVICE)
        response = models.HandleReloadConfigRequest(reload_request({"added": str(tmp_path / "elsewhere")}), timeout=60)
        assert response.status.error_code == 0
        reply = predictions.Predict(predict_request("added", {"x": np.array([[2.0]], np.float32)}))
        assert reply.model_spec.version.value == 3 and list(reply.outputs["y"].float_val) == [3.0]
        # A model of the repository cannot be named: the config covers the configured models only.
        with pytest.raises(grpc.RpcError) as raised:
            models.HandleReloadConfigRequest(reload_request({"half_plus_two": str(tmp_path / "elsewhere")}))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "also in the model repository" in raised.value.details()
        # A model whose base path holds no version does not become available: TensorFlow Serving's words.
        (tmp_path / "empty").mkdir()
        with pytest.raises(grpc.RpcError) as raised:
            models.HandleReloadConfigRequest(reload_request({"added": str(tmp_path / "elsewhere"),
                                                             "empty": str(tmp_path / "empty")}))
        assert "1 model(s) did not become available: {{name: empty" in raised.value.details()
        # The new config supersedes the old one: a model left out is unloaded.
        assert models.HandleReloadConfigRequest(reload_request({})).status.error_code == 0
        assert code_of(predictions.Predict, predict_request("added", {"x": np.ones((1, 1), np.float32)}))[0] in (
            grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
        assert predictions.Predict(predict_request("half_plus_two", {"x": np.ones(1, np.float32)})).outputs["y"].float_val
        assert models.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest()).status.error_code == 0
        other = model_management_pb2.ReloadConfigRequest()
        other.config.custom_model_config.type_url = "x"
        code, details = code_of(models.HandleReloadConfigRequest, other)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "Only ModelConfigList is currently supported" in details


def test_reload_config_needs_the_admin_token(tmp_path, make_server):
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "half_plus_two", root / "half_plus_two")
    server = make_server(root, admin_token="secret", api_token="reader")
    with grpc.insecure_channel(server.grpc_target) as channel:
        models, predictions = Stub(channel, MODEL_SERVICE), Stub(channel, PREDICTION_SERVICE)
        x = predict_request("half_plus_two", {"x": np.ones(1, np.float32)})
        assert code_of(models.HandleReloadConfigRequest, reload_request({}))[0] == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(models.HandleReloadConfigRequest, reload_request({}),
                       metadata=[("authorization", "Bearer reader")])[0] == grpc.StatusCode.PERMISSION_DENIED
        assert models.HandleReloadConfigRequest(reload_request({}), metadata=[("authorization", "Bearer secret")])
        assert code_of(predictions.Predict, x)[0] == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(predictions.Predict, x, metadata=[("authorization", "Bearer wrong")])[0] == grpc.StatusCode.PERMISSION_DENIED
        for token in ("reader", "secret"):
            assert predictions.Predict(x, metadata=[("authorization", f"Bearer {token}")]).outputs["y"].float_val
