"""The Open Inference Protocol (KServe v2, as Triton speaks it) under `/v2`: health, server and model
metadata, infer with JSON or binary tensors, and the model repository extension (index, load with
uploaded files, unload). Routes parse and delegate; the codec lives in `service.protocols.codecs.v2`."""

from __future__ import annotations

import base64
import binascii
import functools
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.auth import require_admin, require_api
from service.errors import BadRequest
from service.inference.dataplane import DataPlane
from service.inference.response_limit import BINARY, JSON
from service.observability.payload_log import JsonBody, V2BinaryBody
from service.protocols import open_inference as oip
from service.protocols.bodies import BodyLimit, parse_json, read_body, upload_limit, wait_for_disconnect
from service.protocols.codecs import v2, v2_tensors
from service.protocols.inference_routes import Route
from service.protocols.openapi import BASE64_PATTERN, BINARY_CONTENT, errors, json_body
from service.protocols.rest_tfserving import ASCII_DIGITS, parse_version
from service.repository.management import RepositoryManagement
from service.repository.manager import ModelManager

__all__ = ["router", "ROUTES", "LOAD_PATH"]

_TAGS = ("Open Inference Protocol (v2)",)
router = APIRouter(tags=list(_TAGS))

HEADER_LENGTH = "Inference-Header-Content-Length"

_PARAMETERS = {"type": "object", "description": "parameters: name -> value"}
_INPUT = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"enum": list(v2_tensors.DATATYPES)},
        "parameters": {**_PARAMETERS, "description": "e.g. binary_data_size: the tensor's bytes in the binary section"},
        "data": {"type": "array", "description": "the elements, flat or nested, row-major; len = product of shape"},
    },
}
_OUTPUT = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"},
                   "parameters": {**_PARAMETERS, "description": "e.g. binary_data: true to get it in binary"}},
}
_INFER_HEADER = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": ["string", "null"]},
        "parameters": {**_PARAMETERS, "properties": {"binary_data_output": {"type": "boolean"}},
                       "description": "e.g. binary_data_output, timeout (µs), priority (1 highest), signature_name"},
        "inputs": {"type": "array", "items": _INPUT},
        "outputs": {"type": "array", "items": _OUTPUT},
    },
}
_INFER_DOC = {
    "parameters": [{
        "name": HEADER_LENGTH,
        "in": "header",
        "required": False,
        "description": "The binary tensor extension: the body is a JSON header of this many bytes (the object "
                       "the JSON body would be), then the tensors' bytes; absent, the whole body is JSON.",
        "schema": {"type": "integer", "minimum": 0},
    }],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": _INFER_HEADER,
                "example": {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32",
                                        "data": [5.1, 3.5, 1.4, 0.2]}]},
            },
            "application/octet-stream": {
                **BINARY_CONTENT,
                "description": f"Binary tensor extension: a JSON header of `{HEADER_LENGTH}` bytes, then tensor data.",
            },
        },
    },
    "responses": {"200": {
        "description": "The outputs: JSON, or with binary outputs a JSON header then their bytes",
        "headers": {HEADER_LENGTH: {"description": "With binary outputs: the JSON header's length in bytes",
                                    "schema": {"type": "integer", "minimum": 0}}},
        "content": {"application/json": {"schema": {"type": "object"}}, "application/octet-stream": BINARY_CONTENT},
    }},
}
# Reads: the API token (401, 403), an unknown model or version (404), no version loaded (503), an
# invalid version (400).
_READ_ERRORS = errors(401, 403, 404, 503)
_VERSION_READ_ERRORS = errors(400, 401, 403, 404, 503)
_READY_SCHEMA = {"type": "object", "required": ["name", "ready"],
                 "properties": {"name": {"type": "string"}, "ready": {"type": "boolean"}}}
# Readiness answers 503 with the same document, so that a probe needs only the status.
_MODEL_READY_RESPONSES = {
    200: {"description": "Ready", "content": {"application/json": {"schema": _READY_SCHEMA}}},
    503: {"description": "Not ready", "content": {"application/json": {"schema": _READY_SCHEMA}}},
}


def _manager(request: Request) -> ModelManager:
    return request.app.state.manager


def _management(request: Request) -> RepositoryManagement:
    return request.app.state.management


def _plane(request: Request) -> DataPlane:
    return request.app.state.plane


# --- server --------------------------------------------------------------------------------------


@router.get("/v2")
async def server_metadata() -> dict[str, Any]:
    return oip.server_metadata()


@router.get("/v2/health/live")
async def live() -> dict[str, bool]:
    """200 while the process serves HTTP (a liveness probe)."""
    return {"live": True}


def _ready_document(ready: bool) -> dict[str, Any]:
    schema = {"type": "object", "required": ["ready"], "properties": {"ready": {"const": ready}}}
    return {"application/json": {"schema": schema}}


