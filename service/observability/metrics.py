"""Prometheus metrics: what the server did, in series that aggregate across pods.

Our own metrics follow Prometheus conventions (base units, `_seconds`, `_total`). Beside them stand
the series Triton exposes (`nv_inference_count`, `nv_inference_request_duration_us`, ...) under
Triton's exact names, so that dashboards and autoscaling rules written for Triton work unchanged;
they are exported untyped because Triton's names break the conventions promtool checks for counters
(`_total`, no `_count`), and the `_us` unit in three of them is Triton's and stays.

GPU memory is read at scrape time, per visible GPU, when cupy sees one; without a GPU those series
are absent rather than zero. So is whether the model config file's current contents are served
(`tensorgate_model_config_file_valid`), absent when the server reads none.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UntypedMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from engine.devices import array_module, gpu_available

__all__ = ["Metrics", "LATENCY_BUCKETS", "CONTENT_TYPE", "gpu_backend"]

log = logging.getLogger("tensorgate.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Fine buckets from 0.5 ms to 10 s: model servers live in the low milliseconds.
LATENCY_BUCKETS = (
    0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

_TRITON = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes (Triton-compatible counter)"),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes (Triton-compatible counter)"),
    ("nv_inference_count", "Number of inferences performed, one per batch row (Triton-compatible counter)"),
    ("nv_inference_exec_count", "Number of model executions performed, one per batch (Triton-compatible counter)"),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (Triton-compatible counter)"),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds (Triton-compatible counter)"),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds (Triton-compatible counter)"),
)


class _TritonCollector:
    """Triton's per model/version counters, accumulated in plain dicts and exported untyped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[tuple[str, str], float]] = {name: defaultdict(float) for name, _ in _TRITON}

    def add(self, model: str, version: str, **values: float) -> None:
        with self._lock:
            for name, value in values.items():
                self._values[f"nv_inference_{name}"][(model, version)] += value

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshot = {name: dict(values) for name, values in self._values.items()}
        for name, documentation in _TRITON:
            family = UntypedMetricFamily(name, documentation, labels=["model", "version"])
            for (model, version), value in sorted(snapshot[name].items()):
                family.add_metric([model, version], value)
            yield family


class _ManagerCollector:
    """Series read from the model manager at scrape time: loaded versions and executor caches."""

    def __init__(self, servables: Callable[[], Iterable]):
        self._servables = servables

    def collect(self) -> Iterable[Metric]:
        loaded = GaugeMetricFamily("tensorgate_loaded_versions", "Model versions loaded and serving", labels=["model"])
        hits = CounterMetricFamily("tensorgate_executor_cache_hits", "Requests whose signature found a compiled plan", labels=["model", "version"])
        misses = CounterMetricFamily("tensorgate_executor_cache_misses", "Requests that compiled a plan for a new signature", labels=["model", "version"])
        evictions = CounterMetricFamily("tensorgate_executor_cache_evictions", "Plans dropped from a full executor cache", labels=["model", "version"])
        entries = GaugeMetricFamily("tensorgate_executor_cache_entries", "Compiled plans held", labels=["model", "version"])
        build = CounterMetricFamily("tensorgate_plan_build_seconds", "Time spent compiling plans", labels=["model", "version"])
        per_model: dict[str, int] = defaultdict(int)
        for servable in self._servables():
            per_model[servable.model] += 1
            labels = [servable.model, str(servable.version)]
            stats = servable.session.cache_stats()
            hits.add_metric(labels, stats.hits)
            misses.add_metric(labels, stats.misses)
            evictions.add_metric(labels, stats.evictions)
            entries.add_metric(labels, stats.entries)
            build.add_metric(labels, stats.build_seconds)
        for model, count in sorted(per_model.items()):
            loaded.add_metric([model], count)
        yield from (loaded, hits, misses, evictions, entries, build)


class _ResidencyCollector:
    """Bytes each loaded version holds (measured when it loaded) and in all, and the budget they are held to;
    read from the model manager at scrape time."""

    def __init__(self, resident: Callable[[], Iterable[tuple[str, int, int]]], budget: int | None):
        self._resident, self._budget = resident, budget

    def collect(self) -> Iterable[Metric]:
        per_version = GaugeMetricFamily("tensorgate_model_resident_bytes",
                                        "Memory a loaded model version holds (weights, constants, compiled plans' buffers)",
                                        labels=["model", "version"])
        total = 0
        for model, version, size in self._resident():
            per_version.add_metric([model, str(version)], size)
            total += size
        yield per_version
        all_models = GaugeMetricFamily("tensorgate_models_resident_bytes", "Memory all loaded model versions hold")
        all_models.add_metric([], total)
        yield all_models
        if self._budget is not None:
            budget = GaugeMetricFamily("tensorgate_model_memory_budget_bytes",
                                       "The memory budget loaded model versions are held to (TENSORGATE_MODEL_MEMORY_BYTES)")
            budget.add_metric([], self._budget)
            yield budget


