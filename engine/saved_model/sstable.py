"""LevelDB-style sorted tables: the file format of a tensor bundle's index (engine.saved_model.tensor_bundle).

A table is a sequence of blocks and a 48-byte footer: the metaindex and index block handles (varint64
offset and size each), zero padding, and the magic number 0xdb4775248b80fb57. The index block's entries
point at the data blocks. A block holds entries (varint32 shared key prefix length, unshared length, value
length, then the key's unshared bytes and the value), then its restart offsets (fixed32 each) and their
count; it is followed by a 5-byte trailer: a compression type byte (0: none, as TensorFlow 2 writes
bundles; 1: Snappy, as TensorFlow 1.x did) and the masked CRC-32C of the (compressed) block and that byte,
verified here.

    >>> for key, value in read_table(Path("variables/variables.index").read_bytes()): ...
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import cramjam
import google_crc32c

__all__ = ["TableError", "mask_crc32c", "masked_crc32c", "read_table", "read_varint"]

_FOOTER_SIZE = 48
_TABLE_MAGIC = 0xDB4775248B80FB57
_BLOCK_TRAILER_SIZE = 5
_NO_COMPRESSION = 0
_SNAPPY = 1  # LevelDB's kSnappyCompression: TensorFlow 1.x wrote bundle indexes with it
_CRC_MASK_DELTA = 0xA282EAD8


def mask_crc32c(crc: int) -> int:
    """A CRC-32C as LevelDB and TensorFlow store it: rotated right by 15 bits plus a constant, so that
    the checksum of data that embeds checksums is not itself trivially related to them."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _CRC_MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C of `data` (bytes: the C library takes read-only buffers only)."""
    return mask_crc32c(google_crc32c.value(data))


class TableError(ValueError):
    """A malformed table: truncated, a bad checksum, a structure that does not add up."""


def read_varint(buf: bytes | memoryview, pos: int, limit: int) -> tuple[int, int]:
    """The varint at `pos` (read no further than `limit`) and the position after it."""
    result = shift = 0
    while True:
        if pos >= limit or shift > 63:
            raise TableError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


@dataclass(frozen=True)
class _BlockHandle:
    offset: int
    size: int


def _block_handle(buf: bytes | memoryview, pos: int, limit: int) -> tuple[_BlockHandle, int]:
    offset, pos = read_varint(buf, pos, limit)
    size, pos = read_varint(buf, pos, limit)
    return _BlockHandle(offset, size), pos


def _read_block(table: bytes, handle: _BlockHandle, what: str) -> memoryview:
    """A block's contents, after checking its trailer's type and checksum."""
    end = handle.offset + handle.size
    if end + _BLOCK_TRAILER_SIZE > len(table):
        raise TableError(f"{what} at offset {handle.offset} (size {handle.size}) runs past the end of the file")
    kind = table[end]
    (stored,) = struct.unpack_from("<I", table, end + 1)
    if masked_crc32c(table[handle.offset : end + 1]) != stored:
        raise TableError(f"{what} at offset {handle.offset} fails its checksum")
    if kind == _SNAPPY:
        try:
            return memoryview(bytes(cramjam.snappy.decompress_raw(table[handle.offset : end])))
        except cramjam.DecompressionError as e:
            raise TableError(f"{what} at offset {handle.offset}: its Snappy compression is corrupt: {e}") from None
    if kind != _NO_COMPRESSION:
        raise TableError(f"{what} is compressed (type {kind}); tables are uncompressed (0) or Snappy (1)")
    return memoryview(table)[handle.offset : end]


def _block_entries(block: memoryview) -> Iterator[tuple[bytes, memoryview]]:
    """(key, value) pairs of a block: prefix-compressed keys, then the restart array."""
    if len(block) < 4:
        raise TableError("block too short for its restart count")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise TableError(f"block claims {num_restarts} restart points, more than it can hold")
    key = b""
    pos = 0
    while pos < limit:
        shared, pos = read_varint(block, pos, limit)
        unshared, pos = read_varint(block, pos, limit)
        value_size, pos = read_varint(block, pos, limit)
        if shared > len(key) or pos + unshared + value_size > limit:
            raise TableError("block entry runs past the block")
        key = key[:shared] + bytes(block[pos : pos + unshared])
        pos += unshared
        yield key, block[pos : pos + value_size]
        pos += value_size


def read_table(data: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """Every (key, value) of a table file, in key order."""
    if len(data) < _FOOTER_SIZE:
        raise TableError(f"the file has {len(data)} bytes, fewer than a table's {_FOOTER_SIZE}-byte footer")
    footer = len(data) - _FOOTER_SIZE
    (magic,) = struct.unpack_from("<Q", data, len(data) - 8)
    if magic != _TABLE_MAGIC:
        raise TableError("the footer lacks the table magic number (truncated, or not a bundle index)")
    _metaindex, pos = _block_handle(data, footer, len(data) - 8)
    index_handle, _ = _block_handle(data, pos, len(data) - 8)
    index = _read_block(data, index_handle, "index block")
    for _separator, handle_bytes in _block_entries(index):
        handle, _ = _block_handle(handle_bytes, 0, len(handle_bytes))
        yield from _block_entries(_read_block(data, handle, "data block"))
