"""Triton's statistics extension through tritonclient (HTTP and gRPC): per loaded version, the successful
inferences (rows), executions, failures, queue and compute time and per-batch-size executions, counted
as Triton counts them; an unknown model answered in Triton's words."""

from __future__ import annotations

import numpy as np
import pytest

from tests.service.conftest import serve_examples

triton_http = pytest.importorskip("tritonclient.http")
triton_grpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = serve_examples(tmp_path_factory.mktemp("stats") / "repo", "half_plus_two", "iris_classifier")
    yield server
    server.stop()


def features(rows: int) -> np.ndarray:
    return np.linspace(0.1, 7.0, rows * 4, dtype=np.float32).reshape(rows, 4)


def test_statistics_count_what_ran(server):
    http = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        for rows in (3, 5):
            x = triton_http.InferInput("features", [rows, 4], "FP32")
            x.set_data_from_numpy(features(rows))
            http.infer("iris_classifier", [x], model_version="2")
        bad = triton_http.InferInput("features", [1, 3], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
        with pytest.raises(InferenceServerException):
            http.infer("iris_classifier", [bad], model_version="2")
        (stats,) = http.get_inference_statistics("iris_classifier", "2")["model_stats"]
    finally:
        http.close()
    assert (stats["name"], stats["version"]) == ("iris_classifier", "2")
    assert stats["inference_count"] == 8 and stats["execution_count"] == 2 and stats["last_inference"] > 0
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 2 and inference["fail"]["count"] == 1
    assert inference["compute_infer"]["count"] == 2 and inference["compute_infer"]["ns"] > 0
    assert inference["success"]["ns"] >= inference["compute_infer"]["ns"]
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]} == {3: 1, 5: 1}


def test_every_loaded_version_over_grpc_and_unknown_models(server):
    grpc = triton_grpc.InferenceServerClient(server.grpc_target)
    try:
        everything = grpc.get_inference_statistics(as_json=True)["model_stats"]
        assert {(s["name"], s["version"]) for s in everything} >= {("half_plus_two", "1"), ("iris_classifier", "1"),
                                                                     ("iris_classifier", "2")}
        one = grpc.get_inference_statistics("iris_classifier", "1", as_json=True)["model_stats"]
        assert [(s["name"], s["version"]) for s in one] == [("iris_classifier", "1")]
        with pytest.raises(InferenceServerException) as e:
            grpc.get_inference_statistics("nope")
        assert "Request for unknown model: 'nope' is not found" in e.value.message()
    finally:
        grpc.close()
    http = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        with pytest.raises(InferenceServerException) as e:
            http.get_inference_statistics("nope")
        assert "Request for unknown model: 'nope' is not found" in e.value.message()
        assert "statistics" in http.get_server_metadata()["extensions"]
    finally:
        http.close()
