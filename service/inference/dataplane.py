"""The data plane: inference, independent of any wire protocol.

Routes decode a request into arrays and encode what comes back; the data plane resolves names
against the signature (alias or graph tensor), checks dtypes and shapes naming the alias, and runs
the request: through the version's batch scheduler when batching is on, else in the worker pool, or
on the event loop itself when its plan measured cheaper than the hop to a worker (tens of
microseconds: see `inline`), so health checks stay responsive; codec work on small bodies runs on
the loop too (a thread hop costs more than parsing a few kilobytes). The worker pool's queue is bounded
(`admission`): past it a request is shed with 503 and Retry-After. When a shutdown's grace period ends,
requests still waiting get 503 (`abort_waiting`). A request whose client disconnects or
whose deadline passes is dropped if it has not started computing. Every request is observed once,
in metrics and in the dashboard's live statistics, and, when they are on, in a trace (its phases as spans:
`service.observability.tracing`) and in the payload log (`service.observability.payload_log`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from engine.compile.plan import format_shape
from service.errors import (
    BadRequest,
    DeadlineExceeded,
    ServiceError,
    Unavailable,
    status_of,
)
from service.inference.admission import AdmissionPool, Overloaded
from service.inference.batching import QueueFull
from service.inference.inline import InlineCosts
from service.inference.response_limit import ResponseLimit
from service.observability.metrics import Metrics
from service.observability.model_stats import ModelStatistics
from service.observability.payload_log import Body, PayloadLogger, PayloadRecord
from service.observability.tracing import NO_PHASE, RequestTrace, Tracing
from service.repository.manager import ModelManager
from service.repository.servable import Servable
from service.repository.signatures import (
    OutputValue,
    Signature,
    TensorSpec,
    composite_value,
    fetched_tensors,
)

__all__ = ["InferResult", "DataPlane", "Observation", "ClientDisconnected", "check_input", "INLINE_BYTES"]

T = TypeVar("T")

# Bodies and results up to this size are decoded and encoded on the event loop.
INLINE_BYTES = 64 * 1024
# Plans that measured at most this much compute per run run on the event loop (0: never).
INLINE_COMPUTE_S = 50e-6


class ClientDisconnected(ServiceError):
    """The client went away before its response was ready (nginx's 499; nobody reads it)."""

    status = 499


@dataclass(frozen=True)
class InferResult:
    """The outputs of one request, in the order asked for, with the version that computed them; a
    ragged or sparse output's value is a RaggedValue or a SparseValue."""

    model: str
    version: int
    signature: Signature
    outputs: tuple[tuple[TensorSpec, OutputValue], ...]
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # classification labels by output alias


def check_input(spec: TensorSpec, array: np.ndarray, shapes: bool = True) -> None:
    """A request's tensor against what its signature declares (its shape too unless `shapes` is off:
    a server that feeds any shape, as TensorFlow Serving does); the message names the alias."""
    if spec.dtype is not None and array.dtype != spec.dtype:
        text = spec.dtype == np.dtype(object) and array.dtype.kind in "SUO"
        if not text:
            raise BadRequest(f"input '{spec.alias}' expects dtype {_dtype_name(spec.dtype)}, got {_dtype_name(array.dtype)}")
    if spec.shape is not None and shapes:
        if array.ndim != len(spec.shape) or any(d is not None and d != s for d, s in zip(spec.shape, array.shape)):
            raise BadRequest(f"input '{spec.alias}' expects shape {format_shape(spec.shape)}, got {format_shape(array.shape)}")


def _grouped(specs: Sequence[TensorSpec], values: Sequence[np.ndarray]) -> tuple[tuple[TensorSpec, OutputValue], ...]:
    """Each output with its value: the fetched arrays in order, a ragged or sparse output's components
    put together (`fetched_tensors` lists them in its place)."""
    grouped, start = [], 0
    for spec in specs:
        count = len(spec.tensors)
        arrays = values[start : start + count]
        start += count
        grouped.append((spec, arrays[0] if spec.composite is None else composite_value(spec.composite, arrays)))
    return tuple(grouped)


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype == np.dtype(object) else dtype.name


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "success"
    if isinstance(error, (QueueFull, Overloaded)):
        return "rejected"
    if isinstance(error, DeadlineExceeded):
        return "timeout"
    if isinstance(error, (ClientDisconnected, asyncio.CancelledError)):
        return "cancelled"
    return "client_error" if status_of(error) < 500 else "server_error"


class Observation:
    """What one request reports when it ends: the model version and signature it reached, its queue and
    compute time, its payloads when the payload log samples it. Routes fill it in as they learn;
    `DataPlane.observe` records it."""

    def __init__(self, protocol: str, model: str):
        self.protocol, self.model = protocol, model
        self.version = ""
        self.signature = ""  # the signature it ran (one the model declares), for the metrics' label
        self.trace: RequestTrace | None = None  # its server span, when the request is traced
        self.payload: PayloadRecord | None = None  # when the payload log sampled it
        self.queue_s: float | None = None
        self.compute_s: float | None = None
        self.rows = 1  # the inputs' leading dimension: the inferences a request asked for
        self.load_wait_s: float | None = None  # how long it waited for its version to load (a cold start)

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        """A block of the request (decode, encode) as a span of its trace; nothing when it is not traced."""
        return NO_PHASE if self.trace is None else self.trace.phase(name)

    # The payload log's two calls; a route makes them only when `payload` is set (the log sampled the request),
    # so that a server without the log builds nothing for it.
    def log_request(self, body: Body, request_id: str | None = None) -> None:
        """The request's payload, and its id (the events' id; a new one without)."""
        self.payload.request, self.payload.id = body, request_id or self.payload.id

    def log_response(self, body: Body) -> None:
        """The response's payload."""
        self.payload.response = body


class DataPlane:
    """Runs requests on a ModelManager's servables, off the event loop, within a deadline.

        >>> plane = DataPlane(manager, threads=8, timeout_s=60)
        >>> async with plane.observe("v2", "iris") as obs, plane.lease("iris", obs) as servable:
        ...     result = await plane.infer(servable, servable.signature(None), {"features": x}, None, obs)
    """

    def __init__(self, manager: ModelManager, *, threads: int, timeout_s: float, metrics: Metrics | None = None,
                 stats: Any | None = None, inline_compute_s: float = INLINE_COMPUTE_S, max_queued: int = 2**31,
                 max_response_bytes: int | None = None, model_stats: ModelStatistics | None = None,
                 tracing: Tracing | None = None, payload_log: PayloadLogger | None = None):
        self.manager = manager
        self.tracing, self.payload_log = tracing, payload_log
        self.model_stats = model_stats or ModelStatistics()  # Triton's statistics extension
        self.response_limit = ResponseLimit(max_response_bytes)
        self.timeout_s = timeout_s
        self.inline = InlineCosts(inline_compute_s)
        self.metrics = metrics or Metrics(manager.servables)
        self.stats = stats
        self._pool = AdmissionPool(threads, max_queued)
        self.draining = False  # the server is shutting down: readiness fails from then on
        self.last_draining_request = 0.0  # monotonic time of the last HTTP request while draining (service.server)
        self._grace_over = False
        self._waiting = 0  # requests awaiting a result in `wait`
        self._aborted: asyncio.Future | None = None  # done when the shutdown's grace period ends

    def close(self) -> None:
        self._pool.shutdown()

    def ready(self) -> bool:
        """Ready for traffic: every model has a version available, and the server is not shutting down."""
        return not self.draining and self.manager.ready()

    @property
    def busy_threads(self) -> int:
        """Inference threads running a computation now."""
        return self._pool.running

    def abort_waiting(self) -> int:
        """End every request still waiting for its result with 503 (the shutdown's grace period is
        over); work not yet started never starts. Call on the event loop; how many were waiting."""
        self.draining = self._grace_over = True
        signal = self._abort_signal()
        if not signal.done():
            signal.set_result(None)
        return self._waiting

    def _abort_signal(self) -> asyncio.Future:
        """One future per event loop that every waiting request watches, done when the grace is over."""
        loop = asyncio.get_running_loop()
        if self._aborted is None or self._aborted.get_loop() is not loop:
            self._aborted = loop.create_future()
            if self._grace_over:
                self._aborted.set_result(None)
        return self._aborted

    # --- running work ------------------------------------------------------------------------------

    def _timeout(self, timeout_s: float | None) -> float:
        return self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)

    async def call(self, fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
        """Run `fn(*args)` in the worker pool; DeadlineExceeded past the timeout.

        A timed-out computation cannot be interrupted mid-kernel: it finishes in the background and
        its result is dropped; one still waiting for a worker never starts.
        """
        return await self.wait(self._pool.submit(fn, *args), timeout_s)

    async def maybe_call(self, size: int, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` inline when its input is small (`size` bytes), else in the worker pool."""
        return fn(*args) if size <= INLINE_BYTES else await self.call(fn, *args)

    async def wait(self, future: Future, timeout_s: float | None = None,
                   disconnected: Callable[[], Awaitable[Any]] | None = None) -> Any:
        """Await a concurrent future within the timeout, cancelling it (so that it never starts) on
        timeout or when `disconnected` completes first; Unavailable (503) when a shutdown's grace ends first."""
        timeout = self._timeout(timeout_s)
        wrapped = asyncio.wrap_future(future)
        watcher = asyncio.ensure_future(disconnected()) if disconnected is not None else None
        aborted = self._abort_signal()
        self._waiting += 1
        try:
            done, _ = await asyncio.wait([wrapped, aborted] + ([watcher] if watcher else []), timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The caller went away (a gRPC client cancelled its call): the work must not start.
            future.cancel()
            raise
        finally:
            self._waiting -= 1
            if watcher is not None:
                watcher.cancel()
        if wrapped in done:
            return wrapped.result()
        future.cancel()
        if watcher is not None and watcher in done:
            raise ClientDisconnected("the client disconnected before the response was ready")
        if aborted in done:
            raise Unavailable("the server is shutting down and its grace period (shutdown_grace_s) ended before this "
                              "request finished; retry on another replica")
        raise DeadlineExceeded(f"request timed out after {timeout:g} s")

    # --- requests ----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def observe(self, protocol: str, model: str, endpoint: str = "") -> AsyncIterator[Observation]:
        """Time a request and record its outcome in metrics and live statistics (and its trace and payloads,
        when those are on); `endpoint` (the path or RPC) names it in the payload log."""
        obs = Observation(protocol, model)
        if self.tracing is not None:
            obs.trace = self.tracing.current()
        if self.payload_log is not None and self.payload_log.sampled():
            obs.payload = PayloadRecord(protocol, endpoint, model)
        start = time.perf_counter()
        in_flight = self.metrics.in_flight_gauge(protocol)
        in_flight.inc()
        error: BaseException | None = None
        try:
            yield obs
        except BaseException as e:
            error = e
            raise
        finally:
            in_flight.dec()
            duration = time.perf_counter() - start
            # Label only models the server knows: a client must not mint series with made-up names.
            model_label = obs.model if obs.version or self.manager.knows(obs.model) else ""
            outcome = _outcome(error)
            self.metrics.observe_request(model_label, obs.version, protocol, outcome, duration, obs.queue_s,
                                         obs.compute_s, obs.signature)
            if self.stats is not None and model_label:
                self.stats.record_request(model_label, obs.version, protocol, duration, outcome == "success",
                                          obs.queue_s, obs.signature)
            if obs.trace is not None:
                obs.trace.span.set_attributes({"tensorgate.model": obs.model, "tensorgate.model.version": obs.version,
                                               "tensorgate.signature": obs.signature})
            if obs.payload is not None and obs.version:
                obs.payload.version, obs.payload.signature = obs.version, obs.signature
                self.payload_log.emit(obs.payload)
            if obs.version:
                self.model_stats.record_request(obs.model, obs.version, duration_s=duration, ok=outcome == "success",
                                                rows=obs.rows, queue_s=obs.queue_s, compute_s=obs.compute_s)

    @contextlib.asynccontextmanager
    async def lease(self, model: str, obs: Observation, version: int | None = None, label: str | None = None,
                    timeout_s: float | None = None):
        """The servable for a request, held until the block ends (an unload waits for it, an eviction
        passes it by). A version kept out of memory is loaded first: the request waits for the load (one
        per version, shared by every request waiting) up to its deadline, then gets DeadlineExceeded."""
        reservation = self.manager.reserve(model, version, label)
        try:
            if reservation.load is not None:
                timeout = self._timeout(timeout_s)
                try:
                    # shield: a request that gives up must not cancel the load the others wait for.
                    await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(reservation.load)), timeout)
                except TimeoutError:
                    raise self.manager.waited_too_long(reservation, timeout) from None
                obs.load_wait_s = time.monotonic() - reservation.started
                if obs.trace is not None:
                    now = time.time_ns()
                    obs.trace.child("load", now - int(obs.load_wait_s * 1e9), now, {"tensorgate.model": model})
            servable = self.manager.servable_of(reservation)
            obs.version = str(servable.version)
            yield servable
        finally:
            self.manager.release(reservation)

    def prepare(self, servable: Servable, signature: Signature, inputs: Mapping[str, np.ndarray],
                outputs: Sequence[str] | None) -> tuple[dict[str, np.ndarray], list[TensorSpec]]:
        """Graph feeds and output specs for a request, every name resolved and every input checked."""
        feeds: dict[str, np.ndarray] = {}
        for name, array in inputs.items():
            spec = servable.resolve_input(signature, name)
            array = servable.reshaped(name, array)
            check_input(spec, array, servable.checks_feed_shapes)
            if spec.tensor in feeds:
                raise BadRequest(f"input '{name}' names tensor '{spec.tensor}', which is already fed")
            feeds[spec.tensor] = array
        specs = list(signature.outputs) if outputs is None else [
            servable.resolve_output(signature, n, composites=True) for n in outputs]
        if len({s.alias for s in specs}) != len(specs):
            raise BadRequest(f"an output is requested more than once: {[s.alias for s in specs]}")
        wholes = {s.alias for s in specs if s.composite is not None}
        parts = [s for s in specs if s.component_of in wholes]
        if parts:
            raise BadRequest(f"output '{parts[0].alias}' is requested twice: alone, and as a part of '{parts[0].component_of}'")
        return feeds, specs

    async def infer(
        self,
        servable: Servable,
        signature: Signature,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None,
        obs: Observation,
        *,
        priority: int = 0,
        timeout_s: float | None = None,
        disconnected: Callable[[], Awaitable[Any]] | None = None,
    ) -> InferResult:
        """Run a request on a leased servable. Input and output names are signature aliases or graph
        tensor names; `outputs=None` means every output of the signature."""
        obs.signature = signature.name
        feeds, specs = self.prepare(servable, signature, inputs, outputs)
        fetches = fetched_tensors(specs)
        timeout = self._timeout(timeout_s)
        submitted_ns = time.time_ns() if obs.trace is not None else 0
        # NOTE: the parts of a ragged or sparse output do not follow the batch, so they cannot be split into
        # the rows of batched requests: such requests run alone.
        composite = any(s.composite is not None or s.component_of is not None for s in specs)
        if servable.scheduler is not None and not composite:
            deadline = time.monotonic() + timeout
            future = servable.scheduler.submit(feeds, fetches, priority=priority, deadline=deadline, trace=obs.trace)
            values, queue_s, compute_s = await self.wait(future, timeout, disconnected)
        else:
            key = self.inline.key(feeds, fetches)
            if self.inline.cheap(servable, key):
                values, queue_s, compute_s = self._run_timed(servable, feeds, fetches, key, time.perf_counter())
            else:
                future = self._pool.submit(self._run_timed, servable, feeds, fetches, key, time.perf_counter())
                values, queue_s, compute_s = await self.wait(future, timeout, disconnected)
        obs.queue_s, obs.compute_s = queue_s, compute_s
        obs.rows = next((a.shape[0] for a in feeds.values() if a.ndim), 1)
        if obs.trace is not None:
            self._trace_run(obs, submitted_ns)
        # Whoever encodes the outputs holds them to `response_limit` by its encoding (routes, gRPC
        # handlers, service.inference.examples), once per request.
        grouped = _grouped(specs, values)
        if servable.reshape:
            grouped = tuple((spec, servable.reshaped(spec.alias, v) if spec.composite is None else v) for spec, v in grouped)
        return InferResult(servable.model, servable.version, signature, grouped, servable.output_labels)

    @staticmethod
    def _trace_run(obs: Observation, submitted_ns: int) -> None:
        """The queue and compute spans of a request that ran (the compute linked to its batch's span)."""
        trace = obs.trace
        started = submitted_ns + int(obs.queue_s * 1e9)
        trace.child("queue", submitted_ns, started)
        batch_rows = trace.batch_rows or obs.rows
        trace.child("compute", started, started + int(obs.compute_s * 1e9),
                    {"tensorgate.signature": obs.signature, "tensorgate.batch_size": batch_rows},
                    links=() if trace.batch is None else (trace.batch,))

    def _run_timed(self, servable: Servable, feeds, fetches, key: tuple, submitted: float
                   ) -> tuple[list[np.ndarray], float, float]:
        start = time.perf_counter()
        values = servable.run(feeds, fetches)
        end = time.perf_counter()
        self.inline.record(servable, key, end - start)
        self.observe_batch(servable.model, servable.version, next((a.shape[0] for a in feeds.values() if a.ndim), 1),
                           end - start)
        return values, start - submitted, end - start

    def observe_batch(self, model: str, version: int, rows: int, compute_s: float) -> None:
        """One model execution over `rows` rows (a batch, or a request run alone), `compute_s` long."""
        self.metrics.observe_batch(model, str(version), rows)
        self.model_stats.record_execution(model, str(version), batch_size=rows, compute_s=compute_s)
        if self.stats is not None:
            self.stats.record_batch(model, str(version), rows)
