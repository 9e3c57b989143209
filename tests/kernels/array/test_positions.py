"""Kernels that compute positions from values: LowerBound/UpperBound (searchsorted), ListDiff,
InvertPermutation and UnravelIndex.

Expected values were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

SORTED = f32([[1, 2, 2, 4], [0, 0, 5, 9]])
VALUES = f32([[2, 5, 0], [0, 9, 10]])
NAN = float("nan")

CASES = [
    pytest.param("LowerBound", [SORTED, VALUES], {}, [i32(1, 4, 0, 0, 3, 4).reshape(2, 3)], id="lower-bound"),
    pytest.param("UpperBound", [SORTED, VALUES], {"out_type": np.dtype(np.int64)}, [i64(3, 4, 0, 2, 4, 4).reshape(2, 3)],
                 id="upper-bound-int64"),
    # NaN breaks the order: the binary search's own path decides, as in std::lower_bound.
    pytest.param("LowerBound", [f32([[1, 2, NAN]]), f32([[NAN, 3]])], {}, [i32(0, 2).reshape(1, 2)], id="lower-bound-nan"),
    pytest.param("UpperBound", [f32([[1, 2, NAN]]), f32([[NAN, 3]])], {}, [i32(3, 3).reshape(1, 2)], id="upper-bound-nan"),
    pytest.param("LowerBound", [np.zeros((2, 0), np.float32), VALUES], {}, [np.zeros((2, 3), np.int32)],
                 id="lower-bound-empty-rows"),
    pytest.param("ListDiff", [i32(1, 2, 3, 4, 2, 6), i32(2, 4, 7)], {}, [i32(1, 3, 6), i32(0, 2, 5)], id="list-diff"),
    pytest.param("ListDiff", [np.array([b"a", b"b", b"c"], dtype=object), np.array([b"b"], dtype=object)],
                 {"out_idx": np.dtype(np.int64)}, [np.array([b"a", b"c"], dtype=object), i64(0, 2)], id="list-diff-strings"),
    pytest.param("ListDiff", [f32([NAN, 1]), f32([NAN])], {}, [f32([NAN, 1]), i32(0, 1)], id="list-diff-nan-kept"),
    pytest.param("ListDiff", [i32(), i32(1)], {}, [i32(), i32()], id="list-diff-empty"),
    pytest.param("InvertPermutation", [i32(2, 0, 1, 3)], {}, [i32(1, 2, 0, 3)], id="invert-permutation"),
    pytest.param("InvertPermutation", [i64()], {}, [i64()], id="invert-permutation-empty"),
    pytest.param("UnravelIndex", [i32(2, 5, 7), i32(3, 3)], {}, [i32(0, 1, 2, 2, 2, 1).reshape(2, 3)], id="unravel"),
    pytest.param("UnravelIndex", [np.int64(5), i64(2, 3)], {}, [i64(1, 2)], id="unravel-scalar"),
    # Negative indices are not refused: C++ division and remainder give these.
    pytest.param("UnravelIndex", [i32(-1), i32(3, 3)], {}, [i32(0, -1).reshape(2, 1)], id="unravel-negative"),
    pytest.param("UnravelIndex", [i32(0), i32()], {}, [np.zeros((0, 1), np.int32)], id="unravel-no-dims"),
]

ERRORS = [
    pytest.param("LowerBound", [SORTED[0], VALUES[0]], {}, ValueError, "rank 2 but is rank 1 for `sorted_inputs`",
                 id="search-vector"),
    pytest.param("LowerBound", [SORTED, VALUES[:1]], {}, ValueError, "Leading dim_size", id="search-rows"),
    pytest.param("ListDiff", [np.int32([[1]]), i32(1)], {}, ValueError, "x should be a 1D vector", id="list-diff-matrix"),
    pytest.param("InvertPermutation", [i32(2, 0, 0)], {}, ValueError, "0 is duplicated in the input", id="invert-dup"),
    pytest.param("InvertPermutation", [i64(3, 0, 1)], {}, ValueError, "3 is not between 0 and 3", id="invert-range"),
    pytest.param("InvertPermutation", [np.int32([[0]])], {}, ValueError, "1D vector", id="invert-matrix"),
    pytest.param("UnravelIndex", [i32(9), i32(3, 3)], {}, ValueError, "out of bound", id="unravel-too-big"),
    pytest.param("UnravelIndex", [i32(0), i32(3, 0)], {}, ValueError, "dim of zero, but dims contains zero at index 1",
                 id="unravel-zero-dim"),
    pytest.param("UnravelIndex", [i32(0), i32(3, -1)], {}, ValueError, "cannot be negative", id="unravel-negative-dim"),
    pytest.param("UnravelIndex", [np.int32([[2, 5]]), i32(3, 3)], {}, ValueError, "scalar or vector", id="unravel-matrix"),
    pytest.param("UnravelIndex", [i32(), i32(3, 2)], {}, ValueError, "empty tensor indices", id="unravel-empty"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_position_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_position_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_search_agrees_with_numpy_on_sorted_rows(run_kernel):
    rng = np.random.default_rng(0)
    rows = np.sort(rng.integers(0, 20, (5, 37)), axis=1).astype(np.int64)
    values = rng.integers(-3, 24, (5, 50)).astype(np.int64)
    for op, side in (("LowerBound", "left"), ("UpperBound", "right")):
        (out,) = run_kernel(op, rows, values)
        want = np.stack([np.searchsorted(r, v, side=side) for r, v in zip(rows, values)]).astype(np.int32)
        np.testing.assert_array_equal(out, want)
