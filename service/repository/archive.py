"""Safe extraction of an uploaded version archive (`.tar.gz`/`.tgz`, `.tar`, `.zip`) into a directory.

An archive from a client is untrusted: a member may try to write outside the target (an absolute
path, `..`, a link), be something other than a file (a device, a FIFO), or expand far beyond its own
size (a zip or gzip bomb). `extract_archive` refuses all of these before writing anything they
would touch, names the offending member, and never trusts a size it has not counted itself:

    >>> extract_archive(data, staging, ArchiveLimits(), markers=("saved_model.pb", "model.pb"))

The archive is bytes (a v2 `load` parameter) or a file (a version upload, streamed to disk), read as a
stream either way: a file is never read into memory whole.

Regular files and directories are extracted, nothing else: links of any kind (symbolic or hard, even
pointing inside) are refused, since a version directory never needs one. Entries whose names start
with a dot (`.DS_Store`, macOS `._*` files) and `__MACOSX/` are skipped. The version may sit at the
archive's root or inside a single top-level directory (`tar czf m.tgz my_model/`), which is stripped.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import tarfile
import uuid
import zipfile
import zlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from service.errors import BadRequest, PayloadTooLarge

__all__ = ["ArchiveLimits", "ARCHIVE_CONTENT_TYPES", "ARCHIVE_SUFFIXES", "archive_kind", "archive_file_kind", "extract_archive"]

MiB = 1024 * 1024
GiB = 1024 * MiB

# Content-Types that announce an archive (magic bytes decide which kind it is).
ARCHIVE_CONTENT_TYPES = frozenset({
    "application/gzip", "application/x-gzip", "application/x-tar", "application/x-gtar",
    "application/x-compressed-tar", "application/tar+gzip", "application/zip", "application/x-zip-compressed",
})
# File names (v2 `file:` parameters) that hold an archive of a version rather than one of its files.
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")

_CHUNK = 1 * MiB
_MAGIC_BYTES = 512  # enough for every magic `archive_kind` knows (tar's sits at offset 257)
_MAX_NAME_PART = 255  # bytes: what every common filesystem allows per path component
_MAX_PATH = 1024  # bytes, well under PATH_MAX once the repository's own path is in front
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
class ArchiveLimits:
    """What an uploaded archive may expand to: entries, bytes, and bytes per byte of archive.

    The ratio guards against bombs early (a 1 MiB archive may expand to `max_ratio` MiB), but only
    past `ratio_floor_bytes`: small archives of very compressible files (zero-initialised
    variables, text graphs) are harmless whatever their ratio.
    """

    max_files: int = 10_000
    max_bytes: int = 4 * GiB
    max_ratio: float = 100.0
    ratio_floor_bytes: int = 16 * MiB

    def budget(self, archive_size: int) -> tuple[int, str]:
        """The most bytes an archive of `archive_size` bytes may expand to, and the setting that says so."""
        by_ratio = max(self.ratio_floor_bytes, int(self.max_ratio * archive_size))
        if by_ratio < self.max_bytes:
            return by_ratio, f"{self.max_ratio:g} times the archive's {archive_size} bytes (TENSORGATE_ARCHIVE_MAX_RATIO)"
        return self.max_bytes, f"{self.max_bytes} bytes (TENSORGATE_ARCHIVE_MAX_BYTES)"


def archive_kind(data: bytes) -> str | None:
    """`"tar.gz"`, `"zip"` or `"tar"` by the archive's magic bytes; None for anything else."""
    if data[:2] == b"\x1f\x8b":
        return "tar.gz"
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if data[257:262] == b"ustar":  # POSIX and GNU tar headers
        return "tar"
    return None


def archive_file_kind(path: Path) -> str | None:
    """`archive_kind` of a file, from its first bytes."""
    with open(path, "rb") as f:
        return archive_kind(f.read(_MAGIC_BYTES))


def extract_archive(data: bytes | Path, dest: Path, limits: ArchiveLimits, *, markers: Collection[str]) -> None:
    """Extract `data` (an archive's bytes, or a file holding it) into the empty directory `dest`,
    then make the directory holding one of `markers` (`saved_model.pb`, ...) its root. Raises
    BadRequest for an unsafe, corrupt or unrecognised archive and PayloadTooLarge when it exceeds
    `limits`, naming the member."""
    with open(data, "rb") if isinstance(data, Path) else io.BytesIO(data) as source:
        kind = archive_kind(source.read(_MAGIC_BYTES))
        if kind is None:
            raise BadRequest("the body is not a .tar.gz, .tgz, .tar or .zip archive (no gzip, zip or tar magic bytes)")
        size = source.seek(0, io.SEEK_END)
        source.seek(0)
        extractor = _Extractor(dest, limits, size)
        try:
            if kind == "zip":
                _extract_zip(source, extractor)
            else:
                _extract_tar(source, kind, extractor)
        except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, gzip.BadGzipFile, NotImplementedError) as e:
            raise BadRequest(f"the {kind} archive is corrupt: {e}") from None
        except ValueError as e:  # zipfile's own for offsets that point nowhere ("negative seek value")
            raise BadRequest(f"the {kind} archive is corrupt: {e}") from None
    _strip_single_top_directory(dest, markers, extractor.names)


