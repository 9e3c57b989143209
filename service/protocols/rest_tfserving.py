"""TensorFlow Serving's REST API (`/v1/...`): model status, metadata, predict, classify and regress, plus
upload, delete and labels. Routes parse paths and bodies, then delegate to the data plane (classify and
regress through `service.inference.examples`), the model manager (reads) or the repository's management
(writes)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.auth import require_admin, require_api
from service.errors import BadRequest
from service.inference import examples
from service.inference.batching import full_queue_unavailable
from service.inference.dataplane import DataPlane
from service.inference.response_limit import JSON
from service.observability.payload_log import JsonBody
from service.protocols import tfserving_documents as documents
from service.protocols.bodies import parse_json, read_body, save_body, upload_limit, wait_for_disconnect
from service.protocols.codecs import tfserving, tfserving_examples, tfserving_response
from service.protocols.inference_routes import INFERENCE_ERRORS, Route
from service.protocols.openapi import BASE64_PATTERN, BINARY_CONTENT, VERSION_MAX, errors, json_body
from service.protocols.proto.classification_pb2 import ClassificationRequest
from service.protocols.proto.regression_pb2 import RegressionRequest
from service.repository.archive import ARCHIVE_CONTENT_TYPES, archive_file_kind
from service.repository.management import RepositoryManagement
from service.repository.manager import ModelManager
from service.repository.signatures import Signature

__all__ = ["router", "ROUTES", "parse_version", "UPLOAD_PATH", "ASCII_DIGITS"]

_TAGS = ("TensorFlow Serving REST",)
router = APIRouter(tags=list(_TAGS))

_PREDICT_BODY = json_body(
    {
        "type": "object",
        "properties": {
            "signature_name": {"type": "string", "default": "serving_default"},
            "instances": {"type": "array", "description": "row format: one entry per example"},
            "inputs": {"description": "columnar format: a tensor, or an object alias -> tensor"},
        },
        # Exactly one of the two formats (TF Serving: "expecting only one of 'inputs' or 'instances'").
        "oneOf": [{"required": ["instances"]}, {"required": ["inputs"]}],
    },
    example={"instances": [1.0, 2.0, 5.0]},
)

# ASCII only: str.isdigit takes other scripts' digits too.
ASCII_DIGITS = re.compile(r"[0-9]+")


def parse_version(version: str) -> int:
    """A version from a path or body: ASCII digits naming an int64 of at least 1 (TensorFlow Serving's
    versions are int64s); BadRequest otherwise."""
    if not ASCII_DIGITS.fullmatch(version) or not 1 <= int(version) <= VERSION_MAX:
        raise BadRequest(f"invalid version '{version}': versions are positive integers (at most {VERSION_MAX})")
    return int(version)


def load_wait_header(obs) -> dict[str, str] | None:
    """`Tensorgate-Load-Wait-Ms` on the answer to a request that waited for its version to load (lazy loading,
    evicted, idle): how much of its latency was the cold start."""
    return None if obs.load_wait_s is None else {LOAD_WAIT_HEADER: f"{obs.load_wait_s * 1e3:.1f}"}


LOAD_WAIT_HEADER = "Tensorgate-Load-Wait-Ms"


def _manager(request: Request) -> ModelManager:
    return request.app.state.manager


def _management(request: Request) -> RepositoryManagement:
    return request.app.state.management


def _plane(request: Request) -> DataPlane:
    return request.app.state.plane


# --- status and metadata -------------------------------------------------------------------------

def _status(request: Request, model: str, version: int | None, label: str | None) -> dict[str, Any]:
    return documents.model_status(_manager(request), model, version, label)


# Reads: the API token (401, 403), an unknown model, version or label (404), an invalid version (400).
_READ_ERRORS = errors(401, 403, 404)
_VERSION_READ_ERRORS = errors(400, 401, 403, 404)
# Metadata needs a loaded version: 503 while none is.
_METADATA_ERRORS = errors(401, 403, 404, 503)
_VERSION_METADATA_ERRORS = errors(400, 401, 403, 404, 503)


@router.get("/v1/models/{model}", dependencies=[Depends(require_api)], responses=_READ_ERRORS)
def model_status(request: Request, model: str) -> dict[str, Any]:
    """Every version of the model and its state (START, LOADING, AVAILABLE, UNLOADING, END)."""
    return _status(request, model, None, None)


@router.get("/v1/models/{model}/versions/{version}", dependencies=[Depends(require_api)],
            responses=_VERSION_READ_ERRORS)
def version_status(request: Request, model: str, version: str) -> dict[str, Any]:
    return _status(request, model, parse_version(version), None)


@router.get("/v1/models/{model}/labels/{label}", dependencies=[Depends(require_api)], responses=_READ_ERRORS)
def label_status(request: Request, model: str, label: str) -> dict[str, Any]:
    return _status(request, model, None, label)


def _metadata(request: Request, model: str, version: int | None, label: str | None) -> dict[str, Any]:
    return documents.model_metadata(_manager(request), model, version, label)


@router.get("/v1/models/{model}/metadata", dependencies=[Depends(require_api)], responses=_METADATA_ERRORS)
def model_metadata(request: Request, model: str) -> dict[str, Any]:
    """The SignatureDefs of the latest available version: aliases, tensors, dtypes and shapes."""
    return _metadata(request, model, None, None)


@router.get("/v1/models/{model}/versions/{version}/metadata", dependencies=[Depends(require_api)],
            responses=_VERSION_METADATA_ERRORS)
def version_metadata(request: Request, model: str, version: str) -> dict[str, Any]:
    return _metadata(request, model, parse_version(version), None)


@router.get("/v1/models/{model}/labels/{label}/metadata", dependencies=[Depends(require_api)],
            responses=_METADATA_ERRORS)
def label_metadata(request: Request, model: str, label: str) -> dict[str, Any]:
    return _metadata(request, model, None, label)


# --- predict -------------------------------------------------------------------------------------


def _decode(doc: dict, signature: Signature) -> tfserving.PredictRequest:
    return tfserving.decode_predict_inputs(doc, signature.inputs)


async def _predict(request: Request, model: str, version: int | None, label: str | None) -> Response:
    plane = _plane(request)
    async with plane.observe("v1", model, request.url.path) as obs:
        body = await read_body(request)
        if obs.payload is not None:  # the payload log samples this request
            obs.log_request(JsonBody(body), request.headers.get("x-request-id"))
        with obs.phase("decode"):
            doc = await plane.maybe_call(len(body), tfserving.parse_predict_body, body)
        async with plane.lease(model, obs, version, label) as servable:
            signature = servable.signature(doc.get("signature_name"))
            with obs.phase("decode"):
                decoded = await plane.maybe_call(len(body), _decode, doc, signature)
            with full_queue_unavailable():
                result = await plane.infer(servable, signature, decoded.inputs, None, obs,
                                           disconnected=lambda: wait_for_disconnect(request))
        outputs = {spec.alias: value for spec, value in result.outputs}
        plane.response_limit.check_outputs((name, value, JSON) for name, value in outputs.items())
        size = sum(value.nbytes for value in outputs.values())
        with obs.phase("encode"):
            content = await plane.maybe_call(size, tfserving_response.encode_predict_response, outputs,
                                             decoded.row_format)
        plane.response_limit.check_encoded(len(content))
        if obs.payload is not None:
            obs.log_response(JsonBody(content))
    return Response(content, media_type="application/json", headers=load_wait_header(obs))


async def predict(request: Request, model: str) -> Response:
    """Predict with the latest available version, in row (`instances`) or columnar (`inputs`) format."""
    return await _predict(request, model, None, None)


async def predict_version(request: Request, model: str, version: str) -> Response:
    return await _predict(request, model, parse_version(version), None)


async def predict_label(request: Request, model: str, label: str) -> Response:
    return await _predict(request, model, None, label)


# --- classify and regress ------------------------------------------------------------------------

# A tf.Example's feature: one value or a list of values of one kind, as TF Serving reads them: integers
# (and booleans) make an int64_list, other numbers a float_list, strings and {"b64": ...} a bytes_list.
# NOTE: JSON Schema cannot tell 2.0 from 2, which TF Serving reads as different kinds; the schema
# keeps floats to non-integral values so that nothing it admits mixes kinds in one list.
_INT64 = {"type": ["integer", "boolean"], "minimum": -(2**63), "maximum": VERSION_MAX}
_FLOAT = {"type": "number", "not": {"type": "integer"}}
_BYTES = {"anyOf": [
    {"type": "string"},
    {"type": "object", "required": ["b64"], "additionalProperties": False,
     "properties": {"b64": {"type": "string", "pattern": BASE64_PATTERN}}},
]}
_FEATURE = {"anyOf": [kind for one in (_INT64, _FLOAT, _BYTES) for kind in (one, {"type": "array", "items": one})]}
_EXAMPLE = {"type": "object", "additionalProperties": _FEATURE, "description": "a tf.Example: feature -> value or list"}
_EXAMPLES_BODY = json_body(
    {
        "type": "object",
        "required": ["examples"],
        "properties": {
            "signature_name": {"type": "string", "default": "serving_default"},
            "context": {**_EXAMPLE, "description": "features every example shares"},
            "examples": {"type": "array", "minItems": 1, "items": _EXAMPLE},
        },
    },
    example={"examples": [{"x": 1.5, "tag": "a"}, {"x": 2.5, "tag": "b"}]},
)


async def _classify_or_regress(request: Request, model: str, version: int | None, label: str | None,
                               classify: bool) -> Response:
    plane = _plane(request)
    check_method_name = request.app.state.settings.signature_method_name_check
    async with plane.observe("v1", model, request.url.path) as obs:
        body = await read_body(request)
        if obs.payload is not None:
            obs.log_request(JsonBody(body), request.headers.get("x-request-id"))
        message = ClassificationRequest() if classify else RegressionRequest()
        with obs.phase("decode"):
            parsed = await plane.maybe_call(len(body), tfserving_examples.parse_examples_body, body, message)
        async with plane.lease(model, obs, version, label) as servable:
            run = examples.classify if classify else examples.regress
            result = await run(plane, servable, parsed, obs, check_method_name=check_method_name,
                               disconnected=lambda: wait_for_disconnect(request))
        encode = tfserving_examples.encode_classification if classify else tfserving_examples.encode_regression
        with obs.phase("encode"):
            content = await plane.maybe_call(result.nbytes, encode, result)
        if obs.payload is not None:
            obs.log_response(JsonBody(content))
    return Response(content, media_type="application/json")


async def classify(request: Request, model: str) -> Response:
    """Classify tf.Examples with a classify signature: `{"results": [[[label, score], ...], ...]}`."""
    return await _classify_or_regress(request, model, None, None, classify=True)


async def classify_version(request: Request, model: str, version: str) -> Response:
    return await _classify_or_regress(request, model, parse_version(version), None, classify=True)


async def classify_label(request: Request, model: str, label: str) -> Response:
    return await _classify_or_regress(request, model, None, label, classify=True)


async def regress(request: Request, model: str) -> Response:
    """Regress tf.Examples with a regress signature: `{"results": [value, ...]}`."""
    return await _classify_or_regress(request, model, None, None, classify=False)


async def regress_version(request: Request, model: str, version: str) -> Response:
    return await _classify_or_regress(request, model, parse_version(version), None, classify=False)


async def regress_label(request: Request, model: str, label: str) -> Response:
    return await _classify_or_regress(request, model, None, label, classify=False)


# Predict answers a full batch queue with 503, as TF Serving's clients expect, never 429.
_PREDICT_ERRORS = tuple(status for status in INFERENCE_ERRORS if status != 429)

# Dispatched ahead of FastAPI's router (see service.protocols.inference_routes).
ROUTES = [
    Route("POST", "/v1/models/{model}:predict", predict, _PREDICT_BODY, _TAGS, _PREDICT_ERRORS),
    Route("POST", "/v1/models/{model}/versions/{version}:predict", predict_version, _PREDICT_BODY, _TAGS,
          _PREDICT_ERRORS),
    Route("POST", "/v1/models/{model}/labels/{label}:predict", predict_label, _PREDICT_BODY, _TAGS, _PREDICT_ERRORS),
    Route("POST", "/v1/models/{model}:classify", classify, _EXAMPLES_BODY, _TAGS),
    Route("POST", "/v1/models/{model}/versions/{version}:classify", classify_version, _EXAMPLES_BODY, _TAGS),
    Route("POST", "/v1/models/{model}/labels/{label}:classify", classify_label, _EXAMPLES_BODY, _TAGS),
    Route("POST", "/v1/models/{model}:regress", regress, _EXAMPLES_BODY, _TAGS),
    Route("POST", "/v1/models/{model}/versions/{version}:regress", regress_version, _EXAMPLES_BODY, _TAGS),
    Route("POST", "/v1/models/{model}/labels/{label}:regress", regress_label, _EXAMPLES_BODY, _TAGS),
]


# --- management ----------------------------------------------------------------------------------

_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        # Any Content-Type is read by the rules below; these are the ones that say what the body is.
        "content": {
            "application/octet-stream": BINARY_CONTENT,
            "text/plain": BINARY_CONTENT,
            **{content_type: BINARY_CONTENT for content_type in sorted(ARCHIVE_CONTENT_TYPES)},
        },
        "description": "A GraphDef: binary (model.pb), or text (model.pbtxt) with `?format=pbtxt`; or an archive "
                       "(.tar.gz, .tgz, .tar, .zip) of a version directory, such as a SavedModel, recognised by its "
                       "magic bytes or an archive Content-Type (`?format=archive` insists). "
                       "`Content-Encoding: gzip` or `deflate` is decompressed as it streams. Up to "
                       "TENSORGATE_MAX_UPLOAD_BYTES (413 beyond).",
    },
    "responses": {"201": {"description": "The version was validated, written and is being served"}},
}
# The one route whose body is held to TENSORGATE_MAX_UPLOAD_BYTES rather than the request limit
# (the app's BodyLimitMiddleware is told so).
UPLOAD_PATH = "/v1/models/{model}/versions/{version}"


def _is_archive(request: Request, body: Path) -> bool:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return content_type in ARCHIVE_CONTENT_TYPES or archive_file_kind(body) is not None


# Every management write: the admin token (401, 403), the repository's state (409).
@router.put(UPLOAD_PATH, dependencies=[Depends(require_admin)], status_code=201, openapi_extra=_UPLOAD_BODY,
            tags=["management"], responses=errors(400, 401, 403, 409, 413, 503))
async def upload_version(request: Request, model: str, version: str,
                         format: Literal["pb", "pbtxt", "archive"] | None = None) -> JSONResponse:
    """Upload a version: validated and warmed up before it is written (atomically) and served.

    The body is a GraphDef, or an archive of a version directory (a SavedModel's `saved_model.pb`,
    `variables/`, `assets/`), extracted safely into a staging directory first. Without `format`, an
    archive is recognised by its magic bytes (gzip, zip, tar) or its Content-Type; anything else is
    a binary GraphDef. The body is streamed to a staging file in the repository (never held in
    memory), up to TENSORGATE_MAX_UPLOAD_BYTES; whatever happens, that file is gone afterwards."""
    number = parse_version(version)
    management = _management(request)
    with management.upload_file(model) as body:
        size = await save_body(request, body, upload_limit(request.app.state.settings))
        if not size:
            raise BadRequest("the request body is empty: send the GraphDef bytes or a version archive")
        if format == "archive" or (format is None and _is_archive(request, body)):
            limits = request.app.state.settings.archive_limits()
            status = await run_in_threadpool(management.upload_archive, model, number, body, limits)
        else:
            status = await run_in_threadpool(management.upload, model, number, body, f"model.{format or 'pb'}")
    return JSONResponse({"model_version_status": [documents.version_status(status)]}, status_code=201)


@router.delete("/v1/models/{model}/versions/{version}", dependencies=[Depends(require_admin)], tags=["management"],
               responses=errors(400, 401, 403, 404, 409))
async def delete_version(request: Request, model: str, version: str) -> dict[str, Any]:
    """Unload a version (after its in-flight requests) and remove it from the repository."""
    number = parse_version(version)
    await run_in_threadpool(_management(request).delete, model, number)
    return {"deleted": {"model": model, "version": str(number)}}


_LABEL_BODY = json_body(
    {
        "type": "object",
        "required": ["version"],
        "properties": {"version": {"anyOf": [
            {"type": "integer", "minimum": 1, "maximum": VERSION_MAX},
            # As status documents write versions (up to 18 digits: a pattern cannot say 2^63 - 1).
            {"type": "string", "pattern": "^[1-9][0-9]{0,17}$"},
        ]}},
    },
    example={"version": 2},
)


@router.put("/v1/models/{model}/labels/{label}", dependencies=[Depends(require_admin)], tags=["management"],
            openapi_extra=_LABEL_BODY, responses=errors(400, 401, 403, 404, 409, 413))
async def set_label(request: Request, model: str, label: str) -> dict[str, Any]:
    """Point a label at an available version: body `{"version": N}`. Persisted in config.yaml."""
    body = await read_body(request)
    doc = parse_json(body)
    version = doc.get("version") if isinstance(doc, dict) else None
    if type(version) is not int and not isinstance(version, str):  # bool is an int, but not a version
        raise BadRequest('expected a JSON body {"version": N}')
    number = parse_version(str(version))
    labels = await run_in_threadpool(_management(request).set_label, model, label, number)
    return {"labels": {k: str(v) for k, v in labels.items()}}


@router.delete("/v1/models/{model}/labels/{label}", dependencies=[Depends(require_admin)], tags=["management"],
               responses=errors(401, 403, 404, 409))
async def delete_label(request: Request, model: str, label: str) -> dict[str, Any]:
    labels = await run_in_threadpool(_management(request).delete_label, model, label)
    return {"labels": {k: str(v) for k, v in labels.items()}}