class _ConfigFileCollector:
    """Whether the model config file's current contents are served (1) or were rejected, the last
    good ones serving still (0); nothing without a model config file."""

    def __init__(self, valid: Callable[[], bool | None]):
        self._valid = valid

    def collect(self) -> Iterable[Metric]:
        valid = self._valid()
        if valid is None:
            return
        family = GaugeMetricFamily("tensorgate_model_config_file_valid",
                                   "1 when the model config file's current contents are served, 0 when they were rejected "
                                   "(the last good contents serving still; the models' status says why)")
        family.add_metric([], 1.0 if valid else 0.0)
        yield family


def gpu_backend() -> Any | None:
    """cupy when it is installed and sees a CUDA device, else None: the GPU collector's default."""
    return array_module("gpu") if gpu_available() else None


def _gpu_uuid(cupy: Any, index: int) -> str:
    """The GPU's UUID as nvidia-smi and Triton print it (`GPU-xxxxxxxx-...`), else its index."""
    try:
        raw = cupy.cuda.runtime.getDeviceProperties(index).get("uuid")
    except Exception:  # an older cupy without the key, or a driver that will not say
        raw = None
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        h = raw.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return str(index)


@dataclass(frozen=True)
class _GpuMemory:
    device: str  # gpu:N
    uuid: str
    used: int
    total: int
    pool_used: int
    pool_total: int


class _GpuMemoryCollector:
    """Memory of each visible GPU (the driver's view) and of cupy's memory pool on it, read at scrape
    time; nothing at all without a GPU backend."""

    def __init__(self, backend: Callable[[], Any | None]):
        self._backend = backend
        self._uuids: dict[int, str] = {}

    def collect(self) -> Iterable[Metric]:
        cupy = self._backend()
        if cupy is None:
            return
        try:
            readings = [self._read(cupy, index) for index in range(int(cupy.cuda.runtime.getDeviceCount()))]
        except Exception:  # a CUDA error must not take the other series of the scrape down with it
            log.warning("reading GPU memory failed; GPU series left out of this scrape", exc_info=True)
            return
        used = GaugeMetricFamily("tensorgate_gpu_memory_used_bytes", "GPU memory in use on the device, by any process", labels=["device"])
        total = GaugeMetricFamily("tensorgate_gpu_memory_total_bytes", "GPU memory on the device", labels=["device"])
        pool_used = GaugeMetricFamily("tensorgate_gpu_memory_pool_used_bytes",
                                      "GPU memory in arrays allocated from cupy's default memory pool", labels=["device"])
        pool_total = GaugeMetricFamily("tensorgate_gpu_memory_pool_total_bytes",
                                       "GPU memory cupy's default memory pool holds, in use or cached for reuse", labels=["device"])
        nv_used = GaugeMetricFamily("nv_gpu_memory_used_bytes", "GPU used memory, in bytes (Triton-compatible)", labels=["gpu_uuid"])
        nv_total = GaugeMetricFamily("nv_gpu_memory_total_bytes", "GPU total memory, in bytes (Triton-compatible)", labels=["gpu_uuid"])
        for r in readings:
            used.add_metric([r.device], r.used)
            total.add_metric([r.device], r.total)
            pool_used.add_metric([r.device], r.pool_used)
            pool_total.add_metric([r.device], r.pool_total)
            nv_used.add_metric([r.uuid], r.used)
            nv_total.add_metric([r.uuid], r.total)
        yield from (used, total, pool_used, pool_total, nv_used, nv_total)

    def _read(self, cupy: Any, index: int) -> _GpuMemory:
        if index not in self._uuids:
            self._uuids[index] = _gpu_uuid(cupy, index)
        # The runtime and the memory pool both answer for the current device.
        with cupy.cuda.Device(index):
            free_bytes, total_bytes = cupy.cuda.runtime.memGetInfo()
            pool = cupy.get_default_memory_pool()
            return _GpuMemory(f"gpu:{index}", self._uuids[index], total_bytes - free_bytes, total_bytes,
                              pool.used_bytes(), pool.total_bytes())


