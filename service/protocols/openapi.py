"""The OpenAPI document as a contract: what `/openapi.json` promises has to be what the server does,
because client generators and API gateways believe it.

Routes say which error statuses they can answer with `errors(...)` (FastAPI's `responses=`, or a
Route's doc); `complete` then finishes the document FastAPI built:

- every error status is one shared response (`components/responses`), its body the one `Error`
  schema (`{"error": "..."}`, service.errors decides the status), 429 and 503 with `Retry-After`;
  FastAPI's 422 goes, since validation errors leave as 400 (the app's handler);
- path parameters carry the server's own rules: model names as the repository takes them, versions
  as positive int64s, labels and partial-run handles by their alphabet;
- security follows the server's settings: management needs the admin token when one is set (and is
  open without one only on loopback), inference and metadata the API token when one is set.

    >>> complete(schema, app.state.settings)      # TensorgateApp.openapi does this once
"""

from __future__ import annotations

from typing import Any

from service import repository
from service.settings import Settings

__all__ = ["errors", "json_body", "complete", "MODEL_NAME_PATTERN", "LABEL_PATTERN", "VERSION_MAX", "BASE64_PATTERN",
           "ERROR_SCHEMA", "BINARY_CONTENT"]

# The repository's rules for model names and labels (service.repository.check_model_name/check_label).
MODEL_NAME_PATTERN = f"^{repository.MODEL_NAME_PATTERN}$"
LABEL_PATTERN = f"^{repository.LABEL_PATTERN}$"
# Base64, padded or not (absl's Base64Unescape, which TF Serving uses, takes both).
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$"
# A media type whose body is bytes (uploads, the v2 binary tensor extension).
BINARY_CONTENT = {"schema": {"type": "string", "format": "binary"}}
# TensorFlow Serving's versions are int64s; 0 and negatives are not versions.
VERSION_MAX = 2**63 - 1

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string", "description": "What went wrong: it names the model, tensor, node or limit"},
    },
    "additionalProperties": False,
}

_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying (sent when the server sheds load or a queue is full)",
        "schema": {"type": "integer", "minimum": 0},
    }
}

# status -> (component name, description, response headers)
_ERRORS: dict[int, tuple[str, str, dict[str, Any]]] = {
    400: ("BadRequest", "The request is malformed or does not fit the model (JSON, framing, tensor names, dtypes, "
                        "shapes, an invalid version, label or file); the message names the problem", {}),
    401: ("Unauthorized", "No bearer token, or a malformed Authorization header, where a token is needed",
          {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}}),
    403: ("Forbidden", "The bearer token is not valid here, or management is disabled (the server listens beyond "
                       "loopback and no admin token is set)", {}),
    404: ("NotFound", "No such model, version, label, signature, tensor or partial run", {}),
    409: ("Conflict", "The request contradicts the repository's state (a version that exists, a labelled version, "
                      "a model that the model config file owns)", {}),
    413: ("PayloadTooLarge", "The body, its decompressed size, an archive's contents, the memory the request needs "
                            "or its response is over the server's limit (the message names the limit)", {}),
    429: ("TooManyRequests", "A bounded resource is full (the batch queue, the open partial runs); retry after a "
                            "while", _RETRY_AFTER),
    503: ("Unavailable", "The model has no version ready (loading, failed), the server is shedding load or out of "
                        "memory, or it is shutting down; retry, after `Retry-After` seconds when given", _RETRY_AFTER),
    504: ("GatewayTimeout", "The request ran past its timeout (TENSORGATE_REQUEST_TIMEOUT_S or its own `timeout`)", {}),
}

_PATH_PARAMETERS: dict[str, dict[str, Any]] = {
    "model": {
        "description": "A model name: letters, digits, '_', '.', '-', not starting with '.' or '-', at most 128",
        "schema": {"type": "string", "pattern": MODEL_NAME_PATTERN},
    },
    "version": {
        "description": "A version: a positive integer (int64)",
        "schema": {"type": "integer", "format": "int64", "minimum": 1, "maximum": VERSION_MAX},
    },
    "label": {
        "description": "A version label: letters, digits, '_' and '-'",
        "schema": {"type": "string", "pattern": LABEL_PATTERN},
    },
    "handle": {
        "description": "A partial run's handle, as its setup answered it",
        "schema": {"type": "string", "pattern": r"^[A-Za-z0-9_-]+$"},
    },
}

