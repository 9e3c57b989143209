"""Philox4x32-10, TensorFlow's counter-based random generator, and the distributions its stateless random
ops draw from it, bit-for-bit (but for normals in float32 arithmetic: see `_box_muller_float`).

A generator is a 64-bit key and a 128-bit counter. Block `i` of a stream is the ten-round Philox bijection
of counter + i (128-bit addition) under the key: four uint32 words. TensorFlow fills an output of n values
from consecutive blocks, each block giving `per_block` values (4 for 32-bit and 16-bit types, 2 for 64-bit
ones, which take two words each); the last block may be partly used. Here every block is computed at once,
over uint64 arrays holding 32-bit words (so a 32x32-bit product is one exact uint64 multiplication).

Seeds become a key and counter as TensorFlow's `GenerateKey` does: the seed pair is the counter of one
Philox block under a fixed key; the block's first two words are the key, its last two the counter's high
half.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "Generator",
    "full_range_ints",
    "generator_from_seed",
    "key_counter_arrays",
    "normal_floats",
    "philox_blocks",
    "truncated_normal_floats",
    "uniform_floats",
    "uniform_ints",
]

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF
_MULTIPLIER_A, _MULTIPLIER_B = 0xD2511F53, 0xCD9E8D57
_KEY_STEP_A, _KEY_STEP_B = 0x9E3779B9, 0xBB67AE85
_SEED_SCRAMBLE_KEY = (0x3EC8F720, 0x02461E29)

Generator = tuple[tuple[int, int], tuple[int, int, int, int]]  # (key words, counter words), Python ints


def philox_blocks(xp: Any, generator: Generator, offsets: Any) -> Any:
    """The Philox blocks at `offsets` (a uint64 array of block indices) of `generator`'s stream: a uint64
    array of shape offsets.shape + (4,) whose values are the blocks' uint32 words."""
    (k0, k1), (c0, c1, c2, c3) = generator
    u64 = xp.uint64
    low = u64(c0 | (c1 << 32)) + offsets
    high = u64(c2 | (c3 << 32)) + (low < offsets).astype(u64)  # the carry of the 128-bit addition
    mask, shift = u64(_MASK32), u64(32)
    x0, x1, x2, x3 = low & mask, low >> shift, high & mask, high >> shift
    for _ in range(10):
        # Each round: hi/lo of two 32x32-bit products, mixed with the other two words and the key. In place
        # where an array is not needed again, which saves a third of the time on large draws.
        p0, p1 = x0, x2
        p0 *= u64(_MULTIPLIER_A)
        p1 *= u64(_MULTIPLIER_B)
        x0 = p1 >> shift
        x0 ^= x1
        x0 ^= u64(k0)
        x2 = p0 >> shift
        x2 ^= x3
        x2 ^= u64(k1)
        x1, x3 = p1, p0
        x1 &= mask
        x3 &= mask
        k0, k1 = (k0 + _KEY_STEP_A) & _MASK32, (k1 + _KEY_STEP_B) & _MASK32
    return xp.stack([x0, x1, x2, x3], axis=-1)


