"""Versions as the model manager tracks them: the states TensorFlow Serving reports, the status the
endpoints show, and the records the manager keeps per model and per version.

Each version goes START -> LOADING -> AVAILABLE -> UNLOADING -> END (TensorFlow Serving's
ModelVersionStatus.State). A version that failed to load is END with an `error`; one that is not
served for another reason (unloaded through the API, outside the version policy) carries a `reason`.
A version the server keeps out of memory on purpose (lazy loading, evicted for the memory budget, idle)
is START with `unloaded` set: its next request loads it (TensorFlow Serving's START: tracked, no action yet).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from service.repository.config import ModelConfig
from service.repository.servable import Servable

__all__ = ["ModelRecord", "State", "VersionRecord", "VersionStatus"]


class State(str, Enum):
    """TensorFlow Serving's ModelVersionStatus.State."""

    START = "START"
    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"


@dataclass(frozen=True)
class VersionStatus:
    """What the status endpoints report for one version."""

    model: str
    version: int
    state: State
    error: str | None = None  # why it failed to load (or why a reload failed, while the old one serves)
    reason: str | None = None  # why it is not served, when that is not a failure (unloaded, outside the policy)
    # Not resident, on purpose (lazy loading, evicted, idle): the next request loads it (state START).
    unloaded: bool = False
    resident_bytes: int = 0  # measured when it loaded (engine.runtime.footprint); 0 while not loaded
    pinned: bool = False  # config.yaml `resident: true`: never loaded lazily, evicted or unloaded for idleness


@dataclass(eq=False)
class VersionRecord:
    """What the manager knows of one version: its state, its servable, and why it is not served."""

    version: int
    state: State = State.START
    servable: Servable | None = None
    error: str | None = None
    reason: str | None = None
    inflight: int = 0
    # (files fingerprint, config generation) of the last load attempt; a new attempt is made only
    # when either changes, so that a broken version is not reloaded on every poll.
    attempted: tuple | None = None
    loading: object | None = None  # the token of the load in flight; a newer token supersedes it
    # Not resident on purpose (lazy loading, evicted for the memory budget, idle): the next request loads it.
    parked: bool = False
    source: Any = None  # where its files are (for a parked version's load)
    pending_attempt: tuple | None = None  # the attempt a parked version's load will be
    on_demand: bool = False  # the load in flight was started by a request, which waits for it
    load_done: Future | None = None  # resolved when the load in flight ends, however it ends
    last_used: float = 0.0  # time.monotonic() of its last request's end (or of its load)
    resident_bytes: int = 0  # what the loaded servable holds (engine.runtime.footprint), 0 when not loaded

    @property
    def available(self) -> bool:
        """Serving, or out of memory on purpose and loaded by its next request (parked)."""
        return self.state is State.AVAILABLE or self.parked


@dataclass(eq=False)
class ModelRecord:
    """What the manager knows of one model: its config as last read, and its versions."""

    name: str
    config: ModelConfig = field(default_factory=ModelConfig)
    config_fingerprint: tuple | None = None
    config_error: str | None = None
    generation: int = 0  # bumped when the config changes what a loaded version depends on
    versions: dict[int, VersionRecord] = field(default_factory=dict)
    unloaded: bool = False  # unloaded through the repository API: stays so until loaded again
    on_disk: bool = True  # listed by a model source (the repository, or the model config file)
    configured: bool = False  # listed by the model config file (last time it was listed at all)
