"""How a version becomes a Servable: loaded and warmed up with the server's session options, its model's
batching (config.yaml over the server's defaults) and device, reporting batches and load times to the
metrics. The one place servables are made: the manager's background loads (retried after a failure when
the server says so), and the validation load of a management write (service.repository.management), so
both serve the same thing.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine import SessionOptions
from engine.errors import EngineError
from service.inference.batching import BatchingOptions, BatchStats, resolve_batching
from service.inference.batching_parameters import read_batching_parameters
from service.repository.config import ConfigError, ModelConfig
from service.repository.servable import LoadError, Servable, load_servable
from service.repository.warmup import WarmupOptions

__all__ = ["PER_VERSION_BATCHING_FILE", "VersionLoader"]

# TensorFlow Serving's kBatchingParamsFilename, in a SavedModel version's directory.
PER_VERSION_BATCHING_FILE = "batching_params.pbtxt"

log = logging.getLogger("tensorgate.manager")


@dataclass(frozen=True)
class VersionLoader:
    """Loads versions the same way wherever they are loaded from.

        >>> VersionLoader(SessionOptions()).load("half_plus_two", 1, source, ModelConfig())
    """

    session_options: SessionOptions
    batching_defaults: BatchingOptions = field(default_factory=BatchingOptions)
    # Batch models whose config.yaml has no `batching:` key (TENSORGATE_BATCHING).
    batching_by_default: bool = False
    on_batch: Callable[[str, int, BatchStats], None] | None = None
    on_load: Callable[[str, float], None] | None = None
    device: str = "cpu"  # where versions run unless their config.yaml names a device
    warmup: WarmupOptions = field(default_factory=WarmupOptions)  # how versions replay their warm-up files
    saved_model_tags: tuple[str, ...] = ("serve",)  # the MetaGraph a SavedModel version serves
    # TensorFlow Serving's --enable_per_model_batching_parameters: where batching is on by default, a
    # version's own `batching_params.pbtxt` decides, and a version without one is not batched.
    per_version_batching: bool = False

    def _version_batching(self, source) -> BatchingOptions | None:
        """A version's own batching parameters (`<version>/batching_params.pbtxt`, fields it leaves out
        taking the server's), or None without the file: that version is not batched."""
        path = Path(source) / PER_VERSION_BATCHING_FILE if isinstance(source, Path) and source.is_dir() else None
        if path is None or not path.is_file():
            return None
        try:
            return read_batching_parameters(path, self.batching_defaults)
        except ConfigError as e:
            raise LoadError(str(e)) from None

    def load_retrying(self, name: str, version: int, source, config: ModelConfig, *, retries: int, interval_s: float,
                      still_wanted: Callable[[], bool], stop: threading.Event) -> tuple[Servable | None, str | None]:
        """Load (as `load`), and after a failure load again up to `retries` times, `interval_s` apart, while
        `still_wanted()` and not `stop` (TensorFlow Serving's --max_num_load_retries, retried in the load
        thread as its loader harness does). The servable, or None and why the last attempt failed."""
        servable, error = self._attempt(name, version, source, config)
        for retry in range(1, retries + 1):
            if servable is not None or not still_wanted():
                break
            log.warning("loading model %s version %d failed (%s); retrying in %g s (retry %d of %d)",
                        name, version, error, interval_s, retry, retries)
            if stop.wait(interval_s):
                break
            servable, error = self._attempt(name, version, source, config)
        return servable, error

    def _attempt(self, name: str, version: int, source, config: ModelConfig) -> tuple[Servable | None, str | None]:
        try:
            return self.load(name, version, source, config), None
        except (LoadError, EngineError, OSError) as e:
            return None, str(e)
        except Exception as e:  # an engine bug must not leave the version LOADING forever
            log.exception("loading %s version %d failed", name, version)
            return None, f"internal error while loading: {type(e).__name__}: {e}"

    def load(self, name: str, version: int, source, config: ModelConfig) -> Servable:
        """Load and warm up a version with the model's batching options. Raises LoadError."""
        try:
            batching = resolve_batching(config.batching, self.batching_defaults, self.batching_by_default)
        except ValueError as e:
            raise LoadError(f"config.yaml batching: {e}") from None
        if self.per_version_batching and batching is not None and config.batching is None:
            batching = self._version_batching(source)
        on_batch = None
        if batching is not None and self.on_batch is not None:
            on_batch = functools.partial(self.on_batch, name, version)
        servable = load_servable(name, version, source, config, self.session_options, batching=batching,
                                 on_batch=on_batch, default_device=self.device, warmup=self.warmup,
                                 saved_model_tags=tuple(config.saved_model_tags or self.saved_model_tags))
        if self.on_load is not None:
            self.on_load(name, servable.load_seconds)
        return servable
