"""The model repository over HTTP: upload -> predict -> new version -> label -> delete, restart
persistence, hot reload from the directory, rejected uploads, and the v2 repository extension."""

from __future__ import annotations

import base64
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton
import yaml
from tritonclient.utils import InferenceServerException

from tests.engine.graphs import GraphBuilder

F32 = np.dtype(np.float32)


def scale_graph(k: float) -> bytes:
    """y = x * k over x: float32 [None, 2]; the factor tells which version answered."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 2))
    g.const("k", np.float32(k))
    g.node("y", "Mul", ["x", "k"], T=F32)
    return g.bytes()


def unsupported_graph() -> bytes:
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 2))
    g.node("y", "FancyOp", ["x"])
    return g.bytes()


def predict(c, path: str = "/v1/models/m:predict") -> float:
    r = c.post(path, json={"instances": [[1.0, 1.0]]})
    assert r.status_code == 200, r.text
    return r.json()["predictions"][0][0]


def write_version(root: Path, model: str, version: int, data: bytes) -> None:
    d = root / model / str(version)
    d.mkdir(parents=True)
    (d / "model.pb").write_bytes(data)


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def states(c, model: str = "m") -> dict[str, str]:
    r = c.get(f"/v1/models/{model}")
    return {s["version"]: s["state"] for s in r.json().get("model_version_status", [])}


def test_upload_predict_version_label_delete(tmp_path, make_server, client):
    root = tmp_path / "repo"
    root.mkdir()
    c = client(make_server(root))

    r = c.put("/v1/models/m/versions/1", content=scale_graph(2.0))
    assert r.status_code == 201, r.text
    assert r.json()["model_version_status"][0]["state"] == "AVAILABLE"
    assert predict(c) == 2.0

    assert c.put("/v1/models/m/versions/2", content=scale_graph(3.0)).status_code == 201
    assert predict(c) == 3.0  # the newest version serves; latest: 1 unloads version 1
    wait_for(lambda: states(c) == {"2": "AVAILABLE", "1": "END"})

    r = c.put("/v1/models/m/labels/stable", json={"version": 2})
    assert r.status_code == 200, r.text
    assert predict(c, "/v1/models/m/labels/stable:predict") == 3.0
    assert yaml.safe_load((root / "m" / "config.yaml").read_text())["labels"] == {"stable": 2}
    r = c.put("/v1/models/m/labels/canary", json={"version": 1})
    assert r.status_code == 400 and "not available" in r.json()["error"]

    r = c.delete("/v1/models/m/versions/2")
    assert r.status_code == 409 and "stable" in r.json()["error"]
    assert c.delete("/v1/models/m/labels/stable").status_code == 200
    assert c.delete("/v1/models/m/versions/2").status_code == 200
    assert not (root / "m" / "2").exists()
    # Deleting the newest version rolls back: latest: 1 now means version 1, still on disk.
    wait_for(lambda: states(c) == {"2": "END", "1": "AVAILABLE"})
    assert predict(c) == 2.0
    assert c.delete("/v1/models/m/versions/2").status_code == 404


def test_existing_version_is_a_conflict(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    c = client(make_server(root))
    r = c.put("/v1/models/m/versions/1", content=scale_graph(5.0))
    assert r.status_code == 409 and "already exists" in r.json()["error"]
    assert predict(c) == 2.0


def test_rejected_upload_leaves_everything_as_it_was(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    c = client(make_server(root))
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    for body, problem in [(unsupported_graph(), "FancyOp"), (b"\x00garbage\xff", "not a GraphDef"), (b"", "empty")]:
        r = c.put("/v1/models/m/versions/2", content=body)
        assert r.status_code == 400, r.text
        assert problem.lower() in r.json()["error"].lower()
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before
    assert states(c) == {"1": "AVAILABLE"}
    assert predict(c) == 2.0


def test_restart_serves_the_same_versions_and_labels(tmp_path, make_server, client):
    root = tmp_path / "repo"
    root.mkdir()
    first = make_server(root)
    c = client(first)
    (root / "m").mkdir()
    (root / "m" / "config.yaml").write_text("version_policy: all\n")
    for v, k in [(1, 2.0), (2, 3.0)]:
        assert c.put(f"/v1/models/m/versions/{v}", content=scale_graph(k)).status_code == 201
    assert c.put("/v1/models/m/labels/stable", json={"version": 1}).status_code == 200
    first.stop()

    c = client(make_server(root))
    assert states(c) == {"2": "AVAILABLE", "1": "AVAILABLE"}
    assert predict(c, "/v1/models/m/labels/stable:predict") == 2.0
    assert predict(c, "/v1/models/m/versions/2:predict") == 3.0


def test_hot_reload_loads_new_versions_and_unloads_removed_ones(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    c = client(make_server(root, poll_interval_s=0.05))
    assert predict(c) == 2.0

    # Copy a version in the way users should: written elsewhere, then moved into place.
    staging = tmp_path / "incoming" / "2"
    staging.mkdir(parents=True)
    (staging / "model.pb").write_bytes(scale_graph(3.0))
    shutil.move(staging, root / "m" / "2")
    wait_for(lambda: states(c) == {"2": "AVAILABLE", "1": "END"})
    assert predict(c) == 3.0

    # A new model appears, and a broken version is reported without disturbing the serving one.
    write_version(root, "other", 1, scale_graph(4.0))
    write_version(root, "m", 3, unsupported_graph())
    wait_for(lambda: states(c).get("3") == "END" and states(c, "other") == {"1": "AVAILABLE"})
    assert predict(c) == 3.0
    status = c.get("/v1/models/m/versions/3").json()["model_version_status"][0]
    assert "FancyOp" in status["status"]["error_message"]

    # Removing a version's directory unloads it.
    shutil.rmtree(root / "other" / "1")
    wait_for(lambda: states(c, "other") == {"1": "END"})
    r = c.post("/v1/models/other:predict", json={"instances": [[1.0, 1.0]]})
    assert r.status_code == 503


def test_staging_directories_are_never_loaded(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    half = root / "m" / ".staging-interrupted"
    half.mkdir()
    (half / "model.pb").write_bytes(scale_graph(9.0)[:10])
    c = client(make_server(root))
    assert states(c) == {"1": "AVAILABLE"}
    assert not half.exists()  # left by an interrupted upload: removed at start-up


def test_config_policy_and_signatures(tmp_path, make_server, client):
    root = tmp_path / "repo"
    for v, k in [(1, 2.0), (2, 3.0), (3, 4.0)]:
        write_version(root, "m", v, scale_graph(k))
    (root / "m" / "config.yaml").write_text(
        "version_policy: {specific: [1, 3]}\n"
        "labels: {stable: 1, canary: 3}\n"
        "signatures:\n  scaled:\n    inputs: {value: 'x:0'}\n    outputs: {scaled: 'y:0'}\n"
    )
    c = client(make_server(root))
    assert states(c) == {"3": "AVAILABLE", "1": "AVAILABLE"}
    r = c.post("/v1/models/m/labels/canary:predict", json={"signature_name": "scaled", "inputs": {"value": [[1.0, 2.0]]}})
    assert r.json() == {"outputs": [[4.0, 8.0]]}
    assert c.get("/v1/models/m/labels/stable").json()["model_version_status"][0]["version"] == "1"
    r = c.post("/v1/models/m/versions/2:predict", json={"instances": [[1.0, 1.0]]})
    assert r.status_code == 404
    r = c.post("/v1/models/m:predict", json={"signature_name": "nope", "instances": [[1.0, 1.0]]})
    assert r.status_code == 404 and "scaled" in r.json()["error"]

    # A config change is picked up by the poller: policy first.
    (root / "m" / "config.yaml").write_text("version_policy: {latest: 1}\n")
    wait_for(lambda: states(c) == {"3": "AVAILABLE", "2": "END", "1": "END"} or states(c) == {"3": "AVAILABLE", "1": "END"})
    assert predict(c) == 4.0


def test_invalid_config_is_reported(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    (root / "m" / "config.yaml").write_text("version_polcy: all\n")
    c = client(make_server(root))
    status = c.get("/v1/models/m").json()["model_version_status"][0]
    assert "version_polcy" in status["status"]["error_message"]


def test_v2_repository_extension_with_tritonclient(tmp_path, make_server):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    server = make_server(root)
    tc = triton.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        index = tc.get_model_repository_index()
        assert index == [{"name": "m", "version": "1", "state": "READY", "reason": ""}]

        tc.unload_model("m")
        assert not tc.is_model_ready("m")
        time.sleep(0.3)  # polls must not bring an unloaded model back
        assert not tc.is_model_ready("m")
        assert tc.get_model_repository_index()[0]["state"] == "UNAVAILABLE"
        tc.load_model("m")
        assert tc.is_model_ready("m")

        # Upload through load: Triton's `file:<version>/<name>` parameters and a config.
        tc.load_model("uploaded", config="version_policy: all\n", files={"file:1/model.pb": scale_graph(5.0), "file:2/model.pb": scale_graph(6.0)})
        assert tc.is_model_ready("uploaded", "1") and tc.is_model_ready("uploaded", "2")
        assert (root / "uploaded" / "2" / "model.pb").read_bytes() == scale_graph(6.0)
        x = triton.InferInput("x", [1, 2], "FP32")
        x.set_data_from_numpy(np.ones((1, 2), np.float32))
        assert tc.infer("uploaded", [x], model_version="1").as_numpy("y").tolist() == [[5.0, 5.0]]

        with pytest.raises(InferenceServerException, match="FancyOp"):
            tc.load_model("bad", files={"file:1/model.pb": unsupported_graph()})
        assert not (root / "bad").exists()
        with pytest.raises(InferenceServerException, match="config"):
            tc.load_model("m", config="version_policy: {latest: 0}\n")
    finally:
        tc.close()


def test_load_body_errors(tmp_path, make_server, client):
    c = client(make_server(tmp_path / "repo"))
    r = c.post("/v2/repository/models/m/load", json={"parameters": {"file:1/model.pb": "not base64!"}})
    assert r.status_code == 400 and "base64" in r.json()["error"]
    r = c.post("/v2/repository/models/m/load", json={"parameters": {"file:../x/model.pb": base64.b64encode(b"x").decode()}})
    assert r.status_code == 400
    r = c.post("/v2/repository/models/..bad/load")
    assert r.status_code in (400, 404)
    r = c.post("/v2/repository/models/nothing/unload")
    assert r.status_code == 404


def test_ready_only_when_every_model_is_ready(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "good", 1, scale_graph(2.0))
    write_version(root, "broken", 1, unsupported_graph())
    c = client(make_server(root))
    assert c.get("/v2/health/live").status_code == 200
    assert c.get("/v2/health/ready").status_code == 503
    assert c.get("/v2/models/good/ready").status_code == 200
    assert c.get("/v2/models/broken/ready").status_code == 503
    shutil.rmtree(root / "broken")
    (root / "empty").mkdir()  # a model directory waiting for its first upload does not hold readiness back
    wait_for(lambda: c.get("/v2/health/ready").status_code == 200)


def test_signature_change_reloads_versions(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    c = client(make_server(root))
    assert [i["name"] for i in c.get("/v2/models/m").json()["inputs"]] == ["x"]
    (root / "m" / "config.yaml").write_text("signatures:\n  serving_default:\n    inputs: {value: 'x:0'}\n    outputs: {doubled: 'y:0'}\n")
    wait_for(lambda: [i["name"] for i in c.get("/v2/models/m").json()["inputs"]] == ["value"])
    r = c.post("/v1/models/m:predict", json={"inputs": {"value": [[1.0, 2.0]]}})
    assert r.json() == {"outputs": [[2.0, 4.0]]}
    # A broken config keeps the last good one serving, and says why.
    (root / "m" / "config.yaml").write_text("signatures: [oops]\n")
    wait_for(lambda: "config.yaml" in c.get("/v1/models/m").json()["model_version_status"][0]["status"]["error_message"])
    assert c.post("/v1/models/m:predict", json={"inputs": {"value": [[1.0, 2.0]]}}).status_code == 200


@pytest.mark.parametrize("label", ["é", "canary!", "a b", "", "１"])
def test_labels_are_ascii_letters_digits_underscore_and_dash(label):
    """The OpenAPI document's pattern for labels is the server's own (str.isalnum took any script)."""
    from service.errors import BadRequest
    from service.repository import check_label

    with pytest.raises(BadRequest, match="invalid label"):
        check_label(label)
    assert check_label("canary-2_b") == "canary-2_b"
