"""Running the app under uvicorn: in the foreground (`tensorgate serve`) or in a background thread
(tests and benchmarks, which need a real server on a free port that stops by itself).

A graceful shutdown (SIGTERM or SIGINT in the foreground, `stop()` in the background) goes, in order:
readiness fails (HTTP `/v2/health/ready` 503, gRPC health NOT_SERVING for every service name, KServe's
ServerReady false); the listeners close (HTTP and gRPC: new connections are refused); every HTTP response
from then on says `Connection: close`, so that keep-alive connections still sending requests end after an
answer (for up to 2 s, until no request came for 0.25 s) rather than being closed under a request the client is
sending; then the idle ones close, and a connection with a request in flight finishes it and closes after its
response, never reset mid-request; requests in flight, those waiting in batch queues
included, finish within `shutdown_grace_s`; past it, those still waiting get 503, and the process exits
even if a computation it cannot interrupt is still running. A second SIGINT exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import uvicorn
from starlette.datastructures import State

from service.app import create_app
from service.observability.access_log import log_config
from service.repository.server_core import labels_on_unavailable_versions, wait_for_models
from service.settings import Settings

__all__ = ["serve", "BackgroundServer", "ModelsUnavailable", "TensorgateServer"]

log = logging.getLogger("tensorgate.server")

# After the grace, requests still waiting are answered 503: this long is left for those answers to be
# sent before uvicorn cancels what remains (a client still sending its body, say).
_ANSWER_MARGIN_S = 1.0
# A shutdown first lets busy keep-alive connections close themselves after a response (at most this long), and
# counts a connection as done with once no request came on any for _QUIET_S (see _drain_keep_alive).
_DRAIN_S = 2.0
_QUIET_S = 0.25
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _tls(settings: Settings) -> dict:
    """uvicorn's TLS options for HTTPS (client certificates required when a CA is set)."""
    if settings.tls_cert is None:
        return {}
    options = {"ssl_certfile": str(settings.tls_cert), "ssl_keyfile": str(settings.tls_key)}
    if settings.tls_ca is not None:
        options.update(ssl_ca_certs=str(settings.tls_ca), ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


def _config(settings: Settings, grpc_port: int | None, *, configure_logging: bool = True) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings, grpc_port=grpc_port),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        # The body limit and our own timeouts bound requests; keep-alive suits clients that reuse connections.
        timeout_keep_alive=30,
        # Our own grace ends waiting requests with 503 first (TensorgateServer.shutdown); this is the backstop.
        timeout_graceful_shutdown=settings.shutdown_grace_s + _ANSWER_MARGIN_S,
        access_log=settings.access_log,
        # A server in a thread (tests, benchmarks) leaves the process's logging as it found it.
        log_config=log_config(settings.access_log) if configure_logging else None,
        **_tls(settings),
    )


