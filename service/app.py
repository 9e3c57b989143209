"""The FastAPI application: wires settings, the model manager and its management writes, the data plane
and both protocols.

    >>> app = create_app(Settings(model_repository=Path("models")))
    >>> uvicorn.run(app, host="127.0.0.1", port=8000)

Errors from anywhere (service errors, engine errors, FastAPI's own) leave through one handler as
`{"error": "..."}` with the status `service.errors.status_of` gives.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

import service
from engine.errors import EngineError, OutOfMemoryError
from kernels import jit as kernel_jit
from kernels import pool as kernel_pool
from service.errors import ServiceError, out_of_memory_message, status_of
from service.inference.batching import BatchingOptions, BatchStats
from service.inference.batching_parameters import read_batching_parameters
from service.inference.dataplane import DataPlane
from service.inference.partial_runs import PartialRuns
from service.observability import dashboard
from service.observability.metrics import CONTENT_TYPE, Metrics
from service.observability.monitoring_config import prometheus_path
from service.observability.payload_log import PayloadLogger
from service.observability.stats import LiveStats
from service.observability.tracing import Tracing
from service.protocols import openapi, rest_partial_runs, rest_tfserving, rest_v2
from service.protocols.bodies import BodyLimitMiddleware, request_limit, upload_limit
from service.protocols.grpc.options import channel_arguments
from service.protocols.grpc.options import credentials as grpc_credentials
from service.protocols.grpc.server import GrpcServer
from service.protocols.inference_routes import InferenceRoutes
from service.repository import ModelRepository
from service.repository.config import ConfigError
from service.repository.management import RepositoryManagement
from service.repository.manager import MemoryPolicy, ModelManager
from service.repository.model_config_file import ModelConfigFile
from service.repository.sources import ModelSources
from service.repository.warmup import WarmupOptions
from service.settings import Settings, check_device_available

__all__ = ["create_app", "TensorgateApp"]

log = logging.getLogger("tensorgate.app")

def _closing_connection(send: Send) -> Send:
    """`send`, its response saying `Connection: close`: while the server drains, a keep-alive connection ends
    cleanly after its response (the client opens its next one elsewhere: another replica), instead of being
    closed idle under a request the client is just sending (a reset). uvicorn honours the header."""

    async def closing(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return closing


def _error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _on_error(request: Request, error: Exception) -> JSONResponse:
    status = status_of(error)
    if getattr(request.app, "tracing", None) is not None:
        Tracing.record_error(error)  # on the request's server span
    if isinstance(error, MemoryError):  # the process survives it: answer, and keep serving
        log.warning("out of memory on %s %s: %r", request.method, request.url.path, error)
        return _error_response(status, out_of_memory_message(f"handling {request.method} {request.url.path}"))
    if isinstance(error, OutOfMemoryError):
        log.warning("out of memory on %s %s: %s", request.method, request.url.path, error)
    elif status >= 500 and not isinstance(error, ServiceError):
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=error)
        return _error_response(500, f"internal error: {type(error).__name__}: {error}")
    return _error_response(status, getattr(error, "message", None) or str(error), getattr(error, "headers", None))


async def _on_http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    message = error.detail if isinstance(error.detail, str) else str(error.detail)
    status, headers = error.status_code, getattr(error, "headers", None)
    if status == 405 and (allowed := _allowed_methods(request.app, request.url.path)):
        headers = {"Allow": ", ".join(allowed)}  # Starlette's names only the first route that matched
    if status == 404:
        message = f"no such endpoint: {request.method} {request.url.path}"
    elif status == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    return _error_response(status, message, headers)


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method the API document lists for `path` (FastAPI's routes hold one method each)."""
    paths = app.openapi()["paths"]
    return sorted({method.upper() for template, item in paths.items() if compile_path(template)[0].match(path)
                   for method in item})


async def _on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
    return _error_response(400, f"invalid request: {problems}")


