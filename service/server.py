"""Running the app under uvicorn: in the foreground (`tensorgate serve`) or in a background thread
(tests and benchmarks, which need a real server on a free port that stops by itself)."""

from __future__ import annotations

import ssl
import threading
import time

import uvicorn

from service.app import create_app
from service.observability.access_log import log_config
from service.settings import Settings

__all__ = ["serve", "BackgroundServer"]


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
        access_log=settings.access_log,
        # A server in a thread (tests, benchmarks) leaves the process's logging as it found it.
        log_config=log_config(settings.access_log) if configure_logging else None,
        **_tls(settings),
    )


def serve(settings: Settings) -> None:
    """Serve until interrupted (SIGINT/SIGTERM finish in-flight requests first): HTTP on
    `settings.port`, gRPC on `settings.grpc_port` (0: no gRPC)."""
    uvicorn.Server(_config(settings, settings.grpc_port or None)).run()


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
        self._server = uvicorn.Server(_config(settings, grpc_port, configure_logging=False))
        self._thread = threading.Thread(target=self._server.run, name="tensorgate-server", daemon=True)
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
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        scheme = "https" if self.settings.tls_cert is not None else "http"
        self.url = f"{scheme}://{host}:{port}"
        if self.app.state.grpc_port:
            self.grpc_target = f"{self.settings.host}:{self.app.state.grpc_port}"
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
