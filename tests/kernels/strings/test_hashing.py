"""String hashing: the hash functions against their published test vectors, and the StringToHashBucket*
kernels against buckets read off TensorFlow 2.21 ("TF"); tests/fixtures/ops/preprocessing/hash_* hold
TensorFlow's outputs for many more strings."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.strings.hash_functions import fingerprint64, legacy_hash64, siphash24

WORDS = np.array([b"", b"a", b"hello"], dtype=object)

# The reference implementation's vectors (vectors.h): key 00 01 .. 0f, message 00 01 .. n-1, the
# 64-bit output written as its 8 little-endian bytes.
SIPHASH_VECTORS = {
    0: "310e0edd47db6f72", 1: "fd67dc93c539f874", 2: "5a4fa9d909806c0d", 7: "37d1018bf50002ab",
    8: "6224939a79f5f593", 15: "e545be4961ca29a1", 63: "724506eb4c328a95",
}


@pytest.mark.parametrize("length, expected", SIPHASH_VECTORS.items())
def test_siphash24_reference_vectors(length, expected):
    k0 = int.from_bytes(bytes(range(8)), "little")
    k1 = int.from_bytes(bytes(range(8, 16)), "little")
    assert siphash24(k0, k1, bytes(range(length))).to_bytes(8, "little").hex() == expected


def test_fingerprint64_of_nothing_is_farmhash_k2():
    """FarmHash's farmhashna hashes the empty string to its constant k2."""
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F


def test_legacy_hash64_seed():
    """The default seed is TensorFlow's 0xDECAFCAFFE; another seed gives another hash."""
    assert legacy_hash64(b"hello") == legacy_hash64(b"hello", 0xDECAFCAFFE)
    assert legacy_hash64(b"hello", 0) != legacy_hash64(b"hello")


CASES = [
    pytest.param("StringToHashBucketFast", [WORDS], {"num_buckets": 10}, [3, 9, 6], id="fast-TF"),
    pytest.param("StringToHashBucketFast", [WORDS], {"num_buckets": 1}, [0, 0, 0], id="fast-one-bucket"),
    pytest.param("StringToHashBucketStrong", [WORDS], {"num_buckets": 10, "key": (1, 2)}, [5, 6, 2], id="strong-TF"),
    pytest.param("StringToHashBucketStrong", [WORDS], {"num_buckets": 2**62, "key": (2**63 + 5 - 2**64, 7)},
                 [2669046883678012438, 2119963765996229019, 680133653404478821], id="strong-negative-key-word-TF"),
    pytest.param("StringToHashBucket", [WORDS], {"num_buckets": 2**62},
                 [105434511174508091, 2996632905371535868, 1331861223480393034], id="legacy-TF"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_hash_buckets(run_kernel, op, inputs, attrs, expected):
    (out,) = run_kernel(op, *inputs, **attrs)
    assert out.dtype == np.int64
    assert out.tolist() == expected


def test_fast_hash_keeps_shape_and_hashes_bytes_not_text(run_kernel):
    """A [2,2] input gives [2,2] buckets; a str element hashes as its UTF-8 bytes (no normalization)."""
    strings = np.array([[b"caf\xc3\xa9", "café"], ["cafe\u0301", b""]], dtype=object)
    (out,) = run_kernel("StringToHashBucketFast", strings, num_buckets=2**63 - 1)
    assert out.shape == (2, 2)
    assert out[0, 0] == out[0, 1] == fingerprint64("café".encode()) % (2**63 - 1)
    assert out[1, 0] != out[0, 0]  # the decomposed é is other bytes


def test_fast_hash_of_a_scalar(run_kernel):
    (out,) = run_kernel("StringToHashBucketFast", np.array(b"hello", dtype=object), num_buckets=10)
    assert out.shape == () and int(out) == 6


def test_the_three_hashes_differ(run_kernel):
    strings = np.array([b"tensorgate"], dtype=object)
    fast = run_kernel("StringToHashBucketFast", strings, num_buckets=2**62)[0]
    strong = run_kernel("StringToHashBucketStrong", strings, num_buckets=2**62, key=(0, 0))[0]
    legacy = run_kernel("StringToHashBucket", strings, num_buckets=2**62)[0]
    assert len({int(fast[0]), int(strong[0]), int(legacy[0])}) == 3


ERRORS = [
    pytest.param("StringToHashBucketStrong", {"num_buckets": 10, "key": (1,)}, "Key must have 2 elements", id="key-1"),
    pytest.param("StringToHashBucketStrong", {"num_buckets": 10, "key": (1, 2, 3)}, "Key must have 2 elements",
                 id="key-3"),
    pytest.param("StringToHashBucketFast", {"num_buckets": 0},
                 "Value for attr 'num_buckets' of 0 must be at least minimum 1", id="fast-no-buckets"),
    pytest.param("StringToHashBucketStrong", {"num_buckets": -3, "key": (1, 2)}, "must be at least minimum 1",
                 id="strong-negative-buckets"),
    pytest.param("StringToHashBucket", {"num_buckets": 0}, "must be at least minimum 1", id="legacy-no-buckets"),
]


@pytest.mark.parametrize("op, attrs, message", ERRORS)
def test_hash_bucket_errors(run_kernel, op, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, WORDS, **attrs)
