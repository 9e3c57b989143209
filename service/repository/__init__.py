"""service.repository: the model repository, the life cycle of the versions loaded from it, and the
writes clients make to it.

This module is the repository on disk (`ModelRepository`); its submodules, in the order a version
goes from files to serving:

- `config`: a model's optional `config.yaml` (version policy, labels, signatures, batching, device).
- `model_config_file`: TensorFlow Serving's model config file: models at base paths of their own,
  each with its version policy and labels.
- `sources`: where the manager finds models: this repository, the model config file, or both.
- `archive`: safe extraction of uploaded version archives.
- `signatures`: named input and output aliases bound to graph tensors.
- `servable`: one loaded, warmed-up version, ready to run requests.
- `loading`: how a version becomes a servable (session options, batching, device, warm-up): the one
  place servables are made, for the manager's loads and for management's validation loads.
- `tfrecord`, `warmup`: TensorFlow Serving's warm-up files (a TFRecord of logged requests in a version's
  `assets.extra/`), replayed before a version serves.
- `versions`: the states a version goes through (TensorFlow Serving's) and the records kept of it.
- `resolve`: which version a request means (a number, a label, or the newest available) and why there
  is none, as NotFound or Unavailable.
- `management`: the writes clients ask for (uploads, deletes, labels, the v2 repository's load and
  unload), each validated as a servable before it lands, then handed to the manager.
- `manager`: which versions are loaded, kept in step with the disk (polling, loading with retries,
  retiring); `residency` its leases, memory budget, lazy loading and idle unloading; `status_reads`
  what the endpoints read of it (status, index, readiness).
- `server_core`: what TensorFlow Serving's ServerCore adds on top: a start that loads every model before
  the server listens (`tensorflow_model_server`), and ReloadConfig (HandleReloadConfigRequest).

The model repository on disk: `<root>/<model>/<version>/` plus an optional `<model>/config.yaml`.

A version directory holds a GraphDef (`model.pb` or `model.pbtxt`) or a SavedModel (`saved_model.pb`
or `saved_model.pbtxt`, with `variables/` and `assets/`). This module only reads and writes files;
which versions are loaded is the ModelManager's business. Every write is staged in a dot-directory,
fsynced, and renamed into place, so a reader (this server's poller, another replica on a shared
volume) sees either the old state or the whole new one, never a half-written version. The fsyncs
(`sync_staging`) are separate from the rename (`commit_version`), so that a caller holding a lock
around the rename does not hold it through gigabytes of fsync. An upload's body is streamed to a
staging file (`staging_file`) on the same filesystem. Names starting with a dot are never models or
versions.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from service.errors import BadRequest, Conflict, NotFound
from service.repository.config import ModelConfig, dump_model_config, parse_model_config
from service.repository.triton_config import (
    GRAPHDEF_FILE,
    SAVEDMODEL_DIR,
    TRITON_CONFIG_FILE,
    read_triton_config,
    triton_model_file,
)

__all__ = [
    "GRAPH_FILES",
    "SAVED_MODEL_FILES",
    "VERSION_FILES",
    "VersionFiles",
    "ModelRepository",
    "check_model_name",
    "check_label",
    "check_relative_path",
    "MODEL_NAME_PATTERN",
    "LABEL_PATTERN",
    "config_fingerprint",
    "read_config",
    "scan_versions",
    "version_source",
]

# The files that make a directory a servable version, in order of preference: a directory holding
# both a GraphDef and a SavedModel serves the GraphDef.
GRAPH_FILES = ("model.pb", "model.pbtxt")
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
VERSION_FILES = GRAPH_FILES + SAVED_MODEL_FILES
CONFIG_FILE = "config.yaml"
# The alphabets of model names and labels (the OpenAPI document states the same patterns).
MODEL_NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
LABEL_PATTERN = r"[A-Za-z0-9_-]+"
_MODEL_NAME = re.compile(MODEL_NAME_PATTERN)
_LABEL = re.compile(LABEL_PATTERN)
_STAGING_PREFIX = ".staging-"
_TRASH_PREFIX = ".deleted-"


def check_model_name(name: str) -> str:
    """A model name is a directory name: letters, digits, `_.-`, not starting with a dot."""
    if not _MODEL_NAME.fullmatch(name):
        raise BadRequest(f"invalid model name '{name}': use letters, digits, '_', '.', '-' (not starting with '.' or '-')")
    return name


def check_label(label: str) -> str:
    """A label: ASCII letters, digits, `_` and `-` (str.isalnum would take any script's letters)."""
    if not _LABEL.fullmatch(label):
        raise BadRequest(f"invalid label '{label}': use ASCII letters, digits, '_' and '-'")
    return label


def check_relative_path(path: str) -> PurePosixPath:
    """A file path inside a version directory: relative, no `..`, no hidden components."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or any(part in ("", ".", "..") or part.startswith(".") for part in p.parts) or "\\" in path:
        raise BadRequest(f"invalid file path '{path}': must be a relative path without '..' or hidden components")
    return p


@dataclass(frozen=True)
class VersionFiles:
    """A version directory on disk; `fingerprint` changes whenever a file the version loads from
    changes (for a SavedModel: any file in the directory, variable shards and assets included)."""

    version: int
    path: Path
    graph_file: Path  # model.pb[txt], or saved_model.pb[txt]
    fingerprint: tuple

    @property
    def is_saved_model(self) -> bool:
        return self.graph_file.name in SAVED_MODEL_FILES

    @property
    def source(self) -> Path:
        """What a loader reads: the GraphDef file, or the SavedModel's directory."""
        return self.path if self.is_saved_model else self.graph_file


def _fingerprint(path: Path) -> tuple:
    st = path.stat()
    return (path.name, st.st_size, st.st_mtime_ns, st.st_ino)


def _tree_fingerprint(directory: Path) -> tuple:
    """Every file under `directory` (hidden ones aside), by relative path; links are not followed
    into directories, but a link to a file is fingerprinted by its target."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath, name)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # removed while walking (or a dangling link): the next poll sees the rest
            entries.append((path.relative_to(directory).as_posix(), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(entries)


def version_source(directory: Path, model_file: str | None = None) -> VersionFiles | None:
    """The version a directory holds (numbered 0 when its name is not a version), or None: a GraphDef or
    a SavedModel, in our layout or in Triton's (`model.graphdef`, `model.savedmodel/`, or the config's
    `default_model_filename`, `model_file`: a GraphDef file or a SavedModel directory)."""
    version = int(directory.name) if directory.name.isdigit() else 0
    triton_graph, triton_saved = directory / GRAPHDEF_FILE, directory / SAVEDMODEL_DIR
    if model_file is not None:
        triton_graph = triton_saved = directory / model_file
    for name in SAVED_MODEL_FILES:
        try:
            _fingerprint(triton_saved / name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        return VersionFiles(version, triton_saved, triton_saved / name, _tree_fingerprint(triton_saved))
    try:
        if triton_graph.is_file():
            return VersionFiles(version, directory, triton_graph, _fingerprint(triton_graph))
    except (FileNotFoundError, NotADirectoryError):
        pass
    for name in VERSION_FILES:
        graph_file = directory / name
        try:
            fingerprint = _fingerprint(graph_file)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if name in SAVED_MODEL_FILES:
            fingerprint = _tree_fingerprint(directory)
        return VersionFiles(version, directory, graph_file, fingerprint)
    return None


def scan_versions(model_dir: Path) -> dict[int, VersionFiles]:
    """The servable versions in a model's directory (a repository's `<model>/`, or a model config
    file's `base_path`): subdirectories named by a positive integer holding a GraphDef or a SavedModel."""
    found: dict[int, VersionFiles] = {}
    if not model_dir.is_dir():
        return found
    model_file = triton_model_file(model_dir) if not (model_dir / CONFIG_FILE).exists() else None
    for p in model_dir.iterdir():
        if not (p.name.isdigit() and p.is_dir()) or int(p.name) <= 0:
            continue
        files = version_source(p, model_file)
        if files is not None:
            found[files.version] = files
    return found


