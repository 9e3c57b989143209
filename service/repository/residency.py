"""Residency: which loaded versions stay in memory, and the leases requests hold on them (a mixin of the
model manager, `service.repository.manager.ModelManager`, whose lock and records it uses).

A request *reserves* its version before anything else (`reserve`): a parked version (lazy loading, evicted,
idle) starts loading then, and every request waiting for it shares that load (`Reservation.load`); the
reservation holds the version until the answer (`release`), so it is never evicted, nor unloaded for
idleness, under a request in flight, queued or waiting. Past the memory budget the least recently used idle
version is evicted (`_enforce_budget`, after each load and after a release that left it over the budget), and
the idle unloader parks versions unused for `idle_unload_s` (`unload_idle`). Evicted and idle versions are
parked: START, `unloaded`, loaded again by their next request.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from service.errors import DeadlineExceeded, NotFound, Unavailable
from service.repository.resolve import resolve
from service.repository.servable import Servable
from service.repository.versions import ModelRecord, State, VersionRecord

__all__ = ["EVICTED", "IDLE", "LAZY", "MemoryPolicy", "Reservation", "Residency", "TRIM_HEAP", "unload_kind"]

log = logging.getLogger("tensorgate.manager")

# Why a version is parked (START, not resident), as its status says.
LAZY = "not loaded yet: loads on its first request"
EVICTED = "evicted for the memory budget: loads on its next request"
IDLE = "unloaded after {:g} s without requests: loads on its next request"


@dataclass(frozen=True)
class MemoryPolicy:
    """How many models one server holds: TENSORGATE_LOAD_ON_DEMAND, _MODEL_MEMORY_BYTES, _MODEL_IDLE_UNLOAD_S."""

    load_on_demand: bool = False  # park versions until their first request (pinned models excepted)
    budget_bytes: int | None = None  # resident bytes of all versions; None: no budget
    idle_unload_s: float = 0.0  # park versions unused this long; 0: never

    @property
    def parks(self) -> bool:
        return self.load_on_demand or self.budget_bytes is not None or self.idle_unload_s > 0


@dataclass(eq=False)
class Reservation:
    """A request's hold on a version, taken before the version is loaded when it is parked: while held, the
    version is neither evicted nor unloaded for idleness, and an unload waits for it."""

    record: VersionRecord
    name: str
    load: Future | None  # the load the request waits for; None when the version was loaded already
    started: float  # when the request asked (for the cold-start latency)
    servable: Servable | None  # the loaded version, when it was loaded already


def _trim_heap() -> Callable[[], None]:
    """glibc's malloc_trim(0), or nothing: after an unload, return the freed arenas' pages to the system, so
    that RSS follows what is loaded rather than the peak (thousands of load/unload cycles)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


TRIM_HEAP = _trim_heap()


def unload_kind(reason: str | None) -> str:
    """The metrics' reason label of an unload, from the reason its status gives."""
    reason = reason or ""
    for prefix, kind in (("evicted", "evicted"), ("unloaded after", "idle"), ("unloaded", "api"), ("removed", "removed"),
                         ("outside", "policy"), ("stored", "policy")):
        if reason.startswith(prefix):
            return kind
    return "other"



