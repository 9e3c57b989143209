"""How a version becomes a Servable: loaded and warmed up with the server's session options, its model's
batching (config.yaml over the server's defaults) and device, reporting batches and load times to the
metrics. The one place servables are made: the manager's background loads, and the validation load of a
management write (service.repository.management), so both serve the same thing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import SessionOptions
from service.inference.batching import BatchingOptions, BatchStats, resolve_batching
from service.repository.config import ModelConfig
from service.repository.servable import LoadError, Servable, load_servable
from service.repository.warmup import WarmupOptions

__all__ = ["VersionLoader"]


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

    def load(self, name: str, version: int, source, config: ModelConfig) -> Servable:
        """Load and warm up a version with the model's batching options. Raises LoadError."""
        try:
            batching = resolve_batching(config.batching, self.batching_defaults, self.batching_by_default)
        except ValueError as e:
            raise LoadError(f"config.yaml batching: {e}") from None
        on_batch = None
        if batching is not None and self.on_batch is not None:
            on_batch = functools.partial(self.on_batch, name, version)
        servable = load_servable(name, version, source, config, self.session_options, batching=batching,
                                 on_batch=on_batch, default_device=self.device, warmup=self.warmup,
                                 saved_model_tags=self.saved_model_tags)
        if self.on_load is not None:
            self.on_load(name, servable.load_seconds)
        return servable
