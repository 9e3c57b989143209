"""Kernels of the ops that hash strings into buckets: each string's 64-bit hash modulo `num_buckets`, taken
as unsigned and returned as int64 in the input's shape.

StringToHashBucketFast uses FarmHash Fingerprint64 (Keras `Hashing` without a salt, the lookups' OOV
buckets), StringToHashBucketStrong keyed SipHash-2-4 (`Hashing` with a salt), and the deprecated
StringToHashBucket TensorFlow's legacy Hash64. The hashes are in `kernels.strings.hash_functions`.
Strings are hashed as raw bytes; a `str` element is hashed as its UTF-8 bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.hash_functions import fingerprint64, legacy_hash64, siphash24
from kernels.strings.tensors import as_bytes, flat_strings

__all__ = ["string_to_hash_bucket_fast", "string_to_hash_bucket_strong", "string_to_hash_bucket", "fingerprint"]

_MASK64 = 0xFFFFFFFFFFFFFFFF


def _check_num_buckets(num_buckets: int) -> None:
    # NOTE: TensorFlow's op definition says `num_buckets: int >= 1`; it checks when the graph is built.
    if num_buckets < 1:
        raise ValueError(f"Value for attr 'num_buckets' of {num_buckets} must be at least minimum 1")


def _buckets(strings: Any, num_buckets: int, hash_bytes: Callable[[bytes], int]) -> np.ndarray:
    flat = flat_strings(strings)
    hashes = np.fromiter(map(hash_bytes, flat), dtype=np.uint64, count=len(flat))
    return (hashes % np.uint64(num_buckets)).astype(np.int64).reshape(np.shape(strings))


# Strings are Python objects: these run on the host only (so `xp` is numpy).
@kernel("StringToHashBucketFast", devices=("cpu",))
def string_to_hash_bucket_fast(xp: Any, input: Any, *, num_buckets: int) -> tuple:
    """Fingerprint64(s) mod num_buckets, per string."""
    _check_num_buckets(num_buckets)
    return (_buckets(input, num_buckets, fingerprint64),)


@kernel("StringToHashBucketStrong", devices=("cpu",))
def string_to_hash_bucket_strong(xp: Any, input: Any, *, num_buckets: int, key: tuple[int, ...]) -> tuple:
    """SipHash-2-4 keyed (key[0], key[1]) mod num_buckets, per string."""
    _check_num_buckets(num_buckets)
    if len(key) != 2:
        raise ValueError("Key must have 2 elements")
    # NOTE: the key is list(int) (int64 in the graph); TensorFlow reads the two words as uint64.
    k0, k1 = key[0] & _MASK64, key[1] & _MASK64
    return (_buckets(input, num_buckets, lambda data: siphash24(k0, k1, data)),)


@kernel("StringToHashBucket", devices=("cpu",))
def string_to_hash_bucket(xp: Any, string_tensor: Any, *, num_buckets: int) -> tuple:
    """Deprecated: TensorFlow's legacy Hash64(s) mod num_buckets, per string (still in old graphs)."""
    _check_num_buckets(num_buckets)
    return (_buckets(string_tensor, num_buckets, legacy_hash64),)


def _fingerprint_bytes(value: int) -> bytes:
    # NOTE: TensorFlow writes the 64-bit fingerprint little-endian, whatever the host's byte order.
    return value.to_bytes(8, "little")


@kernel("Fingerprint", devices=("cpu",))
def fingerprint(xp: Any, data: Any, method: Any) -> tuple:
    """FarmHash Fingerprint64 of each row of `data` (everything past dim 0) as 8 little-endian bytes: [rows, 8]
    uint8. A row of numbers is hashed as its bytes (little-endian, as the host holds them); a row of one
    string as the string; a row of several strings as the concatenation of their fingerprints' bytes."""
    method_value = np.asarray(method, dtype=object)
    if method_value.ndim != 0:
        raise ValueError(f"`method` should be a scalar string: {format_dims(method_value.shape)}")
    name = as_bytes(method_value.item())
    if name != b"farmhash64":
        raise ValueError(f"Unsupported fingerprint method: {name.decode('utf-8', 'backslashreplace')}")
    values = np.asarray(data)
    if values.ndim == 0:
        raise ValueError("`data` should have at least one dimension: []")
    rows = values.shape[0]
    per_row = values.size // rows if rows else 0
    if values.dtype == object:
        strings = flat_strings(values)
        if per_row > 1:
            packed = b"".join(_fingerprint_bytes(fingerprint64(s)) for s in strings)
            step = 8 * per_row
            keys = [packed[i * step:(i + 1) * step] for i in range(rows)]
        else:
            # NOTE: rows of no strings (a [n, 0] input) are left unwritten by TensorFlow; they hash b"" here.
            keys = strings if per_row == 1 else [b""] * rows
    else:
        row_bytes = np.ascontiguousarray(values).reshape(rows, per_row).view(np.uint8)
        keys = [row.tobytes() for row in row_bytes]
    out = np.frombuffer(b"".join(_fingerprint_bytes(fingerprint64(k)) for k in keys), dtype=np.uint8)
    return (out.reshape(rows, 8).copy(),)