class Residency:
    """The manager's residency methods (the manager holds `_lock`, `_models`, `memory`, `_events`,
    `_cold_starts`, `_over_budget`, `_changed`, `_stop`, `on_cold_start`, and `_start_load`/`_end`)."""

    def _idle_loop(self) -> None:
        # Checked a few times per idle period: a version leaves at most a quarter period late.
        period = min(max(self.memory.idle_unload_s / 4, 0.05), 5.0)
        while not self._stop.wait(period):
            try:
                self.unload_idle()
            except Exception:
                log.exception("idle unloading failed")

    # --- the memory budget and idle versions (called with the lock held) ---------------------------

    def _evict(self, record: VersionRecord, reason: str) -> None:
        """Park a loaded, idle version: out of memory now, loaded again by its next request."""
        record.parked, record.pending_attempt, record.reason = True, record.attempted, reason
        record.attempted = None
        self._end(record)  # parked: START again

    def _evictable(self, model: ModelRecord, record: VersionRecord) -> bool:
        return (record.servable is not None and record.state is State.AVAILABLE and record.inflight == 0
                and record.loading is None and not model.config.resident)

    def resident_total(self) -> int:
        """Bytes the loaded versions hold, as measured when each loaded."""
        return sum(size for _, _, size in self.resident_versions())

    def _count(self, event: str) -> None:
        self._events[event] = self._events.get(event, 0) + 1

    def memory_summary(self) -> dict:
        """Residency for the dashboard: bytes resident (in all, per model), the budget, versions loaded and
        parked, loads by trigger, unloads by reason, and the recent cold starts' waits."""
        with self._lock:
            per_model: dict[str, int] = {}
            loaded = parked = 0
            for m in self._models.values():
                for r in m.versions.values():
                    if r.servable is not None:
                        loaded += 1
                        per_model[m.name] = per_model.get(m.name, 0) + r.resident_bytes
                    elif r.parked:
                        parked += 1
            waits = sorted(self._cold_starts)
            events = dict(self._events)
        pick = lambda q: round(waits[min(int(q * len(waits)), len(waits) - 1)] * 1e3, 2) if waits else None
        return {
            "resident_bytes": sum(per_model.values()), "budget_bytes": self.memory.budget_bytes,
            "load_on_demand": self.memory.load_on_demand, "idle_unload_s": self.memory.idle_unload_s or None,
            "loaded_versions": loaded, "unloaded_versions": parked,
            "loads": {k.split(":", 1)[1]: v for k, v in events.items() if k.startswith("load:")},
            "unloads": {k.split(":", 1)[1]: v for k, v in events.items() if k.startswith("unload:")},
            "cold_starts": len(waits), "cold_start_p50_ms": pick(0.5), "cold_start_p99_ms": pick(0.99),
            "models": dict(sorted(per_model.items(), key=lambda kv: -kv[1])[:20]),
        }

    def resident_versions(self) -> list[tuple[str, int, int]]:
        """(model, version, bytes) of every loaded version (metrics)."""
        with self._lock:
            return [(m.name, r.version, r.resident_bytes) for m in self._models.values() for r in m.versions.values()
                    if r.servable is not None]

    def _enforce_budget(self, keep: VersionRecord | None = None) -> None:
        """Evict least recently used idle versions while the resident versions exceed the budget. `keep`
        (the version just loaded, for a request about to use it) goes last: never. What cannot be evicted
        (requests in flight, pinned) stays, over the budget, until it can."""
        budget = self.memory.budget_bytes
        if budget is None:
            return
        total = self.resident_total()
        self._over_budget = total > budget
        if not self._over_budget:
            return
        candidates = sorted(((r.last_used, id(r), m, r) for m in self._models.values() for r in m.versions.values()
                             if r is not keep and self._evictable(m, r)), key=lambda c: (c[0], c[1]))
        for _, _, model, record in candidates:
            if total <= budget:
                break
            total -= record.resident_bytes
            log.info("evicting model %s version %d (%d bytes, idle %.1f s): resident models over the %d-byte budget",
                     model.name, record.version, record.resident_bytes, time.monotonic() - record.last_used, budget)
            self._evict(record, EVICTED)
        self._over_budget = total > budget
        if self._over_budget:
            log.warning("resident models take %d bytes, over the %d-byte budget: the rest are in use or pinned",
                        total, budget)

    def unload_idle(self, now: float | None = None) -> int:
        """Park every loaded version unused for `idle_unload_s` (none when that is 0); how many left."""
        if self.memory.idle_unload_s <= 0:
            return 0
        now = time.monotonic() if now is None else now
        reason = IDLE.format(self.memory.idle_unload_s)
        count = 0
        with self._lock:
            for model in self._models.values():
                for record in model.versions.values():
                    if self._evictable(model, record) and now - record.last_used >= self.memory.idle_unload_s:
                        self._evict(record, reason)
                        count += 1
            if count:
                self._changed.notify_all()
        return count

    # --- serving -----------------------------------------------------------------------------------

    def reserve(self, name: str, version: int | None = None, label: str | None = None) -> Reservation:
        """Hold the version a request for `name` (at `version` or `label`) runs on, starting its load when
        it is parked; release with `release`. Raises NotFound/Unavailable as `resolve` does."""
        with self._lock:
            record = resolve(self._models.get(name), name, version, label)
            record.inflight += 1
            if record.parked and record.loading is None:
                model = self._models[name]
                self._start_load(model, record, record.source, record.pending_attempt)
                record.on_demand = True
                log.info("loading model %s version %d for a request", name, record.version)
            waiting = record.load_done if record.servable is None else None
            return Reservation(record, name, waiting, time.monotonic(), record.servable)

    def servable_of(self, reservation: Reservation) -> Servable:
        """The reserved version's servable, once its load (if any) has ended; the load's error otherwise."""
        if reservation.load is None:
            return reservation.servable  # loaded when reserved: held by the reservation since
        record = reservation.record
        with self._lock:
            if record.servable is not None:
                waited = time.monotonic() - reservation.started
                self._cold_starts.append(waited)
                if self.on_cold_start is not None:
                    self.on_cold_start(reservation.name, waited)
                return record.servable
            why = record.error or record.reason or record.state.value.lower()
        raise NotFound(f"version {record.version} of model '{reservation.name}' is not available: {why}")

    def release(self, reservation: Reservation) -> None:
        record = reservation.record
        with self._lock:
            record.inflight -= 1
            record.last_used = time.monotonic()
            if record.state is State.UNLOADING and record.inflight == 0:
                self._end(record)
            elif record.inflight == 0 and self._over_budget:
                self._enforce_budget()  # what was over the budget while in use may go now

    @staticmethod
    def waited_too_long(reservation: Reservation, timeout_s: float) -> DeadlineExceeded:
        return DeadlineExceeded(f"version {reservation.record.version} of model '{reservation.name}' did not load "
                                f"within the request's {timeout_s:g} s deadline (it is still loading)")

    @contextlib.contextmanager
    def lease(self, name: str, version: int | None = None, label: str | None = None, *,
              timeout_s: float = 60.0) -> Iterator[Servable]:
        """The servable to run a request on; it stays loaded until the `with` block ends. A parked version
        is loaded first, waiting up to `timeout_s` (DeadlineExceeded past it)."""
        reservation = self.reserve(name, version, label)
        try:
            if reservation.load is not None:
                try:
                    reservation.load.result(timeout_s)
                except FutureTimeout:
                    raise self.waited_too_long(reservation, timeout_s) from None
            yield self.servable_of(reservation)
        finally:
            self.release(reservation)

    def needs_load(self, name: str, version: int | None = None, label: str | None = None) -> bool:
        """Whether the version a request would get is out of memory (the request would wait for its load):
        async callers of `servable` call it on a thread then."""
        with self._lock:
            try:
                return resolve(self._models.get(name), name, version, label).servable is None
            except (NotFound, Unavailable):
                return False

    def servable(self, name: str, version: int | None = None, label: str | None = None, *,
                 timeout_s: float = 60.0) -> Servable:
        """The servable for metadata (no lease once it is loaded: metadata needs no running version); a
        parked version is loaded first, as for a request."""
        with self._lock:
            record = resolve(self._models.get(name), name, version, label)
            if record.servable is not None:
                return record.servable
        with self.lease(name, version, label, timeout_s=timeout_s) as servable:
            return servable