class Metrics:
    """The server's metrics, in a registry of its own (several apps can live in one process).

        >>> metrics = Metrics(manager.servables)
        >>> metrics.observe_request("iris", "2", "v2", "success", 0.0012)
        >>> text = metrics.exposition()
    """

    def __init__(self, servables: Callable[[], Iterable] = lambda: (), *, gpu: Callable[[], Any | None] = gpu_backend,
                 config_file_valid: Callable[[], bool | None] = lambda: None,
                 resident: Callable[[], Iterable[tuple[str, int, int]]] = lambda: (), memory_budget: int | None = None):
        self.registry = CollectorRegistry()
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        r = self.registry
        # `signature`: the one the request ran, always one its model declares ("" before one was resolved), so
        # the series stay bounded by the models' own signatures.
        labels = ["model", "version", "protocol", "signature"]
        self.request_duration = Histogram("tensorgate_request_duration_seconds", "Time from request received to response ready",
                                          labels, buckets=LATENCY_BUCKETS, registry=r)
        self.queue_duration = Histogram("tensorgate_queue_duration_seconds", "Time a request waited in the batch queue or for a worker",
                                        labels, buckets=LATENCY_BUCKETS, registry=r)
        self.compute_duration = Histogram("tensorgate_compute_duration_seconds", "Time running the model for a request (its whole batch)",
                                          labels, buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("tensorgate_batch_size", "Rows of real requests per executed batch (before padding)",
                                    ["model", "version"], buckets=BATCH_BUCKETS, registry=r)
        self.requests = Counter("tensorgate_requests", "Inference requests by outcome", [*labels, "outcome"], registry=r)
        self.in_flight = Gauge("tensorgate_in_flight_requests", "Inference requests being handled", ["protocol"], registry=r)
        self.load_duration = Histogram("tensorgate_model_load_duration_seconds", "Time to load and warm up a model version",
                                       ["model"], buckets=LOAD_BUCKETS, registry=r)
        self.model_loads = Counter("tensorgate_model_loads", "Model versions loaded, by what asked for the load "
                                   "(policy: the version policy, at start or as files change; request: a request for a "
                                   "version out of memory)", ["model", "trigger"], registry=r)
        self.model_unloads = Counter("tensorgate_model_unloads", "Model versions unloaded, by reason (evicted: the memory "
                                     "budget; idle; api; removed: files gone; policy: outside the version policy)",
                                     ["model", "reason"], registry=r)
        self.cold_start = Histogram("tensorgate_model_cold_start_seconds",
                                    "Time a request waited for its version to load (lazy loading, evicted, idle)",
                                    buckets=LOAD_BUCKETS, registry=r)
        self.payload_events = Counter("tensorgate_payload_log_events", "Payload log events (service.observability."
                                      "payload_log) by outcome: sent; queue_full or sink_error, dropped", ["outcome"],
                                      registry=r)
        self.triton = _TritonCollector()
        r.register(self.triton)
        # Label children by their labels: `labels()` per request (a lock, a tuple, validation) cost
        # more than the observation itself. The label sets are bounded: models and versions the
        # server knows, its protocols and outcomes.
        self._children: dict[tuple, Any] = {}
        r.register(_ManagerCollector(servables))
        r.register(_GpuMemoryCollector(gpu))
        r.register(_ConfigFileCollector(config_file_valid))
        r.register(_ResidencyCollector(resident, memory_budget))

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def in_flight_gauge(self, protocol: str) -> Any:
        """The in-flight gauge of `protocol` (to inc() and dec())."""
        return self._child(self.in_flight, protocol)

    def observe_request(self, model: str, version: str, protocol: str, outcome: str, duration_s: float,
                        queue_s: float | None = None, compute_s: float | None = None, signature: str = "") -> None:
        self._child(self.requests, model, version, protocol, signature, outcome).inc()
        self._child(self.request_duration, model, version, protocol, signature).observe(duration_s)
        if queue_s is not None:
            self._child(self.queue_duration, model, version, protocol, signature).observe(queue_s)
        if compute_s is not None:
            self._child(self.compute_duration, model, version, protocol, signature).observe(compute_s)
        if model:  # Triton counts requests that reached a model
            ok = outcome == "success"
            self.triton.add(
                model, version,
                request_success=1.0 if ok else 0.0,
                request_failure=0.0 if ok else 1.0,
                request_duration_us=duration_s * 1e6,
                queue_duration_us=(queue_s or 0.0) * 1e6,
                compute_infer_duration_us=(compute_s or 0.0) * 1e6,
            )

    def observe_batch(self, model: str, version: str, rows: int) -> None:
        """One model execution over `rows` rows (a batch, or an unbatched request)."""
        self._child(self.batch_size, model, version).observe(rows)
        self.triton.add(model, version, count=float(rows), exec_count=1.0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
