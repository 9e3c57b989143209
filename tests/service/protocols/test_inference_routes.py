"""The inference routes dispatched ahead of FastAPI's router: documented in the OpenAPI document as
FastAPI documents its own routes, guarded and limited like them, and their errors answered alike."""

from __future__ import annotations

import pytest

from service.app import create_app
from service.protocols import rest_tfserving, rest_v2
from service.protocols.codecs import v2
from service.settings import Settings
from tests.service.repository.test_repository import scale_graph, write_version

INFER = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}
ROUTES = rest_v2.ROUTES + rest_tfserving.ROUTES


@pytest.fixture
def server(tmp_path, make_server):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    return make_server(root)


def test_every_inference_route_is_dispatched_ahead_of_fastapi(tmp_path):
    app = create_app(Settings(model_repository=tmp_path, poll_interval_s=0))
    fastapi_paths = {(m, r.path) for r in app.routes for m in getattr(r, "methods", ())}
    for route in ROUTES:
        concrete = route.path.replace("{model}", "m").replace("{version}", "3").replace("{label}", "stable")
        found = app.inference.match(route.method, concrete)
        assert found is not None and found[0] is route, route.path
        assert (route.method, route.path) not in fastapi_paths  # one implementation, not two
    # Paths FastAPI serves are left to it, even where they look alike.
    assert app.inference.match("GET", "/v2/models/m/infer") is None
    assert app.inference.match("PUT", "/v1/models/m/versions/3") is None
    assert app.inference.match("POST", "/v2/models/m/infer/extra") is None


def test_openapi_documents_the_inference_routes(server, client):
    doc = client(server).get("/openapi.json").json()
    operation_ids = []
    for route in ROUTES:
        operation = doc["paths"][route.path][route.method.lower()]
        operation_ids.append(operation["operationId"])
        params = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
        assert params == {p for p in ("model", "version", "label") if "{" + p + "}" in route.path}
        assert "application/json" in operation["requestBody"]["content"]
        assert operation["tags"] and {"200", "400", "404", "413", "503"} <= set(operation["responses"])
    assert len(set(operation_ids)) == len(operation_ids)
    infer = doc["paths"]["/v2/models/{model}/infer"]["post"]
    assert "application/octet-stream" in infer["requestBody"]["content"]
    assert "latest available version" in infer["description"]
    # FastAPI's own routes are still there beside them.
    assert "get" in doc["paths"]["/v2/models/{model}"] and "put" in doc["paths"]["/v1/models/{model}/versions/{version}"]


def test_another_method_on_an_inference_path_is_405(server, client):
    r = client(server).get("/v2/models/m/infer")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json() == {"error": "method GET is not allowed on /v2/models/m/infer"}
    assert client(server).get("/v2/models/m/nothing").status_code == 404


def test_tokens_guard_every_inference_route(tmp_path, make_server, client):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    c = client(make_server(root, api_token="reader"))
    for path in ("/v2/models/m/infer", "/v2/models/m/versions/1/infer"):
        assert c.post(path, json=INFER).status_code == 401
        assert c.post(path, json=INFER, headers={"Authorization": "Bearer wrong"}).status_code == 403
        r = c.post(path, json=INFER, headers={"Authorization": "Bearer reader"})
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [2.0, 4.0]
    assert c.post("/v1/models/m/labels/x:classify", json={"examples": []}).status_code == 401


def test_a_fault_of_ours_is_a_500_and_the_server_goes_on(server, client, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("encoder broke")

    monkeypatch.setattr(v2, "encode_infer_response", broken)
    c = client(server)
    r = c.post("/v2/models/m/infer", json=INFER)
    assert r.status_code == 500 and r.json() == {"error": "internal error: RuntimeError: encoder broke"}
    monkeypatch.undo()
    r = c.post("/v2/models/m/infer", json=INFER)
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [2.0, 4.0]


def test_client_errors_keep_their_status_and_message(server, client):
    c = client(server)
    r = c.post("/v2/models/nope/infer", json=INFER)
    assert r.status_code == 404 and "nope" in r.json()["error"]
    r = c.post("/v1/models/m/versions/0:predict", json={"instances": [[1.0, 1.0]]})
    assert r.status_code == 400 and "positive integers" in r.json()["error"]
    r = c.post("/v2/models/m/infer", content=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
