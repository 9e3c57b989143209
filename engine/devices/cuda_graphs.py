"""CUDA graphs: a GPU plan's kernel launches captured once and replayed per run.

Launching a small model kernel by kernel costs more in Python and launch overhead than the kernels
themselves. Where a plan allows it, CudaGraphRunner runs it eagerly for a few warm-up runs per input
signature (shapes and dtypes), then captures one run on a private stream into a CUDA graph
(`cupy.cuda.Stream.begin_capture()` / `end_capture()`), and from then on replays that graph: feeds
are copied into persistent input buffers, the graph is launched, and the fetches are copied out of
its persistent output buffers.

A plan is capturable when it is one flat GPU partition (no dataflow plan, no call ops whose Python
decides what runs, no _Send/_Recv). Capture runs with a private memory pool, warmed by an eager
run on the same stream just before, so no cudaMalloc happens while capturing and nothing else ever
reuses the memory the graph writes to. Any failure while capturing (a kernel that synchronizes or
copies to the host, an allocation the pool cannot serve) makes that input signature run eagerly for
good. One capture or replay at a time per graph (a lock per captured signature).

    >>> runner = CudaGraphRunner(plan)       # engine.devices.partition uses it for GPU-only signatures
    >>> runner([x])                          # eager, eager, capture, then replay
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import devices
from engine.compile.plan import Plan
from engine.devices.rendezvous import TRANSFER_OPS
from engine.runtime.executor import execute, execute_from_host
from kernels.control_flow.functional import CALL_OPS

__all__ = ["MAX_GRAPHS", "WARMUP_RUNS", "CudaGraphRunner", "capturable"]

log = logging.getLogger("tensorgate.cuda_graphs")

# Eager runs of an input signature before it is captured: the first one loads kernels (cupy compiles
# and caches them), the second settles the memory pool.
WARMUP_RUNS = 2
# Input signatures captured per plan; further ones run eagerly (each graph holds its own buffers).
MAX_GRAPHS = 8


def capturable(plan: Plan) -> bool:
    """Whether `plan` can be captured: a flat GPU plan with no call ops and no transfers."""
    return (
        devices.device_kind(plan.device) == "gpu"
        and plan.dataflow is None
        and bool(plan.instructions)
        and not any(ins.op in CALL_OPS or ins.op in TRANSFER_OPS for ins in plan.instructions)
    )


@dataclass
class _Captured:
    graph: Any  # cupy.cuda.graph.Graph
    stream: Any  # cupy.cuda.Stream
    pool: Any  # cupy.cuda.MemoryPool, private to this graph
    inputs: list[Any]  # persistent device buffers the graph reads
    outputs: list[Any]  # persistent device buffers the graph writes
    lock: threading.Lock


_FAILED = object()


class CudaGraphRunner:
    """Runs a capturable plan on host feed values, returning host fetches; see the module docstring."""

    def __init__(self, plan: Plan, warmup_runs: int = WARMUP_RUNS, max_graphs: int = MAX_GRAPHS):
        self.plan = plan
        self.warmup_runs, self.max_graphs = warmup_runs, max_graphs
        self._seen: dict[tuple, int] = {}
        self._graphs: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self.captures = 0  # successful captures
        self.replays = 0

    def eager(self, values: Sequence[Any]) -> list[Any]:
        return execute_from_host(self.plan, values)

    def __call__(self, values: Sequence[Any]) -> list[Any]:
        key = tuple((np.shape(v), np.asarray(v).dtype.str) for v in values)
        entry = self._graphs.get(key)
        if entry is None:
            with self._lock:
                entry = self._graphs.get(key)
                if entry is None:
                    seen = self._seen[key] = self._seen.get(key, 0) + 1
                    if seen <= self.warmup_runs or len(self._graphs) >= self.max_graphs:
                        entry = None
                    else:
                        entry = self._graphs[key] = self._capture(values)
        if entry is None or entry is _FAILED:
            return self.eager(values)
        return self._replay(entry, values)

    def _replay(self, entry: _Captured, values: Sequence[Any]) -> list[Any]:
        with entry.lock:
            for buffer, value in zip(entry.inputs, values):
                buffer.set(np.ascontiguousarray(value), stream=entry.stream)
            entry.graph.launch(stream=entry.stream)
            results = [out.get(stream=entry.stream) for out in entry.outputs]
            entry.stream.synchronize()
            self.replays += 1
            return results

    def _capture(self, values: Sequence[Any]) -> Any:
        cp = devices.array_module(self.plan.device)
        device_id = devices.parse_device(self.plan.device)[1]
        try:
            with cp.cuda.Device(device_id):
                stream = cp.cuda.Stream(non_blocking=True)
                pool = cp.cuda.MemoryPool()
                with cp.cuda.using_allocator(pool.malloc), stream:
                    inputs = [cp.empty(np.shape(v), dtype=np.asarray(v).dtype) for v in values]
                    for buffer, value in zip(inputs, values):
                        buffer.set(np.ascontiguousarray(value), stream=stream)
                    execute(self.plan, inputs)  # warm the private pool and cupy's kernel cache
                    stream.synchronize()
                    stream.begin_capture()
                    try:
                        outputs = execute(self.plan, inputs)
                    finally:
                        graph = stream.end_capture()
                    stream.synchronize()
                if not all(isinstance(o, cp.ndarray) for o in outputs):
                    raise TypeError("a fetch is not a device array (it was computed on the host)")
        except Exception as e:  # noqa: BLE001 - any capture failure means: run this signature eagerly
            log.info("CUDA graph capture of a plan on %s failed, running eagerly: %s", self.plan.device, e)
            return _FAILED
        self.captures += 1
        return _Captured(graph, stream, pool, inputs, list(outputs), threading.Lock())
