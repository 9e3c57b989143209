"""The gRPC server: TensorFlow Serving's PredictionService and ModelService, KServe v2's
GRPCInferenceService, `grpc.health.v1.Health` (SERVING once every model is ready, for Kubernetes' gRPC
probes) and server reflection (for `grpcurl`), on one port beside HTTP and over the same data plane.

It runs on the HTTP server's event loop (`grpc.aio`), so model work leaves the loop exactly as it does
for HTTP. Bearer tokens come in the `authorization` metadata and are checked by one interceptor, with
the same tokens and rules as over HTTP: health and liveness stay open, management needs the admin token.

    >>> server = GrpcServer(plane, management, settings)
    >>> port = await server.start("127.0.0.1", 8001)
    >>> await server.stop(grace_s=5)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from service.auth import check_admin, check_api
from service.errors import ServiceError
from service.inference.dataplane import DataPlane
from service.protocols.grpc import kserve, tfserving
from service.protocols.grpc.options import channel_arguments, credentials
from service.protocols.grpc.rpc import grpc_status
from service.protocols.grpc.services import (
    INFERENCE_SERVICE,
    MODEL_SERVICE,
    PREDICTION_SERVICE,
    generic_handler,
    reflection_pool,
)
from service.repository.management import RepositoryManagement
from service.settings import Settings

__all__ = ["GrpcServer"]

log = logging.getLogger("tensorgate.grpc")

# Open to anyone who can connect, as the HTTP health routes are.
_OPEN_METHODS = frozenset({
    f"/{INFERENCE_SERVICE}/ServerLive",
    f"/{INFERENCE_SERVICE}/ServerReady",
})
_OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/",
                  "/grpc.reflection.v1.ServerReflection/")
# Management: the admin token, or loopback without one (as over HTTP).
_ADMIN_METHODS = frozenset({
    f"/{MODEL_SERVICE}/HandleReloadConfigRequest",
    f"/{INFERENCE_SERVICE}/RepositoryModelLoad",
    f"/{INFERENCE_SERVICE}/RepositoryModelUnload",
})
_HEALTH_PERIOD_S = 0.5


class _Auth(grpc.aio.ServerInterceptor):
    """Checks the bearer token of every call before its handler runs."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def _check(self, method: str, metadata: tuple) -> None:
        if method in _OPEN_METHODS or method.startswith(_OPEN_SERVICES):
            return
        authorization = next((v for k, v in metadata if k == "authorization"), None)
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")
        if method in _ADMIN_METHODS:
            check_admin(self.settings, authorization)
        else:
            check_api(self.settings, authorization)

    async def intercept_service(self, continuation: Callable[..., Awaitable[grpc.RpcMethodHandler]],
                                details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        try:
            self._check(details.method, tuple(details.invocation_metadata or ()))
        except ServiceError as e:
            return _refusal(await continuation(details), *grpc_status(e))
        return await continuation(details)


def _refusal(handler: grpc.RpcMethodHandler | None, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler | None:
    """A handler of the same shape as `handler` that ends the call with `code`."""
    if handler is None:
        return None  # an unknown method: UNIMPLEMENTED, as without a token

    async def unary(request, context: grpc.aio.ServicerContext):
        await context.abort(code, message)

    async def stream(requests, context: grpc.aio.ServicerContext):
        await context.abort(code, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(stream)
    return grpc.unary_unary_rpc_method_handler(unary)


class GrpcServer:
    """The gRPC services of one app, started on its event loop."""

    def __init__(self, plane: DataPlane, management: RepositoryManagement, settings: Settings):
        self.plane = plane
        self.settings = settings
        self.port = 0
        self._server = grpc.aio.server(
            interceptors=[_Auth(settings)],
            options=[
                ("grpc.max_receive_message_length", settings.max_request_bytes),
                # Responses are held to max_response_bytes before they are encoded (a clear message);
                # this is the backstop for any message that still comes out larger (gRPC takes a C int).
                ("grpc.max_send_message_length", min(settings.max_response_bytes, 2**31 - 1)),
                # Without this, a second server on the same port would start and share its traffic.
                ("grpc.so_reuseport", 0),
                # The deployment's own (--grpc_channel_arguments) come last: gRPC takes the last of a key.
                *channel_arguments(settings.grpc_channel_arguments),
            ],
        )
        self._credentials = credentials(settings)  # read now: a bad SSL config file stops the start
        tracing = plane.tracing
        self._server.add_generic_rpc_handlers((
            generic_handler(PREDICTION_SERVICE, tfserving.PredictionService(
                plane, check_method_name=settings.signature_method_name_check,
                tensor_content=settings.predict_tensor_content), raw=tfserving.RAW_METHODS, tracing=tracing),
            generic_handler(MODEL_SERVICE, tfserving.ModelService(plane.manager, reload_timeout_s=settings.request_timeout_s),
                            tracing=tracing),
            generic_handler(INFERENCE_SERVICE, kserve.InferenceService(plane, management, settings.archive_limits()),
                            raw=kserve.RAW_METHODS, tracing=tracing),
        ))
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        served = [PREDICTION_SERVICE, MODEL_SERVICE, INFERENCE_SERVICE]
        # TensorFlow Serving's --enable_grpc_healthcheck_service answers for "ModelService" and
        # "PredictionService", short names its users' probes ask for.
        self._health_names = ["", *served, "ModelService", "PredictionService"]
        reflection.enable_server_reflection(
            [*served, health.SERVICE_NAME, reflection.SERVICE_NAME], self._server,
            pool=reflection_pool([health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR]))
        self._health_task: asyncio.Task | None = None
        self._stopping: asyncio.Task | None = None

    def _listen(self, address: str) -> int:
        try:
            bound = (self._server.add_secure_port(address, self._credentials) if self._credentials is not None
                     else self._server.add_insecure_port(address))
        except RuntimeError as e:
            raise OSError(f"cannot listen for gRPC on {address}: {e}") from None
        if not bound:
            raise OSError(f"cannot listen for gRPC on {address}")
        return bound

    async def start(self, host: str, port: int | None) -> int:
        """Listen on `host:port` (0: a free port; None: no TCP port) and on `settings.grpc_socket_path`
        when set, and serve; the TCP port listened on (0 without one). OSError when one cannot be bound."""
        bound = 0
        secure = " (TLS)" if self._credentials is not None else ""
        if port is not None:
            bound = self._listen(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        if self.settings.grpc_socket_path is not None:
            # gRPC replaces a socket file left at the path (by an earlier server, say), as TensorFlow Serving's does.
            self._listen(f"unix:{self.settings.grpc_socket_path}")
        await self._server.start()
        self.port = bound
        await self._update_health()
        self._health_task = asyncio.create_task(self._watch_health())
        if port is not None:
            log.info("gRPC listening on %s:%d%s", host, bound, secure)
        if self.settings.grpc_socket_path is not None:
            log.info("gRPC listening on unix:%s%s", self.settings.grpc_socket_path, secure)
        return bound

    async def _update_health(self) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if self.plane.ready() else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in self._health_names:
            await self._health.set(name, status)

    async def _watch_health(self) -> None:
        while True:
            await asyncio.sleep(_HEALTH_PERIOD_S)
            try:
                await self._update_health()
            except Exception:  # a failed update must not end the watch; the next one tries again
                log.exception("updating gRPC health failed")

    async def drain(self) -> None:
        """Answer NOT_SERVING for every service name from now on (a shutdown's first step), still serving calls."""
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        with contextlib.suppress(Exception):
            await self._health.enter_graceful_shutdown()

    async def stop(self, grace_s: float) -> None:
        """Fail health checks, stop accepting calls; calls in flight get `grace_s` seconds to finish.
        A second call waits for the first one's stop."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(grace_s))
        await asyncio.shield(self._stopping)

    async def _stop(self, grace_s: float) -> None:
        await self.drain()
        await self._server.stop(grace_s)
