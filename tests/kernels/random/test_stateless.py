"""Stateless random ops: TensorFlow 2.21's values, a scalar transcription of its Philox and distributions, and
its errors. tests/fixtures/ops/stateless_random/ holds TensorFlow's outputs for more seeds, shapes and dtypes."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

from kernels.registry import AttrBindError

M32 = 0xFFFFFFFF


def philox_block(key: tuple[int, int], counter: tuple[int, int, int, int]) -> list[int]:
    """Philox4x32-10 as TensorFlow's philox_random.h writes it, one block, in Python ints."""
    k0, k1 = key
    c = list(counter)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c


def words_at(key_u64: int, counter_u64: tuple[int, int], block: int) -> list[int]:
    """Block `block` of the stream: the 128-bit counter plus `block`."""
    total = (counter_u64[0] | (counter_u64[1] << 64)) + block
    counter = [(total >> s) & M32 for s in (0, 32, 64, 96)]
    return philox_block((key_u64 & M32, key_u64 >> 32), counter)


def reference_uniform(key_u64: int, counter_u64: tuple[int, int], n: int, dtype) -> np.ndarray:
    """UniformDistribution, element by element: 4 values a block (2 for float64, from word pairs)."""
    dtype = np.dtype(dtype)
    out = []
    per_block = 2 if dtype == np.float64 else 4
    for i in range(n):
        w = words_at(key_u64, counter_u64, i // per_block)
        j = i % per_block
        if dtype == np.float64:
            bits = (1023 << 52) | ((w[2 * j] & 0xFFFFF) << 32) | w[2 * j + 1]
            out.append(struct.unpack("<d", struct.pack("<Q", bits))[0] - 1.0)
        elif dtype == np.float32:
            value = struct.unpack("<f", struct.pack("<I", (127 << 23) | (w[j] & 0x7FFFFF)))[0]
            out.append(np.float32(value) - np.float32(1))
        else:  # float16: 10 mantissa bits
            value = np.array([(15 << 10) | (w[j] & 0x3FF)], np.uint16).view(np.float16)[0]
            out.append(value - np.float16(1))
    return np.array(out, dtype)


def key_counter(run_kernel, seed, dtype=np.int64):
    key, counter = run_kernel("StatelessRandomGetKeyCounter", np.array(seed, dtype))
    return key, counter


# --- TensorFlow's values -----------------------------------------------------------------------------------


def test_seed_scrambles_to_tensorflows_key_and_counter(run_kernel):
    key, counter = key_counter(run_kernel, [1, 2])
    assert key.dtype == counter.dtype == np.uint64
    assert key.tolist() == [10413732777507651514] and counter.tolist() == [0, 17830669156045600267]
    key, counter = key_counter(run_kernel, [-1, 2**40])
    assert key.tolist() == [10657524833782568969] and counter.tolist() == [0, 2387097384896187166]


def test_int32_seeds_are_sign_extended_like_int64_ones(run_kernel):
    a = key_counter(run_kernel, [-7, 3], np.int32)
    b = key_counter(run_kernel, [-7, 3], np.int64)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_uniform_matches_tensorflow(run_kernel):
    key, counter = key_counter(run_kernel, [1, 2])
    shape, alg = np.array([5], np.int32), np.array(1, np.int32)
    (f32,) = run_kernel("StatelessRandomUniformV2", shape, key, counter, alg, dtype=np.dtype(np.float32))
    np.testing.assert_array_equal(f32, np.array([0.8440604209899902, 0.19204533100128174, 0.9962232112884521,
                                                 0.16038739681243896, 0.27199018001556396], np.float32))
    (f64,) = run_kernel("StatelessRandomUniformV2", np.array([3], np.int32), key, counter, alg,
                        dtype=np.dtype(np.float64))
    np.testing.assert_array_equal(f64, [0.7524837538451801, 0.9697857725627486, 0.17592233912897481])
    (f16,) = run_kernel("StatelessRandomUniformV2", shape, key, counter, alg, dtype=np.dtype(np.float16))
    np.testing.assert_array_equal(f16, np.array([0.54296875, 0.2353515625, 0.060546875, 0.8935546875,
                                                 0.1435546875], np.float16))
    (ints,) = run_kernel("StatelessRandomUniformIntV2", shape, key, counter, alg, np.int32(-10), np.int32(10),
                         dtype=np.dtype(np.int32))
    assert ints.dtype == np.int32 and ints.tolist() == [-10, -1, 4, 9, -3]


def test_normals_in_double_match_tensorflow(run_kernel):
    key, counter = key_counter(run_kernel, [1, 2])
    args = (np.array([4], np.int32), key, counter, np.array(1, np.int32))
    # NOTE: exact with numpy (glibc's log, sin and cos, as TensorFlow's CPU kernel); CUDA's may be an ulp off.
    (normal,) = run_kernel("StatelessRandomNormalV2", *args, dtype=np.dtype(np.float64))
    np.testing.assert_allclose(normal, [-0.1423118100189212, 0.7406072461585091, -1.469047669443883,
                                        1.147747453689489], rtol=1e-15, atol=0)
    # Truncated draws reserve 256 words per output: its second pair of doubles starts 128 blocks on, not at block 1.
    (truncated,) = run_kernel("StatelessTruncatedNormalV2", *args, dtype=np.dtype(np.float64))
    np.testing.assert_allclose(truncated, [-0.1423118100189212, 0.7406072461585091, -0.552387756244845,
                                           -0.734450092480207], rtol=1e-15, atol=0)


# --- the rules, transcribed --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 4, 7, 10])
def test_uniform_follows_philox_block_by_block(run_kernel, dtype, n):
    key, counter = key_counter(run_kernel, [123, -456])
    (got,) = run_kernel("StatelessRandomUniformV2", np.array([n], np.int32), key, counter, np.array(1, np.int32),
                        dtype=np.dtype(dtype))
    want = reference_uniform(int(key[0]), tuple(int(c) for c in counter), n, dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_the_block_counter_carries_into_the_high_64_bits(run_kernel):
    key, counter = np.array([0x0123456789ABCDEF], np.uint64), np.array([2**64 - 2, 2**64 - 1], np.uint64)
    (got,) = run_kernel("StatelessRandomUniformV2", np.array([13], np.int64), key, counter, np.array(1, np.int32),
                        dtype=np.dtype(np.float32))
    np.testing.assert_array_equal(got, reference_uniform(0x0123456789ABCDEF, (2**64 - 2, 2**64 - 1), 13, np.float32))


def test_a_longer_draw_extends_a_shorter_one(run_kernel):
    key, counter = key_counter(run_kernel, [5, 6])
    alg = np.array(1, np.int32)
    (short,) = run_kernel("StatelessRandomUniformV2", np.array([6], np.int32), key, counter, alg)
    (long,) = run_kernel("StatelessRandomUniformV2", np.array([3, 11], np.int32), key, counter, alg)
    assert long.shape == (3, 11) and np.array_equal(long.reshape(-1)[:6], short)
    assert ((long >= 0) & (long < 1)).all()


def test_auto_algorithm_is_philox_and_v1_ops_seed_the_same_stream(run_kernel):
    key, counter = key_counter(run_kernel, [8, 9])
    shape = np.array([2, 3], np.int32)
    (philox,) = run_kernel("StatelessRandomUniformV2", shape, key, counter, np.array(1, np.int32))
    (auto,) = run_kernel("StatelessRandomUniformV2", shape, key, counter, np.array(3, np.int32))
    (v1,) = run_kernel("StatelessRandomUniform", shape, np.array([8, 9], np.int64))
    assert np.array_equal(philox, auto) and np.array_equal(philox, v1)
    (alg,) = run_kernel("StatelessRandomGetAlg")
    assert alg.dtype == np.int32 and int(alg) == 1
    *kc, alg = run_kernel("StatelessRandomGetKeyCounterAlg", np.array([8, 9], np.int64))
    assert np.array_equal(kc[0], key) and np.array_equal(kc[1], counter) and int(alg) == 1


def test_full_range_and_64_bit_integers(run_kernel):
    key, counter = key_counter(run_kernel, [1, 2])
    args = (np.array([3], np.int32), key, counter, np.array(1, np.int32))
    (u32,) = run_kernel("StatelessRandomUniformFullIntV2", *args, dtype=np.dtype(np.uint32))
    assert u32.tolist() == words_at(int(key[0]), tuple(int(c) for c in counter), 0)[:3]
    (u64,) = run_kernel("StatelessRandomUniformFullIntV2", *args, dtype=np.dtype(np.uint64))
    w = words_at(int(key[0]), tuple(int(c) for c in counter), 0)
    assert u64[:2].tolist() == [w[0] | (w[1] << 32), w[2] | (w[3] << 32)]
    (i64,) = run_kernel("StatelessRandomUniformIntV2", *args, np.int64(-(2**63)), np.int64(2**63 - 1),
                        dtype=np.dtype(np.int64))
    assert i64.dtype == np.int64 and int(i64[0]) == -(2**63) + int(u64[0]) % (2**64 - 1)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_normal_and_truncated_normal_shapes_and_ranges(run_kernel, dtype):
    key, counter = key_counter(run_kernel, [3, 4])
    args = (np.array([7, 9], np.int32), key, counter, np.array(1, np.int32))
    (normal,) = run_kernel("StatelessRandomNormalV2", *args, dtype=np.dtype(dtype))
    (truncated,) = run_kernel("StatelessTruncatedNormalV2", *args, dtype=np.dtype(dtype))
    assert normal.dtype == truncated.dtype == dtype and normal.shape == truncated.shape == (7, 9)
    assert (np.abs(truncated.astype(np.float64)) <= 2).all() and np.isfinite(normal.astype(np.float64)).all()


def test_empty_outputs_draw_nothing_and_check_no_bounds(run_kernel):
    key, counter = key_counter(run_kernel, [1, 2])
    (empty,) = run_kernel("StatelessRandomUniformIntV2", np.array([0, 3], np.int32), key, counter,
                          np.array(1, np.int32), np.int32(5), np.int32(5), dtype=np.dtype(np.int32))
    assert empty.shape == (0, 3) and empty.dtype == np.int32
    (scalar,) = run_kernel("StatelessRandomUniformV2", np.array([], np.int32), key, counter, np.array(1, np.int32))
    assert scalar.shape == () and 0 <= float(scalar) < 1


# --- errors, in TensorFlow's words -------------------------------------------------------------------------

KEY = np.array([1], np.uint64)
COUNTER = np.array([0, 0], np.uint64)
PHILOX = np.array(1, np.int32)
SHAPE = np.array([2], np.int32)

ERRORS = [
    ("StatelessRandomGetKeyCounter", (np.array([1, 2, 3], np.int64),), {}, r"seed must have shape \[2\], not \[3\]"),
    ("StatelessRandomUniform", (SHAPE, np.array([[1, 2]], np.int32)), {}, r"seed must have shape \[2\], not \[1,2\]"),
    ("StatelessRandomUniformV2", (SHAPE, KEY, COUNTER, np.array(2, np.int32)), {}, "Unsupported algorithm id: 2"),
    ("StatelessRandomUniformV2", (SHAPE, KEY, COUNTER, np.array([1], np.int32)), {},
     r"input 3 \(0-based\) must have shape \[\], not \[1\]"),
    ("StatelessRandomUniformV2", (SHAPE, np.array([1, 2], np.uint64), COUNTER, PHILOX), {},
     r"key must have shape \[1\], not \[2\]\. \(Note that batched keys are not supported yet\.\)"),
    ("StatelessRandomUniformV2", (SHAPE, KEY, np.array([0], np.uint64), PHILOX), {},
     r"counter must be a vector with length at least 2; got shape: \[1\]"),
    ("StatelessRandomUniformV2", (np.array([2, -3], np.int32), KEY, COUNTER, PHILOX), {}, "Dimension -3 must be >= 0"),
    ("StatelessRandomUniformV2", (np.array([[2]], np.int32), KEY, COUNTER, PHILOX), {},
     r"shape must be a vector of \{int32,int64\}, got shape \[1,1\]"),
    ("StatelessRandomUniformIntV2", (SHAPE, KEY, COUNTER, PHILOX, np.int32(5), np.int32(5)),
     {"dtype": np.dtype(np.int32)}, "Need minval < maxval, got 5 >= 5"),
    ("StatelessRandomUniformIntV2", (SHAPE, KEY, COUNTER, PHILOX, np.array([5], np.int32), np.int32(9)),
     {"dtype": np.dtype(np.int32)}, r"minval must be 0-D, got shape \[1\]"),
    ("StatelessRandomUniformV2", (SHAPE, KEY, COUNTER, PHILOX), {"dtype": np.dtype(np.int32)},
     "StatelessRandomUniformV2 has no kernel for dtype int32"),
]


@pytest.mark.parametrize("op,inputs,attrs,message", ERRORS, ids=lambda v: v if isinstance(v, str) else None)
def test_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)


def test_the_integer_op_requires_its_dtype(run_kernel):
    with pytest.raises(AttrBindError, match="dtype"):
        run_kernel("StatelessRandomUniformIntV2", SHAPE, KEY, COUNTER, PHILOX, np.int32(0), np.int32(9))
