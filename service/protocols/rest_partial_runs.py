"""Partial runs over TensorFlow Serving's REST API (`/v1/models/{m}/partial_runs`): set a run up,
run it step by step, end it. Routes parse paths and bodies, values in TF Serving's JSON value codec
(b64 strings, NaN and Infinity literals, float32 written as float32), and delegate to
`service.inference.partial_runs`; model work runs in the data plane's worker pool, within the request timeout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse

from service.auth import require_api
from service.errors import BadRequest
from service.inference.dataplane import DataPlane, check_input
from service.inference.partial_runs import PartialRuns
from service.inference.response_limit import JSON
from service.protocols.bodies import read_body
from service.protocols.codecs import tfserving, tfserving_response
from service.protocols.openapi import errors, json_body
from service.protocols.rest_tfserving import parse_version
from service.repository.signatures import TensorSpec

__all__ = ["PROTOCOL", "router"]

router = APIRouter(tags=["partial runs"])

# The `protocol` label of partial-run requests in metrics and the dashboard: a step computes part of
# a graph, so its latency would blur the latencies of whole `v1` predictions.
PROTOCOL = "partial_run"

_SETUP_KEYS = ("feeds", "fetches", "targets", "signature_name")
_STEP_KEYS = ("inputs", "outputs")

def _names(description: str) -> dict:
    return {"type": "array", "items": {"type": "string"}, "description": description}


# Bodies take only these keys (an unknown one is a 400), so the schemas say so.
_SETUP_BODY = json_body(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "feeds": _names("input aliases or graph tensors fed over the steps"),
            "fetches": _names("output aliases or graph tensors fetched over the steps"),
            "targets": _names("nodes run for effect"),
            "signature_name": {"type": "string", "default": "serving_default"},
        },
    },
    example={"feeds": ["a", "b"], "fetches": ["h", "y"]},
    required=False,
)
_STEP_BODY = json_body(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "inputs": {"type": "object", "description": "declared feeds not fed yet: name -> tensor"},
            "outputs": _names("declared fetches to compute now"),
        },
        # A step feeds or fetches something.
        "anyOf": [{"required": ["inputs"], "properties": {"inputs": {"minProperties": 1}}},
                  {"required": ["outputs"], "properties": {"outputs": {"minItems": 1}}}],
    },
    example={"inputs": {"a": [1.0, 2.0]}, "outputs": ["h"]},
)
_SETUP_RESPONSES = {
    201: {"description": "The run is set up: its handle, and where its steps go",
          "headers": {"Location": {"description": "The run's URL", "schema": {"type": "string"}}}},
    **errors(400, 401, 403, 404, 413, 429, 503, 504),
}


def _plane(request: Request) -> DataPlane:
    return request.app.state.plane


def _runs(request: Request) -> PartialRuns:
    return request.app.state.partial_runs


# --- bodies --------------------------------------------------------------------------------------


def _parse_object(body: bytes, keys: tuple[str, ...]) -> dict:
    """A JSON object with only `keys` (NaN and Infinity literals allowed, as TF Serving allows them)."""
    try:
        doc = json.loads(body) if body else {}
    except RecursionError:
        raise BadRequest("JSON Parse error: the document is nested too deeply") from None
    except ValueError as e:
        raise BadRequest(f"JSON Parse error: {e}") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"the body must be a JSON object with keys {', '.join(keys)}")
    unknown = [k for k in doc if k not in keys]
    if unknown:
        raise BadRequest(f"unknown key(s) {', '.join(repr(k) for k in unknown)}; expected {', '.join(keys)}")
    return doc


def _tensor_names(doc: dict, key: str) -> list[str]:
    names = doc.get(key, [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadRequest(f"'{key}' must be a list of tensor names")
    return names


def _parse_setup(body: bytes) -> dict:
    doc = _parse_object(body, _SETUP_KEYS)
    for key in ("feeds", "fetches", "targets"):
        doc[key] = _tensor_names(doc, key)
    if not isinstance(doc.get("signature_name", ""), str):
        raise BadRequest("'signature_name' must be a string")
    return doc


def _parse_step(body: bytes) -> dict:
    doc = _parse_object(body, _STEP_KEYS)
    inputs = doc.setdefault("inputs", {})
    if not isinstance(inputs, dict):
        raise BadRequest("'inputs' must be an object: input name -> tensor")
    doc["outputs"] = _tensor_names(doc, "outputs")
    if not inputs and not doc["outputs"]:
        raise BadRequest("a step needs 'inputs' to feed or 'outputs' to fetch")
    return doc


def _decode(inputs: dict, specs: list[TensorSpec]) -> dict[str, np.ndarray]:
    if not specs:
        return {}
    return tfserving.decode_predict_inputs({"inputs": inputs}, specs).inputs


def _encode(outputs: Mapping[str, np.ndarray]) -> bytes:
    """`{"outputs": {name: value}}`, by name even for a single output."""
    if not outputs:
        return b'{"outputs":{}}'
    body = tfserving_response.encode_predict_response(outputs, row_format=False)
    if len(outputs) > 1:
        return body
    # NOTE: the codec writes a lone output bare (`{"outputs": value}`), as TF Serving's columnar
    # format does; a step names what it fetched, so the value is put under its name.
    (name,) = outputs
    prefix = b'{"outputs":'
    assert body.startswith(prefix) and body.endswith(b"}")
    return b'{"outputs":{' + json.dumps(name).encode() + b":" + body[len(prefix):-1] + b"}}"


# --- routes --------------------------------------------------------------------------------------


async def _setup(request: Request, model: str, version: int | None, label: str | None) -> JSONResponse:
    plane, runs = _plane(request), _runs(request)
    async with plane.observe(PROTOCOL, model) as obs:
        doc = _parse_setup(await read_body(request))
        async with plane.lease(model, obs, version, label) as servable:
            signature = servable.signature(doc.get("signature_name"))
            run = await plane.call(runs.open, servable, signature, doc["feeds"], doc["fetches"], doc["targets"])
    body = {
        "handle": run.handle,
        "model": run.model,
        "version": str(run.version),
        "feeds": list(run.feeds.values()),
        "fetches": list(run.fetches.values()),
        "expires_in_s": run.timeout_s,
    }
    return JSONResponse(body, status_code=201, headers={"Location": f"/v1/models/{model}/partial_runs/{run.handle}"})


@router.post("/v1/models/{model}/partial_runs", dependencies=[Depends(require_api)], status_code=201,
             openapi_extra=_SETUP_BODY, responses=_SETUP_RESPONSES)
async def setup(request: Request, model: str) -> JSONResponse:
    """Set up a partial run on the latest available version: declare every feed and fetch of the
    run. Answers 201 with the handle the steps use; idle handles expire."""
    return await _setup(request, model, None, None)


@router.post("/v1/models/{model}/versions/{version}/partial_runs", dependencies=[Depends(require_api)],
             status_code=201, openapi_extra=_SETUP_BODY, responses=_SETUP_RESPONSES)
async def setup_version(request: Request, model: str, version: str) -> JSONResponse:
    return await _setup(request, model, parse_version(version), None)


@router.post("/v1/models/{model}/labels/{label}/partial_runs", dependencies=[Depends(require_api)],
             status_code=201, openapi_extra=_SETUP_BODY, responses=_SETUP_RESPONSES)
async def setup_label(request: Request, model: str, label: str) -> JSONResponse:
    return await _setup(request, model, None, label)


@router.post("/v1/models/{model}/partial_runs/{handle}", dependencies=[Depends(require_api)], openapi_extra=_STEP_BODY,
             responses=errors(400, 401, 403, 404, 413, 503, 504))
async def step(request: Request, model: str, handle: str) -> Response:
    """One step: feed declared inputs not fed yet, fetch declared outputs that can now be computed.
    The run ends by itself once every feed has been fed and every fetch fetched."""
    plane, runs = _plane(request), _runs(request)
    async with plane.observe(PROTOCOL, model) as obs:
        body = await read_body(request)
        doc = await plane.maybe_call(len(body), _parse_step, body)
        run = runs.find(model, handle)
        obs.version = str(run.version)
        with runs.lease(run) as servable:
            feed_specs, fetch_specs = runs.resolve_step(run, servable, list(doc["inputs"]), doc["outputs"])
            arrays = await plane.maybe_call(len(body), _decode, doc["inputs"], feed_specs)
            feeds: dict[str, np.ndarray] = {}
            for spec in feed_specs:
                check_input(spec, arrays[spec.alias], servable.checks_feed_shapes)
                feeds[spec.tensor] = arrays[spec.alias]
            values, obs.compute_s = await plane.call(runs.step, run, servable, feeds, [s.tensor for s in fetch_specs])
        outputs = {spec.alias: value for spec, value in zip(fetch_specs, values)}
        plane.response_limit.check_outputs((name, value, JSON) for name, value in outputs.items())
        content = await plane.maybe_call(sum(v.nbytes for v in values), _encode, outputs)
        plane.response_limit.check_encoded(len(content))
    return Response(content, media_type="application/json")


@router.delete("/v1/models/{model}/partial_runs/{handle}", dependencies=[Depends(require_api)], status_code=204,
               responses=errors(401, 403, 404, 503, 504))
async def close(request: Request, model: str, handle: str) -> Response:
    """End a partial run before it finishes, dropping its state (404 if it is not open)."""
    await _plane(request).call(_runs(request).close, model, handle)
    return Response(status_code=204)
