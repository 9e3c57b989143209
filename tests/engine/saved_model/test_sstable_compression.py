"""Bundle indexes whose blocks are Snappy-compressed, as TensorFlow 1.x wrote them (TensorFlow Serving's
own test models, half_plus_two among them, still are): read as the uncompressed ones, and a corrupt
compressed block or an unknown compression type is a TableError naming it, never a crash."""

from __future__ import annotations

import struct

import cramjam
import pytest

from engine.saved_model.sstable import TableError, masked_crc32c, read_table
from tests.fuzz.tables import _block, write_table

ENTRIES = [(b"", b"header"), (b"a/kernel", b"\x08\x01" * 40), (b"b/bias", b"value " * 30)]


def _rewrite_first_block(table: bytes, size: int, body: bytes, kind: int) -> bytes:
    assert len(body) == size  # same size: every handle in the table stays right
    trailer = bytes([kind]) + struct.pack("<I", masked_crc32c(body + bytes([kind])))
    return body + trailer + table[size + 5:]


def test_snappy_blocks_read_as_uncompressed_ones():
    plain, compressed = write_table(ENTRIES), write_table(ENTRIES, snappy=True)
    assert plain != compressed
    read = [(key, bytes(value)) for key, value in read_table(compressed)]
    assert read == [(key, bytes(value)) for key, value in read_table(plain)] == ENTRIES


def test_a_corrupt_snappy_block_is_a_table_error():
    table = write_table(ENTRIES, snappy=True)
    size = len(cramjam.snappy.compress_raw(_block(ENTRIES)))
    garbled = b"\xff" * size  # a length preamble that runs on and never ends
    with pytest.raises(TableError, match="Snappy compression is corrupt"):
        list(read_table(_rewrite_first_block(table, size, garbled, 1)))


def test_an_unknown_compression_type_is_named():
    table = write_table(ENTRIES)
    size = len(_block(ENTRIES))
    with pytest.raises(TableError, match=r"compressed \(type 2\)"):
        list(read_table(_rewrite_first_block(table, size, table[:size], 2)))
