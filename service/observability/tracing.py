"""OpenTelemetry traces of the requests the server answers (the optional extra `tensorgate[otel]`).

Off unless configured: `TENSORGATE_TRACING=true`, or OpenTelemetry's own variables (an OTLP endpoint in
`OTEL_EXPORTER_OTLP_ENDPOINT`/`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER`);
`OTEL_SDK_DISABLED=true` wins over both. Sampling, the resource (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`), the exporter's endpoint, headers and protocol are OpenTelemetry's settings, read
by its SDK. When off, the app holds no `Tracing`: requests skip every line here, an Observation's `phase()` is
a shared null context.

One request's spans, as a trace viewer shows them (times are the server's own measurements):

    POST /v2/models/{model}/infer   SERVER  parent: the caller's traceparent (W3C headers or gRPC metadata)
      decode                                the body parsed into tensors
      load                                  waited for its version to load (lazy loading, evicted)
      queue                                 waited for an inference thread or for its batch to form
      compute                               the graph run (its batch's), linked to the batch's span
      encode                                the outputs written into the response
    batch                           INTERNAL a trace of its own per executed batch, linked to every request in it

A batch serves many traces, so it is not any one request's child: each request's `compute` links to the
batch, the batch links to each request's server span. Child spans are made when their phase ends, with the
times measured (no span is open across threads), and exported by the SDK's batch processor off the request path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Tracing", "RequestTrace", "tracing_wanted", "NO_PHASE"]

log = logging.getLogger("tensorgate.tracing")

# What an Observation's phase() is when the request is not traced: entered and left for nothing.
NO_PHASE = contextlib.nullcontext()

# Server-side gRPC codes that are the server's fault (OpenTelemetry's RPC conventions): the span is an error.
_GRPC_SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
                                 "DATA_LOSS"})


def tracing_wanted(enabled: bool | None, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to trace: `enabled` when set (our setting), else whether OpenTelemetry's variables ask for an
    exporter; never with OTEL_SDK_DISABLED=true."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if enabled is not None:
        return enabled
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


class RequestTrace:
    """One request's server span, and the batch its computation ran in (set by the batch scheduler)."""

    __slots__ = ("tracing", "span", "context", "batch", "batch_rows")

    def __init__(self, tracing: Tracing, span: Any, context: Any):
        self.tracing, self.span, self.context = tracing, span, context  # context: the span's, its children's parent
        self.batch: Any = None  # the span context of the batch the request ran in
        self.batch_rows = 0  # that batch's rows

    def child(self, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None,
              links: Sequence[Any] = ()) -> None:
        """A finished child span of the request's, from `start_ns` to `end_ns` (epoch nanoseconds)."""
        self.tracing.child(self.context, name, start_ns, end_ns, attributes, links)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A child span over the block (decode, encode)."""
        start = time.time_ns()
        try:
            yield
        finally:
            self.child(name, start, time.time_ns())


class Tracing:
    """The server's tracer and propagator; `http` and `grpc_unary` open a request's server span."""

    def __init__(self, tracer: Any, provider: Any = None):
        from opentelemetry import context, propagate, trace
        from opentelemetry.trace import Link, SpanKind, Status, StatusCode

        self.tracer, self.provider = tracer, provider
        self._context, self._propagate, self._trace = context, propagate, trace
        self._Link, self._SpanKind, self._Status, self._StatusCode = Link, SpanKind, Status, StatusCode

    @classmethod
    def start(cls, endpoint: str | None = None) -> Tracing:
        """A tracer provider of OpenTelemetry's SDK, configured by its OTEL_* variables, exporting with OTLP
        (`OTEL_EXPORTER_OTLP_PROTOCOL`: http/protobuf, the default, or grpc) to `endpoint` (a traces URL)
        or where those variables say, or to the console (`OTEL_TRACES_EXPORTER=console`). ImportError, saying
        what to install, without the `otel` extra."""
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        except ImportError as e:
            raise ImportError(f"tracing needs OpenTelemetry's SDK: pip install 'tensorgate[otel]' ({e})") from None
        import service

        # The SDK reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over this default.
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "tensorgate"),
                                    "service.version": service.__version__})
        provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER(_ARG)
        kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip().lower()
        exporter = ConsoleSpanExporter() if kind == "console" else _otlp_exporter(endpoint)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider.get_tracer("tensorgate", service.__version__), provider)

    def shutdown(self, timeout_s: float = 3.0) -> None:
        """Export what is still queued, then stop the exporter (the server's shutdown), for at most `timeout_s`:
        with the collector down the exporter would retry for its whole timeout; the spans left are dropped."""
        if self.provider is not None:
            flushing = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
            flushing.start()
            flushing.join(timeout_s)
            if flushing.is_alive():
                log.warning("tracing: the collector did not take the last spans within %g s; dropped", timeout_s)

    # --- server spans ------------------------------------------------------------------------------

    def current(self) -> RequestTrace | None:
        """The request trace of the server span this task runs under; None outside one (or not sampled)."""
        span = self._trace.get_current_span()
        return RequestTrace(self, span, self._context.get_current()) if span.is_recording() else None

    async def http(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Run an HTTP request under a server span (OpenTelemetry's HTTP conventions), continuing the trace
        of its `traceparent`/`tracestate` headers. Its route template, when the app matched one, names it."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parent = self._propagate.extract(headers)
        method = scope["method"]
        server = scope.get("server") or ("", None)
        attributes = {"http.request.method": method, "url.path": scope["path"],
                      "url.scheme": scope.get("scheme", "http"), "server.address": server[0],
                      "network.protocol.version": scope.get("http_version", "1.1")}
        if server[1] is not None:
            attributes["server.port"] = server[1]
        if scope.get("client"):
            attributes["client.address"] = scope["client"][0]
        if "user-agent" in headers:
            attributes["user_agent.original"] = headers["user-agent"]
        span = self.tracer.start_span(method, context=parent, kind=self._SpanKind.SERVER, attributes=attributes)
        token = self._context.attach(self._trace.set_span_in_context(span, parent))
        status = [500]  # no response started: the server failed

        async def traced_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await app(scope, receive, traced_send)
        except BaseException as e:
            span.record_exception(e)
            raise
        finally:
            route = scope.get("tensorgate.route") or getattr(scope.get("route"), "path", None)
            if route:
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
            span.set_attribute("http.response.status_code", status[0])
            if status[0] >= 400:
                span.set_attribute("error.type", str(status[0]))
            if status[0] >= 500:  # the server's fault; a 4xx is the client's (OpenTelemetry's HTTP conventions)
                span.set_status(self._Status(self._StatusCode.ERROR))
            span.end()
            self._context.detach(token)

    def grpc(self, service: str, method: str, behaviour: Callable[..., Awaitable[Any]]
             ) -> Callable[..., Awaitable[Any]]:
        """`behaviour` (a gRPC handler coroutine) under a server span (OpenTelemetry's RPC conventions),
        continuing the trace of the call's `traceparent` metadata; a stream's requests are its children."""

        async def traced(request: Any, context: Any) -> Any:
            with self._grpc_span(service, method, context):
                return await behaviour(request, context)

        return traced

    @contextlib.contextmanager
    def _grpc_span(self, service: str, method: str, context: Any) -> Iterator[Any]:
        import grpc

        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
        parent = self._propagate.extract(metadata)
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
        peer = context.peer() or ""
        if peer.startswith(("ipv4:", "ipv6:")):
            attributes["client.address"] = peer.split(":", 1)[1].rsplit(":", 1)[0].strip("[]")
        span = self.tracer.start_span(f"{service}/{method}", context=parent, kind=self._SpanKind.SERVER,
                                      attributes=attributes)
        token = self._context.attach(self._trace.set_span_in_context(span, parent))
        try:
            yield span
        except BaseException as e:
            if not isinstance(e, Exception) or context.code() is None:
                span.record_exception(e)  # not an abort with a status (those are recorded below)
            raise
        finally:
            code = context.code() or grpc.StatusCode.OK
            span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                span.set_attribute("error.type", code.name)
                span.add_event("error", {"rpc.grpc.status_code": code.value[0], "message": context.details() or ""})
                if code.name in _GRPC_SERVER_ERRORS:
                    span.set_status(self._Status(self._StatusCode.ERROR, context.details() or code.name))
            span.end()
            self._context.detach(token)

    @staticmethod
    def record_error(error: BaseException) -> None:
        """Note an error answered to the client on the current span (the app's error handler)."""
        from opentelemetry import trace

        span = trace.get_current_span()
        if span.is_recording():
            span.record_exception(error)

    # --- child spans -------------------------------------------------------------------------------

    def child(self, parent: Any, name: str, start_ns: int, end_ns: int, attributes: Mapping[str, Any] | None = None,
              links: Sequence[Any] = ()) -> None:
        """A finished span under `parent` (a context holding the parent span)."""
        span = self.tracer.start_span(name, context=parent, start_time=start_ns, attributes=attributes,
                                      links=[self._Link(c) for c in links] if links else None)
        span.end(end_time=max(end_ns, start_ns))

    def batch(self, traces: Sequence[RequestTrace], start_ns: int, end_ns: int, rows: int,
              attributes: Mapping[str, Any]) -> None:
        """The span of one executed batch (a trace of its own, linked to each request's server span); each
        request's trace learns it, for its compute span's link."""
        links = [self._Link(t.span.get_span_context()) for t in traces]
        span = self.tracer.start_span("batch", context=self._context.Context(), kind=self._SpanKind.INTERNAL,
                                      start_time=start_ns, attributes=dict(attributes), links=links)
        span.end(end_time=max(end_ns, start_ns))
        for t in traces:
            t.batch, t.batch_rows = span.get_span_context(), rows


def _otlp_exporter(endpoint: str | None) -> Any:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as e:
        raise ImportError(f"tracing over OTLP ({protocol}) needs its exporter: "
                          f"pip install 'tensorgate[otel]' ({e})") from None
    return OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
