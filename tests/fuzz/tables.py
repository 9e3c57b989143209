"""A LevelDB-style table writer, for fuzzing a bundle index below its checksums: entries mutated as
protos and written back with valid block CRCs reach the code behind the checksum checks."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import cramjam

from engine.saved_model.sstable import masked_crc32c
from tests.fuzz.mutations import varint

__all__ = ["write_table"]

_MAGIC = 0xDB4775248B80FB57


def _block(entries: Sequence[tuple[bytes, bytes]]) -> bytes:
    body, restarts = bytearray(), []
    for key, value in entries:
        restarts.append(len(body))  # a restart point per entry: no shared key prefixes
        body += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    restarts = restarts or [0]
    return bytes(body) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def _append_block(out: bytearray, block: bytes, snappy: bool = False) -> bytes:
    """Append `block` (Snappy-compressed, type 1, as TensorFlow 1.x wrote them, with `snappy`) and its
    trailer; returns its handle (varint offset, varint size)."""
    kind = b"\x00"
    if snappy:
        block, kind = bytes(cramjam.snappy.compress_raw(block)), b"\x01"
    handle = varint(len(out)) + varint(len(block))
    out += block + kind + struct.pack("<I", masked_crc32c(block + kind))
    return handle


def write_table(entries: Sequence[tuple[bytes, bytes]], *, snappy: bool = False) -> bytes:
    """A table holding `entries` (in the order given) in one data block, every block Snappy-compressed
    with `snappy`."""
    out = bytearray()
    data_handle = _append_block(out, _block(entries), snappy)
    metaindex_handle = _append_block(out, _block([]), snappy)
    index_handle = _append_block(out, _block([(b"\xff", data_handle)]), snappy)
    footer = (metaindex_handle + index_handle).ljust(40, b"\x00")
    return bytes(out) + footer + struct.pack("<Q", _MAGIC)