_SECURITY_SCHEMES = {
    "adminToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "TENSORGATE_ADMIN_TOKEN: management (uploads, deletes, labels, repository load/unload); it "
                       "works wherever the API token does",
    },
    "apiToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "TENSORGATE_API_TOKEN: inference and metadata, when the server sets one",
    },
}


_DESCRIPTION = (
    "Every error is a JSON object `{\"error\": \"...\"}` naming the problem, with the status each operation lists. "
    "Security follows the server's settings: with TENSORGATE_ADMIN_TOKEN set, management operations need it as a "
    "bearer token (without one they are open only while the server listens on loopback, 403 beyond it); with "
    "TENSORGATE_API_TOKEN set, inference and metadata need it (or the admin token). Health, metrics and this "
    "document stay open. Request bodies may come with `Content-Encoding: gzip` or `deflate` (limits apply to the "
    "decompressed size). A request whose client goes away before its answer is dropped: its status, 499, only "
    "shows in the metrics."
)


def errors(*statuses: int) -> dict[int, dict[str, Any]]:
    """Responses for these error statuses, each the shared component (for `responses=`)."""
    return {status: {"$ref": f"#/components/responses/{_ERRORS[status][0]}"} for status in statuses}


def json_body(schema: dict[str, Any], example: Any, *, required: bool = True) -> dict[str, Any]:
    """An operation's JSON request body (`openapi_extra`, or a Route's doc): routes read their bodies
    themselves (size limits, Content-Encoding), so FastAPI cannot infer the schema from a parameter."""
    content = {"application/json": {"schema": schema, "example": example}}
    return {"requestBody": {"required": required, "content": content}}


def _error_components() -> dict[str, Any]:
    responses = {}
    for name, description, headers in _ERRORS.values():
        response: dict[str, Any] = {
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        if headers:
            response["headers"] = headers
        responses[name] = response
    return responses


def _security(settings: Settings, needs: str | None) -> list[dict[str, list]] | None:
    """The `security` of an operation that needs `needs` ("admin", "api" or None), under `settings`."""
    if needs == "admin":
        if settings.admin_token is not None:
            return [{"adminToken": []}]
        return None  # open on loopback; beyond it every call is 403, whatever it carries
    if needs == "api" and settings.api_token is not None:
        return [{"apiToken": []}, {"adminToken": []}] if settings.admin_token is not None else [{"apiToken": []}]
    return None


def _needs(operation: dict[str, Any]) -> str | None:
    """"admin" or "api": which token the operation's Security dependency (service.auth) asks for."""
    schemes = {name for requirement in operation.get("security", []) for name in requirement}
    return "admin" if "adminToken" in schemes else "api" if "apiToken" in schemes else None


def _complete_operation(operation: dict[str, Any], settings: Settings) -> None:
    needs = _needs(operation)
    operation.pop("security", None)
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)  # validation errors are 400 here (the app's handler)
    if needs == "api" and settings.api_token is None:  # nothing checks a token: neither can be answered
        responses.pop("401", None)
        responses.pop("403", None)
    for status, response in responses.items():
        if "$ref" in response:  # FastAPI adds a description beside the reference: the component has one
            responses[status] = {"$ref": response["$ref"]}
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path" and parameter["name"] in _PATH_PARAMETERS:
            parameter.update(_PATH_PARAMETERS[parameter["name"]])
    if (security := _security(settings, needs)) is not None:
        operation["security"] = security


def complete(schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Finish an app's document (FastAPI's, with the inference routes merged in): shared error
    responses, path parameter rules, and security as the app's `settings` enforce it."""
    schema["info"]["description"] = _DESCRIPTION
    for item in schema["paths"].values():
        for operation in item.values():
            _complete_operation(operation, settings)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["Error"] = ERROR_SCHEMA
    components["responses"] = _error_components()
    components["securitySchemes"] = _SECURITY_SCHEMES
    return schema
