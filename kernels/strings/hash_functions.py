"""The 64-bit string hashes TensorFlow buckets strings with, bit for bit: FarmHash's Fingerprint64,
keyed SipHash-2-4 and TensorFlow's legacy Hash64.

- `fingerprint64`: FarmHash `Fingerprint64` (farmhashna), TensorFlow's `Fingerprint64`
  (platform/default/fingerprint.h), behind StringToHashBucketFast, Keras `Hashing` without a salt and
  the lookups' OOV buckets. It comes from pyfarmhash, Google's FarmHash compiled.
- `siphash24`: SipHash-2-4 keyed with two 64-bit words, what `highwayhash::SipHash` computes for
  TensorFlow's StrongKeyedHash (platform/default/strong_hash.h), behind StringToHashBucketStrong and
  Keras `Hashing` with a salt.
- `legacy_hash64`: TensorFlow's MurmurHash-style `Hash64` (core/lib/hash/hash.cc) with its default
  seed 0xDECAFCAFFE, behind the deprecated StringToHashBucket.
- `fingerprint_cat64`: TensorFlow's `FingerprintCat64` (platform/fingerprint.h), which chains two
  fingerprints into one, behind the hashed feature crosses (SparseCross*, RaggedCross).

Each takes the raw bytes (no Unicode normalization) and returns an unsigned 64-bit Python int:

    >>> hex(siphash24(0x0706050403020100, 0x0F0E0D0C0B0A0908, bytes(range(15))))
    '0xa129ca6149be45e5'
"""

from __future__ import annotations

import struct

from farmhash import fingerprint64

__all__ = ["fingerprint64", "fingerprint_cat64", "siphash24", "legacy_hash64"]

_MASK64 = 0xFFFFFFFFFFFFFFFF


def _rotl(x: int, bits: int) -> int:
    return ((x << bits) | (x >> (64 - bits))) & _MASK64


def siphash24(k0: int, k1: int, data: bytes) -> int:
    """SipHash-2-4 of `data` under the key (k0, k1): the key's first and second little-endian words."""
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def sip_rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & _MASK64
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK64
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK64
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK64
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)

    n = len(data)
    whole = n - n % 8
    for (m,) in struct.iter_unpack("<Q", data[:whole]):
        v3 ^= m
        sip_rounds(2)
        v0 ^= m
    # The last word: the leftover bytes, and the length's low byte in the top byte.
    m = int.from_bytes(data[whole:], "little") | ((n & 0xFF) << 56)
    v3 ^= m
    sip_rounds(2)
    v0 ^= m
    v2 ^= 0xFF
    sip_rounds(4)
    return v0 ^ v1 ^ v2 ^ v3


def legacy_hash64(data: bytes, seed: int = 0xDECAFCAFFE) -> int:
    """TensorFlow's `Hash64(data, n, seed)`; its one-argument form uses the seed 0xDECAFCAFFE."""
    m, r = 0xC6A4A7935BD1E995, 47
    n = len(data)
    h = (seed ^ (n * m)) & _MASK64
    whole = n - n % 8
    for (k,) in struct.iter_unpack("<Q", data[:whole]):
        k = (k * m) & _MASK64
        k ^= k >> r
        k = (k * m) & _MASK64
        h = ((h ^ k) * m) & _MASK64
    if n % 8:
        h = ((h ^ int.from_bytes(data[whole:], "little")) * m) & _MASK64
    h ^= h >> r
    h = (h * m) & _MASK64
    return h ^ (h >> r)


_K_MUL = 0xC6A4A7935BD1E995


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def fingerprint_cat64(fp1: int, fp2: int) -> int:
    """TensorFlow's `FingerprintCat64`: two 64-bit fingerprints combined into one (unsigned ints)."""
    result = fp1 ^ _K_MUL
    result ^= (_shift_mix((fp2 * _K_MUL) & _MASK64) * _K_MUL) & _MASK64
    result = (result * _K_MUL) & _MASK64
    result = (_shift_mix(result) * _K_MUL) & _MASK64
    return _shift_mix(result)
