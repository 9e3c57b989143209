"""The indexing kernels' compiled loops (kernels.array.indexing_compiled) held to their numpy twins: the gathers'
index check, Unique, UniqueWithCounts and UniqueV2 on integer vectors, TopKV2 on float32 rows (ties, NaN,
signed zeros and infinities, k from 1 to the whole row); and the small-input paths of Pack, OneHot, Where and
Tile that skip numpy's generic machinery. Outputs agree to the bit, errors word for word."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")


def run(op, *inputs, compiled=True, **attrs):
    fn = kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})
    try:
        return fn(*inputs)
    except (ValueError, IndexError) as e:
        return f"{type(e).__name__}: {e}"


def assert_same_as_twin(op, *inputs, **attrs):
    got, twin = run(op, *inputs, **attrs), run(op, *inputs, compiled=False, **attrs)
    if isinstance(twin, str) or isinstance(got, str):
        assert got == twin
        return twin
    for g, t in zip(got, twin, strict=True):
        assert g.dtype == t.dtype and g.shape == t.shape
        np.testing.assert_array_equal(g.view(np.int32) if g.dtype == np.float32 else g,
                                      t.view(np.int32) if t.dtype == np.float32 else t)
    return twin


@pytest.mark.parametrize("seed", range(3))
def test_top_k_compiled_equals_twin(seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n, rows = int(rng.integers(1, 70)), int(rng.integers(1, 5))
        x = np.round(rng.normal(size=(rows, n)) * rng.choice([1, 4]), int(rng.integers(0, 2))).astype(np.float32)
        pick = rng.random((rows, n))
        x[pick < 0.05] = np.nan
        x[(pick >= 0.05) & (pick < 0.1)] = -0.0
        x[(pick >= 0.1) & (pick < 0.13)] = np.inf
        x[(pick >= 0.13) & (pick < 0.16)] = -np.inf
        if rng.random() < 0.3:
            x = x.reshape(rows, 1, n)
        k = np.int32(rng.integers(0, n + 1))
        assert_same_as_twin("TopKV2", x, k, index_type=rng.choice([np.int32, np.int64]))


def test_top_k_of_a_retrieval_batch():
    scores = np.random.default_rng(5).normal(size=(32, 2000)).astype(np.float32)
    values, indices = assert_same_as_twin("TopKV2", scores, np.int32(10))
    np.testing.assert_array_equal(values, -np.sort(-scores, axis=1)[:, :10])
    assert indices.dtype == np.int32


@pytest.mark.parametrize("op", ["Unique", "UniqueWithCounts"])
def test_unique_compiled_equals_twin(op):
    rng = np.random.default_rng(len(op))
    for _ in range(300):
        x = rng.integers(-5, 5, int(rng.integers(0, 40)))
        dtype = rng.choice([np.int8, np.int32, np.int64, np.uint8, np.uint64])
        x = (x * 2**40 if rng.random() < 0.3 else x).astype(dtype)
        assert_same_as_twin(op, x, out_idx=rng.choice([np.int32, np.int64]))


def test_unique_v2_of_a_vector_compiled_equals_twin():
    rng = np.random.default_rng(2)
    for _ in range(100):
        x = rng.integers(0, 6, int(rng.integers(0, 20)))
        for op in ("UniqueV2", "UniqueWithCountsV2"):
            assert_same_as_twin(op, x, np.array([], np.int64))
            assert_same_as_twin(op, x, np.array([0], np.int64))


def test_unique_lists_values_in_order_of_first_appearance():
    y, idx = run("Unique", np.array([7, 3, 7, 9, 3], np.int64))
    np.testing.assert_array_equal(y, [7, 3, 9])
    np.testing.assert_array_equal(idx, [0, 1, 0, 2, 1])
    assert idx.dtype == np.int32


@pytest.mark.parametrize("indices", [np.array(3), np.array([0, 4, 2]), np.arange(40) % 5, np.array([[1, 2], [3, 0]]),
                                     np.array([1, 5]), np.array(-1), np.arange(40) - 1, np.array([[0, 7]], np.int32)])
def test_gather_index_check_compiled_equals_twin(indices):
    params = np.arange(10, dtype=np.float32).reshape(5, 2)
    assert_same_as_twin("GatherV2", params, indices, np.int32(0))
    assert_same_as_twin("Gather", params, indices)
    if indices.size and indices.min() >= 0:
        assert_same_as_twin("GatherV2", params.T, np.minimum(indices, 1), np.int32(1))


def test_gather_names_the_first_bad_index():
    message = run("GatherV2", np.zeros((5, 2), np.float32), np.arange(40).reshape(4, 10) - 3, np.int32(0))
    assert message == "IndexError: indices[0,0] = -3 is not in [0, 5)"


@pytest.mark.parametrize("values", [
    [np.array(3, np.int32), np.array(4, np.int32)],
    [np.array(b"x", object), np.array(b"yy", object)],
    [np.array(1.5, np.float16), np.array(np.nan, np.float16)],
    [np.array(True), np.array(False), np.array(True)],
])
def test_pack_of_scalars(values):
    out = run("Pack", *values)[0]
    expected = np.stack(values)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    assert out.tolist() == expected.tolist() or np.array_equal(out, expected, equal_nan=True)


@pytest.mark.parametrize("on, off", [(1.0, 0.0), (1.0, -0.0), (2.0, 0.5)])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_values(on, off, axis):
    indices = np.array([[0, 3], [-1, 2]], np.int64)
    out = run("OneHot", indices, np.int32(3), np.float32(on), np.float32(off), axis=axis)[0]
    hot = np.moveaxis(indices[..., None] == np.arange(3), -1, axis)
    expected = np.where(hot, np.float32(on), np.float32(off))
    np.testing.assert_array_equal(out.view(np.int32), expected.view(np.int32))  # -0.0 stays -0.0


def test_where_of_a_mask_is_a_column_of_positions():
    out = run("Where", np.array([False, True, True, False, True]))[0]
    np.testing.assert_array_equal(out, [[1], [2], [4]])
    assert out.dtype == np.int64 and out.shape == (3, 1)


def test_tile_by_ones_is_its_input():
    x = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(run("Tile", x, np.array([1, 1], np.int32))[0], x)
    np.testing.assert_array_equal(run("Tile", x, np.array([2, 1], np.int32))[0], np.tile(x, (2, 1)))
