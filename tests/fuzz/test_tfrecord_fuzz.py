"""The TFRecord reader (service.repository.tfrecord, warm-up files): mutated warm-up files TensorFlow
Serving's tools wrote, plain or gzip'd, give their records or TFRecordError, never another exception,
and never allocate what a corrupt length field claims (up to 2**64 bytes)."""

from __future__ import annotations

import gzip
import struct
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from service.repository.tfrecord import TFRecordError, masked_crc32c, read_records
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated
from tests.fuzz.seeds import tfrecord_files

FILES = tuple(p.read_bytes() for p in tfrecord_files())
SEEDS = FILES + tuple(gzip.compress(f, mtime=0) for f in FILES)


def _header(length: int) -> bytes:
    """A record header whose length checksum holds: the reader then trusts the length."""
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc32c(raw))


def read(data: bytes, compression: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tf_serving_warmup_requests"
        path.write_bytes(data)
        # One record at a time, each at most the (decompressed) file: gzip expands some 1000:1 at most.
        limit = (1032 if data[:2] == b"\x1f\x8b" else 4) * len(data) + 4 * MiB
        call_parser(lambda: list(read_records(path, compression=compression)), allowed=(TFRecordError,),
                    memory_limit=limit)


@fuzz_settings()
@given(mutated(SEEDS) | st.binary(max_size=64), st.sampled_from(["auto", "gzip", "none"]))
@example(_header(2**60) + b"data", "auto")  # a checked length of 2**60 bytes, and four of them present
@example(_header(2**64 - 1), "none")
@example(gzip.compress(_header(1 << 30) + bytes(1 << 16)), "auto")
def test_mutated_tfrecord_files_give_records_or_tfrecord_error(data: bytes, compression: str) -> None:
    read(data, compression)