class TensorgateServer(uvicorn.Server):
    """uvicorn's server with tensorgate's graceful shutdown (see the module's docstring)."""

    def __init__(self, config: uvicorn.Config, *, on_listening: Callable[[TensorgateServer], None] | None = None):
        super().__init__(config)
        self.grace_exceeded = False  # requests were still unfinished when the grace ended
        self.on_listening = on_listening

    @property
    def app_state(self) -> State:
        """The app's state (settings, plane, gRPC server): `config.app` stays the TensorgateApp that
        `config.load()` wraps in middleware."""
        return self.config.app.state

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Signals reach only the main thread (a BackgroundServer is stopped by stop()). Unlike uvicorn's,
        # the signal is not raised again once the server has stopped: it asked for a graceful shutdown,
        # which happened, and the exit status says how it went (`serve`).
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)
        if self.started and self.on_listening is not None:
            self.on_listening(self)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Readiness fails the moment the signal arrives, before the shutdown's first tick (uvicorn looks
        # at should_exit every 0.1 s): HTTP's at once, gRPC health's on the loop's next turn
        # (call_soon_threadsafe is safe from a signal handler; its health servicer is async).
        self.app_state.plane.draining = True
        grpc_server, loop = self.app_state.grpc_server, getattr(self, "_loop", None)
        if grpc_server is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(grpc_server.drain()))
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = self.app_state
        grace_s = state.settings.shutdown_grace_s
        state.plane.draining = True
        stopping_grpc = None
        if state.grpc_server is not None:
            await state.grpc_server.drain()
            # gRPC stops accepting at once and gets the margin beyond the grace to send its 503s (UNAVAILABLE).
            stopping_grpc = asyncio.ensure_future(state.grpc_server.stop(grace_s + _ANSWER_MARGIN_S))
        grace_end = asyncio.get_running_loop().call_later(grace_s, self._end_grace)
        try:
            await self._drain_keep_alive(min(_DRAIN_S, grace_s))
            await super().shutdown(sockets)  # HTTP: close the listeners, finish requests, lifespan shutdown
        finally:
            grace_end.cancel()
            if stopping_grpc is not None:
                await stopping_grpc

    async def _drain_keep_alive(self, limit_s: float) -> None:
        """Stop accepting, then let busy keep-alive connections end themselves: every response now says
        `Connection: close` (service.app), so a client sending request after request on one connection gets its
        answer and reconnects (to another replica, once Kubernetes has taken this one out of the Service) rather
        than having the connection closed under its next request. Done when no request came for _QUIET_S (at
        once when none came lately), or after `limit_s`; then uvicorn closes what is left, idle."""
        for server in self.servers:
            server.close()  # new connections are refused from now on
        for connection in self.server_state.connections:
            # A request already in flight closes its connection after its answer too, as uvicorn's own shutdown
            # does (its protocols' `cycle`); those arriving from now on are told by the app (service.app).
            cycle = getattr(connection, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                cycle.keep_alive = False
        plane, loop = self.app_state.plane, asyncio.get_running_loop()
        end = loop.time() + limit_s
        while loop.time() < end and self.server_state.connections:
            if time.monotonic() - plane.last_draining_request >= _QUIET_S and not self.server_state.tasks:
                break
            await asyncio.sleep(0.02)

    def _end_grace(self) -> None:
        plane = self.app_state.plane
        waiting = plane.abort_waiting()
        if waiting or plane.busy_threads:
            self.grace_exceeded = True
            log.warning("the shutdown grace period (%g s) is over: %d requests still waiting get 503 (%d computations "
                        "still running)", self.app_state.settings.shutdown_grace_s, waiting, plane.busy_threads)


class ModelsUnavailable(Exception):
    """A server that waits for its models before it listens found some that could not load."""


def _wait_for_models(server: TensorgateServer) -> None:
    """Load every model's versions before listening, as TensorFlow Serving does; ModelsUnavailable
    names the models that did not load (after their retries)."""

    def no_versions(name: str, base_path: Path | None) -> None:
        # TensorFlow Serving's words, which its users search for.
        log.warning("No versions of servable %s found under base path %s. Did you forget to name your leaf "
                    "directory as a number (eg. '/1/')?", name, base_path)

    manager = server.app_state.manager
    manager.start()
    failed = wait_for_models(manager, on_empty=no_versions)
    if failed:
        manager.stop()
        problems = ", ".join(f"{{{name} due to error: {why}}}" for name, why in sorted(failed.items()))
        raise ModelsUnavailable(f"{len(failed)} model(s) did not become available: {{{problems}}}")
    unavailable = labels_on_unavailable_versions(manager)
    if unavailable and not server.app_state.settings.allow_version_labels_for_unavailable_models:
        manager.stop()
        name, label, version = unavailable[0]
        raise ModelsUnavailable(f"Request to assign label to version {version} of model {name}, which is not currently "
                                f"available for inference (label '{label}'; --allow_version_labels_for_unavailable_models "
                                "lets it wait for that version)")


def serve(settings: Settings, *, wait_for_models: bool = False,
          on_listening: Callable[[TensorgateServer], None] | None = None) -> int:
    """Serve until SIGTERM or SIGINT, which shut down gracefully: HTTP on `settings.port` (unless
    `settings.http` is off), gRPC on `settings.grpc_port` (0: no gRPC port) and `settings.grpc_socket_path`.
    With `wait_for_models`, every model is loaded before anything listens (ModelsUnavailable when one
    fails); `on_listening` is called once the listeners are up. The exit status: 0 when every request
    finished within the grace, 1 when some were cut off (answered 503, or still computing when the
    process left)."""
    server = TensorgateServer(_config(settings, settings.grpc_port or None), on_listening=on_listening)
    if wait_for_models:
        _wait_for_models(server)
    # No HTTP: an empty list of sockets runs the app's life cycle (models, gRPC) without a listener.
    server.run(sockets=None if settings.http else [])
    status = 1 if server.grace_exceeded else 0
    if server.config.loaded and server.app_state.plane.busy_threads:
        # A computation cannot be interrupted mid-kernel (one past the grace, or one whose client timed
        # out earlier), and Python would wait for its thread at exit.
        log.warning("exiting with %d computations still running", server.app_state.plane.busy_threads)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


class BackgroundServer:
    """A real server in a thread, on `settings.host` and a free port when `settings.port` is 0; gRPC
    on a free port too, unless `settings.grpc_port` is set (0: no gRPC).

        >>> with BackgroundServer(Settings(model_repository=path, port=0)) as server:
        ...     httpx.get(f"{server.url}/v2/health/ready")
        ...     grpc.insecure_channel(server.grpc_target)
    """

    def __init__(self, settings: Settings, *, startup_timeout_s: float = 30.0):
        self.settings = settings
        self.startup_timeout_s = startup_timeout_s
        grpc_port = settings.grpc_port if "grpc_port" in settings.model_fields_set else 0
        if "grpc_port" in settings.model_fields_set and settings.grpc_port == 0:
            grpc_port = None
        self._server = TensorgateServer(_config(settings, grpc_port, configure_logging=False))
        sockets = None if settings.http else []
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": sockets}, name="tensorgate-server",
                                        daemon=True)
        self.url = ""
        self.grpc_target = ""  # host:port of the gRPC services; "" without them

    @property
    def app(self):
        return self._server.config.app

    def start(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        if self._server.servers:
            host, port = self._server.servers[0].sockets[0].getsockname()[:2]
            scheme = "https" if self.settings.tls_cert is not None else "http"
            self.url = f"{scheme}://{host}:{port}"
        if self.app.state.grpc_port:
            self.grpc_target = f"{self.settings.host}:{self.app.state.grpc_port}"
        return self

    def stop(self) -> None:
        """Shut down gracefully (requests in flight get `settings.shutdown_grace_s`) and wait for it."""
        self._server.should_exit = True
        self._thread.join(timeout=self.settings.shutdown_grace_s + 30)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