def _words(xp: Any, generator: Generator, size: int, per_block: int) -> Any:
    """The uint32 words behind `size` values drawn `per_block` to a block: shape [size, 4 // per_block]."""
    blocks = -(-size // per_block)
    words = philox_blocks(xp, generator, xp.arange(blocks, dtype=xp.uint64)).astype(xp.uint32)
    return words.reshape(blocks * per_block, 4 // per_block)[:size]


def generator_from_seed(seed: Any) -> Generator:
    """TensorFlow's GenerateKey: the generator of a [2] int32/int64 seed (int32 values sign-extended)."""
    seed0, seed1 = (int(v) & _MASK64 for v in seed.tolist())
    counter = (seed0 & _MASK32, seed0 >> 32, seed1 & _MASK32, seed1 >> 32)
    mix = philox_blocks(np, (_SEED_SCRAMBLE_KEY, counter), np.zeros(1, np.uint64))[0].tolist()
    return (mix[0], mix[1]), (0, 0, mix[2], mix[3])


def key_counter_arrays(xp: Any, generator: Generator) -> tuple[Any, Any]:
    """A generator as TensorFlow's key ([1] uint64) and counter ([2] uint64) tensors: low word first."""
    (k0, k1), (c0, c1, c2, c3) = generator
    key = xp.asarray([k0 | (k1 << 32)], dtype=xp.uint64)
    return key, xp.asarray([c0 | (c1 << 32), c2 | (c3 << 32)], dtype=xp.uint64)


# --- uint32 words to values --------------------------------------------------------------------------------


def _unit_floats(xp: Any, words: Any, dtype: np.dtype) -> Any:
    """[0, 1) from random mantissa bits under a zero exponent, minus one (exact), as TensorFlow's
    Uint32ToFloat / Uint64ToDouble / Uint16ToHalf / Uint16ToGfloat16. `words` is [n, 1] or [n, 2]."""
    if dtype == np.float64:
        bits = ((words[:, 0].astype(xp.uint64) & xp.uint64(0xFFFFF)) << xp.uint64(32)) | words[:, 1]
        return (bits | xp.uint64(1023 << 52)).view(xp.float64) - 1.0
    w = words[:, 0]
    if dtype == np.float32:
        return ((w & xp.uint32(0x7FFFFF)) | xp.uint32(127 << 23)).view(xp.float32) - xp.float32(1)
    if dtype == np.float16:
        bits = ((w & xp.uint32(0x3FF)) | xp.uint32(15 << 10)).astype(xp.uint16)
        return bits.view(xp.float16) - xp.float16(1)
    if dtype == ml_dtypes.bfloat16:
        bits = ((w & xp.uint32(0x7F)) | xp.uint32(127 << 7)).astype(xp.uint16)
        return bits.view(ml_dtypes.bfloat16) - ml_dtypes.bfloat16(1)
    raise ValueError(f"unsupported dtype {np.dtype(dtype).name} for a random float")


def _per_block(dtype: np.dtype) -> int:
    return 2 if np.dtype(dtype).itemsize == 8 else 4


def uniform_floats(xp: Any, generator: Generator, size: int, dtype: np.dtype) -> Any:
    """`size` floats uniform in [0, 1): TensorFlow's UniformDistribution for half, bfloat16, float, double."""
    return _unit_floats(xp, _words(xp, generator, size, _per_block(dtype)), dtype)


def _uint64s(xp: Any, words: Any) -> Any:
    return words[:, 0].astype(xp.uint64) | (words[:, 1].astype(xp.uint64) << xp.uint64(32))


def uniform_ints(xp: Any, generator: Generator, size: int, dtype: np.dtype, lo: int, hi: int) -> Any:
    """`size` integers in [lo, hi) as TensorFlow draws them (lo < hi): lo + word % (hi - lo), the range
    unsigned; int64 values take two words, low first."""
    dtype = np.dtype(dtype)
    words = _words(xp, generator, size, _per_block(dtype))
    bits = 64 if dtype.itemsize == 8 else 32
    span = (hi - lo) % (1 << bits)
    drawn = _uint64s(xp, words) if bits == 64 else words[:, 0].astype(xp.uint64)
    # NOTE: lo + (word % span) fits the type (TensorFlow's SignedAdd); wrapping unsigned addition gives it.
    total = (drawn % xp.uint64(span)) + xp.uint64(lo & _MASK64)
    return total.astype(xp.uint32 if bits == 32 else xp.uint64).view(dtype)


def full_range_ints(xp: Any, generator: Generator, size: int, dtype: np.dtype) -> Any:
    """`size` integers over the whole range of `dtype` (int32, uint32: one word; int64, uint64: two)."""
    dtype = np.dtype(dtype)
    words = _words(xp, generator, size, _per_block(dtype))
    if dtype.itemsize == 8:
        return _uint64s(xp, words).view(dtype)
    return words[:, 0].view(dtype)


# --- Box-Muller --------------------------------------------------------------------------------------------

_TWO_PI = 2.0 * np.pi  # NOTE: `2.0f * M_PI` in TensorFlow is a double product: the angle is computed in double


def _box_muller_float(xp: Any, x0: Any, x1: Any) -> tuple[Any, Any]:
    """TensorFlow's BoxMullerFloat on word arrays: two float32 normals per pair of words. log, sin and cos
    are evaluated in float64 and rounded once: correctly rounded, where glibc's logf and sincosf, which
    TensorFlow calls, are not always (about 1.5% of TensorFlow's values are an ulp away from these)."""
    u1 = _unit_floats(xp, x0[:, None], np.float32)
    u1 = xp.maximum(u1, xp.float32(1.0e-7))
    v1 = (_TWO_PI * _unit_floats(xp, x1[:, None], np.float32).astype(xp.float64)).astype(xp.float32)
    log_u1 = xp.log(u1.astype(xp.float64)).astype(xp.float32)
    u2 = xp.sqrt(xp.float32(-2.0) * log_u1)
    v1 = v1.astype(xp.float64)
    return xp.sin(v1).astype(xp.float32) * u2, xp.cos(v1).astype(xp.float32) * u2


def _box_muller_double(xp: Any, words: Any) -> tuple[Any, Any]:
    """TensorFlow's BoxMullerDouble: two float64 normals from four words."""
    u1 = xp.maximum(_unit_floats(xp, words[:, 0:2], np.float64), 1.0e-7)
    v1 = _TWO_PI * _unit_floats(xp, words[:, 2:4], np.float64)
    u2 = xp.sqrt(-2.0 * xp.log(u1))
    return xp.sin(v1) * u2, xp.cos(v1) * u2


def _normal_candidates(xp: Any, blocks: Any, dtype: np.dtype) -> Any:
    """Per block, the normals TensorFlow derives from it in order: [n, 4] (float32 math) or [n, 2] (double)."""
    if dtype == np.float64:
        d0, d1 = _box_muller_double(xp, blocks.astype(xp.uint32))
        return xp.stack([d0, d1], axis=-1)
    words = blocks.astype(xp.uint32)
    f0, f1 = _box_muller_float(xp, words[:, 0], words[:, 1])
    f2, f3 = _box_muller_float(xp, words[:, 2], words[:, 3])
    return xp.stack([f0, f1, f2, f3], axis=-1)


def normal_floats(xp: Any, generator: Generator, size: int, dtype: np.dtype) -> Any:
    """`size` standard normals: TensorFlow's NormalDistribution (half and bfloat16 round the float32 values)."""
    dtype = np.dtype(dtype)
    blocks = philox_blocks(xp, generator, xp.arange(-(-size // _per_block(dtype)), dtype=xp.uint64))
    return _normal_candidates(xp, blocks, dtype).reshape(-1)[:size].astype(dtype, copy=False)


# NOTE: TensorFlow reserves 256 draws per output value for rejection sampling, so output group g (of
# `per_block` values) starts at block g * 256 * per_block / 4 of the stream, whatever earlier groups used.
_RESERVED_SAMPLES_PER_OUTPUT = 256


def truncated_normal_floats(xp: Any, generator: Generator, size: int, dtype: np.dtype) -> Any:
    """`size` standard normals inside (-2, 2): TensorFlow's TruncatedNormalDistribution. Each group draws
    blocks from its own start until it has accepted `per_block` values, keeping them in drawing order;
    every group's next block is computed at once, over the groups still short."""
    dtype = np.dtype(dtype)
    per_block = _per_block(dtype)
    groups = -(-size // per_block)
    stride = per_block * _RESERVED_SAMPLES_PER_OUTPUT // 4
    out = xp.zeros((groups, per_block), dtype=xp.float64 if dtype == np.float64 else xp.float32)
    filled = xp.zeros(groups, dtype=xp.int64)
    pending = xp.arange(groups, dtype=xp.int64)
    step = 0
    while pending.size:
        offsets = pending.astype(xp.uint64) * xp.uint64(stride) + xp.uint64(step)
        candidates = _normal_candidates(xp, philox_blocks(xp, generator, offsets), dtype)
        accepted = xp.abs(candidates) < 2.0
        slot = filled[pending][:, None] + xp.cumsum(accepted, axis=1) - 1
        take = accepted & (slot < per_block)
        rows = xp.broadcast_to(pending[:, None], take.shape)[take]
        out[rows, slot[take]] = candidates[take]
        filled[pending] = xp.minimum(filled[pending] + accepted.sum(axis=1), per_block)
        pending = pending[filled[pending] < per_block]
        step += 1
    return out.reshape(-1)[:size].astype(dtype, copy=False)