@router.get("/v2/health/ready", responses={
    200: {"description": "Ready", "content": _ready_document(True)},
    503: {"description": "Not ready (models loading, or the server draining before it stops)",
          "content": _ready_document(False)},
})
async def ready(request: Request) -> JSONResponse:
    """200 once every model in the repository has a version available; 503 before, and from the moment
    a shutdown begins (SIGTERM), so that load balancers stop sending traffic first."""
    is_ready = request.app.state.plane.ready()
    return JSONResponse({"ready": is_ready}, status_code=200 if is_ready else 503)


# --- models --------------------------------------------------------------------------------------


@router.get("/v2/models/stats", dependencies=[Depends(require_api)], responses=_READ_ERRORS)
def all_statistics(request: Request) -> dict[str, Any]:
    """Triton's statistics extension: counts and cumulative durations of every loaded version."""
    return oip.statistics(_plane(request), None, None)


@router.get("/v2/models/{model}/stats", dependencies=[Depends(require_api)], responses=_READ_ERRORS)
def model_statistics(request: Request, model: str) -> dict[str, Any]:
    return oip.statistics(_plane(request), model, None)


@router.get("/v2/models/{model}/versions/{version}/stats", dependencies=[Depends(require_api)],
            responses=_VERSION_READ_ERRORS)
def version_statistics(request: Request, model: str, version: str) -> dict[str, Any]:
    return oip.statistics(_plane(request), model, parse_version(version))


@router.get("/v2/models/{model}", dependencies=[Depends(require_api)], responses=_READ_ERRORS)
def model_metadata(request: Request, model: str) -> dict[str, Any]:
    """Inputs and outputs (of the default signature) with datatypes and shapes (-1: any size)."""
    return oip.model_metadata(_manager(request), model, None)


@router.get("/v2/models/{model}/versions/{version}", dependencies=[Depends(require_api)],
            responses=_VERSION_READ_ERRORS)
def version_metadata(request: Request, model: str, version: str) -> dict[str, Any]:
    return oip.model_metadata(_manager(request), model, parse_version(version))


def _model_ready(request: Request, model: str, version: int | None) -> JSONResponse:
    ready = oip.model_ready(_manager(request), model, version)
    return JSONResponse({"name": model, "ready": ready}, status_code=200 if ready else 503)


@router.get("/v2/models/{model}/ready", dependencies=[Depends(require_api)],
            responses={**_MODEL_READY_RESPONSES, **errors(401, 403, 404)})
def model_ready(request: Request, model: str) -> JSONResponse:
    return _model_ready(request, model, None)


@router.get("/v2/models/{model}/versions/{version}/ready", dependencies=[Depends(require_api)],
            responses={**_MODEL_READY_RESPONSES, **errors(400, 401, 403, 404)})
def version_ready(request: Request, model: str, version: str) -> JSONResponse:
    return _model_ready(request, model, parse_version(version))


@router.get("/v2/models/{model}/config", dependencies=[Depends(require_api)], responses=_READ_ERRORS)
def model_config(request: Request, model: str) -> dict[str, Any]:
    """The model's configuration in Triton's form (what `tritonclient`'s get_model_config reads)."""
    return oip.model_config(_manager(request), model, None)


@router.get("/v2/models/{model}/versions/{version}/config", dependencies=[Depends(require_api)],
            responses=_VERSION_READ_ERRORS)
def version_config(request: Request, model: str, version: str) -> dict[str, Any]:
    return oip.model_config(_manager(request), model, parse_version(version))


# --- infer ---------------------------------------------------------------------------------------


async def _infer(request: Request, model: str, version: int | None) -> Response:
    plane = _plane(request)
    async with plane.observe("v2", model, request.url.path) as obs:
        body = await read_body(request)
        header = request.headers.get(HEADER_LENGTH)
        if header is not None and not ASCII_DIGITS.fullmatch(header.strip()):
            raise BadRequest(f"invalid {HEADER_LENGTH} header '{header}': expected a byte count")
        if obs.payload is not None:  # the payload log samples this request
            obs.log_request(JsonBody(body) if header is None else V2BinaryBody(body, int(header)),
                            request.headers.get("x-request-id"))
        with obs.phase("decode"):
            if header is not None and int(header) == 0:  # a raw binary request: the body is the one input's bytes
                decoded = await plane.maybe_call(len(body), oip.raw_infer_request, plane.manager, model, version, body)
            else:
                decoded = await plane.maybe_call(len(body), v2.decode_infer_request, body,
                                                 None if header is None else int(header))
        if obs.payload is not None and not obs.payload.id:
            obs.payload.id = decoded.id or None  # the body's id names its events when no header does
        result = await oip.infer(plane, model, version, decoded, obs, disconnected=lambda: wait_for_disconnect(request))
        size = sum(value.nbytes for _, value in result.outputs)
        outputs = oip.output_tensors(decoded, result, binary_default=False)
        plane.response_limit.check_outputs((name, array, BINARY if binary else JSON) for name, array, binary in outputs)
        with obs.phase("encode"):
            content, json_length = await plane.maybe_call(size, v2.encode_infer_response, model, str(result.version),
                                                          decoded.id, outputs)
        plane.response_limit.check_encoded(len(content))
        if obs.payload is not None:
            obs.log_response(JsonBody(content) if json_length is None else V2BinaryBody(content, json_length))
    if json_length is None:
        return Response(content, media_type="application/json")
    return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(json_length)})


