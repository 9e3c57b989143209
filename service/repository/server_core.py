"""What TensorFlow Serving's ServerCore does on top of the manager: its start, where every model's
versions are loaded, or given up, before the server listens (`tensorflow_model_server`; `tensorgate serve`
listens at once and reports readiness instead), and its ReloadConfig (ModelService's
HandleReloadConfigRequest), which replaces the configured models and waits for the new ones.

At the start, a model whose base path has no version yet is waited for, as TensorFlow Serving waits; a
model whose versions all failed to load is reported; a model config file's label naming a version that did
not load is reported too, as TensorFlow Serving refuses it without `--allow_version_labels_for_unavailable_models`.

    >>> failed = wait_for_models(manager, on_empty=lambda name, path: log.warning(...))
    >>> labels_on_unavailable_versions(manager)
    [('m', 'canary', 7)]
    >>> reload_server_config(manager, models, timeout_s=60)      # Unavailable names models that did not load
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from service.errors import BadRequest, Unavailable
from service.repository.config import ConfigError
from service.repository.manager import ModelManager
from service.repository.model_config_file import ConfiguredModel
from service.repository.resolve import why_unavailable
from service.repository.versions import State

__all__ = ["config_base_dir", "labels_on_unavailable_versions", "reload_server_config", "wait_for_models"]


def wait_for_models(manager: ModelManager, on_empty: Callable[[str, Path | None], None] | None = None,
                    period_s: float = 1.0) -> dict[str, str]:
    """Block until every model has had its wanted versions loaded or given up, waiting on while a model of
    the config file has no version at all (`on_empty(name, base_path)` is called once for each such model).
    Returns, by model, why it has no available version; empty when all serve. Models added meanwhile are
    waited for too; a manager stopped meanwhile ends the wait."""
    told: set[str] = set()
    while True:
        manager.wait_settled(timeout=period_s)
        with manager.locked():
            models = manager.records()
            pending = any(r.loading is not None for m in models.values() for r in m.versions.values())
            empty = sorted(name for name, m in models.items() if m.configured and not m.unloaded and not m.versions)
            failed = {name: why_unavailable(m).removeprefix(" (").removesuffix(")") for name, m in models.items()
                      if m.versions and not any(r.available for r in m.versions.values())}
        if not pending and not empty:
            return failed
        for name in empty:
            if name not in told and on_empty is not None:
                told.add(name)
                on_empty(name, manager.sources.base_path(name))
        # The poller looks for versions meanwhile; look at its findings again.
        if manager.stopped(0 if pending else period_s):
            return {}


def labels_on_unavailable_versions(manager: ModelManager) -> list[tuple[str, str, int]]:
    """(model, label, version) for every label of a model config file that names a version not available."""
    with manager.locked():
        return [(name, label, version) for name, m in sorted(manager.records().items()) if m.configured
                for label, version in sorted(m.config.labels.items())
                if version not in m.versions or m.versions[version].state is not State.AVAILABLE]


def reload_server_config(manager: ModelManager, models: dict[str, ConfiguredModel], timeout_s: float) -> None:
    """Serve `models` as the configured models from now on (TensorFlow Serving's ReloadConfig):
    models left out unload, new ones load, policies and labels apply. Waits up to `timeout_s` for
    the new models to become available; Unavailable names those that did not. BadRequest when a
    model clashes with the repository (nothing changes then)."""
    try:
        with manager.disk_write():
            new = manager.sources.replace_configured(models)
    except ConfigError as e:
        raise BadRequest(str(e)) from None
    manager.poll()
    deadline = time.monotonic() + timeout_s
    for name in sorted(new):
        manager.wait_settled(name, max(deadline - time.monotonic(), 0.0))
    failed = {name: manager.why_unavailable(name) for name in sorted(new) if not manager.versions_available(name)}
    if failed:
        # TensorFlow Serving's words (ServerCore::WaitUntilModelsAvailable).
        listed = "".join(f"{{name: {n}{why}}}, " for n, why in failed.items())
        raise Unavailable(f"{len(failed)} model(s) did not become available: {{{listed}}}")


def config_base_dir(manager: ModelManager) -> Path:
    """Where relative base paths of a reloaded model server config start: the model config file's
    directory, or the working directory without one (as TensorFlow Serving)."""
    config_file = manager.sources.config_file
    if config_file is not None and config_file.path is not None:
        return config_file.path.absolute().parent
    return Path.cwd()
