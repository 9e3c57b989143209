"""The model manager: which versions of which models are loaded, and their life cycle.

Each version goes START -> LOADING -> AVAILABLE -> UNLOADING -> END, the states TensorFlow Serving
reports. The manager keeps the loaded versions in step with its model sources (the repository on
disk, and TensorFlow Serving's model config file: `service.repository.sources`): a poller (and
every management write, which `service.repository.management` makes and reports here) compares the
disk with what is loaded, loads what the version policy asks for in the background, and swaps a
version in only once it has loaded and warmed up. Versions leave service availability-first: an old
version is unloaded only once a version the policy wants is available (or its files are gone), and
only after the requests running on it have finished. A model config file is read again every
`config_poll_wait_s` by a poller of its own, and what changed in it is reconciled at once.

Many models on one server (`MemoryPolicy`): with `load_on_demand`, the versions a policy wants are listed
but *parked* (START, `unloaded`) until a request comes; the request waits for the load (one load per
version; every waiter gets its outcome). Past `budget_bytes` of resident models (each measured when it
loads, `engine.runtime.footprint`), the least recently used idle version is evicted (parked again), and
`idle_unload_s` parks versions unused for that long. A version with requests in flight, queued or waiting
for its load is never evicted (requests hold a lease from before its load to their answer), nor one whose
config.yaml says `resident: true`. Leases, the budget and idle unloading are `service.repository.residency`;
what the endpoints read (status, index, readiness) is `service.repository.status_reads`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from engine import SessionOptions
from engine.runtime.footprint import resident_bytes
from service.errors import NotFound
from service.inference.batching import BatchingOptions, BatchStats
from service.repository import ModelRepository, VersionFiles
from service.repository.config import ConfigError, ModelConfig
from service.repository.loading import VersionLoader
from service.repository.residency import LAZY, TRIM_HEAP, MemoryPolicy, Reservation, Residency, unload_kind
from service.repository.resolve import removed_from, why_unavailable
from service.repository.servable import Servable
from service.repository.sources import ModelSources
from service.repository.status_reads import StatusReads
from service.repository.versions import ModelRecord, State, VersionRecord
from service.repository.warmup import WarmupOptions

__all__ = ["MemoryPolicy", "ModelManager", "Reservation"]

log = logging.getLogger("tensorgate.manager")

class ModelManager(Residency, StatusReads):
    """Loads, serves and unloads model versions from a ModelRepository (or from ModelSources: a
    repository, a model config file, or both).

        >>> manager = ModelManager(ModelRepository(Path("models")), SessionOptions())
        >>> manager.start()
        >>> with manager.lease("half_plus_two") as servable:
        ...     servable.run({"x:0": x}, ["y:0"])
    """

    def __init__(
        self,
        sources: ModelSources | ModelRepository,
        session_options: SessionOptions,
        *,
        load_threads: int = 2,
        poll_interval_s: float = 2.0,
        batching: BatchingOptions | None = None,
        batching_by_default: bool = False,
        on_batch: Callable[[str, int, BatchStats], None] | None = None,
        on_load: Callable[[str, float], None] | None = None,
        device: str = "cpu",
        warmup: WarmupOptions | None = None,
        saved_model_tags: tuple[str, ...] = ("serve",),
        per_version_batching: bool = False,
        load_retries: int = 0,
        load_retry_interval_s: float = 60.0,
        memory: MemoryPolicy | None = None,
        on_unload: Callable[[str, int, str], None] | None = None,
        on_cold_start: Callable[[str, float], None] | None = None,
        on_loaded: Callable[[str, int, str], None] | None = None,
    ):
        self.sources = sources if isinstance(sources, ModelSources) else ModelSources(sources)
        self.repository = self.sources.repository  # where management writes go; None: none (config file only)
        self.loader = VersionLoader(session_options, batching_defaults=batching or BatchingOptions(),
                                    batching_by_default=batching_by_default, on_batch=on_batch, on_load=on_load,
                                    device=device, warmup=warmup or WarmupOptions(),
                                    saved_model_tags=saved_model_tags, per_version_batching=per_version_batching)
        # TensorFlow Serving's --max_num_load_retries and --load_retry_interval_micros: a failed load is
        # tried again this many times, this long apart, before the version is given up.
        self.load_retries = load_retries
        self.load_retry_interval_s = load_retry_interval_s
        self.poll_interval_s = poll_interval_s
        self._models: dict[str, ModelRecord] = {}
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._loader = ThreadPoolExecutor(load_threads, thread_name_prefix="tensorgate-load")
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._config_poller: threading.Thread | None = None
        self._initial_scan_done = False
        # Bumped (under the lock) by every write this manager makes to the repository: a poll's scan
        # taken before a write is stale about it and must not be reconciled.
        self._disk_writes = 0
        self.memory = memory or MemoryPolicy()
        # Reported as versions leave memory (model, version, reason: evicted, idle, unloaded, removed, policy,
        # replaced) and as requests that waited for a load get it (model, seconds waited).
        self.on_unload = on_unload
        self.on_cold_start = on_cold_start
        self.on_loaded = on_loaded  # (model, version, trigger: "policy" or "request") for every version loaded
        self._janitor: threading.Thread | None = None
        self._over_budget = False  # the last budget check could not evict enough (versions in use or pinned)
        # For the dashboard: loads by trigger, unloads by reason, and the latest cold starts' waits.
        self._events: dict[str, int] = {}
        self._cold_starts: deque[float] = deque(maxlen=1024)

    # --- life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Clean up interrupted writes, start loading every model, and start polling (once: a second
        call does nothing)."""
        if self._initial_scan_done:
            return
        for path in self.sources.remove_stale_staging():
            log.warning("removed %s, left by an interrupted upload", path)
        self.poll()
        self._initial_scan_done = True
        if self.poll_interval_s > 0:
            self._poller = threading.Thread(target=self._poll_loop, name="tensorgate-poller", daemon=True)
            self._poller.start()
        if self.sources.config_poll_wait_s > 0:
            self._config_poller = threading.Thread(target=self._config_poll_loop, name="tensorgate-config-poller", daemon=True)
            self._config_poller.start()
        if self.memory.idle_unload_s > 0:
            self._janitor = threading.Thread(target=self._idle_loop, name="tensorgate-idle-unloader", daemon=True)
            self._janitor.start()

    def stop(self) -> None:
        self._stop.set()
        for poller in (self._poller, self._config_poller, self._janitor):
            if poller is not None:
                poller.join(timeout=10)
        self._loader.shutdown(wait=False, cancel_futures=True)
        for servable in self.servables():
            servable.close()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            try:
                self.poll()
            except Exception:  # a poll must never kill the poller; the next one tries again
                log.exception("repository poll failed")

    def _config_poll_loop(self) -> None:
        while not self._stop.wait(self.sources.config_poll_wait_s):
            try:
                self.reload_config_file()
            except Exception:
                log.exception("model config file poll failed")

    def reload_config_file(self) -> bool:
        """Read the model config file again and, when the models it serves changed, reconcile every
        model at once (new ones load, removed ones unload, policies and labels apply). An invalid
        file changes nothing and is reported on its models' status. True when something changed."""
        # Counted as a write: a poll's scan taken before the new contents were accepted is stale.
        with self.disk_write():
            changed = self.sources.reload_config_file()
        if changed:
            self.poll()
        return changed

    def poll(self) -> None:
        """Compare the repository with what is loaded, once; start loads and unloads as needed.

        The disk is scanned without the lock (a scan stats every file of every SavedModel version,
        and every request takes the lock to lease a servable). A scan that a write of this manager
        overtook would undo that write (a version just uploaded looks removed), so it is taken again
        under the lock."""
        with self._lock:
            writes = self._disk_writes
        names, disks = self._scan()
        with self._lock:
            if writes != self._disk_writes:
                names, disks = self._scan()
            for name in names | set(self._models):
                self._sync(name, on_disk=name in names, disk=disks.get(name, {}))

    def _scan(self) -> tuple[set[str], dict[str, dict[int, VersionFiles]]]:
        """The models in the repository, and the versions on disk of each."""
        names = self.sources.model_names()
        return names, {name: self.sources.versions(name) for name in names}

    # --- reconciling one model with the disk (called with the lock held) ---------------------------

    def _record(self, name: str) -> ModelRecord:
        model = self._models.get(name)
        if model is None:
            model = self._models[name] = ModelRecord(name)
        return model

    def _refresh_config(self, model: ModelRecord) -> None:
        fingerprint = self.sources.config_fingerprint(model.name)
        if fingerprint == model.config_fingerprint:
            return
        model.config_fingerprint = fingerprint
        try:
            config = self.sources.read_config(model.name)
        except ConfigError as e:
            # Keep serving with the last good config; report the problem on every version.
            model.config_error = str(e)
            log.error("%s", e)
            return
        model.config_error = None
        if config.serving_fields() != model.config.serving_fields():
            model.generation += 1
        model.config = config

    def _sync(self, name: str, *, on_disk: bool, disk: Mapping[int, VersionFiles] | None = None) -> None:
        """Load and unload versions of `name` to match the disk (`disk`: its versions, scanned by
        the caller; scanned here when None)."""
        model = self._record(name)
        model.on_disk = on_disk
        if on_disk:
            model.configured = self.sources.is_configured(name)
            self._refresh_config(model)
        if disk is None:
            disk = self.sources.versions(name) if on_disk else {}
        wanted = set() if model.unloaded else model.config.version_policy.select(disk)
        for v in sorted(wanted):
            record = model.versions.setdefault(v, VersionRecord(v))
            attempt = (disk[v].fingerprint, model.generation)
            if record.loading is None and record.attempted != attempt and record.state is not State.UNLOADING:
                if record.servable is None and not model.config.resident and (record.parked or self.memory.load_on_demand):
                    self._park(record, disk[v].source, attempt, record.reason if record.parked else LAZY)
                else:
                    self._start_load(model, record, disk[v].source, attempt)
        self._retire_surplus(model, wanted, disk)

    @staticmethod
    def _park(record: VersionRecord, source, attempt: tuple, reason: str | None) -> None:
        """Keep a wanted version out of memory until a request needs it (its files' latest place noted)."""
        record.parked, record.source, record.pending_attempt = True, source, attempt
        record.state, record.error, record.reason = State.START, None, reason

    def _start_load(self, model: ModelRecord, record: VersionRecord, source, attempt: tuple) -> None:
        token = object()
        record.loading, record.attempted, record.source, record.parked = token, attempt, source, False
        if record.load_done is None:
            record.load_done = Future()
        if record.servable is None:
            record.state, record.error, record.reason = State.LOADING, None, None
        config, version = model.config, record.version
        self._loader.submit(self._load, model.name, version, source, config, token)

    def _loading_record(self, name: str, version: int, token: object) -> VersionRecord | None:
        """The version's record while the load `token` is still the one it waits for; None once that
        load was superseded by a newer one, or the version unloaded."""
        with self._lock:
            model = self._models.get(name)
            record = model.versions.get(version) if model else None
            return record if record is not None and record.loading is token else None

    def _load(self, name: str, version: int, source, config: ModelConfig, token: object) -> None:
        servable, error = self.loader.load_retrying(
            name, version, source, config, retries=self.load_retries, interval_s=self.load_retry_interval_s,
            still_wanted=lambda: self._loading_record(name, version, token) is not None, stop=self._stop)
        # Measured outside the lock (a walk over the servable's objects: ~0.25 s for ResNet50's 550 MB).
        size = resident_bytes(servable) if servable is not None else 0
        # The load's transient memory (the parsed GraphDef: as much again as the weights) is free now; without
        # a trim glibc keeps much of it, ~1.3 MB a load for small models (RSS 1.14x the footprints -> 1.00x).
        TRIM_HEAP()
        with self._lock:
            record = self._loading_record(name, version, token)
            if record is None:
                if servable is not None:
                    servable.close()
                return  # superseded by a newer load, or unloaded meanwhile
            trigger = "request" if record.on_demand else "policy"
            record.loading, record.on_demand = None, False
            if servable is not None:
                self._count(f"load:{trigger}")
                if self.on_loaded is not None:
                    self.on_loaded(name, version, trigger)
            if servable is not None:
                if record.servable is not None:
                    record.servable.close()  # a reload: requests queued on the old one still run
                record.servable, record.state, record.error, record.reason = servable, State.AVAILABLE, None, None
                record.resident_bytes, record.last_used = size, time.monotonic()
            elif record.servable is not None:
                record.error = f"reload failed, still serving the previous load: {error}"
            else:
                record.state, record.error = State.END, error
            if error:
                log.error("model %s version %d: %s", name, version, error)
            self._settle(record)
            self._sync(name, on_disk=self._models[name].on_disk)
            if servable is not None:
                self._enforce_budget(keep=record)
            self._changed.notify_all()

    @staticmethod
    def _settle(record: VersionRecord) -> None:
        """Wake the requests waiting for the version's load: it ended (loaded, failed, or was called off)."""
        done, record.load_done = record.load_done, None
        if done is not None and not done.done():
            done.set_result(None)

    def _retire_surplus(self, model: ModelRecord, wanted: set[int], disk: Mapping) -> None:
        # Availability first: keep an unwanted version while nothing wanted is available yet, unless
        # its files are gone or the model was unloaded on purpose.
        wanted_available = any(model.versions[v].available for v in wanted if v in model.versions)
        wanted_pending = any(model.versions[v].loading is not None for v in wanted if v in model.versions)
        for v, record in model.versions.items():
            if v in wanted or record.state in (State.END, State.UNLOADING):
                continue
            gone = v not in disk or model.unloaded
            if not gone and (not wanted_available or wanted_pending):
                continue
            if model.unloaded:
                reason = "unloaded"
            elif v not in disk:
                reason = removed_from(model)
            else:
                reason = f"outside the version policy ({model.config.version_policy.describe()})"
            self._unload(record, reason)

    def _unload(self, record: VersionRecord, reason: str) -> None:
        record.loading, record.parked, record.on_demand = None, False, False
        record.reason, record.attempted = reason, None
        self._settle(record)
        if record.servable is None:
            record.state = State.END
            return
        record.state = State.UNLOADING
        if record.inflight == 0:
            self._end(record)

    def _end(self, record: VersionRecord) -> None:
        servable = record.servable
        servable.close()
        record.servable, record.resident_bytes = None, 0
        if record.parked:
            record.state = State.START  # evicted or idle: its next request loads it
        else:
            record.state = State.END
        kind = unload_kind(record.reason)
        self._count(f"unload:{kind}")
        if self.on_unload is not None:
            self.on_unload(servable.model, servable.version, kind)
        # Off the lock's critical path is not needed: trimming a few freed arenas takes microseconds to
        # milliseconds, and leaving them makes RSS drift up over thousands of load/unload cycles.
        TRIM_HEAP()

    # --- for the repository's writers (service.repository.management) ------------------------------

    def known_config(self, name: str) -> ModelConfig | None:
        """The config `name` is served with; None for a model this manager has not seen."""
        with self._lock:
            model = self._models.get(name)
            return model.config if model is not None else None

    def config_error(self, name: str) -> str | None:
        """Why `name`'s config.yaml was rejected (its last good config still serves), or None."""
        with self._lock:
            model = self._models.get(name)
            return model.config_error if model is not None else None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the manager's lock, so that what a writer checked still holds when it writes."""
        with self._lock:
            yield

    @contextlib.contextmanager
    def disk_write(self) -> Iterator[None]:
        """Hold the lock across a write to the repository, and count the write: a poll's scan taken
        before it is stale about it, and is taken again. Anything slow (fsyncs) belongs before it."""
        with self._lock:
            self._disk_writes += 1
            yield

    def adopt_version(self, name: str, version: int, servable: Servable, config: ModelConfig,
                      files: VersionFiles) -> bool:
        """Record a version just renamed into place (call inside `disk_write`, with the rename), and
        serve `servable`, the load that validated it under `config`, if it still fits: the config
        has not changed what a load depends on, and the graph holds no paths into the staging
        directory. Otherwise close it and load the version again from its place. Either way the
        version is unloaded when the version policy does not want it. True when `servable` was
        adopted; False when a load is in flight (see `wait_settled`)."""
        with self._lock:
            model = self._record(name)
            self._refresh_config(model)
            model.on_disk, model.unloaded = True, False
            record = model.versions.setdefault(version, VersionRecord(version))
            reuse = model.config.serving_fields() == config.serving_fields() and not servable.uses_asset_paths
            if reuse:
                # The validated load is the served one: no second load.
                if record.servable is not None:
                    record.servable.close()
                record.servable, record.state, record.error, record.reason = servable, State.AVAILABLE, None, None
                record.loading, record.attempted = None, (files.fingerprint, model.generation)
                record.parked, record.source, record.last_used = False, files.source, time.monotonic()
                record.resident_bytes = resident_bytes(servable)
                self._settle(record)
            else:
                servable.close()
            self._sync(name, on_disk=True)
            self._enforce_budget(keep=record)
            if version not in model.config.version_policy.select(self.sources.versions(name)):
                self._unload(record, f"stored, not served: outside the version policy ({model.config.version_policy.describe()})")
            self._changed.notify_all()
            return reuse

    def adopt_labels(self, name: str, config: ModelConfig) -> None:
        """Serve with `config`, just written to `name`'s config.yaml with new labels (nothing a loaded
        version depends on changed, so nothing reloads), and do not read it back on the next poll."""
        with self._lock:
            model = self._models[name]
            model.config = config
            model.config_fingerprint = self.sources.config_fingerprint(name)

    def reconcile(self, name: str, *, on_disk: bool) -> None:
        """Load and unload versions of `name` to match the disk now, rather than at the next poll."""
        with self._lock:
            self._sync(name, on_disk=on_disk)

    def reload(self, name: str) -> None:
        """Serve `name` again (an explicit load): lift an `unload`, retry versions that failed to
        load, and load what its files and version policy ask for."""
        with self._lock:
            model = self._record(name)
            model.unloaded = False
            for record in model.versions.values():
                if record.state is State.END:
                    record.attempted = None  # an explicit load retries failed versions
            self._sync(name, on_disk=self.sources.has_model(name))

    def unload(self, name: str) -> None:
        """Take every version of `name` out of service (after its in-flight requests); it stays out,
        even across polls, until `reload`."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                raise NotFound(f"model '{name}' not found")
            model.unloaded = True
            self._sync(name, on_disk=model.on_disk)

    def why_unavailable(self, name: str) -> str:
        """Why no version of `name` is available, as the tail of a message: " (unloaded)", ..."""
        with self._lock:
            return why_unavailable(self._models.get(name))