def config_fingerprint(model_dir: Path) -> tuple | None:
    """Changes whenever the model directory's config.yaml (or, without one, Triton's config.pbtxt and
    its label files) does; None without either."""
    for name in (CONFIG_FILE, TRITON_CONFIG_FILE):
        try:
            fingerprint = _fingerprint(model_dir / name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        if name == TRITON_CONFIG_FILE:  # the label files beside it count too
            return (fingerprint, *(_fingerprint(p) for p in sorted(model_dir.iterdir()) if p.is_file() and p != model_dir / name))
        return fingerprint
    return None


def read_config(model_dir: Path, source: str) -> ModelConfig:
    """A model directory's config.yaml, or Triton's config.pbtxt without one (defaults when neither);
    raises ConfigError naming `source`'s model and the file."""
    try:
        text = (model_dir / CONFIG_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        if (model_dir / TRITON_CONFIG_FILE).is_file():
            return read_triton_config(model_dir, source=str(Path(source).with_name(TRITON_CONFIG_FILE)))
        return ModelConfig()
    return parse_model_config(text, source=source)


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
        """Servable versions on disk: directories named by a positive integer holding a GraphDef or
        a SavedModel."""
        return scan_versions(self.model_dir(model))

    def config_fingerprint(self, model: str) -> tuple | None:
        return config_fingerprint(self.model_dir(model))

    def read_config(self, model: str) -> ModelConfig:
        """The model's config.yaml (defaults when absent); raises ConfigError when it is invalid."""
        return read_config(self.model_dir(model), source=f"{model}/{CONFIG_FILE}")

    # --- writing -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A fresh, empty staging directory to assemble a version in; removed when the block ends
        unless `commit_version` moved it into place. It lives at the repository root, hidden, so that
        a rejected upload of a new model leaves no trace, not even an empty model directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            yield staging
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    @contextlib.contextmanager
    def staging_file(self) -> Iterator[Path]:
        """A path for a fresh staging file (an upload's body, streamed to disk), not yet created:
        hidden at the repository root, on the filesystem versions are renamed into, and removed when
        the block ends unless it was moved away (`stage_file`). One left by a crash is removed at
        start-up with the staging directories."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{_STAGING_PREFIX}{uuid.uuid4().hex}.upload"
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)

    @staticmethod
    def stage_files(staging: Path, files: Mapping[str, bytes]) -> None:
        """Write `files` (relative path -> bytes; subdirectories allowed) into a staging directory.
        Not fsynced here: `sync_staging` fsyncs whatever a staging directory holds, however it got
        there (these files, a staged file, an extracted archive)."""
        for rel, data in files.items():
            dest = staging / check_relative_path(rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)

    @staticmethod
    def stage_file(staging: Path, rel: str, source: Path) -> None:
        """Move `source` (a `staging_file`) into a staging directory as `rel`: a rename, not a copy."""
        dest = staging / check_relative_path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, dest)

    @staticmethod
    def sync_staging(staging: Path) -> None:
        """Fsync every file and directory of a staging directory, so that once `commit_version`
        renames it into place its contents are durable too. This is the slow part of a write (an
        upload may be gigabytes): call it before taking any lock that `commit_version` runs under."""
        for dirpath, _, filenames in os.walk(staging, topdown=False):
            for name in filenames:
                with open(os.path.join(dirpath, name), "rb") as f:
                    os.fsync(f.fileno())
            _fsync_dir(Path(dirpath))

    def commit_version(self, model: str, version: int, staging: Path, *, replace: bool = False) -> VersionFiles:
        """Rename a staged version directory, already fsynced by `sync_staging`, into place as
        `<model>/<version>`, and fsync the directory it lands in.

        An existing version is a Conflict unless `replace` (the v2 repository `load` overrides files,
        as Triton does); the old directory is then moved aside and removed.
        """
        if version <= 0:
            raise BadRequest(f"invalid version {version}: versions are positive integers")
        if version_source(staging) is None:
            raise BadRequest(f"version {version} of model '{model}' needs one of {', '.join(VERSION_FILES)}")
        model_dir = self.model_dir(model)
        target = model_dir / str(version)
        if target.exists() and not replace:
            raise Conflict(f"version {version} of model '{model}' already exists; versions are immutable: DELETE it first or upload a new version")
        created = not model_dir.exists()
        model_dir.mkdir(parents=True, exist_ok=True)
        # The old version goes aside and the new one in, two renames back to back; the old files are
        # removed only once the new ones are in place (a crash in between: the version is absent).
        replaced = self._move_aside(target) if target.exists() else None
        os.rename(staging, target)
        _fsync_dir(model_dir)
        if created:
            _fsync_dir(self.root)
        if replaced is not None:
            self.discard(replaced)
        return self.versions(model)[version]

    def write_version(self, model: str, version: int, files: Mapping[str, bytes], *, replace: bool = False) -> VersionFiles:
        """Write a version's files (relative path -> bytes) atomically: staged, fsynced, then renamed
        into place (see `sync_staging` and `commit_version`)."""
        if version <= 0:
            raise BadRequest(f"invalid version {version}: versions are positive integers")
        if not any(name in files for name in VERSION_FILES):
            raise BadRequest(f"version {version} of model '{model}' needs one of {', '.join(VERSION_FILES)}")
        with self.staging() as staging:
            self.stage_files(staging, files)
            self.sync_staging(staging)
            return self.commit_version(model, version, staging, replace=replace)

    @staticmethod
    def _move_aside(path: Path) -> Path:
        """Rename `path` to a hidden trash name beside it, so that it disappears at once for every
        reader; what a crash leaves there is removed at start-up (`remove_stale_staging`)."""
        trash = path.parent / f"{_TRASH_PREFIX}{path.name}-{uuid.uuid4().hex}"
        os.rename(path, trash)
        _fsync_dir(path.parent)
        return trash

    @staticmethod
    def discard(trash: Path) -> None:
        """Remove what `delete_version` moved aside (slow for a version of many files: call it
        outside any lock that requests take)."""
        shutil.rmtree(trash, ignore_errors=True)

    def delete_version(self, model: str, version: int) -> Path:
        """Take a version out of the repository: it is moved aside at once (one rename), and the
        returned trash directory is for `discard` to remove."""
        target = self.model_dir(model) / str(version)
        if not target.is_dir():
            raise NotFound(f"model '{model}' has no version {version} in the repository")
        return self._move_aside(target)

    def write_config(self, model: str, config: ModelConfig) -> None:
        """Replace config.yaml atomically (comments in a hand-written file are not kept). Conflict for a
        model in Triton's layout: a config.yaml beside its config.pbtxt would replace it."""
        model_dir = self.model_dir(model)
        if (model_dir / TRITON_CONFIG_FILE).is_file() and not (model_dir / CONFIG_FILE).is_file():
            raise Conflict(f"model '{model}' is configured by its {TRITON_CONFIG_FILE} (Triton's layout), which the "
                           "API does not change: edit that file instead (its version_policy; labels: not in Triton's)")
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
        dirs = [self.root] if self.root.is_dir() else []
        for directory in dirs + [self.model_dir(model) for model in self.model_names()]:
            for p in directory.iterdir():
                if p.name.startswith((_STAGING_PREFIX, _TRASH_PREFIX)):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                    removed.append(p)
        return removed