# --- member checks and writing ------------------------------------------------------------------


def _member_path(name: str) -> PurePosixPath | None:
    """The relative path a member may be written to; None to skip it (the root, hidden entries)."""
    if not name or "\x00" in name:
        raise BadRequest(f"archive member {name!r}: empty name or NUL byte")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # tarfile keeps undecodable bytes as surrogates
        raise BadRequest(f"archive member {name!r}: the name is not UTF-8") from None
    if name.startswith("/") or "\\" in name or _WINDOWS_DRIVE.match(name):
        raise BadRequest(f"archive member '{name}': absolute paths (and backslashes) are not allowed")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise BadRequest(f"archive member '{name}': '..' components are not allowed")
    if not parts or parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts):
        return None
    if len(name.encode()) > _MAX_PATH or any(len(p.encode()) > _MAX_NAME_PART for p in parts):
        raise BadRequest(f"archive member '{name[:100]}...': a path longer than {_MAX_PATH} bytes or a component "
                         f"longer than {_MAX_NAME_PART}")
    return PurePosixPath(*parts)


class _Extractor:
    """Writes checked members under `dest`, counting entries and the bytes actually written."""

    def __init__(self, dest: Path, limits: ArchiveLimits, archive_size: int):
        self.dest = dest
        self.real_dest = os.path.realpath(dest)
        self.limits = limits
        self.budget, self.budget_reason = limits.budget(archive_size)
        self.entries = 0
        self.written = 0
        self.files: set[PurePosixPath] = set()
        self.dirs: set[PurePosixPath] = set()
        self.names: list[str] = []

    def count_entry(self, name: str) -> None:
        self.entries += 1
        if self.entries > self.limits.max_files:
            raise PayloadTooLarge(
                f"archive member '{name}' is entry number {self.entries}, over the limit of {self.limits.max_files} "
                "entries (TENSORGATE_ARCHIVE_MAX_FILES)"
            )

    def check_size(self, name: str, size: int) -> None:
        if self.written + size > self.budget:
            raise PayloadTooLarge(
                f"archive member '{name}' ({size} bytes) would expand the archive to {self.written + size} bytes or more, "
                f"over the limit of {self.budget_reason}"
            )

    def _target(self, name: str, path: PurePosixPath) -> Path:
        target = self.dest.joinpath(*path.parts)
        # Belt and braces: no link is ever created, so this only fails on a bug in the checks above.
        if not os.path.realpath(target).startswith(self.real_dest + os.sep):
            raise BadRequest(f"archive member '{name}' resolves outside the version directory")
        return target

    def _check_parents(self, name: str, path: PurePosixPath) -> None:
        parents = [p for p in path.parents if p != PurePosixPath(".")]
        for parent in parents:
            if parent in self.files:
                raise BadRequest(f"archive member '{name}' needs '{parent}' to be a directory, but it is a file")
        self.dirs.update(parents)

    def add_dir(self, name: str) -> None:
        path = _member_path(name)
        if path is None:
            return
        if path in self.files:
            raise BadRequest(f"archive member '{name}' is a directory, but '{path}' is also a file")
        self._check_parents(name, path)
        self.dirs.add(path)
        self._target(name, path).mkdir(parents=True, exist_ok=True)

    def add_file(self, name: str, size: int, reader: BinaryIO) -> None:
        path = _member_path(name)
        if path is None:
            return
        if path in self.files:
            raise BadRequest(f"archive member '{name}' appears twice")
        if path in self.dirs:
            raise BadRequest(f"archive member '{name}' is a file, but '{path}' is also a directory")
        self._check_parents(name, path)
        self.check_size(name, size)
        target = self._target(name, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.files.add(path)
        self.names.append(path.as_posix())
        with open(target, "xb") as out:  # "x": never through anything already there
            while chunk := reader.read(_CHUNK):
                self.check_size(name, len(chunk))  # the declared size is a claim; count what arrives
                self.written += len(chunk)
                out.write(chunk)


def _refuse_type(name: str, what: str) -> None:
    raise BadRequest(f"archive member '{name}' is {what}; only regular files and directories are allowed")


# --- tar -----------------------------------------------------------------------------------------


class _BoundedReader(io.RawIOBase):
    """A decompressed tar stream that refuses to grow past `limit` bytes, or to be read in one
    gulp larger than `max_read` (tarfile reads a long-name or pax header whole: a header declaring
    gigabytes must not be read into memory)."""

    def __init__(self, inner: BinaryIO, limit: int, max_read: int, reason: str):
        self.inner, self.limit, self.max_read, self.reason = inner, limit, max_read, reason

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.inner.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self.inner.tell() + offset if whence == io.SEEK_CUR else None
        if target is not None and target > self.limit:
            raise PayloadTooLarge(f"the tar stream expands past {self.reason}")
        return self.inner.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0 or size > self.max_read:
            raise BadRequest(f"the tar archive has a header or read of {size} bytes, more than {self.max_read} allowed")
        if self.inner.tell() + size > self.limit:
            size = max(0, self.limit - self.inner.tell())
            data = self.inner.read(size + 1)
            if len(data) > size:
                raise PayloadTooLarge(f"the tar stream expands past {self.reason}")
            return data
        return self.inner.read(size)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def _extract_tar(source: BinaryIO, kind: str, extractor: _Extractor) -> None:
    raw = source
    if kind == "tar.gz":
        raw = gzip.GzipFile(fileobj=raw, mode="rb")
    # Headers take at most a few blocks per entry; everything else in the stream is counted file data.
    stream_limit = extractor.budget + 4 * 1024 * (extractor.limits.max_files + 1) + MiB
    bounded = _BoundedReader(raw, stream_limit, 4 * _CHUNK, extractor.budget_reason)
    with tarfile.open(fileobj=bounded, mode="r:") as tar:
        for member in _members(tar, extractor):
            name = member.name
            if member.issym() or member.islnk():
                raise BadRequest(f"archive member '{name}' is a {'symbolic' if member.issym() else 'hard'} link to "
                                 f"'{member.linkname}'; links are not allowed")
            if member.ischr() or member.isblk():
                _refuse_type(name, "a device file")
            if member.isfifo():
                _refuse_type(name, "a FIFO")
            if member.isdir():
                extractor.add_dir(name)
            elif member.isreg():
                extractor.check_size(name, member.size)
                reader = tar.extractfile(member)
                extractor.add_file(name, member.size, reader)
            else:
                _refuse_type(name, f"of tar type {member.type!r}")


def _members(tar: tarfile.TarFile, extractor: _Extractor) -> Iterator[tarfile.TarInfo]:
    """Members one by one, as the stream yields them (never a listing of the whole archive first)."""
    while True:
        member = tar.next()
        if member is None:
            return
        extractor.count_entry(member.name)
        yield member
        tar.members.clear()  # tarfile keeps every member it has read; nothing here needs them again


# --- zip -----------------------------------------------------------------------------------------


def _extract_zip(source: BinaryIO, extractor: _Extractor) -> None:
    with zipfile.ZipFile(source) as archive:
        infos = archive.infolist()
        # The central directory declares everything up front: refuse before writing a byte.
        declared = 0
        for info in infos:
            extractor.count_entry(info.filename)
            declared += info.file_size
            if declared > extractor.budget:
                raise PayloadTooLarge(
                    f"archive member '{info.filename}' brings the declared uncompressed size to {declared} bytes, "
                    f"over the limit of {extractor.budget_reason}"
                )
        for info in infos:
            name = info.filename
            if not name:  # zipfile cuts names at a NUL byte; ZipInfo.is_dir fails on what is left
                raise BadRequest("archive member '': empty name or NUL byte")
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if kind == stat.S_IFLNK:
                raise BadRequest(f"archive member '{name}' is a symbolic link; links are not allowed")
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                _refuse_type(name, "a device file, FIFO or socket")
            if info.flag_bits & 0x1:
                raise BadRequest(f"archive member '{name}' is encrypted")
            if info.is_dir() or kind == stat.S_IFDIR:
                extractor.add_dir(name)
                continue
            with archive.open(info) as reader:
                extractor.add_file(name, info.file_size, reader)


# --- layout --------------------------------------------------------------------------------------


def _strip_single_top_directory(dest: Path, markers: Collection[str], names: list[str]) -> None:
    if any((dest / m).is_file() for m in markers):
        return
    entries = list(dest.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and any((entries[0] / m).is_file() for m in markers):
        # Move the directory aside first: its children may share its name.
        top = dest / f".strip-{uuid.uuid4().hex}"
        os.rename(entries[0], top)
        for child in top.iterdir():
            os.rename(child, dest / child.name)
        top.rmdir()
        return
    listing = ", ".join(sorted(names)[:10]) + (", ..." if len(names) > 10 else "") if names else "no files"
    raise BadRequest(
        f"the archive holds no {' or '.join(markers)} at its root or inside a single top-level directory "
        f"(it holds: {listing})"
    )
