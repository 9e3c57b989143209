"""Which version of a model a request means, and why there is none: a version number, a label, or (neither
given) the newest available version, with TensorFlow Serving's distinctions between a model or version
that does not exist (NotFound) and one that exists but is not serving yet (Unavailable).

Pure functions of a model's record (service.repository.versions); the manager calls them under its lock.
"""

from __future__ import annotations

from service.errors import NotFound, Unavailable
from service.repository.versions import ModelRecord, State, VersionRecord

__all__ = ["removed_from", "resolve", "status_records", "why_unavailable"]

# What why_unavailable says of a model the manager has never seen.
NEVER_SEEN = " (no version in the repository)"


def _labelled(model: ModelRecord, name: str, version: int | None, label: str | None) -> int | None:
    """The version a label names (the version asked for when there is no label)."""
    if label is None:
        return version
    if label not in model.config.labels:
        raise NotFound(f"model '{name}' has no label '{label}'")
    return model.config.labels[label]


def _tf_serving_words(name: str, version: int | None) -> str:
    # TensorFlow Serving's text for a servable it does not have, which its clients and tests look for
    # ("Servable" in the details means the server is up and answering).
    request = f"Latest({name})" if version is None else f"Specific({name}, {version})"
    return f" (Servable not found for request: {request})"


def _servable(record: VersionRecord) -> bool:
    """Available, or kept out of memory on purpose and loaded for the request (parked, or loading for one)."""
    return record.available or record.on_demand


def resolve(model: ModelRecord | None, name: str, version: int | None, label: str | None) -> VersionRecord:
    """The version a request for `name` (at `version` or `label`) runs on, or the error it gets: an
    available version, or one parked or loading on demand (the request waits for its load)."""
    if model is None or (not model.versions and not model.on_disk):
        raise NotFound(f"model '{name}' not found{_tf_serving_words(name, version)}")
    version = _labelled(model, name, version, label)
    if version is None:
        available = [r for v, r in sorted(model.versions.items()) if _servable(r)]
        if available:
            return available[-1]
        raise Unavailable(f"no version of model '{name}' is available{why_unavailable(model)}")
    record = model.versions.get(version)
    if record is None:
        raise NotFound(f"model '{name}' has no version {version}{_tf_serving_words(name, version)}")
    if _servable(record):
        return record
    if record.state in (State.START, State.LOADING):
        raise Unavailable(f"version {version} of model '{name}' is still loading")
    why = record.error or record.reason or record.state.value.lower()
    raise NotFound(f"version {version} of model '{name}' is not available: {why}")


def status_records(model: ModelRecord | None, name: str, version: int | None, label: str | None) -> list[VersionRecord]:
    """The versions a status request reports: every known one, newest first, or the one asked for."""
    if model is None or not model.versions:
        raise NotFound(f"could not find any versions of model '{name}'")
    version = _labelled(model, name, version, label)
    if version is None:
        return [r for _, r in sorted(model.versions.items(), reverse=True)]
    if version not in model.versions:
        raise NotFound(f"could not find version {version} of model '{name}'")
    return [model.versions[version]]


def why_unavailable(model: ModelRecord | None) -> str:
    """Why no version of a model is available, as the tail of a message: " (unloaded)", " yet (loading)", ..."""
    if model is None:
        return NEVER_SEEN
    if model.unloaded:
        return " (unloaded)"
    errors = [f"version {v}: {r.error}" for v, r in sorted(model.versions.items()) if r.error]
    if any(r.state in (State.START, State.LOADING) for r in model.versions.values()):
        return " yet (loading)"
    return f" ({'; '.join(errors)})" if errors else NEVER_SEEN


def removed_from(model: ModelRecord) -> str:
    """Why a version whose files the sources no longer list was unloaded."""
    if not model.configured:
        return "removed from the repository"
    if not model.on_disk:
        return "removed from the model config file"
    return "removed from the model's base_path"
