"""Management writes: every change a client asks of the model repository, validated before it lands.

Uploads (a GraphDef, or an archive of a version directory), deletes, labels, and the v2 repository's
`load` and `unload` come through here. A new version is staged, loaded and warmed up from its staging
directory before anything in the repository changes; its files are fsynced before the ModelManager's
lock is taken (that may take seconds, and every request takes the lock to lease a servable) and
renamed into place under it, where the ModelManager adopts the load that validated it. Which versions
are loaded afterwards stays the ModelManager's business; this module only asks it to reconcile.

Models of TensorFlow Serving's model config file are read-only here: every write to one is a
Conflict naming the file (the file decides their versions and labels), and so is any write on a
server that serves a model config file without a repository.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from service.errors import BadRequest, Conflict, NotFound
from service.repository import (
    GRAPH_FILES,
    VERSION_FILES,
    ModelRepository,
    check_label,
    check_model_name,
    version_source,
)
from service.repository.archive import ARCHIVE_SUFFIXES, ArchiveLimits, extract_archive
from service.repository.config import ConfigError, ModelConfig, parse_model_config
from service.repository.manager import ModelManager
from service.repository.servable import LoadError, Servable
from service.repository.versions import VersionStatus

__all__ = ["RepositoryManagement"]


class RepositoryManagement:
    """The repository's write side: each write changes the disk and tells the ModelManager, under its
    lock, what changed.

        >>> management = RepositoryManagement(manager)
        >>> management.upload("half_plus_two", 2, graph_bytes).state
        <State.AVAILABLE: 'AVAILABLE'>
        >>> management.set_label("half_plus_two", "stable", 2)
        {'stable': 2}
    """

    def __init__(self, manager: ModelManager):
        self.manager = manager
        self.sources = manager.sources
        self.repository = manager.repository  # the manager's own: writes and polls must see one disk

    def _writable(self, name: str) -> ModelRepository:
        """The repository a write to `name` goes to (Conflict for a model config file's model, or
        without a repository)."""
        return self.sources.check_writable(name)

    @contextlib.contextmanager
    def upload_file(self, name: str) -> Iterator[Path]:
        """A staging file to stream an upload of `name` to (see ModelRepository.staging_file),
        refused before a byte is read when `name` cannot be written."""
        check_model_name(name)
        with self._writable(name).staging_file() as path:
            yield path

    # --- new versions ------------------------------------------------------------------------------

    def _validate(self, name: str, version: int, source, config: ModelConfig, staging: Path | None = None) -> Servable:
        try:
            return self.manager.loader.load(name, version, source, config)
        except LoadError as e:
            message = str(e)
            if staging is not None:  # name files as the client knows them, not by our staging path
                message = message.replace(str(staging), "<upload>")
            raise BadRequest(f"version {version} of model '{name}' rejected: {message}") from None

    def _current_config(self, name: str) -> ModelConfig:
        """The config a new version of `name` loads with: the one served, else config.yaml."""
        config = self.manager.known_config(name)
        if config is not None:
            return config
        try:
            return self.repository.read_config(name)
        except ConfigError as e:
            raise Conflict(str(e)) from None

    def _check_new_version(self, name: str, version: int) -> None:
        check_model_name(name)
        self._writable(name)
        if version <= 0:
            raise BadRequest(f"invalid version {version}: versions are positive integers")
        if version in self.repository.versions(name):
            raise Conflict(f"version {version} of model '{name}' already exists; versions are immutable: DELETE it first or upload a new version")

    def upload(self, name: str, version: int, data: bytes | Path, filename: str = "model.pb") -> VersionStatus:
        """Validate and warm up a GraphDef, write it atomically, and serve it (policy permitting).
        `data` is the GraphDef's bytes, or a repository `staging_file` holding them (a streamed
        upload), which is moved into place rather than written again.

        Nothing is written, and nothing served changes, unless the graph loads and warms up.
        """
        check_model_name(name)
        if filename not in GRAPH_FILES:
            raise BadRequest(f"invalid file name '{filename}': expected one of {', '.join(GRAPH_FILES)}")
        self._check_new_version(name, version)
        config = self._current_config(name)
        servable = self._validate(name, version, _graph_bytes(data), config)
        with self.repository.staging() as staging:
            try:
                if isinstance(data, Path):
                    self.repository.stage_file(staging, filename, data)
                else:
                    self.repository.stage_files(staging, {filename: data})
            except BaseException:
                servable.close()
                raise
            return self._install(name, version, servable, config, staging)

    def upload_archive(self, name: str, version: int, data: bytes | Path, limits: ArchiveLimits) -> VersionStatus:
        """Extract a version archive (a SavedModel, or a GraphDef, directory as .tar.gz, .tar or
        .zip; its bytes, or a file holding them) safely into a staging directory, validate and warm
        it up there, then rename it into place and serve it: the path `upload` takes. A rejected
        archive leaves no trace."""
        self._check_new_version(name, version)
        config = self._current_config(name)
        with self.repository.staging() as staging:
            extract_archive(data, staging, limits, markers=VERSION_FILES)
            servable = self._validate(name, version, version_source(staging).source, config, staging)
            return self._install(name, version, servable, config, staging)

    def _install(self, name: str, version: int, servable: Servable, config: ModelConfig, staging: Path,
                 timeout: float = 600.0) -> VersionStatus:
        """Write a validated version (fsync the staging directory, then rename it into place) and
        serve the servable its validation loaded; or, when that load no longer fits (the config
        changed meanwhile, or its graph holds paths into the staging directory), load it again from
        its place and wait for that load.

        The fsync runs before the lock is taken: it may take seconds for a large upload, and every
        request takes the lock to lease a servable. Only the rename happens under it."""
        try:
            self.repository.sync_staging(staging)
        except BaseException:
            servable.close()
            raise
        with self.manager.disk_write():
            try:
                files = self.repository.commit_version(name, version, staging)
            except BaseException:
                servable.close()
                raise
            if self.manager.adopt_version(name, version, servable, config, files):
                (status,) = self.manager.status(name, version)
                return status
        self.manager.wait_settled(name, timeout)
        (status,) = self.manager.status(name, version)
        return status

    def delete(self, name: str, version: int) -> None:
        """Unload a version (after its in-flight requests) and remove it from the repository."""
        self._writable(name)
        with self.manager.locked():
            config = self.manager.known_config(name)
            labels = [label for label, v in (config.labels if config else {}).items() if v == version]
            if labels:
                raise Conflict(f"version {version} of model '{name}' is labelled {', '.join(labels)}; point the label elsewhere first")
            # NOTE: a refused delete writes nothing, so it is not counted as a write.
            with self.manager.disk_write():
                trash = self.repository.delete_version(name, version)
                self.manager.reconcile(name, on_disk=True)
        # The version is gone for every reader already; removing its files may take a while (many
        # files, a slow disk) and needs no lock.
        self.repository.discard(trash)

    # --- labels ------------------------------------------------------------------------------------

    def set_label(self, name: str, label: str, version: int) -> dict[str, int]:
        """Point `label` at an available version, and persist it in config.yaml."""
        check_label(label)
        self._writable(name)
        with self.manager.locked():
            config = self.manager.known_config(name)
            if config is None:
                raise NotFound(f"model '{name}' not found")
            if version not in self.manager.versions_available(name):
                raise BadRequest(f"cannot point label '{label}' at version {version} of model '{name}': that version is not available")
            return self._write_labels(name, config, {**config.labels, label: version})

    def delete_label(self, name: str, label: str) -> dict[str, int]:
        self._writable(name)
        with self.manager.locked():
            config = self.manager.known_config(name)
            if config is None or label not in config.labels:
                raise NotFound(f"model '{name}' has no label '{label}'")
            return self._write_labels(name, config, {k: v for k, v in config.labels.items() if k != label})

    def _write_labels(self, name: str, config: ModelConfig, labels: dict[str, int]) -> dict[str, int]:
        """Write `config` with `labels` to config.yaml (the caller holds the manager's lock)."""
        error = self.manager.config_error(name)
        if error:
            raise Conflict(f"cannot change labels while config.yaml is invalid: {error}")
        config = config.model_copy(update={"labels": labels})
        self.repository.write_config(name, config)
        self.manager.adopt_labels(name, config)
        return dict(labels)

    # --- the v2 repository extension ---------------------------------------------------------------

    def load_model(self, name: str, config_text: str | None = None, files: Mapping[str, bytes] | None = None,
                   timeout: float = 600.0, *, archive_limits: ArchiveLimits | None = None) -> list[VersionStatus]:
        """The v2 repository `load`: optionally write a new config and version files (validated
        first), then load the model and wait for it. Raises BadRequest when no version loads.

        `files` maps `<version>/<path>` to bytes: a version's files (`1/saved_model.pb`,
        `1/variables/variables.index`, ...), or one archive of them (`1/model.tar.gz`, `.tgz`,
        `.tar`, `.zip`), extracted under `archive_limits`."""
        check_model_name(name)
        self._writable(name)
        if not files and not self.repository.model_dir(name).is_dir():
            raise NotFound(f"model '{name}' is not in the repository (upload it with 'file:<version>/model.pb' parameters)")
        config = self._current_config(name)
        if config_text is not None:
            try:
                config = parse_model_config(config_text, source=f"config of model '{name}'")
            except ConfigError as e:
                raise BadRequest(str(e)) from None
        by_version = _files_by_version(files or {})
        with contextlib.ExitStack() as stack:
            staged: dict[int, Path] = {}
            for version, version_files in sorted(by_version.items()):
                staging = stack.enter_context(self.repository.staging())
                self._stage_version(name, version, version_files, config, staging, archive_limits)
                staged[version] = staging
            with self.manager.disk_write():
                # Versions before the config: a crash in between leaves the old config, whose labels
                # name versions still there, never a config naming versions not yet renamed in.
                for version, staging in staged.items():
                    self.repository.commit_version(name, version, staging, replace=True)
                if config_text is not None:
                    self.repository.write_config(name, config)
                self.manager.reload(name)
        self.manager.wait_settled(name, timeout)
        with self.manager.locked():
            if not self.manager.versions_available(name):
                raise BadRequest(f"failed to load model '{name}'{self.manager.why_unavailable(name)}")
            return self.manager.status(name)[::-1]  # oldest first, as the index lists them

    def _stage_version(self, name: str, version: int, version_files: Mapping[str, bytes], config: ModelConfig,
                       staging: Path, archive_limits: ArchiveLimits | None) -> None:
        """Write one version's files (or extract its archive) into `staging`, validate them, and fsync
        them: everything but the rename, which `load_model` does for all versions under the lock."""
        archive = _single_archive(version_files)
        if archive is not None:
            extract_archive(archive, staging, archive_limits or ArchiveLimits(), markers=VERSION_FILES)
        else:
            self.repository.stage_files(staging, version_files)
        found = version_source(staging)
        if found is None:
            raise BadRequest(
                f"version {version} of model '{name}' needs one of {', '.join(VERSION_FILES)} "
                f"(or a single {', '.join(ARCHIVE_SUFFIXES)} archive of them)"
            )
        self._validate(name, version, found.source, config, staging).close()
        self.repository.sync_staging(staging)  # before the lock: see _install

    def unload_model(self, name: str) -> None:
        """The v2 repository `unload`: every version leaves service (after in-flight requests) and
        stays unloaded, even across polls, until loaded again. Not for a model config file's models:
        the file decides what they serve."""
        self.sources.check_not_configured(name)
        self.manager.unload(name)


# protobuf refuses to parse a message of 2 GiB or more.
_MAX_GRAPHDEF_BYTES = 2**31 - 1


def _graph_bytes(data: bytes | Path) -> bytes:
    """A GraphDef upload's bytes; one streamed to a file is read back (a GraphDef is under 2 GiB)."""
    if not isinstance(data, Path):
        return data
    size = data.stat().st_size
    if size > _MAX_GRAPHDEF_BYTES:
        raise BadRequest(f"a GraphDef of {size} bytes is over protobuf's 2 GiB limit; upload a large model as a "
                         "SavedModel archive instead")
    return data.read_bytes()


def _files_by_version(files: Mapping[str, bytes]) -> dict[int, dict[str, bytes]]:
    """`file:<version>/<path>` parameters, grouped by version."""
    by_version: dict[int, dict[str, bytes]] = {}
    for path, data in files.items():
        head, _, rest = path.partition("/")
        if not head.isdigit() or int(head) <= 0 or not rest:
            raise BadRequest(f"invalid file parameter 'file:{path}': expected 'file:<version>/<filename>'")
        by_version.setdefault(int(head), {})[rest] = data
    return by_version


def _single_archive(version_files: Mapping[str, bytes]) -> bytes | None:
    """A version given as one archive file (`1/model.tar.gz`) rather than as its files."""
    if len(version_files) != 1:
        return None
    (path, data), = version_files.items()
    return data if "/" not in path and path.lower().endswith(ARCHIVE_SUFFIXES) else None
