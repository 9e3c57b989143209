"""SparseTensor ops: SparseToDense, SparseReorder, SparseReshape, SparseFillEmptyRows, SparseConcat, SparseSlice,
SparseAdd, SparseTensorDenseMatMul and the sparse reductions, with TensorFlow's orderings, edge cases and errors.
Expected values and messages were read off TensorFlow 2.21; tests/fixtures/ops/sparse/ holds TensorFlow's
outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

NAN = float("nan")


def ix(*rows, rank=2) -> np.ndarray:
    return np.array(rows, np.int64).reshape(-1, rank)


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() for v in values]
    return out


S23 = i64(2, 3)
S33 = i64(3, 3)
SLICE_IX = ix([0, 0], [0, 3], [1, 1], [2, 2], [3, 4], [3, 0])
SLICE_V = f32([1, 2, 3, 4, 5, 6])
RED_IX = ix([0, 0], [0, 2], [1, 1], [2, 0], [2, 2])
RED_V = f32([1, 2, 3, -4, 5])

CASES = [
    # SparseToDense
    pytest.param("SparseToDense", [ix([0, 1], [1, 2]), S23, f32([5, 6]), np.float32(-1)], {},
                 [f32([[-1, 5, -1], [-1, -1, 6]])], id="to-dense"),
    pytest.param("SparseToDense", [i64(0, 3), i64(5), f32([5, 6]), np.float32(0)], {}, [f32([5, 0, 0, 6, 0])],
                 id="to-dense-vector-indices"),
    pytest.param("SparseToDense", [np.int64(2), i64(5), np.float32(5), np.float32(0)], {}, [f32([0, 0, 5, 0, 0])],
                 id="to-dense-scalar-index"),
    pytest.param("SparseToDense", [ix([0, 1], [1, 2]).astype(np.int32), i32(2, 3), np.float32(7), np.float32(0)], {},
                 [f32([[0, 7, 0], [0, 0, 7]])], id="to-dense-scalar-value-int32"),
    pytest.param("SparseToDense", [ix([0, 1], [0, 1]), S23, f32([5, 6]), np.float32(0)], {"validate_indices": False},
                 [f32([[0, 6, 0], [0, 0, 0]])], id="to-dense-unvalidated-repeat-last-wins"),
    pytest.param("SparseToDense", [ix([0, 1], [1, 0]), i64(2, 2), strings("a", "b"), np.array(b"z", dtype=object)],
                 {}, [np.array([[b"z", b"a"], [b"b", b"z"]], dtype=object)], id="to-dense-strings"),
    pytest.param("SparseToDense", [ix(), i64(0, 2), f32([]), np.float32(3)], {}, [np.zeros((0, 2), np.float32)],
                 id="to-dense-empty"),
    pytest.param("SparseToDense", [np.zeros((1, 0), np.int64), np.zeros(0, np.int64), f32([1]), np.float32(0)], {},
                 [np.float32(1)], id="to-dense-scalar-output"),
    # SparseReorder
    pytest.param("SparseReorder", [ix([1, 2], [0, 1], [1, 0], [0, 0]), f32([1, 2, 3, 4]), S23], {},
                 [ix([0, 0], [0, 1], [1, 0], [1, 2]), f32([4, 2, 3, 1])], id="reorder"),
    pytest.param("SparseReorder", [ix([1, 2], [0, 1], [1, 2]), f32([1, 2, 3]), S23], {},
                 [ix([0, 1], [1, 2], [1, 2]), f32([2, 1, 3])], id="reorder-stable"),
    pytest.param("SparseReorder", [ix([1, 2], [5, 1], [-1, 0]), f32([1, 2, 3]), S23], {},
                 [ix([-1, 0], [1, 2], [5, 1]), f32([3, 1, 2])], id="reorder-unchecked-bounds"),
    # SparseReshape
    pytest.param("SparseReshape", [ix([0, 1], [1, 2]), S23, i64(3, -1)], {}, [ix([0, 1], [2, 1]), i64(3, 2)],
                 id="reshape"),
    pytest.param("SparseReshape", [ix([0, 1], [1, 2]), S23, i64(1, -1, 2)], {}, [ix([0, 0, 1], [0, 2, 1], rank=3),
                                                                               i64(1, 3, 2)], id="reshape-3d"),
    pytest.param("SparseReshape", [ix([0, 5]), S23, i64(6)], {}, [ix([5], rank=1), i64(6)], id="reshape-out-of-range"),
    pytest.param("SparseReshape", [ix(), i64(0, 3), i64(-1, 2)], {}, [ix(), i64(0, 2)], id="reshape-empty"),
    pytest.param("SparseReshape", [ix([1, 0]), S23, i64(2, 3)], {}, [ix([1, 0]), S23], id="reshape-same"),
    # SparseFillEmptyRows
    pytest.param("SparseFillEmptyRows", [ix([0, 1], [0, 2], [2, 0]), f32([1, 2, 3]), i64(4, 3), np.float32(-1)], {},
                 [ix([0, 1], [0, 2], [1, 0], [2, 0], [3, 0]), f32([1, 2, -1, 3, -1]),
                  np.array([False, True, False, True]), i64(0, 1, 3)], id="fill"),
    pytest.param("SparseFillEmptyRows", [ix([2, 0], [0, 2], [0, 1]), f32([1, 2, 3]), i64(4, 3), np.float32(-1)], {},
                 [ix([0, 2], [0, 1], [1, 0], [2, 0], [3, 0]), f32([2, 3, -1, 1, -1]),
                  np.array([False, True, False, True]), i64(3, 0, 1)], id="fill-unsorted-by-row"),
    pytest.param("SparseFillEmptyRows", [ix(), f32([]), i64(3, 3), np.float32(-1)], {},
                 [ix([0, 0], [1, 0], [2, 0]), f32([-1, -1, -1]), np.array([True] * 3), i64()], id="fill-all-empty"),
    pytest.param("SparseFillEmptyRows", [ix(), f32([]), i64(0, 3), np.float32(-1)], {},
                 [ix(), f32([]), np.zeros(0, bool), i64()], id="fill-no-rows"),
    pytest.param("SparseFillEmptyRows", [ix([1, 0, 1], rank=3), f32([1]), i64(3, 2, 2), np.float32(0)], {},
                 [ix([0, 0, 0], [1, 0, 1], [2, 0, 0], rank=3), f32([0, 1, 0]), np.array([True, False, True]), i64(1)],
                 id="fill-rank-3"),
    pytest.param("SparseFillEmptyRows", [ix([1, 0]), strings("a"), i64(2, 3), np.array(b"", dtype=object)], {},
                 [ix([0, 0], [1, 0]), np.array([b"", b"a"], dtype=object), np.array([True, False]), i64(1)],
                 id="fill-strings"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1], [1, 9]), f32([1, 2]), i64(4, 3), np.float32(-1)], {},
                 [ix([0, 1], [1, 9], [2, 0], [3, 0]), f32([1, 2, -1, -1]), np.array([False, False, True, True]),
                  i64(0, 1)], id="fill-column-unchecked"),
    # SparseConcat (N indices, N values, N shapes)
    pytest.param("SparseConcat", [ix([0, 1], [1, 0]), ix([0, 0], [1, 1]), f32([1, 2]), f32([3, 4]), S23, i64(2, 2)],
                 {"concat_dim": 1, "N": 2}, [ix([0, 1], [0, 3], [1, 0], [1, 4]), f32([1, 3, 2, 4]), i64(2, 5)], id="concat-1"),
    pytest.param("SparseConcat", [ix([1, 0], [0, 1]), ix([1, 1], [0, 0]), f32([1, 2]), f32([3, 4]), S23, i64(2, 2)],
                 {"concat_dim": -1, "N": 2}, [ix([0, 1], [0, 3], [1, 0], [1, 4]), f32([2, 4, 1, 3]), i64(2, 5)],
                 id="concat-sorts"),
    pytest.param("SparseConcat", [ix([1, 1], [0, 1]), ix([0, 2], [0, 0]), f32([1, 2]), f32([3, 4]), S23, i64(1, 3)],
                 {"concat_dim": 0, "N": 2}, [ix([0, 1], [1, 1], [2, 0], [2, 2]), f32([2, 1, 4, 3]), i64(3, 3)], id="concat-0"),
    pytest.param("SparseConcat", [ix([0, 1], [0, 1]), ix([0, 0]), f32([1, 2]), f32([3]), S23, i64(2, 1)],
                 {"concat_dim": 1, "N": 2}, [ix([0, 1], [0, 1], [0, 3]), f32([1, 2, 3]), i64(2, 4)], id="concat-repeats"),
    # SparseSlice
    pytest.param("SparseSlice", [SLICE_IX, SLICE_V, i64(4, 5), i64(1, 1), i64(2, 3)], {},
                 [ix([0, 0], [1, 1]), f32([3, 4]), i64(2, 3)], id="slice"),
    pytest.param("SparseSlice", [SLICE_IX, SLICE_V, i64(4, 5), i64(2, 2), i64(10, 10)], {},
                 [ix([0, 0], [1, 2]), f32([4, 5]), i64(2, 3)], id="slice-cut-at-end"),
    pytest.param("SparseSlice", [SLICE_IX, SLICE_V, i64(4, 5), i64(5, 0), i64(1, 1)], {},
                 [ix(), f32([]), i64(0, 1)], id="slice-past-end"),
    pytest.param("SparseSlice", [SLICE_IX, SLICE_V, i64(4, 5), i64(-1, 0), i64(2, 2)], {},
                 [ix([1, 0]), f32([1]), i64(2, 2)], id="slice-negative-start"),
    pytest.param("SparseSlice", [ix([3, 0], [0, 3], [1, 1]), f32([1, 2, 3]), i64(4, 5), i64(0, 0), i64(4, 4)], {},
                 [ix([3, 0], [0, 3], [1, 1]), f32([1, 2, 3]), i64(4, 4)], id="slice-keeps-order"),
    # SparseAdd
    pytest.param("SparseAdd", [ix([0, 1], [1, 0], [2, 2]), f32([1, 2, 3]), S33, ix([0, 0], [1, 0], [2, 1]),
                               f32([10, -2, 5]), S33, np.float32(0)], {},
                 [ix([0, 0], [0, 1], [1, 0], [2, 1], [2, 2]), f32([10, 1, 0, 5, 3]), S33], id="add"),
    pytest.param("SparseAdd", [ix([0, 1], [1, 0], [2, 2]), f32([1, 2, 3]), S33, ix([0, 0], [1, 0], [2, 1]),
                               f32([10, -1.5, 5]), S33, np.float32(1)], {},
                 [ix([0, 0], [0, 1], [2, 1], [2, 2]), f32([10, 1, 5, 3]), S33], id="add-thresh-drops-small-sums"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([0.2]), S33, ix([1, 1]), f32([0.1]), S33, np.float32(1)], {},
                 [ix([0, 1], [1, 1]), f32([0.2, 0.1]), S33], id="add-thresh-spares-unmatched"),
    pytest.param("SparseAdd", [ix([2, 2], [0, 1]), f32([3, 1]), S33, ix([1, 0], [0, 1]), f32([5, 7]), S33,
                               np.float32(0)], {}, [ix([1, 0], [0, 1], [2, 2], [0, 1]), f32([5, 7, 3, 1]), S33],
                 id="add-unsorted-walk"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([1]), S33, ix([0, 1], [0, 1], [1, 1]), f32([10, 20, 30]), S33,
                               np.float32(0)], {}, [ix([0, 1], [0, 1], [1, 1]), f32([11, 20, 30]), S33],
                 id="add-repeats"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([NAN]), S33, ix([0, 1]), f32([0.5]), S33, np.float32(0)], {},
                 [ix(), f32([]), S33], id="add-nan-sum-dropped"),
    pytest.param("SparseAdd", [ix([0, 1]), i32(1), S33, ix([0, 1]), i32(-1), S33, np.int32(0)], {},
                 [ix([0, 1]), i32(0), S33], id="add-int-zero-kept"),
    # SparseTensorDenseMatMul
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1], [1, 0], [1, 2]), f32([1, 2, 3]), S23,
                                             np.arange(6, dtype=np.float32).reshape(3, 2)], {},
                 [f32([[2, 3], [12, 17]])], id="matmul"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1], [2, 0]), f32([1, 2]), i64(3, 2),
                                             np.arange(6, dtype=np.float32).reshape(3, 2)], {"adjoint_a": True},
                 [f32([[8, 10], [0, 1]])], id="matmul-adjoint-a"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1], [0, 1]), f32([1, 2]), S23,
                                             np.arange(6, dtype=np.float32).reshape(3, 2)], {},
                 [f32([[6, 9], [0, 0]])], id="matmul-repeats-add"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1]), np.array([1 + 2j], np.complex64), S23,
                                             np.array([[1j, 2], [3, 4], [5, 6j]], np.complex64)],
                 {"adjoint_a": True, "adjoint_b": True},
                 [np.array([[0, 0, 0], [(1 - 2j) * -1j, (1 - 2j) * 3, (1 - 2j) * 5], [0, 0, 0]], np.complex64)],
                 id="matmul-conjugates"),
    pytest.param("SparseTensorDenseMatMul", [ix(), f32([]), S23, np.ones((3, 2), np.float32)], {},
                 [np.zeros((2, 2), np.float32)], id="matmul-empty"),
    # Sparse reductions
    pytest.param("SparseReduceSum", [RED_IX, RED_V, S33, i32(1)], {}, [f32([3, 3, 1])], id="reduce-sum"),
    pytest.param("SparseReduceSum", [RED_IX, RED_V, S33, i32(0)], {"keep_dims": True}, [f32([[-3, 3, 7]])],
                 id="reduce-sum-keep-dims"),
    pytest.param("SparseReduceSum", [RED_IX, RED_V, S33, np.int32(-1)], {}, [f32([3, 3, 1])], id="reduce-sum-negative"),
    pytest.param("SparseReduceSum", [RED_IX, RED_V, S33, i32(0, 1)], {}, [np.float32(7)], id="reduce-sum-all"),
    pytest.param("SparseReduceSum", [RED_IX, RED_V, S33, i32()], {}, [f32([[1, 0, 2], [0, 3, 0], [-4, 0, 5]])],
                 id="reduce-sum-no-axes"),
    pytest.param("SparseReduceMax", [RED_IX, RED_V, S33, i32(0)], {}, [f32([1, 3, 5])], id="reduce-max"),
    pytest.param("SparseReduceMax", [ix(), f32([]), S33, i32(1)], {}, [f32([0, 0, 0])], id="reduce-max-empty-is-zero"),
    pytest.param("SparseReduceMax", [ix([0, 0], [0, 1], [1, 0], [1, 1]), f32([NAN, 1, 2, NAN]), i64(2, 2), i32(1)], {},
                 [f32([1, NAN])], id="reduce-max-nan"),
    pytest.param("SparseReduceSum", [ix([2, 0], [0, 2], [0, 0], [0, 0]), f32([1, 2, 3, 4]), S33, i32(1)], {},
                 [f32([9, 0, 1])], id="reduce-sum-unsorted-repeats"),
    pytest.param("SparseReduceSumSparse", [RED_IX, RED_V, S33, i32(1)], {},
                 [ix([0], [1], [2], rank=1), f32([3, 3, 1]), i64(3)], id="reduce-sum-sparse"),
    pytest.param("SparseReduceSumSparse", [RED_IX, RED_V, S33, i32(0)], {"keep_dims": True},
                 [ix([0, 0], [0, 1], [0, 2]), f32([-3, 3, 7]), i64(1, 3)], id="reduce-sum-sparse-keep-dims"),
    pytest.param("SparseReduceMaxSparse", [RED_IX, RED_V, S33, i32(0, 1)], {},
                 [np.zeros((1, 0), np.int64), f32([5]), i64()], id="reduce-max-sparse-all"),
    pytest.param("SparseReduceSumSparse", [ix([0, 0], [5, 0]), f32([1, 2]), S33, i32(1)], {},
                 [ix([0], [5], rank=1), f32([1, 2]), i64(3)], id="reduce-sum-sparse-unchecked"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_sparse_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


def test_sorted_sparse_add_matches_the_merge_walk():
    from kernels.sparse.arithmetic import _merge_sorted, _merge_walk

    rng = np.random.default_rng(0)
    for _ in range(300):
        a = np.sort(rng.integers(0, 4, rng.integers(0, 7)))[:, None] * [1, 0]
        b = np.sort(rng.integers(0, 4, rng.integers(0, 7)))[:, None] * [1, 0]
        for got, want in zip(_merge_sorted(a, b), _merge_walk(a, b)):
            np.testing.assert_array_equal(got, want)


ERRORS = [
    pytest.param("SparseToDense", [ix([1, 2], [0, 1]), S23, f32([5, 6]), np.float32(0)], {},
                 r"indices\[1\] = \[0,1\] is out of order. Many sparse ops require sorted indices.", id="to-dense-order"),
    pytest.param("SparseToDense", [ix([0, 1], [0, 1]), S23, f32([5, 6]), np.float32(0)], {},
                 r"indices\[1\] = \[0,1\] is repeated", id="to-dense-repeat"),
    pytest.param("SparseToDense", [ix([0, 1], [2, 2]), S23, f32([5, 6]), np.float32(0)], {},
                 r"indices\[1\] = \[2,2\] is out of bounds: need 0 <= index < \[2,3\]", id="to-dense-bounds"),
    pytest.param("SparseToDense", [ix([1, 1], [0, 9]), S23, f32([5, 6]), np.float32(0)], {},
                 r"indices\[1\] = \[0,9\] is out of bounds", id="to-dense-bounds-before-order"),
    pytest.param("SparseToDense", [ix([0, 1], [-1, 2]), S23, f32([5, 6]), np.float32(0)], {"validate_indices": False},
                 r"Indices are not valid \(out of bounds\).  Shape: \[2,3\]", id="to-dense-unvalidated-bounds"),
    pytest.param("SparseToDense", [i64(3, 1), i64(5), f32([5, 6]), np.float32(0)], {},
                 r"indices\[1\] = \[1\] is out of order", id="to-dense-vector-order"),
    pytest.param("SparseToDense", [np.zeros((1, 1, 1), np.int64), i64(2), f32([5]), np.float32(0)], {},
                 r"sparse_indices should be a scalar, vector, or matrix, got shape \[1,1,1\]", id="to-dense-rank-3"),
    pytest.param("SparseToDense", [ix([0, 1]), np.array([[2, 3]], np.int64), f32([5]), np.float32(0)], {},
                 r"output_shape must be rank 1, got shape \[1,2\]", id="to-dense-shape-rank"),
    pytest.param("SparseToDense", [ix([0, 1]), i64(2, 3, 4), f32([5]), np.float32(0)], {},
                 "output_shape has incorrect number of elements: 3 should be: 2", id="to-dense-shape-size"),
    pytest.param("SparseToDense", [ix([0, 1]), S23, f32([5, 6]), np.float32(0)], {},
                 r"sparse_values has incorrect shape \[2\], should be \[\] or \[1\]", id="to-dense-values"),
    pytest.param("SparseToDense", [ix([0, 1]), S23, f32([5]), f32([0])], {}, "default_value should be a scalar.",
                 id="to-dense-default"),
    pytest.param("SparseToDense", [ix([0, 1]), i64(2, -3), f32([5]), np.float32(0)], {}, "Dimension -3 must be >= 0",
                 id="to-dense-negative-dim"),
    pytest.param("SparseReorder", [i64(1, 2), f32([1, 2]), S23], {}, "Sparse indices must be rank 2 but is rank 1",
                 id="reorder-indices"),
    pytest.param("SparseReorder", [ix([1, 2]), np.ones((1, 1), np.float32), S23], {},
                 "Sparse values must be rank 1 but is rank 2", id="reorder-values"),
    pytest.param("SparseReorder", [ix([1, 2]), f32([1]), np.array([[2, 3]], np.int64)], {},
                 "Sparse shape must be rank 1 but is rank 2", id="reorder-shape"),
    pytest.param("SparseReorder", [ix([1, 2], [0, 1]), f32([1]), S23], {},
                 r"Number of elements in indices \(2\) and values \(1\) do not match", id="reorder-count"),
    pytest.param("SparseReorder", [ix([1, 2]), f32([1]), i64(2, 3, 4)], {},
                 r"Index rank \(2\) and shape rank \(3\) do not match", id="reorder-rank"),
    pytest.param("SparseReshape", [ix([0, 1]), S23, i64(-1, -1)], {},
                 "only one output dimension may be -1, not both 0 and 1", id="reshape-two-unknown"),
    pytest.param("SparseReshape", [ix([0, 1]), S23, i64(4, 2)], {},
                 r"Input to reshape is a tensor with 6 dense values, but the requested shape has 8. "
                 r"input_shape=\[2,3\] output_shape=\[4,2\]", id="reshape-size"),
    pytest.param("SparseReshape", [ix([0, 1]), S23, i64(4, -1)], {},
                 r"Input to reshape is a SparseTensor with 6 dense values, but the requested shape requires a multiple "
                 r"of 4. input_shape=\[2,3\] output_shape=\[4,1\]", id="reshape-not-a-multiple"),
    pytest.param("SparseReshape", [ix([0, 1]), S23, i64(-2, -3)], {}, "size 0 must be non-negative, not -2",
                 id="reshape-negative"),
    pytest.param("SparseReshape", [ix(), i64(0, 3), i64(0, -1)], {},
                 "reshape cannot infer the missing input size for an empty tensor unless all specified input sizes "
                 "are non-zero", id="reshape-cannot-infer"),
    pytest.param("SparseReshape", [i64(0, 1), S23, i64(6)], {}, "Input must be a matrix.", id="reshape-indices"),
    pytest.param("SparseReshape", [ix([0, 1]), np.array([[2, 3]], np.int64), i64(6)], {}, "Input shape must be a vector.",
                 id="reshape-input-shape"),
    pytest.param("SparseReshape", [ix([0, 1]), i64(2, 3, 1), i64(6)], {},
                 "Input tensor rank must match input shape length.", id="reshape-rank"),
    pytest.param("SparseReshape", [ix([0, 1]), S23, np.array([[6]], np.int64)], {},
                 r"Target shape should be a vector but received shape \[1,1\]", id="reshape-target"),
    pytest.param("SparseReshape", [ix([0, 1]), i64(2, -3), i64(6)], {},
                 "Expected shape dimensions to be non-negative, got -3", id="reshape-negative-input-dim"),
    pytest.param("SparseReshape", [ix([0, 0]), i64(0, 3), i64(0, 3, 1)], {},
                 r"Input tensor has 1 non zero elements but input shape \(\[0,3\]\) or output shape \(\[0,3,1\]\) "
                 "is empty", id="reshape-entries-of-empty"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1], [4, 0]), f32([1, 2]), i64(4, 3), np.float32(-1)], {},
                 r"indices\(1, 0\) is invalid: 4 >= 4", id="fill-row-too-big"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1], [-1, 0]), f32([1, 2]), i64(4, 3), np.float32(-1)], {},
                 r"indices\(1, 0\) is invalid: -1 >= 4", id="fill-row-negative"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1]), f32([1, 2]), i64(4, 3), np.float32(-1)], {},
                 r"The length of `values` \(2\) must match the first dimension of `indices` \(1\).", id="fill-values"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1]), f32([1]), i64(4, 3), f32([0])], {},
                 r"default_value must be a scalar, saw: \[1\]", id="fill-default"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1]), f32([1]), np.array([[4, 3]], np.int64), np.float32(0)], {},
                 r"dense_shape must be a vector, saw: \[1,2\]", id="fill-shape"),
    pytest.param("SparseFillEmptyRows", [i64(0, 1), f32([1, 2]), i64(4, 3), np.float32(0)], {},
                 r"indices must be a matrix, saw: \[2\]", id="fill-indices"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1]), np.ones((1, 1), np.float32), i64(4, 3), np.float32(0)], {},
                 r"values must be a vector, saw: \[1,1\]", id="fill-values-rank"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1]), f32([1]), i64(4, 3, 2), np.float32(0)], {},
                 r"The length of `dense_shape` \(3\) must match the second dimension of `indices` \(2\).",
                 id="fill-rank"),
    pytest.param("SparseFillEmptyRows", [ix([0, 1]), f32([1]), i64(0, 3), np.float32(-1)], {},
                 r"Received SparseTensor with dense_shape\[0\] = 0 but indices.shape\[0\] = 1", id="fill-no-rows"),
    pytest.param("SparseConcat", [ix([0, 1]), ix([0, 0]), f32([1]), f32([3]), S23, i64(3, 2)], {"concat_dim": 1, "N": 2},
                 "Input shapes must match: expected 2 for dimension 0 but got 3 at position 1", id="concat-shapes"),
    pytest.param("SparseConcat", [ix([0, 1]), ix([0, 0, 0], rank=3), f32([1]), f32([3]), S23, i64(3, 2, 1)],
                 {"concat_dim": 1, "N": 2}, "Ranks of all input tensors must match: expected 2 but got 3 at position 1",
                 id="concat-ranks"),
    pytest.param("SparseConcat", [ix([0, 1]), ix([0, 0]), f32([1]), f32([3]), S23, i64(2, 2)], {"concat_dim": 2, "N": 2},
                 r"Concat dimension must be in range \[-2, 2\), got 2", id="concat-dim"),
    pytest.param("SparseConcat", [ix([0, 1]), ix([0, 0]), f32([1, 2]), f32([3]), S23, i64(2, 2)], {"concat_dim": 1, "N": 2},
                 r"indices and values rows \(indexing dimension\) must match. \(indices = 1, values = 2\)",
                 id="concat-values"),
    pytest.param("SparseConcat", [i64(0, 1), ix([0, 0]), f32([1, 2]), f32([3]), S23, i64(1, 3)], {"concat_dim": 0, "N": 2},
                 r"Input indices should be a matrix but received shape \[2\] at position 0", id="concat-indices"),
    pytest.param("SparseConcat", [ix([0, 1]), ix([0, 0]), f32([1]), f32([3]), np.array([[2, 3]], np.int64), i64(1, 3)],
                 {"concat_dim": 0, "N": 2}, r"Input shapes should be a vector but received shape \[1,2\] at position 0",
                 id="concat-shape-rank"),
    pytest.param("SparseSlice", [ix([1, 2]), f32([1]), i64(4, 5), np.array([[0, 0]], np.int64), i64(1, 1)], {},
                 r"Input start should be a vector but received shape \[1,2\]", id="slice-start"),
    pytest.param("SparseSlice", [ix([1, 2]), f32([1]), i64(4, 5), i64(0), i64(2, 2)], {},
                 "Expected start to be a vector of length 2 but got length 1", id="slice-start-length"),
    pytest.param("SparseSlice", [ix([1, 2]), f32([1]), i64(4, 5), i64(0, 0), i64(1)], {},
                 "Expected size to be a vector of length 2 but got length 1", id="slice-size-length"),
    pytest.param("SparseSlice", [ix([1, 2]), f32([1]), i64(4, 5), i64(0, 0), i64(2, -1)], {},
                 "Expected a non-negative size, got -1", id="slice-negative-size"),
    pytest.param("SparseSlice", [ix([1, 2]), f32([1, 2]), i64(4, 5), i64(0, 0), i64(1, 1)], {},
                 r"Number of elements in indices \(1\) and values \(2\) do not match", id="slice-values"),
    pytest.param("SparseSlice", [ix(), f32([]), i64(-2, 3), i64(0, 0), i64(1, 1)], {},
                 "Expected shape dimensions to be non-negative, got -2", id="slice-negative-dim"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([1]), S33, ix([0, 1]), f32([5]), i64(3, 4), np.float32(0)], {},
                 "Operands' shapes do not match: got 3 and 4 for dimension 1", id="add-shapes"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([1]), S33, ix([0, 1]), f32([5]), S33, f32([0])], {},
                 r"The magnitude threshold must be a scalar: got shape \[1\]", id="add-thresh"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([1, 2]), S33, ix(), f32([]), S33, np.float32(0)], {},
                 "Expected 1 and 0 non-empty input values, got 2 and 0", id="add-values"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([1]), S33, ix([0, 1, 1], rank=3), f32([5]), i64(3, 3, 1),
                               np.float32(0)], {}, "Input indices must have the same dimension, got 2 and 3",
                 id="add-index-ranks"),
    pytest.param("SparseAdd", [ix([0, 1]), f32([1]), i64(3, 3, 1), ix([0, 1]), f32([5]), i64(3, 3, 1),
                               np.float32(0)], {}, "Second dimension of a_indices and length of a_shape must match, "
                 "got 2 and 3", id="add-shape-length"),
    pytest.param("SparseAdd", [i64(0, 1), f32([1, 2]), S33, ix([0, 1]), f32([5]), S33, np.float32(0)], {},
                 r"Input indices should be matrices but received shapes: \[2\] and \[1,2\]", id="add-indices"),
    pytest.param("SparseAdd", [ix([0, 1]), np.ones((1, 1), np.float32), S33, ix([0, 1]), f32([5]), S33,
                               np.float32(0)], {}, r"Input values should be vectors but received shapes: \[1,1\] and \[1\]",
                 id="add-values-rank"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1], [1, 5]), f32([1, 2]), S23, np.ones((3, 2), np.float32)], {},
                 r"k \(5\) from index\[1,1\] out of bounds \(>=3\)", id="matmul-k"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1], [4, 1]), f32([1, 2]), S23, np.ones((3, 2), np.float32)], {},
                 r"m \(4\) from index\[1,0\] out of bounds \(>=2\)", id="matmul-m"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1], [5, 1]), f32([1, 2]), i64(3, 2), np.ones((3, 2), np.float32)],
                 {"adjoint_a": True}, r"k \(5\) from index\[1,0\] out of bounds \(>=3\)", id="matmul-k-adjoint"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1]), f32([1]), i64(2, 4), np.ones((3, 2), np.float32)], {},
                 r"Cannot multiply A and B because inner dimension does not match: 4 vs. 3.  Did you forget a "
                 r"transpose\?  Dimensions of A: \[2, 4\).  Dimensions of B: \[3,2\]", id="matmul-inner"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1]), f32([1]), S23, f32([1, 2, 3])], {},
                 "Tensor 'b' is not a matrix", id="matmul-b"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1]), f32([1]), i64(2, 3, 1), np.ones((3, 2), np.float32)], {},
                 "Tensor 'a_shape' must have 2 elements", id="matmul-shape"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1]), f32([1, 2]), S23, np.ones((3, 2), np.float32)], {},
                 "Number of rows of a_indices does not match number of entries in a_values", id="matmul-values"),
    pytest.param("SparseTensorDenseMatMul", [ix([0, 1, 0], rank=3), f32([1]), S23, np.ones((3, 2), np.float32)], {},
                 "Number of columns of a_indices does not match number of entries in a_shape", id="matmul-columns"),
    pytest.param("SparseTensorDenseMatMul", [i64(0, 1), f32([1]), S23, np.ones((3, 2), np.float32)], {},
                 "Tensor 'a_indices' is not a matrix", id="matmul-indices"),
    pytest.param("SparseReduceSum", [RED_IX, RED_V, S33, i32(2)], {},
                 "Invalid reduction dimension 2, for input with 2 dimensions.", id="reduce-axis"),
    pytest.param("SparseReduceMax", [RED_IX, RED_V, S33, i32(-3)], {},
                 "Invalid reduction dimension -3, for input with 2 dimensions.", id="reduce-negative-axis"),
    pytest.param("SparseReduceSum", [ix([0, 0], [5, 0]), f32([1, 2]), S33, i32(1)], {},
                 r"Obtained a write index of 5 which is outside of bounds of \[0, 3\)", id="reduce-write-index"),
    pytest.param("SparseReduceSum", [ix([-1, 0], [0, 0]), f32([1, 2]), i64(2, 3), i32(1)], {},
                 r"Obtained a write index of -1 which is outside of bounds of \[0, 2\)", id="reduce-negative-index"),
    pytest.param("SparseReduceSum", [RED_IX, f32([1]), S33, i32(1)], {},
                 r"indices and values rows \(indexing dimension\) must match. \(indices = 5, values = 1\)",
                 id="reduce-values"),
    pytest.param("SparseReduceSum", [RED_IX, RED_V, i64(3, 3, 1), i32(1)], {}, "Order length must be SparseTensor rank.",
                 id="reduce-rank"),
    pytest.param("SparseReduceSum", [i64(0, 1), f32([1, 2]), S23, i32(1)], {}, r"indices must be a matrix, but got: \[2\]",
                 id="reduce-indices"),
    pytest.param("SparseReduceSum", [ix([0, 1]), np.ones((1, 1), np.float32), S23, i32(1)], {},
                 r"vals must be a vec, but got: \[1,1\]", id="reduce-values-rank"),
    pytest.param("SparseReduceSum", [ix([0, 1]), f32([1]), np.array([[2, 3]], np.int64), i32(1)], {},
                 r"Expected input_shape to be a vector; got shape: \[1,2\]", id="reduce-shape"),
    pytest.param("SparseReduceSum", [ix([0, 1]), f32([1]), S23, np.array([[1]], np.int32)], {},
                 r"Expected reduction_axes to be a scalar or a vector; got shape: \[1,1\]", id="reduce-axes-rank"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", ERRORS)
def test_sparse_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