class TensorgateApp(FastAPI):
    """FastAPI, with the inference routes (`inference`) matched ahead of its router and middleware
    stack, which cost more than a small model (see service.protocols.inference_routes); they get the
    body limits from `inference_app` and their OpenAPI documentation merged into the app's."""

    inference: InferenceRoutes
    inference_app: ASGIApp

    # With CORS on (settings.cors_origins()), every request goes through Starlette's CORSMiddleware first.
    cors: ASGIApp | None = None
    # With tracing on, every HTTP request runs under a server span, outermost (preflights included).
    tracing: Tracing | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.tracing is not None and scope["type"] == "http" and "tensorgate.traced" not in scope:
            scope["tensorgate.traced"] = True  # marks the request as traced, on its way back here
            await self.tracing.http(scope, receive, send, self)
            return
        if scope["type"] == "http" and self.state.plane.draining:
            send = _closing_connection(send)
            self.state.plane.last_draining_request = time.monotonic()
        if self.cors is not None and scope.get("cors") is None:
            scope["cors"] = True  # marks the request as passed through, on its way back here
            await self.cors(scope, receive, send)
            return
        if scope["type"] == "http" and (found := self.inference.match(scope["method"], scope["path"])) is not None:
            route, scope["path_params"] = found
            scope["app"], scope["endpoint"], scope["tensorgate.route"] = self, route.endpoint, route.path
            await self.inference_app(scope, receive, send)
            return
        if scope["type"] == "http" and (allowed := self.inference.allows(scope["path"])):
            # An inference route's path, another method: 405, even where a FastAPI route's `{label}`
            # or `{version}` would swallow `x:predict`.
            message = f"method {scope['method']} is not allowed on {scope['path']}"
            await _error_response(405, message, {"Allow": ", ".join(allowed)})(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = super().openapi()
            for path, operations in self.inference.openapi_paths().items():
                schema["paths"].setdefault(path, {}).update(operations)
            # The document as an exact contract: error statuses, parameter rules, security.
            openapi.complete(schema, self.state.settings)
        return self.openapi_schema


def _model_sources(settings: Settings) -> ModelSources:
    """The repository (unless only a model config file is given) and the model config file, read
    now: ConfigError when it is invalid or names a model of the repository."""
    repository = ModelRepository(settings.model_repository) if settings.serves_repository() else None
    config_file = None
    if settings.model_config_file is not None:
        config_file = ModelConfigFile(settings.model_config_file, settings.model_config_file_poll_wait_seconds)
    elif settings.model_base_path is not None:
        config_file = ModelConfigFile.single(settings.model_name, settings.model_base_path)
    sources = ModelSources(repository, config_file)
    sources.load()
    return sources


def _server_batching(settings: Settings) -> tuple[BatchingOptions, bool]:
    """The server-wide batching options, and whether models without `batching:` batch: a batching
    parameters file turns batching on with its fields (ConfigError naming the file and the field)."""
    options = settings.batching_options()
    if settings.batching_parameters_file is None:
        return options, settings.batching
    return read_batching_parameters(settings.batching_parameters_file, options), True


# Response headers of ours a browser script may need: the binary extension's JSON length, a cold start's wait,
# a shed request's Retry-After.
_EXPOSED_HEADERS = ("Inference-Header-Content-Length", "Tensorgate-Load-Wait-Ms", "Retry-After")


def _tracing(settings: Settings) -> Tracing | None:
    """The tracer, when tracing is on; ConfigError when it is asked for without OpenTelemetry's SDK."""
    if not settings.tracing_on():
        return None
    try:
        return Tracing.start(settings.tracing_endpoint)
    except ImportError as e:
        raise ConfigError(str(e)) from None


def _payload_log(settings: Settings, metrics: Metrics) -> PayloadLogger | None:
    if settings.payload_log_url is None and settings.payload_log_file is None:
        return None
    return PayloadLogger(url=settings.payload_log_url, path=settings.payload_log_file, mode=settings.payload_log_mode,
                         sample_rate=settings.payload_log_sample_rate, queue_size=settings.payload_log_queue_size,
                         timeout_s=settings.payload_log_timeout_s,
                         on_outcome=lambda outcome: metrics.payload_events.labels(outcome).inc())


def create_app(settings: Settings | None = None, *, grpc_port: int | None = None) -> TensorgateApp:
    """An application serving `settings.model_repository` and/or `settings.model_config_file`;
    models load when the app starts, and with `grpc_port` (0: a free one) the gRPC services start
    beside it on `settings.host` (and on `settings.grpc_socket_path`, with or without a port), on the
    app's event loop (`app.state.grpc_port` says where). Raises DeviceError when `settings.device` is a
    device this process does not have, ConfigError when one of TensorFlow Serving's config files (or a
    gRPC channel argument) is invalid."""
    settings = settings or Settings()
    check_device_available(settings.device)
    kernel_jit.configure(cache_dir=settings.kernel_cache_dir)
    kernel_pool.configure(settings.kernel_threads)
    sources = _model_sources(settings)
    batching, batching_by_default = _server_batching(settings)
    metrics_path = prometheus_path(settings.monitoring_config_file)
    serves_grpc = grpc_port is not None or settings.grpc_socket_path is not None
    if serves_grpc:  # read now, so that a bad SSL config file or channel argument stops the start here
        grpc_credentials(settings)
        channel_arguments(settings.grpc_channel_arguments)
    config_file = sources.config_file
    metrics = Metrics(lambda: manager.servables(),
                      config_file_valid=lambda: None if config_file is None else config_file.error is None,
                      resident=lambda: manager.resident_versions(), memory_budget=settings.model_memory_bytes)
    stats = LiveStats()
    tracing = _tracing(settings)
    payload_log = _payload_log(settings, metrics)

    def on_batch(model: str, version: int, batch: BatchStats) -> None:
        plane.observe_batch(model, version, batch.rows, batch.compute_s)  # plane exists before any batch runs

    manager = ModelManager(
        sources,
        settings.session_options(),
        load_threads=settings.load_threads,
        poll_interval_s=settings.poll_interval_s,
        batching=batching,
        batching_by_default=batching_by_default,
        on_batch=on_batch,
        on_load=lambda model, seconds: metrics.load_duration.labels(model).observe(seconds),
        device=settings.device,
        warmup=WarmupOptions(settings.warmup_iterations, settings.signature_method_name_check, enabled=settings.warmup),
        saved_model_tags=tuple(settings.saved_model_tags),
        per_version_batching=settings.per_version_batching_parameters,
        load_retries=settings.load_retries,
        load_retry_interval_s=settings.load_retry_interval_s,
        memory=MemoryPolicy(settings.load_on_demand, settings.model_memory_bytes, settings.model_idle_unload_s),
        on_loaded=lambda model, version, trigger: metrics.model_loads.labels(model, trigger).inc(),
        on_unload=lambda model, version, reason: metrics.model_unloads.labels(model, reason).inc(),
        on_cold_start=lambda model, seconds: metrics.cold_start.observe(seconds),
    )
    plane = DataPlane(manager, threads=settings.inference_threads, timeout_s=settings.request_timeout_s,
                      metrics=metrics, stats=stats, inline_compute_s=settings.inline_compute_us / 1e6,
                      max_queued=settings.max_queued_requests, max_response_bytes=settings.max_response_bytes,
                      tracing=tracing, payload_log=payload_log)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager.start()  # already started by a server that waited for its models before listening
        if settings.load_on_demand and settings.compiled_kernels:
            # Models load on their first request: have the cached compiled kernels ready before it comes.
            kernel_jit.preload_cached()
        grpc_server = None
        try:
            if serves_grpc:
                grpc_server = app.state.grpc_server = GrpcServer(plane, app.state.management, settings)
                app.state.grpc_port = await grpc_server.start(settings.host, grpc_port) or None
            yield
        finally:
            if grpc_server is not None:
                # Usually stopped already: service.server stops gRPC as the shutdown begins, beside HTTP.
                await grpc_server.stop(settings.shutdown_grace_s)
            manager.stop()
            plane.close()
            if payload_log is not None:
                payload_log.close()
            if tracing is not None:
                tracing.shutdown()

    app = TensorgateApp(
        title="tensorgate",
        version=service.__version__,
        summary="A model server for TensorFlow graphs: TensorFlow Serving REST and the Open Inference Protocol (v2).",
        lifespan=lifespan,
    )
    if origins := settings.cors_origins():
        # Browsers on those origins may call every route (TensorFlow Serving's --rest_api_enable_cors_support:
        # any origin); they may read our response headers too (a credentialed request reads the listed ones).
        app.cors = CORSMiddleware(app, allow_origins=origins, allow_methods=settings.cors_allow_methods,
                                  allow_headers=settings.cors_allow_headers,
                                  allow_credentials=settings.cors_allow_credentials, max_age=settings.cors_max_age_s,
                                  expose_headers=["*", *_EXPOSED_HEADERS])
    app.tracing = tracing
    app.state.settings = settings
    app.state.manager = manager
    app.state.management = RepositoryManagement(manager)
    app.state.plane = plane
    app.state.partial_runs = PartialRuns(manager)
    app.state.metrics = metrics
    app.state.stats = stats
    app.state.grpc_port = None
    app.state.grpc_server = None
    limits = {"limit": request_limit(settings), "upload_limit": upload_limit(settings)}
    app.add_middleware(BodyLimitMiddleware, **limits,
                       upload_routes=[("PUT", rest_tfserving.UPLOAD_PATH), ("POST", rest_v2.LOAD_PATH)])
    app.inference = InferenceRoutes(rest_v2.ROUTES + rest_tfserving.ROUTES, _on_error)
    app.inference_app = BodyLimitMiddleware(app.inference, **limits)  # the same limits, ahead of FastAPI
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    # Known errors go through the exception middleware (answered, not re-raised); anything else is
    # a fault of ours and reaches the server-error middleware as a 500.
    app.add_exception_handler(ServiceError, _on_error)
    app.add_exception_handler(EngineError, _on_error)
    app.add_exception_handler(MemoryError, _on_error)  # answered (503) like the known errors, not re-raised
    app.add_exception_handler(Exception, _on_error)
    app.include_router(rest_v2.router)
    app.include_router(rest_tfserving.router)
    app.include_router(rest_partial_runs.router)
    app.include_router(dashboard.router)

    @app.get("/metrics", tags=["monitoring"], response_class=Response)
    async def prometheus_metrics() -> Response:
        """Prometheus metrics (text exposition format 0.0.4)."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    if metrics_path is not None and metrics_path != "/metrics":
        # TensorFlow Serving's path (or the monitoring config file's), for scrapers set up for it.
        app.add_api_route(metrics_path, prometheus_metrics, methods=["GET"], tags=["monitoring"], response_class=Response,
                          summary="Prometheus metrics, where TensorFlow Serving serves them")

    return app
