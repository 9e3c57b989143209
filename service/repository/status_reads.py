"""What the endpoints read of the model manager: each version's status, the repository index, readiness
(a mixin of `service.repository.manager.ModelManager`, whose lock and records it reads)."""

from __future__ import annotations

import time

from service.errors import NotFound, Unavailable
from service.repository.config import ModelConfig
from service.repository.resolve import resolve, status_records
from service.repository.servable import Servable
from service.repository.versions import ModelRecord, State, VersionRecord, VersionStatus

__all__ = ["StatusReads"]


class StatusReads:
    """Reads under the manager's lock: status, index, readiness, the loaded servables."""

    # --- status ------------------------------------------------------------------------------------

    def _status(self, model: ModelRecord, record: VersionRecord) -> VersionStatus:
        error = record.error or (f"config.yaml: {model.config_error}" if model.config_error else None)
        error = error or self.sources.problem(model.name)
        return VersionStatus(model.name, record.version, record.state, error, record.reason,
                             unloaded=record.parked, resident_bytes=record.resident_bytes,
                             pinned=model.config.resident)

    def status(self, name: str, version: int | None = None, label: str | None = None) -> list[VersionStatus]:
        """Every known version of a model, newest first (or the one asked for)."""
        with self._lock:
            model = self._models.get(name)
            return [self._status(model, r) for r in status_records(model, name, version, label)]

    def index(self) -> list[VersionStatus]:
        """Every model of the sources or loaded, with each known version (v2 repository index)."""
        with self._lock:
            rows = []
            for name in sorted(set(self._models) | self.sources.model_names()):
                model = self._models.get(name)
                if model is None or not model.versions:
                    rows.append(VersionStatus(name, 0, State.END, None, "not loaded"))
                    continue
                rows += [self._status(model, r) for _, r in sorted(model.versions.items())]
            return rows

    def knows(self, name: str) -> bool:
        with self._lock:
            return name in self._models

    def servables(self) -> list[Servable]:
        """Every servable loaded now (for metrics)."""
        with self._lock:
            return [r.servable for m in self._models.values() for r in m.versions.values() if r.servable is not None]

    def config(self, name: str) -> ModelConfig:
        with self._lock:
            if name not in self._models:
                raise NotFound(f"model '{name}' not found")
            return self._models[name].config

    def versions_available(self, name: str) -> list[int]:
        with self._lock:
            model = self._models.get(name)
            return sorted(v for v, r in model.versions.items() if r.available) if model else []

    def model_ready(self, name: str, version: int | None = None) -> bool:
        with self._lock:
            try:
                resolve(self._models.get(name), name, version, None)
                return True
            except (NotFound, Unavailable):
                return False

    def ready(self) -> bool:
        """True once the first scan has run, and every model in the repository with versions on disk
        has one available or parked (loaded by its first request; models unloaded through the API excepted)."""
        with self._lock:
            if not self._initial_scan_done:
                return False
            # A model directory with no version (yet) serves nothing and waits for an upload.
            return all(
                any(r.available for r in m.versions.values())
                for m in self._models.values()
                if m.on_disk and not m.unloaded and m.versions
            )

    def wait_settled(self, name: str | None = None, timeout: float = 60.0) -> bool:
        """Block until no load is in flight (for `name`, or any model); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                models = [self._models[name]] if name in self._models else [] if name else list(self._models.values())
                if not any(r.loading is not None for m in models for r in m.versions.values()):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)

    def records(self) -> dict[str, ModelRecord]:
        """Every model's record, for readers in this package that hold `locked()` while they read them."""
        with self._lock:
            return dict(self._models)

    def stopped(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for `stop()`; whether it was called."""
        return self._stop.wait(timeout)

