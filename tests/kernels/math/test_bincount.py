"""Bincount, DenseBincount and RaggedBincount: counts, weights, binary_output, values past size, and
TensorFlow's errors. Expected values and messages were read off TensorFlow 2.21;
tests/fixtures/ops/preprocessing/bincount/ holds TensorFlow's outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

NONE = np.zeros([0], np.float32)  # zero-size weights: count
S5 = np.int32(5)

CASES = [
    # Bincount: any shape, one [size] output in the weights' dtype
    pytest.param("Bincount", [i32(1, 1, 3, 7), S5, NONE], {}, [f32([0, 2, 0, 1, 0])], id="bincount-counts"),
    pytest.param("Bincount", [i32(1, 1, 3, 7), S5, f32([0.5, 1, 2, 3])], {}, [f32([0, 1.5, 0, 2, 0])],
                 id="bincount-weights"),
    pytest.param("Bincount", [np.array([[1, 2], [2, 4]], np.int32), S5, f32([[1, 2], [3, 4]])], {},
                 [f32([0, 1, 5, 0, 4])], id="bincount-matrix"),
    pytest.param("Bincount", [i32(1, 2), S5, np.ones((2, 1), np.float32)], {}, [f32([0, 1, 1, 0, 0])],
                 id="bincount-weights-of-another-shape"),
    pytest.param("Bincount", [i32(1, 2, 2), np.int32(3), i32(5, 6, 7)], {}, [i32(0, 5, 13)], id="bincount-int-weights"),
    pytest.param("Bincount", [i32(1, 2, 2), np.int32(3), np.zeros([0], np.float64)], {},
                 [np.array([0, 1, 2], np.float64)], id="bincount-float64-counts"),
    pytest.param("Bincount", [i32(1, 2), np.int32(0), NONE], {}, [NONE], id="bincount-size-0"),
    pytest.param("Bincount", [np.zeros([0], np.int32), np.int32(2), NONE], {}, [f32([0, 0])], id="bincount-nothing"),
    # DenseBincount
    pytest.param("DenseBincount", [i32(1, 1, 3, 7), S5, NONE], {}, [f32([0, 2, 0, 1, 0])], id="dense-1d"),
    pytest.param("DenseBincount", [i64(1, 1, 3, 7), np.int64(5), NONE], {}, [f32([0, 2, 0, 1, 0])], id="dense-int64"),
    pytest.param("DenseBincount", [i32(1, 1, 3, 7), S5, NONE], {"binary_output": True}, [f32([0, 1, 0, 1, 0])],
                 id="dense-1d-binary"),
    pytest.param("DenseBincount", [i32(1, 1, 3), S5, f32([2, 3, 4])], {"binary_output": True}, [f32([0, 1, 0, 1, 0])],
                 id="dense-binary-ignores-weights"),
    pytest.param("DenseBincount", [np.array([[1, 2, 2], [0, 9, 4]], np.int32), S5, NONE], {},
                 [f32([[0, 1, 2, 0, 0], [1, 0, 0, 0, 1]])], id="dense-2d"),
    pytest.param("DenseBincount", [np.array([[1, 2, 2], [0, 9, 4]], np.int32), S5, f32([[1, 2, 3], [4, 5, 6]])], {},
                 [f32([[0, 1, 5, 0, 0], [4, 0, 0, 0, 6]])], id="dense-2d-weights"),
    pytest.param("DenseBincount", [np.array([[1, 2, 2], [0, 9, 4]], np.int32), S5, NONE], {"binary_output": True},
                 [f32([[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]])], id="dense-2d-binary"),
    pytest.param("DenseBincount", [i32(1, 2, 2), np.int32(3), i64(5, 6, 7)], {}, [i64(0, 5, 13)], id="dense-int64-weights"),
    pytest.param("DenseBincount", [np.int32(3), S5, NONE], {}, [f32([0, 0, 0, 1, 0])], id="dense-scalar"),
    pytest.param("DenseBincount", [np.int32(1), np.int32(3), np.float32(2)], {}, [f32([0, 2, 0])],
                 id="dense-scalar-weight"),
    pytest.param("DenseBincount", [np.zeros((0, 3), np.int32), np.int32(4), NONE], {}, [np.zeros((0, 4), np.float32)],
                 id="dense-no-rows"),
    pytest.param("DenseBincount", [np.zeros((2, 0), np.int32), np.int32(3), np.zeros((2, 0), np.float32)], {},
                 [np.zeros((2, 3), np.float32)], id="dense-no-columns"),
    pytest.param("DenseBincount", [np.array([[1, 2]], np.int32), np.int32(3), np.zeros((0, 5), np.float32)], {},
                 [f32([[0, 1, 1]])], id="dense-zero-size-weights-of-any-shape"),
    # RaggedBincount
    pytest.param("RaggedBincount", [i64(0, 2, 2, 5), i32(1, 1, 0, 4, 9), S5, NONE], {},
                 [f32([[0, 2, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 1]])], id="ragged"),
    pytest.param("RaggedBincount", [i64(0, 2, 2, 5), i32(1, 1, 0, 4, 9), S5, f32([1, 2, 3, 4, 5])], {},
                 [f32([[0, 3, 0, 0, 0], [0, 0, 0, 0, 0], [3, 0, 0, 0, 4]])], id="ragged-weights"),
    pytest.param("RaggedBincount", [i64(0, 2, 2, 5), i32(1, 1, 0, 4, 9), S5, f32([1, 2, 3, 4, 5])],
                 {"binary_output": True}, [f32([[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 1]])],
                 id="ragged-binary"),
    pytest.param("RaggedBincount", [i64(0, 3, 2, 5), i32(1, 1, 0, 4, 9), S5, NONE], {},
                 [f32([[1, 2, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]])], id="ragged-unsorted-splits"),
    pytest.param("RaggedBincount", [i64(0, 7, 5), i32(1, 1, 0, 4, 9), S5, NONE], {},
                 [f32([[1, 2, 0, 0, 1], [0, 0, 0, 0, 0]])], id="ragged-split-past-the-end"),
    pytest.param("RaggedBincount", [i64(0), np.zeros([0], np.int32), S5, NONE], {}, [np.zeros((0, 5), np.float32)],
                 id="ragged-no-rows"),
    pytest.param("RaggedBincount", [i64(0, 1, 3), i64(2, 2, 0), np.int64(3), i64(1, 2, 3)], {},
                 [np.array([[0, 0, 1], [3, 0, 2]], np.int64)], id="ragged-int64"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_bincounts(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


def test_dense_bincount_matches_per_row_counts(run_kernel):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 12, (50, 30)).astype(np.int64)
    weights = rng.standard_normal((50, 30)).astype(np.float32)
    (out,) = run_kernel("DenseBincount", values, np.int64(10), weights)
    expected = np.zeros((50, 10), np.float32)
    for r in range(50):
        for v, w in zip(values[r], weights[r]):
            if v < 10:
                expected[r, v] += w
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


WEIGHTS_SHAPE = "`weights` must be the same shape as `arr` or a length-0 `Tensor`"

ERRORS = [
    pytest.param("Bincount", [i32(1, -1), S5, NONE], {}, "Input arr must be non-negative!", id="bincount-negative"),
    pytest.param("Bincount", [i32(1, 2), S5, f32([1, 2, 3])], {}, "Input indices and weights must have the same size.",
                 id="bincount-weights-size"),
    pytest.param("Bincount", [i32(-1, 2), S5, f32([1, 2, 3])], {}, "non-negative!", id="bincount-negative-first"),
    pytest.param("Bincount", [i32(1, 2), np.int32(-1), NONE], {}, r"size \(-1\) must be non-negative",
                 id="bincount-negative-size"),
    pytest.param("Bincount", [i32(1, 2), i32(3), NONE], {}, "Shape must be rank 0 but is rank 1", id="bincount-size-vector"),
    pytest.param("DenseBincount", [i32(1, -1), S5, NONE], {}, "Input arr must be non-negative!", id="dense-1d-negative"),
    pytest.param("DenseBincount", [np.array([[1, -3], [-1, 0]], np.int32), S5, NONE], {"binary_output": True},
                 "Input 'in' must be non-negative! Negative input value found: -1", id="dense-2d-last-negative"),
    pytest.param("DenseBincount", [np.array([[-5, -3], [1, 0]], np.int32), S5, NONE], {},
                 "Negative input value found: -3", id="dense-2d-last-negative-first-row"),
    pytest.param("DenseBincount", [i32(1, 2), S5, f32([1, 2, 3])], {}, WEIGHTS_SHAPE + r".* Received \[3\]",
                 id="dense-weights-size"),
    pytest.param("DenseBincount", [i32(1, 2), S5, np.ones((1, 2), np.float32)], {"binary_output": True},
                 r"Received \[1,2\]", id="dense-weights-shape-checked-when-binary"),
    pytest.param("DenseBincount", [np.int32(1), S5, f32([2])], {}, r"Received \[1\]", id="dense-scalar-weights-shape"),
    pytest.param("DenseBincount", [i32(1, -2), S5, f32([1, 2, 3])], {}, WEIGHTS_SHAPE, id="dense-weights-before-negative"),
    pytest.param("DenseBincount", [np.zeros((1, 1, 1), np.int32), np.int32(-1), NONE], {},
                 "Shape must be at most rank 2 but is rank 3", id="dense-rank-3"),
    pytest.param("DenseBincount", [i32(-1), np.int32(-2), NONE], {}, r"size \(-2\) must be non-negative",
                 id="dense-negative-size-first"),
    pytest.param("RaggedBincount", [i64(0, 2, 2, 5), i32(1, -1, 0, 4, 9), S5, NONE], {}, "Input must be non-negative",
                 id="ragged-negative"),
    pytest.param("RaggedBincount", [i64(1, 2), i32(1, 1), S5, NONE], {}, "Splits must start with 0, not with 1",
                 id="ragged-start"),
    pytest.param("RaggedBincount", [i64(0, 3), i32(-1, 1), S5, NONE], {},
                 "Splits must end with the number of values, got 3 instead of 2", id="ragged-end-before-negative"),
    pytest.param("RaggedBincount", [np.zeros([0], np.int64), np.zeros([0], np.int32), S5, NONE], {},
                 "Splits must be non-empty", id="ragged-no-splits"),
    pytest.param("RaggedBincount", [i64(1, 2), i32(1, 1), np.int32(-5), NONE], {}, r"size \(-5\) must be non-negative",
                 id="ragged-negative-size-first"),
    pytest.param("RaggedBincount", [i64(0, 2), i32(1, 1), S5, f32([1])], {},
                 "Input indices and weights must have the same size.", id="ragged-weights-size"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", ERRORS)
def test_bincount_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
