"""Models that need the custom ops TensorFlow Serving's binary links (TensorFlow Text with SentencePiece,
TensorFlow Decision Forests), served over every protocol against TensorFlow's numbers: TensorFlow Serving's
REST predict and gRPC Predict, and the Open Inference Protocol over HTTP and gRPC with Triton's own clients.

The models are the golden SavedModels under tests/fixtures/saved_models/ whose graphs hold such ops (BERT
classifiers taking raw text through BertTokenizer and FastBertTokenizer, a SentencePiece pair classifier,
TensorFlow Text's model-server regression model, TF-DF forests), found by their op names, so that a new one
is served here by being written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from engine.graph.op_packages import PACKAGE_OPS
from engine.graph.tensors import from_array, to_array
from engine.proto import saved_model_pb2
from service.protocols.grpc.services import PREDICTION_SERVICE, Stub
from service.protocols.proto import predict_pb2
from tests.golden import FIXTURES
from tests.service.conftest import start_server
from tests.service.repository.test_saved_models import check_output, infer_v2, predict_v1, signature_cases

triton_grpc = pytest.importorskip("tritonclient.grpc")


def _custom_ops(model_dir: Path) -> set[str]:
    saved = saved_model_pb2.SavedModel.FromString((model_dir / "saved_model.pb").read_bytes())
    ops = set()
    for meta in saved.meta_graphs:
        ops |= {node.op for node in meta.graph_def.node}
        for function in meta.graph_def.library.function:
            ops |= {node.op for node in function.node_def}
    return ops & set(PACKAGE_OPS)


CASES = sorted(p.parent for p in (FIXTURES / "saved_models").glob("*/signatures.json")
               if _custom_ops(p.parent / "model"))


def test_the_custom_op_models_are_there():
    packages = {PACKAGE_OPS[op] for case in CASES for op in _custom_ops(case / "model")}
    assert packages == {"tensorflow-text", "tensorflow-decision-forests"}, [c.name for c in CASES]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("custom_ops") / "repo"
    for case_dir in CASES:
        shutil.copytree(case_dir / "model", root / case_dir.name / "1")
    server = start_server(root, poll_interval_s=0)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http(server):
    import httpx

    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_rest_predict_matches_tensorflow(server, http, case_dir):
    for sig in signature_cases(case_dir):
        outputs = predict_v1(http, sig, f"/v1/models/{case_dir.name}:predict")
        for alias, value in outputs.items():
            check_output(sig, alias, value, case_dir / "model")  # (no output is an asset's path)


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_grpc_predict_matches_tensorflow(server, case_dir):
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = Stub(channel, PREDICTION_SERVICE)
        for sig in signature_cases(case_dir):
            request = predict_pb2.PredictRequest(model_spec={"name": case_dir.name, "signature_name": sig.name})
            for alias, value in sig.feeds.items():
                request.inputs[alias].CopyFrom(from_array(value))
            response = stub.Predict(request, timeout=60)
            for alias in sig.fetches:
                check_output(sig, alias, to_array(response.outputs[alias]), case_dir / "model")


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_v2_http_and_grpc_match_tensorflow(server, case_dir):
    for sig in signature_cases(case_dir):
        for alias, value in infer_v2(server, sig, case_dir.name).items():
            check_output(sig, alias, value, case_dir / "model")
        client = triton_grpc.InferenceServerClient(server.grpc_target)
        try:
            inputs = []
            for alias, value in sig.feeds.items():
                dtype = "BYTES" if value.dtype == object else triton_grpc.np_to_triton_dtype(value.dtype)
                x = triton_grpc.InferInput(alias, list(value.shape), dtype)
                x.set_data_from_numpy(value)
                inputs.append(x)
            result = client.infer(case_dir.name, inputs, parameters={"signature_name": sig.name}, client_timeout=60)
            for alias in sig.fetches:
                got = result.as_numpy(alias)
                check_output(sig, alias, got.astype(object) if got.dtype.kind == "S" else got, case_dir / "model")
        finally:
            client.close()


def test_a_bad_feed_is_a_clear_400(http):
    """Text where a model wants numbers: a 400 naming the input, never a 500."""
    case = next(c for c in CASES if c.name == "bert_tokenizer_classifier")
    r = http.post(f"/v1/models/{case.name}:predict", json={"inputs": {"text": [[1.5, 2.5]]}})
    assert r.status_code == 400, r.text
    assert "text" in r.json()["error"]
