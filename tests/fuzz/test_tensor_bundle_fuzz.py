"""Tensor bundles (engine.saved_model.tensor_bundle, over the sstable reader): a mutated index or data
shard of a bundle TensorFlow wrote gives its tensors or SavedModelError, never another exception, and
never allocates what a corrupt entry claims (a shape of 10**18 elements, an offset or size of 2**60)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from engine.errors import SavedModelError
from engine.proto import tensor_bundle_pb2
from engine.saved_model.sstable import TableError, read_table
from engine.saved_model.tensor_bundle import read_bundle
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated
from tests.fuzz.seeds import bundle_dirs
from tests.fuzz.tables import write_table

BUNDLES = bundle_dirs()
INDEXES = tuple((d / "ckpt.index").read_bytes() for d in BUNDLES)
SHARDS = tuple(p.read_bytes() for d in BUNDLES for p in sorted(d.glob("ckpt.data-*")))


def _bundle_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("ckpt.*"))


def read_mutated(bundle: Path, replaced: str, data: bytes) -> None:
    """read_bundle of a copy of `bundle` whose file `replaced` holds `data` instead."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "bundle"
        shutil.copytree(bundle, copy)
        (copy / replaced).write_bytes(data)
        # The tensors themselves (a few times the files' size as arrays, objects for strings) and no more.
        limit = 32 * (_bundle_size(copy) + len(data)) + 8 * MiB
        call_parser(read_bundle, copy / "ckpt", allowed=(SavedModelError,), memory_limit=limit)


@fuzz_settings()
@given(st.sampled_from(range(len(BUNDLES))), mutated(INDEXES))
def test_mutated_index_gives_tensors_or_saved_model_error(which: int, index: bytes) -> None:
    read_mutated(BUNDLES[which], "ckpt.index", index)


@fuzz_settings()
@given(st.sampled_from(range(len(BUNDLES))), mutated(SHARDS))
def test_mutated_data_shard_gives_tensors_or_saved_model_error(which: int, shard: bytes) -> None:
    read_mutated(BUNDLES[which], "ckpt.data-00000-of-" + ("00004" if BUNDLES[which].name == "sharded" else "00001"),
                 shard)


@fuzz_settings()
@given(st.binary(max_size=256) | mutated(INDEXES))
def test_sstable_reader_raises_table_error_only(data: bytes) -> None:
    call_parser(lambda: list(read_table(data)), allowed=(TableError,), memory_limit=8 * len(data) + MiB)


# --- below the checksums: entries edited as protos, the table rewritten with valid CRCs -----------------

_SIZES = st.sampled_from([-(2**63), -4, -1, 0, 1, 2, 3, 7, 130, 2**31, 2**32 + 1, 10**18, 2**62, 2**63 - 1])


def _is_entry(value: bytes) -> bool:
    try:
        tensor_bundle_pb2.BundleEntryProto.FromString(value)
    except DecodeError:
        return False
    return True


@st.composite
def edited_index(draw, bundle: Path, index: str = "ckpt.index") -> bytes:
    """The index of `bundle` with 1-3 entries edited, as bytes or as BundleEntryProto fields."""
    entries = [(key, bytes(value)) for key, value in read_table((bundle / index).read_bytes())]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(entries) - 1))
        key, value = entries[i]
        if key == b"":
            header = tensor_bundle_pb2.BundleHeaderProto.FromString(value)
            header.num_shards = draw(st.sampled_from([0, 1, 2, 4, 2**31 - 1]))
            header.version.min_consumer = draw(st.sampled_from([0, 1, 2]))
            value = header.SerializeToString()
        elif draw(st.booleans()) or not _is_entry(value):
            value = draw(mutated([value]))
        else:
            entry = tensor_bundle_pb2.BundleEntryProto.FromString(value)
            what = draw(st.sampled_from(["shape", "offset", "size", "dtype", "shard", "slices"]))
            if what == "shape":
                del entry.shape.dim[:]
                for size in draw(st.lists(_SIZES, max_size=4)):
                    entry.shape.dim.add().size = size
            elif what == "offset":
                entry.offset = draw(_SIZES.filter(lambda v: v >= 0))
            elif what == "size":
                entry.size = draw(_SIZES.filter(lambda v: v >= 0))
            elif what == "dtype":
                entry.dtype = draw(st.integers(0, 130))
            elif what == "shard":
                entry.shard_id = draw(st.sampled_from([0, 1, 3, 2**31 - 1]))
            else:
                part = entry.slices.add()
                for _ in range(draw(st.integers(0, 3))):
                    extent = part.extent.add()
                    extent.start = draw(_SIZES)
                    if draw(st.booleans()):
                        extent.length = draw(_SIZES)
            value = entry.SerializeToString()
        entries[i] = (key, value)
    return write_table(entries)


def index_with(bundle: Path, edit, *, slices_only: bool = False) -> bytes:
    """The index of `bundle` with `edit(entry)` applied to every tensor's BundleEntryProto (or only to
    the slices of partitioned ones), CRCs valid."""
    entries = []
    for key, value in read_table((bundle / "ckpt.index").read_bytes()):
        if key and (key.startswith(b"\x00") or not slices_only):
            entry = tensor_bundle_pb2.BundleEntryProto.FromString(bytes(value))
            edit(entry)
            value = entry.SerializeToString()
        entries.append((key, bytes(value)))
    return write_table(entries)


def _set_shape(*sizes: int):
    def edit(entry) -> None:
        del entry.shape.dim[:]
        for size in sizes:
            entry.shape.dim.add().size = size
    return edit


def _set(field: str, value: int):
    return lambda entry: setattr(entry, field, value)


@fuzz_settings(2)
@given(st.integers(0, len(BUNDLES) - 1).flatmap(lambda w: st.tuples(st.just(w), edited_index(BUNDLES[w]))))
@example((0, index_with(BUNDLES[0], _set_shape(-1, -4))))  # two unknown dims: numpy's reshape refuses
@example((0, index_with(BUNDLES[0], _set_shape(2**62))))  # 2**62 elements claimed
@example((0, index_with(BUNDLES[0], _set("size", 2**60))))  # a read of 2**60 bytes claimed
@example((1, index_with(BUNDLES[1], _set_shape(10**9, 10**9))))  # a partitioned tensor of 10**18 elements
@example((1, index_with(BUNDLES[1], _set("dtype", 7), slices_only=True)))  # string slices of a float tensor
def test_index_entries_edited_below_the_checksums_give_tensors_or_saved_model_error(case) -> None:
    which, index = case
    read_mutated(BUNDLES[which], "ckpt.index", index)
