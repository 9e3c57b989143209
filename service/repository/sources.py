"""Model sources: where the models a server serves come from, as one view for the ModelManager.

Two kinds of source: a model repository directory (`<root>/<model>/<version>/`, written through the
API) and TensorFlow Serving's model config file (each model with a base path of its own, its version
policy and labels in the file). The manager asks `ModelSources` for model names, versions and
configs, and polls and reconciles every model the same way, whichever source it comes from.

Model names are unique across sources: a config file naming a model the repository also holds is
refused at start, and on a reload (the last good contents keep serving). A repository directory that
appears later under a config file model's name is ignored while the clash lasts, and reported. Models
of the config file are read-only over the API: the file decides what they serve.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from service.errors import Conflict
from service.repository import (
    CONFIG_FILE,
    ModelRepository,
    VersionFiles,
    config_fingerprint,
    read_config,
    scan_versions,
)
from service.repository.config import ConfigError, ModelConfig
from service.repository.model_config_file import ConfiguredModel, ModelConfigFile

__all__ = ["ModelSources"]

log = logging.getLogger("tensorgate.sources")


class ModelSources:
    """The models of a repository directory, of a model config file, or of both.

        >>> sources = ModelSources(ModelRepository(Path("models")), ModelConfigFile(Path("models.config")))
        >>> sources.load()                       # ConfigError: invalid, or a name in both
        >>> sorted(sources.model_names())
        ['half_plus_two', 'iris_classifier']
    """

    def __init__(self, repository: ModelRepository | None = None, config_file: ModelConfigFile | None = None):
        self.repository = repository
        self.config_file = config_file
        self._clashes: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    # --- the model config file ---------------------------------------------------------------------

    @property
    def config_poll_wait_s(self) -> float:
        """How often the model config file is read again; 0: never (no file, or read once)."""
        return self.config_file.poll_wait_s if self.config_file is not None else 0.0

    def load(self) -> None:
        """Read the model config file at start; raises ConfigError when it is invalid or names a
        model of the repository."""
        if self.config_file is None:
            return
        models = self.config_file.read()
        self._check_clashes(models)
        self.config_file.accept(models)

    def reload_config_file(self) -> bool:
        """Read the model config file again. True when the models it serves changed. An invalid
        file (or one naming a repository model) changes nothing: the last good contents keep
        serving, and the error is logged and reported on the status of its models."""
        if self.config_file is None:
            return False
        try:
            models = self.config_file.read()
            self._check_clashes(models)
        except ConfigError as e:
            if str(e) != self.config_file.error:
                log.error("%s; still serving its last good contents", e)
            self.config_file.reject(str(e))
            return False
        if self.config_file.error is not None:
            log.info("model config file %s is valid again", self.config_file.path)
        changed = models != self.config_file.models
        self.config_file.accept(models)
        return changed

    def replace_configured(self, models: dict[str, ConfiguredModel]) -> set[str]:
        """Serve `models` instead of the model config file's (ModelService's HandleReloadConfigRequest;
        with no file, they become the configured models). ConfigError when one is a repository model.
        The names that were not configured before."""
        self._check_clashes(models)
        if self.config_file is None:
            self.config_file = ModelConfigFile(None)
        new = set(models) - set(self.config_file.models)
        self.config_file.accept(models)
        return new

    def _check_clashes(self, models: dict[str, ConfiguredModel]) -> None:
        if self.repository is None:
            return
        clashes = sorted(set(models) & set(self.repository.model_names()))
        if clashes:
            where = self.repository.root
            raise ConfigError(f"{self.config_file.description}: model '{clashes[0]}' is also in the model "
                              f"repository ({where / clashes[0]}); model names must be unique across both")

    def _configured(self, name: str) -> ConfiguredModel | None:
        return self.config_file.models.get(name) if self.config_file is not None else None

    # --- what the manager reads --------------------------------------------------------------------

    def model_names(self) -> set[str]:
        """Every model of every source. A name in both is the config file's (see `problem`)."""
        in_repository = set(self.repository.model_names()) if self.repository is not None else set()
        configured = set(self.config_file.models) if self.config_file is not None else set()
        clashes = frozenset(in_repository & configured)
        with self._lock:
            new, self._clashes = clashes - self._clashes, clashes
        for name in sorted(new):
            log.error("%s", self._clash_message(name))
        return in_repository | configured

    def has_model(self, name: str) -> bool:
        if self._configured(name) is not None:
            return True
        return self.repository is not None and self.repository.model_dir(name).is_dir()

    def is_configured(self, name: str) -> bool:
        """Whether `name` comes from the model config file."""
        return self._configured(name) is not None

    def versions(self, name: str) -> dict[int, VersionFiles]:
        configured = self._configured(name)
        if configured is not None:
            return scan_versions(configured.base_path)
        return self.repository.versions(name) if self.repository is not None else {}

    def base_path(self, name: str) -> Path | None:
        """Where `name`'s versions are: its base_path in the config file, else its repository directory."""
        configured = self._configured(name)
        if configured is not None:
            return configured.base_path
        return self.repository.model_dir(name) if self.repository is not None else None

    def config_fingerprint(self, name: str) -> tuple | None:
        """Changes whenever the model's config does (its config.yaml, or its entry in the config file)."""
        configured = self._configured(name)
        if configured is not None:
            return ("model config file", configured, config_fingerprint(configured.base_path))
        return self.repository.config_fingerprint(name) if self.repository is not None else None

    def read_config(self, name: str) -> ModelConfig:
        """The model's config; raises ConfigError when it is invalid."""
        configured = self._configured(name)
        if configured is not None:
            source = str(configured.base_path / CONFIG_FILE)
            return configured.apply_to(read_config(configured.base_path, source), source)
        return self.repository.read_config(name) if self.repository is not None else ModelConfig()

    def problem(self, name: str) -> str | None:
        """What is wrong with where `name` comes from while it serves anyway: its config file failed
        to reload, or a repository directory has its name."""
        if self._configured(name) is None:
            return None
        if self.config_file.error is not None:
            return f"{self.config_file.error}; still serving the model config file's last good contents"
        with self._lock:
            clash = name in self._clashes
        return self._clash_message(name) if clash else None

    def _clash_message(self, name: str) -> str:
        return (f"model '{name}' of {self.config_file.description} is also a directory of the model "
                f"repository ({self.repository.root / name}); serving the config file's, ignoring the directory")

    # --- what the repository's writers need ------------------------------------------------------

    def check_writable(self, name: str) -> ModelRepository:
        """The repository that writes to `name` go to; Conflict for a model of the model config file
        (the file decides what it serves) or when the server has no repository."""
        self.check_not_configured(name)
        if self.repository is None:
            raise Conflict(f"this server has no model repository to write model '{name}' to: it serves the model "
                           "config file's models only (start it with --model-repository to upload models)")
        return self.repository

    def check_not_configured(self, name: str) -> None:
        """Conflict when `name` is a model of the model config file: the API does not change those."""
        if self._configured(name) is not None:
            raise Conflict(f"model '{name}' comes from {self.config_file.description}, which the API "
                           "does not change: edit the file (its base_path, model_version_policy, version_labels) instead")

    def remove_stale_staging(self) -> list[Path]:
        return self.repository.remove_stale_staging() if self.repository is not None else []
