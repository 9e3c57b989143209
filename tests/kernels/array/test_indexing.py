"""Indexing kernels: gathers, ScatterNd, OneHot, Where, TopKV2, MatrixBandPart and Unique.

Expected values are written by hand and were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

P23 = f32([[0, 1, 2], [10, 11, 12]])
P223 = np.arange(12, dtype=np.int32).reshape(2, 2, 3)
NAN = float("nan")

GATHERS = [
    pytest.param("GatherV2", [P23, i32(1, 0, 1), np.int32(0)], {}, [P23[[1, 0, 1]]], id="gather-axis0"),
    pytest.param("GatherV2", [P23, i64(2, 0, 0, 1).reshape(2, 2), np.int32(1)], {},
                 [f32([[[2, 0], [0, 1]], [[12, 10], [10, 11]]])], id="gather-axis1-2d-indices"),
    pytest.param("GatherV2", [P23, i32(2), np.int64(-1)], {}, [f32([[2], [12]])], id="gather-negative-axis"),
    pytest.param("GatherV2", [P23, np.int32(1), np.int32(0)], {}, [f32([10, 11, 12])], id="gather-scalar-index"),
    pytest.param("GatherV2", [f32([5, 6]), np.int32(1), np.int32(0)], {}, [np.float32(6)], id="gather-to-scalar"),
    pytest.param("GatherV2", [P23, np.zeros((0,), np.int32), np.int32(1)], {}, [np.zeros((2, 0), np.float32)], id="gather-empty-indices"),
    pytest.param("GatherV2", [P23, i32(2, 0, 1, 1).reshape(2, 2), np.int32(1)], {"batch_dims": 1},
                 [f32([[2, 0], [11, 11]])], id="gather-batch-dims"),
    pytest.param("GatherV2", [P23, i32(2, 0, 1, 1).reshape(2, 2), np.int32(-1)], {"batch_dims": -1},
                 [f32([[2, 0], [11, 11]])], id="gather-negative-batch-dims"),
    pytest.param("GatherV2", [P223, i32(2, 0), np.int32(2)], {"batch_dims": 1},
                 [np.array([[2, 5], [6, 9]], np.int32)], id="gather-batch-dims-inner-axis"),
    pytest.param("GatherV2", [P223, i32(1, 1, 0, 0, 0, 1).reshape(2, 3), np.int32(1)], {"batch_dims": 1},
                 [np.array([[[3, 4, 5], [3, 4, 5], [0, 1, 2]], [[6, 7, 8], [6, 7, 8], [9, 10, 11]]], np.int32)],
                 id="gather-batch-dims-slices"),
    pytest.param("Gather", [P23, i64(1, 1)], {}, [f32([[10, 11, 12], [10, 11, 12]])], id="gather-v1"),
    pytest.param("GatherNd", [P23, i32(1, 2, 0, 0).reshape(2, 2)], {}, [f32([12, 0])], id="gather-nd-elements"),
    pytest.param("GatherNd", [P23, i64(1, 0).reshape(2, 1)], {}, [f32([[10, 11, 12], [0, 1, 2]])], id="gather-nd-rows"),
    pytest.param("GatherNd", [P23, i32(0, 1)], {}, [np.float32(1)], id="gather-nd-one-index"),
    pytest.param("GatherNd", [P23, np.zeros((2, 0), np.int32)], {}, [np.stack([P23, P23])], id="gather-nd-empty-index-rows"),
    pytest.param("GatherNd", [P23, np.zeros((0, 2), np.int32)], {}, [np.zeros((0,), np.float32)], id="gather-nd-no-rows"),
]

CASES = GATHERS + [
    # ScatterNd: duplicates add up
    pytest.param("ScatterNd", [i32(4, 3, 1, 7).reshape(4, 1), f32([9, 10, 11, 12]), i32(8)], {},
                 [f32([0, 11, 0, 10, 9, 0, 0, 12])], id="scatter-nd"),
    pytest.param("ScatterNd", [i32(1, 1).reshape(2, 1), i32(3, 4), i32(3)], {}, [i32(0, 7, 0)], id="scatter-nd-duplicates-sum"),
    pytest.param("ScatterNd", [i32(1, 0).reshape(2, 1), f32([[1, 2], [3, 4]]), i32(3, 2)], {},
                 [f32([[3, 4], [1, 2], [0, 0]])], id="scatter-nd-slices"),
    pytest.param("ScatterNd", [i32(0, 1, 1, 0).reshape(2, 2), f32([5, 6]), i32(2, 2)], {},
                 [f32([[0, 5], [6, 0]])], id="scatter-nd-elements"),
    pytest.param("ScatterNd", [np.zeros((0, 1), np.int32), np.zeros((0,), np.float32), i32(3)], {},
                 [np.zeros((3,), np.float32)], id="scatter-nd-no-updates"),
    # OneHot
    pytest.param("OneHot", [i32(0, 2, -1, 3), np.int32(3), np.float32(1), np.float32(0)], {},
                 [f32([[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])], id="one-hot-out-of-range-is-off"),
    pytest.param("OneHot", [i64(0, 2), np.int32(3), np.int32(5), np.int32(-1)], {"axis": 0},
                 [np.array([[5, -1], [-1, -1], [-1, 5]], np.int32)], id="one-hot-axis0"),
    pytest.param("OneHot", [i32(1, 0, 2, 1).reshape(2, 2), np.int32(3), np.float32(1), np.float32(0)], {"axis": 1},
                 [f32([[[0, 1], [1, 0], [0, 0]], [[0, 0], [0, 1], [1, 0]]])], id="one-hot-middle-axis"),
    pytest.param("OneHot", [np.int32(1), np.int32(2), np.float32(1), np.float32(0)], {}, [f32([0, 1])], id="one-hot-scalar"),
    pytest.param("OneHot", [i32(0, 1), np.int32(0), np.float32(1), np.float32(0)], {}, [np.zeros((2, 0), np.float32)], id="one-hot-depth-zero"),
    # Where: int64 coordinates of true / non-zero elements
    pytest.param("Where", [np.array([[True, False], [False, True]])], {}, [i64(0, 0, 1, 1).reshape(2, 2)], id="where-bool"),
    pytest.param("Where", [f32([[0, NAN], [2, 0]])], {}, [i64(0, 1, 1, 0).reshape(2, 2)], id="where-float-nan-is-true"),
    pytest.param("Where", [i32(0, 3, 0, -1)], {}, [i64(1, 3).reshape(2, 1)], id="where-int"),
    pytest.param("Where", [np.zeros((2, 0, 3), bool)], {}, [np.zeros((0, 3), np.int64)], id="where-empty"),
    # TopKV2: ties go to the lower index
    pytest.param("TopKV2", [f32([1, 3, 2, 3, 1]), np.int32(3)], {}, [f32([3, 3, 2]), i32(1, 3, 2)], id="top-k-ties"),
    pytest.param("TopKV2", [f32([[1, 5, 5], [7, 7, 7]]), np.int32(1)], {}, [f32([[5], [7]]), i32(1, 0).reshape(2, 1)], id="top-k-1-ties"),
    pytest.param("TopKV2", [i32(4, -2, 9), np.int32(3)], {}, [i32(9, 4, -2), i32(2, 0, 1)], id="top-k-all"),
    pytest.param("TopKV2", [f32([[1, 2], [3, 4]]), np.int32(0)], {}, [np.zeros((2, 0), np.float32), np.zeros((2, 0), np.int32)], id="top-k-zero"),
    pytest.param("TopKV2", [np.zeros((0, 4), np.float32), np.int32(2)], {},
                 [np.zeros((0, 2), np.float32), np.zeros((0, 2), np.int32)], id="top-k-no-rows"),
    pytest.param("TopKV2", [np.array([[5, 1, 5, 3, 5, 0, 5, 2, 5, 9], [4, 4, 4, 4, 4, 4, 4, 4, 4, 4]], np.int32), np.int32(2)], {},
                 [np.array([[9, 5], [4, 4]], np.int32), np.array([[9, 0], [0, 1]], np.int32)], id="top-k-small-k-ties"),
    pytest.param("TopKV2", [f32([2, 1, 2]), np.int32(2)], {"index_type": np.dtype(np.int64)}, [f32([2, 2]), i64(0, 2)], id="top-k-int64-indices"),
    # MatrixBandPart
    pytest.param("MatrixBandPart", [np.ones((3, 4), np.float32), np.int64(1), np.int64(0)], {},
                 [f32([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0]])], id="band-lower"),
    pytest.param("MatrixBandPart", [np.ones((3, 4), np.float32), np.int64(0), np.int64(-1)], {},
                 [f32([[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]])], id="band-upper-triangle"),
    pytest.param("MatrixBandPart", [np.full((2, 2, 2), np.inf, np.float32), np.int32(0), np.int32(0)], {},
                 [np.array([[[np.inf, 0], [0, np.inf]]] * 2, np.float32)], id="band-diagonal-batched-inf"),
    pytest.param("MatrixBandPart", [i32(1, 2, 3, 4).reshape(2, 2), np.int64(-1), np.int64(-1)], {},
                 [i32(1, 2, 3, 4).reshape(2, 2)], id="band-everything"),
    # Unique: first-appearance order
    pytest.param("Unique", [i32(1, 1, 2, 4, 4, 4, 7, 8, 8)], {}, [i32(1, 2, 4, 7, 8), i32(0, 0, 1, 2, 2, 2, 3, 4, 4)], id="unique"),
    pytest.param("Unique", [f32([3, 1, 3, 2])], {"out_idx": np.dtype(np.int64)}, [f32([3, 1, 2]), i64(0, 1, 0, 2)], id="unique-unsorted-int64"),
    pytest.param("Unique", [f32([3, NAN, 1, NAN, 3])], {}, [f32([3, NAN, 1, NAN]), i32(0, 1, 2, 3, 0)], id="unique-nans-stay-distinct"),
    pytest.param("Unique", [np.zeros((0,), np.int32)], {}, [np.zeros((0,), np.int32), np.zeros((0,), np.int32)], id="unique-empty"),
    pytest.param("UniqueWithCounts", [i32(5, 5, 3, 5)], {}, [i32(5, 3), i32(0, 0, 1, 0), i32(3, 1)], id="unique-with-counts"),
]

ERRORS = [
    pytest.param("GatherV2", [P23, i32(1, 7), np.int32(1)], {}, IndexError, r"indices\[1\] = 7 is not in \[0, 3\)", id="gather-too-big"),
    pytest.param("GatherV2", [P23, i32(0, 0, 1, -1).reshape(2, 2), np.int32(1)], {}, IndexError,
                 r"indices\[1,1\] = -1 is not in \[0, 3\)", id="gather-negative-index"),
    pytest.param("GatherV2", [P23, i32(0), np.int32(2)], {}, ValueError, "axis", id="gather-axis-range"),
    pytest.param("GatherV2", [P23, i32(0, 0).reshape(2, 1), np.int32(0)], {"batch_dims": 1}, ValueError,
                 r"batch_dims \(1\) must be less than or equal to axis \(0\)", id="gather-batch-dims-past-axis"),
    pytest.param("GatherV2", [P23, i32(0, 0, 0).reshape(3, 1), np.int32(1)], {"batch_dims": 1}, ValueError,
                 "should be equal to indices.shape", id="gather-batch-shape-mismatch"),
    pytest.param("Gather", [P23, i32(2)], {}, IndexError, "not in", id="gather-v1-out-of-range"),
    pytest.param("GatherNd", [P23, i32(0, 0, 1, 3).reshape(2, 2)], {}, IndexError,
                 r"indices\[1\] = \[1,3\] does not index into param shape \[2,3\]", id="gather-nd-out-of-range"),
    pytest.param("GatherNd", [P23, i32(0, 0, 0)], {}, ValueError, "innermost dimension", id="gather-nd-too-deep"),
    pytest.param("ScatterNd", [i32(1, -1).reshape(2, 1), f32([1, 2]), i32(4)], {}, IndexError,
                 r"indices\[1\] = \[-1\] does not index into shape \[4\]", id="scatter-nd-out-of-range"),
    pytest.param("ScatterNd", [i32(1, 2).reshape(2, 1), f32([1, 2, 3]), i32(4)], {}, ValueError, "mismatch", id="scatter-nd-shape-mismatch"),
    pytest.param("OneHot", [i32(0), np.int32(-1), np.float32(1), np.float32(0)], {}, ValueError, "depth must be non-negative", id="one-hot-depth"),
    pytest.param("OneHot", [i32(0), np.int32(2), np.float32(1), np.float32(0)], {"axis": -2}, ValueError, "Expected axis", id="one-hot-axis"),
    pytest.param("Where", [np.bool_(True)], {}, ValueError, "Unhandled input dimensions: 0", id="where-scalar"),
    pytest.param("TopKV2", [f32([1, 2]), np.int32(3)], {}, ValueError, "at least k columns. Had 2, needed 3", id="top-k-too-big"),
    pytest.param("TopKV2", [f32([1, 2]), np.int32(-1)], {}, ValueError, "Need k >= 0", id="top-k-negative"),
    pytest.param("TopKV2", [np.float32(1), np.int32(0)], {}, ValueError, ">= 1-D", id="top-k-scalar"),
    pytest.param("MatrixBandPart", [np.ones((3, 4), np.float32), np.int64(4), np.int64(0)], {}, ValueError, "num_lower", id="band-lower-too-big"),
    pytest.param("MatrixBandPart", [np.ones((4,), np.float32), np.int64(1), np.int64(0)], {}, ValueError, "at least 2-dim", id="band-vector"),
    pytest.param("Unique", [np.zeros((2, 2), np.int32)], {}, ValueError, "1D vector", id="unique-matrix"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_indexing_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_indexing_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_bad_indices_ignored_on_request(run_kernel):
    """bad_indices_policy=IGNORE: a bad GatherNd row reads zeros and a bad ScatterNd row is dropped."""
    (gathered,) = run_kernel("GatherNd", P23, i32(1, 2, 5, 0).reshape(2, 2), bad_indices_policy="IGNORE")
    np.testing.assert_array_equal(gathered, f32([12, 0]))
    (scattered,) = run_kernel("ScatterNd", i32(1, 9).reshape(2, 1), f32([1, 2]), i32(3), bad_indices_policy="IGNORE")
    np.testing.assert_array_equal(scattered, f32([0, 1, 0]))


def test_top_k_unsorted_returns_the_same_set(run_kernel):
    """sorted=False lets TensorFlow return the top k in any order; ours are sorted anyway."""
    values, indices = run_kernel("TopKV2", f32([4, 9, 1, 7]), np.int32(2), sorted=False)
    assert sorted(values.tolist()) == [7, 9]
    assert sorted(indices.tolist()) == [1, 3]


def test_scatter_nd_leaves_updates_alone(run_kernel):
    updates = f32([1, 2])
    run_kernel("ScatterNd", i32(0, 0).reshape(2, 1), updates, i32(2))
    np.testing.assert_array_equal(updates, f32([1, 2]))
