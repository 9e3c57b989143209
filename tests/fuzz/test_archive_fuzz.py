"""Archive extraction (service.repository.archive): tar, tar.gz and zip uploads, built member by
member from hostile names and types (traversal, absolute paths, links, devices, long names) or
mutated byte by byte, extract inside the target directory or raise BadRequest / PayloadTooLarge,
never another exception, never writing outside the target, and never expanding past the limits."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tempfile
import warnings
import zipfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from service.errors import BadRequest, PayloadTooLarge
from service.repository.archive import ArchiveLimits, extract_archive
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated
from tests.fuzz.seeds import graph_defs

LIMITS = ArchiveLimits(max_files=40, max_bytes=2 * MiB, max_ratio=20, ratio_floor_bytes=256 * 1024)
MARKERS = ("saved_model.pb", "model.pb")

_NAMES = (st.sampled_from(["model.pb", "1/model.pb", "v/saved_model.pb", "variables/", "..", "../x", "/etc/x",
                           "a/../../x", "C:/x", "a\\b", ".hidden", "__MACOSX/x", "a//b", "./model.pb", "a\x00b",
                           "x" * 300, "d/" * 600 + "f", "\udcff", "é/model.pb", ""])
          | st.text(alphabet="ab./\\\x00", max_size=12))
_KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE,
                          tarfile.BLKTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE, b"x"])
_MEMBERS = st.lists(st.tuples(_NAMES, _KINDS, st.binary(max_size=64), st.sampled_from(["", "../../etc", "/", "model.pb"])),
                    min_size=1, max_size=6)


def _tar(members, gz: bool) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8", errors="surrogateescape") as tar:
        for name, kind, data, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.CONTTYPE) else 0
            tar.addfile(info, io.BytesIO(data) if info.size else None)
    return gzip.compress(out.getvalue(), mtime=0) if gz else out.getvalue()


def _zip(members) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        warnings.simplefilter("ignore")  # duplicate names are part of the point
        for name, kind, data, _link in members:
            info = zipfile.ZipInfo(name.encode("utf-8", "surrogateescape").decode("utf-8", "replace") or "_")
            info.external_attr = {tarfile.SYMTYPE: 0o120777, tarfile.DIRTYPE: 0o040755, tarfile.FIFOTYPE: 0o010644,
                                  tarfile.CHRTYPE: 0o020644}.get(kind, 0o100644) << 16
            archive.writestr(info, data)
    return out.getvalue()


def _model_archives() -> tuple[bytes, ...]:
    """A real version (a GraphDef TensorFlow wrote) as each kind of archive, at the root and in a folder."""
    graph = graph_defs()[len(graph_defs()) // 2]
    flat = [("model.pb", tarfile.REGTYPE, graph, ""), ("config.yaml", tarfile.REGTYPE, b"device: cpu\n", "")]
    nested = [("m/", tarfile.DIRTYPE, b"", "")] + [(f"m/{n}", k, d, lk) for n, k, d, lk in flat]
    return (_tar(flat, gz=True), _tar(nested, gz=False), _zip(flat), _zip(nested))


ARCHIVES = _model_archives()


def extract(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "version"
        dest.mkdir()
        call_parser(extract_archive, data, dest, LIMITS, markers=MARKERS, allowed=(BadRequest, PayloadTooLarge),
                    memory_limit=64 * len(data) + 16 * MiB)
        # Nothing lands beside the target, and nothing in it is a link or other than a file or directory.
        assert os.listdir(tmp) == ["version"]
        for path in dest.rglob("*"):
            assert not path.is_symlink() and (path.is_file() or path.is_dir()), path
        written = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        assert written <= LIMITS.budget(len(data))[0]


@fuzz_settings()
@given(_MEMBERS, st.sampled_from(["tar", "tar.gz", "zip"]))
@example([("\udcff/model.pb", tarfile.REGTYPE, b"x", "")], "tar")  # a name that is not UTF-8
@example([("a", tarfile.REGTYPE, b"x", ""), ("a/model.pb", tarfile.REGTYPE, b"x", "")], "zip")
@example([("\x00", tarfile.REGTYPE, b"x", "")], "zip")  # a name zipfile cuts to "" at the NUL
def test_archives_of_hostile_members_extract_safely_or_raise(members, kind: str) -> None:
    extract(_zip(members) if kind == "zip" else _tar(members, gz=kind == "tar.gz"))


@fuzz_settings()
@given(mutated(ARCHIVES))
@example(ARCHIVES[2][:4] + ARCHIVES[2][5:])  # a zip whose local header is a byte short: zipfile seeks to -1
def test_mutated_archives_extract_safely_or_raise(data: bytes) -> None:
    extract(data)


@fuzz_settings(0.3)
@given(st.sampled_from([0, 1]), st.integers(3 * MiB, 64 * MiB))
def test_bombs_stop_at_the_limit(kind: int, size: int) -> None:
    # Zeros compress about 1000:1 in gzip and deflate alike: a few kilobytes claiming megabytes.
    zeros = [("model.pb", tarfile.REGTYPE, b"", ""), ("big", tarfile.REGTYPE, bytes(size), "")]
    data = _tar(zeros, gz=True) if kind == 0 else _zip(zeros)
    with tempfile.TemporaryDirectory() as tmp:
        outcome = call_parser(extract_archive, data, Path(tmp), LIMITS, markers=MARKERS,
                              allowed=(BadRequest, PayloadTooLarge), memory_limit=16 * MiB)
        assert isinstance(outcome, PayloadTooLarge), outcome
