"""A server with lazy loading, a memory budget and idle unloading, through its HTTP APIs: versions listed
unloaded, loaded by their first request (TF Serving REST and v2), evicted past the budget, and the residency
in the repository index, the metrics and the dashboard's data."""

from __future__ import annotations

import re
import shutil

import grpc
import numpy as np
import pytest

from service.protocols.grpc.services import MODEL_SERVICE, PREDICTION_SERVICE, Stub
from service.protocols.proto import get_model_status_pb2, model_pb2, predict_pb2
from tests.service.conftest import EXAMPLES


def _repository(root, count: int):
    for i in range(count):
        shutil.copytree(EXAMPLES / "half_plus_two", root / f"m{i}")
    return root


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_lazy_loading_and_the_budget_through_the_server(tmp_path, make_server, client):
    server = make_server(_repository(tmp_path / "repo", 3), load_on_demand=True)
    http = client(server)
    index = {row["name"]: row for row in http.post("/v2/repository/index", json={}).json()}
    assert index["m0"]["state"] == "UNAVAILABLE" and "first request" in index["m0"]["reason"]
    status = http.get("/v1/models/m0").json()["model_version_status"][0]
    assert status["state"] == "START" and status["status"]["error_code"] == "OK"  # TF Serving's words
    assert http.get("/v2/health/ready").status_code == 200 and http.get("/v2/models/m0/ready").status_code == 200

    r = http.post("/v1/models/m0:predict", json={"instances": [1.0, 2.0, 5.0]})
    assert r.status_code == 200 and r.json() == {"predictions": [2.5, 3.0, 4.5]}
    assert float(r.headers["Tensorgate-Load-Wait-Ms"]) > 0  # a cold start says so
    assert "Tensorgate-Load-Wait-Ms" not in http.post("/v1/models/m0:predict", json={"instances": [1.0]}).headers
    r = http.post("/v2/models/m1/infer",
                  json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [2.5, 3.0]
    meta = http.get("/v1/models/m2/metadata")  # metadata loads a parked version too
    assert meta.status_code == 200 and "serving_default" in meta.json()["metadata"]["signature_def"]["signature_def"]

    metrics = http.get("/metrics").text
    assert _metric(metrics, "tensorgate_model_loads_total", trigger="request") == 3
    assert _metric(metrics, "tensorgate_model_cold_start_seconds_count") == 3
    assert _metric(metrics, "tensorgate_model_resident_bytes", model="m0") > 0
    assert _metric(metrics, "tensorgate_models_resident_bytes") == sum(
        _metric(metrics, "tensorgate_model_resident_bytes", model=f"m{i}") for i in range(3))
    stats = {row["name"]: row for row in http.get("/v2/models/stats").json()["model_stats"]}
    assert stats["m0"]["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": int(_metric(
        metrics, "tensorgate_model_resident_bytes", model="m0"))}]  # Triton's statistics say it too
    memory = http.get("/dashboard/data").json()["memory"]
    assert memory["loaded_versions"] == 3 and memory["loads"] == {"request": 3} and memory["cold_starts"] == 3
    assert memory["resident_bytes"] == _metric(metrics, "tensorgate_models_resident_bytes")


def test_evictions_past_the_budget_are_counted_and_reloaded_on_demand(tmp_path, make_server, client):
    probe = make_server(_repository(tmp_path / "probe", 1))
    size = int(_metric(client(probe).get("/metrics").text, "tensorgate_model_resident_bytes", model="m0"))
    assert size > 0
    server = make_server(_repository(tmp_path / "repo", 4), load_on_demand=True, model_memory_bytes=2 * size)
    http = client(server)
    for name in ("m0", "m1", "m2", "m3", "m0"):
        r = http.post(f"/v1/models/{name}:predict", json={"instances": [1.0]})
        assert r.status_code == 200, r.text
    metrics = http.get("/metrics").text
    assert _metric(metrics, "tensorgate_model_unloads_total", reason="evicted") == 3
    assert _metric(metrics, "tensorgate_models_resident_bytes") <= 2 * size
    assert _metric(metrics, "tensorgate_model_memory_budget_bytes") == 2 * size
    index = {row["name"]: row for row in http.post("/v2/repository/index", json={}).json()}
    assert index["m0"]["state"] == "READY" and index["m3"]["state"] == "READY"
    assert index["m1"]["state"] == "UNAVAILABLE" and re.match("evicted", index["m1"]["reason"])
    stats = {row["name"]: row for row in http.get("/v2/models/stats").json()["model_stats"]}
    assert "m1" not in stats and stats["m0"]["memory_usage"][0]["byte_size"] > 0  # Triton lists loaded versions


def test_tritonclient_and_tf_serving_grpc_load_parked_models(tmp_path, make_server):
    """Real clients over gRPC: tritonclient sees a parked model ready, its infer loads it; TensorFlow Serving's
    GetModelStatus says START, then AVAILABLE once a Predict loaded the version."""
    triton_grpc = pytest.importorskip("tritonclient.grpc")
    server = make_server(_repository(tmp_path / "repo", 2), load_on_demand=True)
    client = triton_grpc.InferenceServerClient(server.grpc_target)
    assert client.is_model_ready("m0")
    x = triton_grpc.InferInput("x", [3], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], np.float32))
    assert client.infer("m0", [x]).as_numpy("y").tolist() == [2.5, 3.0, 4.5]
    (usage,) = client.get_inference_statistics("m0").model_stats[0].memory_usage
    assert usage.type == "CPU" and usage.byte_size > 0
    with grpc.insecure_channel(server.grpc_target) as channel:
        spec = model_pb2.ModelSpec(name="m1")
        status = Stub(channel, MODEL_SERVICE).GetModelStatus(get_model_status_pb2.GetModelStatusRequest(model_spec=spec))
        assert status.model_version_status[0].state == 10  # START
        request = predict_pb2.PredictRequest(model_spec=spec)
        request.inputs["x"].dtype = 1
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.inputs["x"].float_val.append(4.0)
        reply = Stub(channel, PREDICTION_SERVICE).Predict(request)
        assert list(reply.outputs["y"].float_val) == [4.0]
        status = Stub(channel, MODEL_SERVICE).GetModelStatus(get_model_status_pb2.GetModelStatusRequest(model_spec=spec))
        assert status.model_version_status[0].state == 30  # AVAILABLE
