"""A Session runs one graph on a device, caching one compiled plan per feed/fetch/target signature.

    >>> sess = engine.Session(engine.load_graph("model.pb"), device="cpu")   # or "gpu", "cpu:1", "/device:GPU:0"
    >>> y, z = sess.run(["out:0", "layer2/z:0"], {"x:0": x})
    >>> sess.run([], {"x:0": x}, targets=["init"])
    >>> h = sess.prun_setup(["a:0", "b:0"], ["h:0", "out:0"])   # a partial run, fed in steps

Any tensor can be fed, not only placeholders: feeding an intermediate tensor cuts the graph above it.
Feeds of placeholders are checked against the declared dtype and shape.

Nodes go to the session's device when it has their kernel, else to the CPU (engine.devices.placement); a
signature spread over several devices runs as one partition per device, concurrently, joined by
_Send/_Recv pairs (engine.devices.partition). `SessionOptions(logical_cpus=2)` adds a second CPU device,
cpu:1, that nodes can be pinned to by their NodeDef `device` field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine import devices
from engine.compile.cache import CacheStats, ExecutorCache
from engine.compile.plan import (
    ConstantCache,
    FeedSpec,
    Plan,
    PlanOptions,
    compile_plan,
    format_shape,
)
from engine.devices.partition import (
    PartitionedPlan,
    PartitionWorkers,
    compile_signature,
    run_partitioned,
)
from engine.devices.placement import dataflow_device
from engine.errors import FeedDtypeError, FeedError, FeedShapeError, UnknownTensorError
from engine.graph import Graph, dtypes, parse_tensor_name, validate
from engine.graph.graph_def import GraphSource, load_graph
from engine.runtime.allocator import tune_allocator
from engine.runtime.executor import execute
from engine.runtime.partial_run import PartialRuns
from engine.runtime.resources import ResourceManager
from kernels import blas

__all__ = ["Session", "SessionOptions"]


@dataclass(frozen=True)
class SessionOptions:
    """Options of one Session; the server builds these from its settings."""

    # Plans kept per session; the least recently used one is dropped beyond this.
    cache_capacity: int = 64
    # Partial runs (prun_setup/prun): how many may be open at once, and how long one may sit idle
    # before its handle expires and its state is dropped.
    prun_max_handles: int = 64
    prun_timeout_s: float = 300.0
    plan: PlanOptions = field(default_factory=PlanOptions)
    # How many CPU devices the session has: cpu:0 .. cpu:{logical_cpus-1}. They share the host and
    # numpy; more than one lets nodes pinned to cpu:1 run in a partition of their own (tests of the
    # partitioning machinery use this where no GPU exists).
    logical_cpus: int = 1
    # GPU sessions: capture signatures with fixed input shapes and no control flow into CUDA graphs
    # after warm-up and replay them (engine.devices.cuda_graphs); off launches kernel by kernel.
    cuda_graphs: bool = True
    # Seconds a _Recv waits for its value before the run fails (None: until it arrives or the run is
    # aborted by another partition's error).
    recv_timeout_s: float | None = None
    # Make glibc keep freed memory for reuse (engine.runtime.allocator.tune_allocator) when the session is
    # created, so that big intermediate tensors are not page-faulted in again on every run. It is
    # process-wide and applied once: False leaves the allocator alone for this session's sake only (a
    # process whose other sessions asked for it has it anyway).
    tune_allocator: bool = True
    # Make BLAS single-threaded, process-wide, when the session is created, giving its threads back to one
    # large product at a time from outside the engine's kernel pool (kernels.blas): BLAS's own spinning
    # threads would otherwise compete with the pool's kernels and with concurrent requests for the cores.
    # False leaves BLAS's threading as it is.
    single_threaded_blas: bool = True


def _canonical(name: str) -> str:
    if not isinstance(name, str) and isinstance(getattr(name, "name", None), str):
        name = name.name  # a symbolic tensor of engine.builder: `sess.run(probs, {x: ...})`
    try:
        return str(parse_tensor_name(name))
    except (ValueError, TypeError) as e:
        raise UnknownTensorError(str(name), str(e)) from None


def _check_feed(spec: FeedSpec, value: Any) -> Any:
    """The fed value as an array of the declared dtype and a compatible shape, or a FeedError."""
    if spec.dtype is None:
        return value if isinstance(value, np.ndarray) else np.asarray(value)
    expected = spec.dtype
    if isinstance(value, np.ndarray):
        if value.dtype != expected:
            is_text = value.dtype.kind in "SUO" and expected == np.dtype(object)
            if not is_text:
                raise FeedDtypeError(spec.name, dtypes.tf_name_of_numpy(expected), dtypes.tf_name_of_numpy(value.dtype))
            value = value.astype(object)
        arr = value
    else:
        try:
            arr = np.asarray(value, dtype=expected)
        except (ValueError, TypeError, OverflowError) as e:
            raise FeedError(spec.name, f"feed '{spec.name}' cannot be converted to {dtypes.tf_name_of_numpy(expected)}: {e}") from None
    if spec.shape is not None:
        if arr.ndim != len(spec.shape) or any(d is not None and d != s for d, s in zip(spec.shape, arr.shape)):
            raise FeedShapeError(spec.name, format_shape(spec.shape), format_shape(arr.shape))
    return arr


@dataclass(frozen=True)
class _Binding:
    """A plan bound to one spelling of a signature: where each feed (in feed_dict order) and each
    fetch (in request order) sits in the plan."""

    key: tuple
    plan: Plan | PartitionedPlan
    feed_positions: tuple[int, ...]
    fetch_positions: tuple[int, ...]
    # execute for a single-device CPU plan (the hot path, unchanged), run_partitioned otherwise.
    run: Any


def _deliver(value: Any) -> np.ndarray:
    arr = np.asarray(value)
    # A fetched view of a constant is read-only; callers get an array they own.
    return arr if arr.flags.writeable else arr.copy()


class Session:
    """Runs a graph; see the module docstring."""

    def __init__(self, graph: Graph | GraphSource, device: str = "cpu", options: SessionOptions | None = None):
        self.graph = graph if isinstance(graph, Graph) else load_graph(graph)
        self.options = options or SessionOptions()
        if self.options.tune_allocator:
            tune_allocator()
        if self.options.single_threaded_blas:
            blas.limit_blas_threads()
        # Canonical (`cpu:0`, `gpu:0`); DeviceError (a ValueError) for unknown or unavailable devices.
        self.device = devices.resolve_device(device, self.options.logical_cpus)
        self.devices = devices.session_devices(self.device, self.options.logical_cpus)
        # Every op needs a kernel somewhere: on a GPU session, ops without a GPU kernel run on the CPU.
        validate.check_supported(self.graph.nodes, "cpu" if devices.device_kind(self.device) == "cpu" else None)
        # Constants uploaded to a device once per session (one loaded model version), shared by plans.
        self.constants = ConstantCache()
        # Variables and lookup tables: state that lives across runs, shared by every plan of the session.
        self.resources = ResourceManager()
        self._workers = PartitionWorkers()
        self._cache: ExecutorCache[Plan | PartitionedPlan] = ExecutorCache(self.options.cache_capacity)
        self._bindings: dict[tuple, _Binding] = {}
        self._partial_runs = PartialRuns(self.options.prun_max_handles, self.options.prun_timeout_s)

    def _signature_key(self, feeds, fetches, targets) -> tuple:
        return (
            tuple(sorted({_canonical(n) for n in feeds})),
            tuple(sorted({_canonical(n) for n in fetches})),
            tuple(sorted({t.lstrip("^") for t in targets})),
        )

    def _compile(self, key: tuple) -> Plan | PartitionedPlan:
        return compile_signature(
            self.graph, key[0], key[1], key[2],
            device=self.device, devices=self.devices, options=self.options.plan, constants=self.constants,
            resources=self.resources, workers=self._workers, cuda_graphs=self.options.cuda_graphs, recv_timeout=self.options.recv_timeout_s,
        )

    def _plan(self, key: tuple) -> Plan | PartitionedPlan:
        return self._cache.get_or_create(key, lambda: self._compile(key))

    def plan_for(self, feeds: Sequence[str], fetches: Sequence[str], targets: Sequence[str] = ()) -> Plan | PartitionedPlan:
        """The cached plan of a signature (built on first use); names in any order or spelling. A
        signature spread over several devices (or on a GPU) gives a PartitionedPlan."""
        return self._plan(self._signature_key(feeds, fetches, targets))

    def _bind(self, feed_names: tuple, fetch_names: tuple, targets: tuple) -> _Binding:
        canonical_feeds = [_canonical(n) for n in feed_names]
        if len(set(canonical_feeds)) != len(canonical_feeds):
            seen: dict[str, str] = {}
            for name, canonical in zip(feed_names, canonical_feeds):
                if canonical in seen:
                    raise FeedError(canonical, f"tensor '{canonical}' is fed more than once ('{seen[canonical]}' and '{name}')")
                seen[canonical] = name
        canonical_fetches = [_canonical(n) for n in fetch_names]
        key = self._signature_key(canonical_feeds, canonical_fetches, targets)
        plan = self._plan(key)
        return _Binding(
            key,
            plan,
            tuple(plan.feed_index[c] for c in canonical_feeds),
            tuple(plan.fetch_index[c] for c in canonical_fetches),
            execute if isinstance(plan, Plan) else run_partitioned,
        )

    def run(
        self,
        fetches: Sequence[str] | str,
        feed_dict: Mapping[str, Any] | None = None,
        targets: Sequence[str] = (),
    ) -> list[np.ndarray] | np.ndarray:
        """Compute `fetches` (a list of tensor names, or one name) given `feed_dict`, also running
        `targets` for effect. Returns numpy arrays in fetch order (one array for a single name)."""
        single = isinstance(fetches, str) or hasattr(fetches, "name")
        fetch_names = (fetches,) if single else tuple(fetches)
        feed_dict = feed_dict or {}
        targets = (targets,) if isinstance(targets, str) else tuple(targets)

        # Fast path: the same spelling of a signature as an earlier call skips parsing and sorting.
        raw_key = (tuple(feed_dict), fetch_names, targets)
        binding = self._bindings.get(raw_key)
        if binding is None or not self._cache.touch(binding.key):
            binding = self._bind(*raw_key)
            if len(self._bindings) >= 4 * self.options.cache_capacity:
                self._bindings.clear()
            self._bindings[raw_key] = binding

        plan = binding.plan
        values = [None] * len(plan.feeds)
        for position, value in zip(binding.feed_positions, feed_dict.values()):
            values[position] = _check_feed(plan.feeds[position], value)
        outputs = binding.run(plan, values)
        results = [_deliver(outputs[i]) for i in binding.fetch_positions]
        return results[0] if single else results

    def prun_setup(self, feeds: Sequence[str], fetches: Sequence[str], targets: Sequence[str] = ()) -> str:
        """Declare a partial run's feeds, fetches and targets; returns its handle (see engine.runtime.partial_run).

        >>> h = sess.prun_setup(["a:0", "b:0"], ["h:0", "out:0"])
        >>> h_value, = sess.prun(h, {"a:0": a}, ["h:0"])
        >>> out, = sess.prun(h, {"b:0": b}, ["out:0"])
        """
        targets = (targets,) if isinstance(targets, str) else tuple(targets)
        key = self._signature_key(feeds, fetches, targets)
        # Partial runs step through the dataflow executor, on the host (engine.devices.placement).
        plan = self._cache.get_or_create(
            ("partial_run", *key),
            lambda: compile_plan(
                self.graph, key[0], key[1], key[2],
                device=dataflow_device(self.device), options=self.options.plan, dataflow=True,
                resources=self.resources,
            ),
        )
        return self._partial_runs.open(plan)

    def prun(self, handle: str, feed_dict: Mapping[str, Any] | None, fetches: Sequence[str] | str) -> list[np.ndarray] | np.ndarray:
        """One step of a partial run: feed some declared feeds, return some declared fetches (one array
        for a single name), each as soon as the feeds so far make it computable."""
        single = isinstance(fetches, str)
        fetch_names = [_canonical(n) for n in ((fetches,) if single else fetches)]
        feeds: dict[str, Any] = {}
        for name, value in (feed_dict or {}).items():
            canonical = _canonical(name)
            if canonical in feeds:
                raise FeedError(canonical, f"tensor '{canonical}' is fed more than once")
            feeds[canonical] = value
        results = [_deliver(v) for v in self._partial_runs.step(handle, feeds, fetch_names, _check_feed)]
        return results[0] if single else results

    def prun_close(self, handle: str) -> None:
        """End a partial run before it finishes; PartialRunNotFoundError when the handle is unknown."""
        self._partial_runs.close(handle)

    def open_partial_runs(self) -> int:
        """How many partial runs are open (expired ones are not counted)."""
        return len(self._partial_runs)

    def cache_stats(self) -> CacheStats:
        """Executor cache counters (hits, misses, entries, evictions, build seconds)."""
        return self._cache.stats()