async def infer(request: Request, model: str) -> Response:
    """Run the latest available version. Inputs and outputs are signature aliases or any graph
    tensor (`layer1/h:0`); each distinct set compiles (once) its own executor."""
    return await _infer(request, model, None)


async def infer_version(request: Request, model: str, version: str) -> Response:
    """Run the version named."""
    return await _infer(request, model, parse_version(version))


# Dispatched ahead of FastAPI's router (see service.protocols.inference_routes).
ROUTES = [
    Route("POST", "/v2/models/{model}/infer", infer, _INFER_DOC, tags=_TAGS),
    Route("POST", "/v2/models/{model}/versions/{version}/infer", infer_version, _INFER_DOC, tags=_TAGS),
]


# --- repository extension ------------------------------------------------------------------------

async def _optional_json(request: Request, limit: BodyLimit | None = None) -> dict[str, Any]:
    body = await read_body(request, limit)
    if not body.strip():
        return {}
    doc = parse_json(body)
    if not isinstance(doc, dict):
        raise BadRequest("expected a JSON object as the request body")
    return doc


_INDEX_BODY = json_body({"type": "object", "properties": {"ready": {"type": "boolean"}}}, {"ready": True},
                        required=False)


@router.post("/v2/repository/index", dependencies=[Depends(require_api)], tags=["model repository"],
             openapi_extra=_INDEX_BODY, responses=errors(400, 401, 403, 413))
async def repository_index(request: Request) -> list[dict[str, Any]]:
    """Every model in the repository with each version's state; `{"ready": true}` lists only READY ones."""
    doc = await _optional_json(request)
    if not isinstance(doc.get("ready", False), bool):
        raise BadRequest("'ready' must be true or false")
    return oip.index_rows(_manager(request), ready_only=doc.get("ready") is True)


def _load_parameters(doc: dict[str, Any]) -> tuple[str | None, dict[str, bytes]]:
    parameters = doc.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise BadRequest("'parameters' must be an object")
    config = parameters.get("config")
    if config is not None and not isinstance(config, str):
        raise BadRequest("the 'config' parameter must be a string (the model's config.yaml, or JSON)")
    files = {}
    for key, value in parameters.items():
        if not key.startswith("file:"):
            continue
        if not isinstance(value, str):
            raise BadRequest(f"parameter '{key}' must be a base64 string")
        try:
            files[key[len("file:"):]] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"parameter '{key}' is not valid base64") from None
    return config, files


# An upload route: its body is held to TENSORGATE_MAX_UPLOAD_BYTES rather than the request limit
# (the app's BodyLimitMiddleware is told so).
LOAD_PATH = "/v2/repository/models/{model}/load"


_LOAD_BODY = json_body(
    {
        "type": "object",
        "properties": {"parameters": {
            "type": "object",
            "properties": {"config": {"type": "string", "description": "the model's config.yaml (or JSON)"}},
            "patternProperties": {"^file:": {"type": "string", "pattern": BASE64_PATTERN,
                                              "description": "file:<version>/<path>: a file's bytes in base64"}},
        }},
    },
    example={"parameters": {"file:1/model.pb": "CgMKAXg="}},
    required=False,
)


@router.post(LOAD_PATH, dependencies=[Depends(require_admin)], tags=["model repository"], openapi_extra=_LOAD_BODY,
             responses=errors(400, 401, 403, 404, 409, 413, 503))
async def load(request: Request, model: str) -> dict[str, Any]:
    """Load (or reload) a model. Parameters `config` (config.yaml text) and `file:<version>/<path>`
    (base64) upload a model first, as with Triton: a version's files (`file:1/saved_model.pb`,
    `file:1/variables/variables.index`, ...) or one archive of them (`file:1/model.tar.gz`, `.tgz`,
    `.tar`, `.zip`). Uploads are validated before anything is written. The files come inside a JSON
    body, so the body is held in memory (up to TENSORGATE_MAX_UPLOAD_BYTES): large models upload
    better through the streamed `PUT /v1/models/{model}/versions/{version}`."""
    config, files = _load_parameters(await _optional_json(request, upload_limit(request.app.state.settings)))
    management = _management(request)
    limits = request.app.state.settings.archive_limits()
    statuses = await run_in_threadpool(functools.partial(management.load_model, model, config, files, archive_limits=limits))
    return {"name": model, "versions": [oip.index_row(s) for s in statuses]}


@router.post("/v2/repository/models/{model}/unload", dependencies=[Depends(require_admin)], tags=["model repository"],
             openapi_extra=json_body({"type": "object"}, {}, required=False),
             responses=errors(400, 401, 403, 404, 409, 413))
async def unload(request: Request, model: str) -> dict[str, Any]:
    """Unload every version (after in-flight requests finish); it stays unloaded until loaded again."""
    await _optional_json(request)
    await run_in_threadpool(_management(request).unload_model, model)
    return {"name": model, "unloaded": True}
