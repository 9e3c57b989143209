"""The model repository on disk: `<root>/<model>/<version>/model.pb` plus an optional `config.yaml`.

This module only reads and writes files; which versions are loaded is the ModelManager's business.
Every write is staged in a dot-directory beside its target, fsynced, and renamed into place, so a
reader (this server's poller, another replica on a shared volume) sees either the old state or the
whole new one, never a half-written version. Names starting with a dot are never models or versions.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from service.config import ModelConfig, dump_model_config, parse_model_config
from service.errors import BadRequest, Conflict, NotFound

__all__ = ["GRAPH_FILES", "VersionFiles", "ModelRepository", "check_model_name", "check_relative_path"]

# The files that make a directory a servable version, in order of preference.
GRAPH_FILES = ("model.pb", "model.pbtxt")
CONFIG_FILE = "config.yaml"
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_STAGING_PREFIX = ".staging-"
_TRASH_PREFIX = ".deleted-"


def check_model_name(name: str) -> str:
    """A model name is a directory name: letters, digits, `_.-`, not starting with a dot."""
    if not _MODEL_NAME.fullmatch(name):
        raise BadRequest(f"invalid model name '{name}': use letters, digits, '_', '.', '-' (not starting with '.' or '-')")
    return name


def check_relative_path(path: str) -> PurePosixPath:
    """A file path inside a version directory: relative, no `..`, no hidden components."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or any(part in ("", ".", "..") or part.startswith(".") for part in p.parts) or "\\" in path:
        raise BadRequest(f"invalid file path '{path}': must be a relative path without '..' or hidden components")
    return p


@dataclass(frozen=True)
class VersionFiles:
    """A version directory on disk; `fingerprint` changes whenever its graph file is replaced."""

    version: int
    path: Path
    graph_file: Path
    fingerprint: tuple


def _fingerprint(path: Path) -> tuple:
    st = path.stat()
    return (path.name, st.st_size, st.st_mtime_ns, st.st_ino)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class ModelRepository:
    """Reads and atomically writes a model repository rooted at `root`.

        >>> repo = ModelRepository(Path("models"))
        >>> repo.versions("half_plus_two")
        {1: VersionFiles(version=1, ...)}
    """

    def __init__(self, root: Path):
        self.root = Path(root)

    # --- reading -----------------------------------------------------------------------------------

    def model_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _MODEL_NAME.fullmatch(p.name))

    def model_dir(self, model: str) -> Path:
        return self.root / check_model_name(model)

    def versions(self, model: str) -> dict[int, VersionFiles]:
        """Servable versions on disk: directories named by a positive integer holding a graph file."""
        found: dict[int, VersionFiles] = {}
        model_dir = self.model_dir(model)
        if not model_dir.is_dir():
            return found
        for p in model_dir.iterdir():
            if not (p.name.isdigit() and p.is_dir()) or int(p.name) <= 0:
                continue
            for name in GRAPH_FILES:
                graph_file = p / name
                try:
                    found[int(p.name)] = VersionFiles(int(p.name), p, graph_file, _fingerprint(graph_file))
                    break
                except FileNotFoundError:
                    continue
        return found

    def config_fingerprint(self, model: str) -> tuple | None:
        try:
            return _fingerprint(self.model_dir(model) / CONFIG_FILE)
        except FileNotFoundError:
            return None

    def read_config(self, model: str) -> ModelConfig:
        """The model's config.yaml (defaults when absent); raises ConfigError when it is invalid."""
        path = self.model_dir(model) / CONFIG_FILE
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return ModelConfig()
        return parse_model_config(text, source=f"{model}/{CONFIG_FILE}")

    # --- writing -----------------------------------------------------------------------------------

    def _staging_dir(self, model_dir: Path) -> Path:
        model_dir.mkdir(parents=True, exist_ok=True)
        staging = model_dir / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        staging.mkdir()
        return staging

    def write_version(self, model: str, version: int, files: Mapping[str, bytes], *, replace: bool = False) -> VersionFiles:
        """Write a version's files atomically: staged, fsynced, then renamed into place.

        An existing version is a Conflict unless `replace` (the v2 repository `load` overrides files,
        as Triton does); the old directory is then moved aside and removed.
        """
        if version <= 0:
            raise BadRequest(f"invalid version {version}: versions are positive integers")
        if not any(name in files for name in GRAPH_FILES):
            raise BadRequest(f"version {version} of model '{model}' needs one of {', '.join(GRAPH_FILES)}")
        model_dir = self.model_dir(model)
        target = model_dir / str(version)
        if target.exists() and not replace:
            raise Conflict(f"version {version} of model '{model}' already exists; versions are immutable: DELETE it first or upload a new version")
        staging = self._staging_dir(model_dir)
        try:
            for rel, data in files.items():
                dest = staging / check_relative_path(rel)
                dest.parent.mkdir(parents=True, exist_ok=True)
                _write_file(dest, data)
            for d in sorted({p for p in staging.rglob("*") if p.is_dir()} | {staging}, key=lambda p: -len(p.parts)):
                _fsync_dir(d)
            if target.exists():
                self._remove(target)
            os.rename(staging, target)
            _fsync_dir(model_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self.versions(model)[version]

    def _remove(self, path: Path) -> None:
        # Rename first so that the directory disappears at once for every reader, then delete it.
        trash = path.parent / f"{_TRASH_PREFIX}{path.name}-{uuid.uuid4().hex}"
        os.rename(path, trash)
        _fsync_dir(path.parent)
        shutil.rmtree(trash, ignore_errors=True)

    def delete_version(self, model: str, version: int) -> None:
        target = self.model_dir(model) / str(version)
        if not target.is_dir():
            raise NotFound(f"model '{model}' has no version {version} in the repository")
        self._remove(target)

    def write_config(self, model: str, config: ModelConfig) -> None:
        """Replace config.yaml atomically (comments in a hand-written file are not kept)."""
        model_dir = self.model_dir(model)
        model_dir.mkdir(parents=True, exist_ok=True)
        tmp = model_dir / f"{_STAGING_PREFIX}{uuid.uuid4().hex}.yaml"
        try:
            _write_file(tmp, dump_model_config(config).encode())
            os.replace(tmp, model_dir / CONFIG_FILE)
            _fsync_dir(model_dir)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def remove_stale_staging(self) -> list[Path]:
        """Delete what interrupted writes left behind (called at start-up, before anything is written)."""
        removed = []
        for model in self.model_names():
            for p in self.model_dir(model).iterdir():
                if p.name.startswith((_STAGING_PREFIX, _TRASH_PREFIX)):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                    removed.append(p)
        return removed
