"""The inference routes (TF Serving's predict/classify/regress, v2 infer), dispatched ahead of FastAPI.

Nearly all of a model server's traffic goes to these few routes, and for a small model FastAPI's
per-request machinery (matching every route in turn, the middleware stack with its telemetry hooks,
dependency solving) cost more than the model: on the trivial model it was about half of the event
loop's time (py-spy, issue 18). So these routes are a small table of plain `async (request, **path
parameters) -> Response` endpoints, matched with Starlette's own path syntax before FastAPI's router
runs; everything else (metadata, management, health, metrics, docs) stays with FastAPI.

What FastAPI's stack gave them, they still get, from the same code: the API token (`check_api`), the
body limits (`BodyLimitMiddleware`), errors through the one error table (the app's `on_error`), and
their OpenAPI documentation, merged into the app's document by `openapi_paths`.

    >>> routes = InferenceRoutes([Route("POST", "/v2/models/{model}/infer", infer, doc)], on_error)
    >>> routes.match("POST", "/v2/models/iris/infer")
    (Route(...), {'model': 'iris'})
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import Receive, Scope, Send

from service.auth import check_api
from service.protocols import openapi

__all__ = ["Route", "InferenceRoutes", "INFERENCE_ERRORS"]

Endpoint = Callable[..., Awaitable[Response]]

# What an inference request can be answered with besides 200: a bad or misfitting body (400), the
# API token (401, 403), an unknown model/version/label/tensor (404), a body, memory or response over
# its limit (413), a full batch queue (429; TF Serving's predict says 503 as its clients expect),
# a version not ready, load shed or out of memory (503), the request timeout (504).
INFERENCE_ERRORS = (400, 401, 403, 404, 413, 429, 503, 504)


@dataclass(frozen=True)
class Route:
    """One inference route: `path` in Starlette's syntax, `endpoint(request, **path_parameters)`, and
    the OpenAPI operation fields FastAPI would have read off a route (`requestBody`, `responses`,
    tags) with the error statuses it can answer; its summary and description come from the
    endpoint's name and docstring, as FastAPI makes them. Path parameters get their rules from
    `service.protocols.openapi.complete`, as FastAPI's routes do."""

    method: str
    path: str
    endpoint: Endpoint
    doc: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    errors: tuple[int, ...] = INFERENCE_ERRORS

    def operation(self) -> dict[str, Any]:
        name = self.endpoint.__name__
        parameters = [{"name": p, "in": "path", "required": True, "schema": {"type": "string", "title": p.title()}}
                      for p in compile_path(self.path)[2]]
        operation: dict[str, Any] = {
            "tags": list(self.tags),
            "summary": name.replace("_", " ").title(),
            "operationId": re.sub(r"\W", "_", f"{name}{self.path}") + f"_{self.method.lower()}",
            "security": [{"apiToken": []}],  # check_api, as require_api's Security dependency says
            **self.doc,
            "parameters": parameters + self.doc.get("parameters", []),
        }
        responses = {"200": {"description": "Successful Response"}, **self.doc.get("responses", {})}
        operation["responses"] = {**responses, **{str(s): r for s, r in openapi.errors(*self.errors).items()}}
        if self.endpoint.__doc__:
            operation["description"] = " ".join(self.endpoint.__doc__.split())
        return operation


class InferenceRoutes:
    """A table of Routes matched before FastAPI's router; an ASGI app for the requests it matched.

    `on_error(request, error)` answers any error an endpoint raises (the app's error handler)."""

    def __init__(self, routes: Sequence[Route], on_error: Callable[[Request, Exception], Awaitable[Response]]):
        self.routes = list(routes)
        self._on_error = on_error
        self._patterns = [(route, compile_path(route.path)[0]) for route in self.routes]
        # Every route lives under these: most requests that are not inference skip the regexes.
        self._prefixes = tuple({route.path.split("{", 1)[0] for route in self.routes})

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        """The route for a request and its path parameters, or None (FastAPI's router decides)."""
        if not path.startswith(self._prefixes):
            return None
        for route, pattern in self._patterns:
            if route.method == method and (found := pattern.match(path)):
                return route, found.groupdict()
        return None

    def allows(self, path: str) -> list[str]:
        """The methods these routes serve `path` with (for a 405's Allow header)."""
        if not path.startswith(self._prefixes):
            return []
        return sorted({route.method for route, pattern in self._patterns if pattern.match(path)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a request `match` found, its route and parameters in `scope` as Starlette puts them."""
        request = Request(scope, receive)
        try:
            check_api(scope["app"].state.settings, request.headers.get("authorization"))
            response = await scope["endpoint"](request, **scope["path_params"])
        except Exception as error:
            response = await self._on_error(request, error)
        await response(scope, receive, send)

    def openapi_paths(self) -> dict[str, dict[str, Any]]:
        """The routes as OpenAPI path items, for the app's document."""
        paths: dict[str, dict[str, Any]] = {}
        for route in self.routes:
            paths.setdefault(route.path, {})[route.method.lower()] = route.operation()
        return paths
