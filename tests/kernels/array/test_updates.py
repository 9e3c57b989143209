"""Kernels that return a copy with positions rewritten: the TensorScatter family, ScatterNdNonAliasingAdd,
the Inplace ops and TensorStridedSliceUpdate.

Expected values were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

T = np.arange(8, dtype=np.float32)
DUP = i32(1, 1, 3).reshape(3, 1)
NAN = float("nan")

CASES = [
    # Index 1 twice: Update keeps the last, the others accumulate.
    pytest.param("TensorScatterUpdate", [T, DUP, f32([10, 11, 12])], {}, [f32([0, 11, 2, 12, 4, 5, 6, 7])], id="update"),
    pytest.param("TensorScatterAdd", [T, DUP, f32([10, 11, 12])], {}, [f32([0, 22, 2, 15, 4, 5, 6, 7])], id="add"),
    pytest.param("TensorScatterSub", [T, DUP, f32([10, 11, 12])], {}, [f32([0, -20, 2, -9, 4, 5, 6, 7])], id="sub"),
    pytest.param("TensorScatterMax", [T, DUP, f32([10, -11, 2])], {}, [f32([0, 10, 2, 3, 4, 5, 6, 7])], id="max"),
    pytest.param("TensorScatterMin", [T, DUP, f32([10, -11, 2])], {}, [f32([0, -11, 2, 2, 4, 5, 6, 7])], id="min"),
    # A NaN update never wins a Max; a NaN already there stays.
    pytest.param("TensorScatterMax", [f32([1, NAN, 3]), i32(1, 0).reshape(2, 1), f32([5, NAN])], {},
                 [f32([1, NAN, 3])], id="max-nan"),
    pytest.param("TensorScatterMin", [f32([1, NAN, 3]), i32(1, 0, 2).reshape(3, 1), f32([5, NAN, -1])], {},
                 [f32([1, NAN, -1])], id="min-nan"),
    pytest.param("TensorScatterAdd", [np.zeros((2, 2, 2), np.int32), i32(1, 0, 0, 1).reshape(2, 2),
                                      np.array([[1, 2], [3, 4]], np.int32)], {},
                 [np.array([[[0, 0], [3, 4]], [[1, 2], [0, 0]]], np.int32)], id="add-slices"),
    pytest.param("TensorScatterUpdate", [np.array([b"a", b"b"], dtype=object), i32(1).reshape(1, 1),
                                         np.array([b"z"], dtype=object)], {},
                 [np.array([b"a", b"z"], dtype=object)], id="update-strings"),
    pytest.param("TensorScatterAdd", [T, np.zeros((0, 1), np.int32), np.zeros((0,), np.float32)], {}, [T],
                 id="add-nothing"),
    pytest.param("ScatterNdNonAliasingAdd", [T, i64(1, 1).reshape(2, 1), f32([1, 2])], {},
                 [f32([0, 4, 2, 3, 4, 5, 6, 7])], id="non-aliasing-add"),
    # Inplace ops wrap row indices modulo the row count, as TensorFlow's kernel does.
    pytest.param("InplaceUpdate", [np.zeros((4, 2), np.float32), i32(3, 1), np.ones((2, 2), np.float32)], {},
                 [f32([[0, 0], [1, 1], [0, 0], [1, 1]])], id="inplace-update"),
    pytest.param("InplaceAdd", [np.zeros((4, 2), np.float32), i32(1, 1, 4), np.ones((3, 2), np.float32)], {},
                 [f32([[1, 1], [2, 2], [0, 0], [0, 0]])], id="inplace-add-wraps"),
    pytest.param("InplaceSub", [np.zeros((4,), np.int32), i32(-1), i32(5)], {}, [i32(0, 0, 0, -5)],
                 id="inplace-sub-negative"),
    pytest.param("TensorStridedSliceUpdate", [np.zeros((3, 4), np.float32), i32(0, 1), i32(3, 4), i32(2, 2),
                                              np.float32(5)], {},
                 [f32([[0, 5, 0, 5], [0, 0, 0, 0], [0, 5, 0, 5]])], id="strided-update-broadcast"),
    pytest.param("TensorStridedSliceUpdate", [np.zeros((3, 4), np.float32), i32(1), i32(2), i32(1),
                                              np.arange(4, dtype=np.float32)], {"shrink_axis_mask": 1},
                 [f32([[0, 0, 0, 0], [0, 1, 2, 3], [0, 0, 0, 0]])], id="strided-update-shrink"),
    pytest.param("TensorStridedSliceUpdate", [np.zeros(5, np.float32), i32(-1), i32(0), i32(-2), f32([1, 2])], {},
                 [f32([0, 0, 2, 0, 1])], id="strided-update-reversed"),
    pytest.param("TensorStridedSliceUpdate", [np.zeros((3, 4), np.float32), i32(0, 1), i32(3, 4), i32(2, 2),
                                              np.arange(4, dtype=np.float32).reshape(1, 2, 2)], {},
                 [f32([[0, 0, 0, 1], [0, 0, 0, 0], [0, 2, 0, 3]])], id="strided-update-leading-one"),
]

ERRORS = [
    pytest.param("TensorScatterUpdate", [T, i32(1, 9).reshape(2, 1), f32([1, 2])], {}, IndexError,
                 r"indices\[1\] = \[9\] does not index into shape \[8\]", id="out-of-range"),
    pytest.param("TensorScatterAdd", [T, i32(-1).reshape(1, 1), f32([1])], {}, IndexError, r"= \[-1\] does not index",
                 id="negative"),
    pytest.param("TensorScatterAdd", [T, i32(1).reshape(1, 1), f32([1, 2])], {}, ValueError,
                 "Outer dimensions of indices and update must match", id="outer-mismatch"),
    pytest.param("TensorScatterAdd", [np.zeros((4, 3), np.float32), i32(1).reshape(1, 1), f32([[1, 2]])], {},
                 ValueError, "Inner dimensions", id="inner-mismatch"),
    pytest.param("TensorScatterAdd", [T, np.int32(1), np.float32(1)], {}, ValueError, "rank at least one",
                 id="scalar-indices"),
    pytest.param("TensorScatterAdd", [T, np.zeros((2, 0), np.int32), np.ones((2, 8), np.float32)], {}, ValueError,
                 "empty output shape", id="empty-index-rows"),
    pytest.param("InplaceSub", [np.zeros((4, 2), np.float32), i32(1), np.ones((1, 3), np.float32)], {}, ValueError,
                 "shape doesn't match at index 1", id="inplace-shape"),
    pytest.param("InplaceSub", [np.zeros((4, 2), np.float32), np.int32(1), np.ones((2,), np.float32)], {}, ValueError,
                 "i must be a vector", id="inplace-scalar-index"),
    pytest.param("InplaceAdd", [np.zeros((4, 2), np.float32), i32(1, 2), np.ones((1, 2), np.float32)], {}, ValueError,
                 "at index 0", id="inplace-row-count"),
    pytest.param("TensorStridedSliceUpdate", [np.zeros((3, 4), np.float32), i32(0, 1), i32(3, 4), i32(2, 2),
                                              np.ones(3, np.float32)], {}, ValueError,
                 r"Cannot broadcast input shape \[3\] into final shape \[2,2\]", id="strided-update-shape"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_update_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_update_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_bad_rows_ignored_on_request(run_kernel):
    (out,) = run_kernel("TensorScatterAdd", T, i32(9, 1).reshape(2, 1), f32([100, 10]), bad_indices_policy="IGNORE")
    np.testing.assert_array_equal(out, f32([0, 11, 2, 3, 4, 5, 6, 7]))


@pytest.mark.parametrize("op", ["TensorScatterUpdate", "TensorScatterAdd", "InplaceUpdate", "TensorStridedSliceUpdate"])
def test_updates_leave_their_input_alone(run_kernel, op):
    x = np.zeros((4, 2), np.float32)
    inputs = {"TensorScatterUpdate": [x, i32(1).reshape(1, 1), np.ones((1, 2), np.float32)],
              "TensorScatterAdd": [x, i32(1).reshape(1, 1), np.ones((1, 2), np.float32)],
              "InplaceUpdate": [x, i32(1), np.ones((1, 2), np.float32)],
              "TensorStridedSliceUpdate": [x, i32(1), i32(2), i32(1), np.float32(1)]}[op]
    (out,) = run_kernel(op, *inputs)
    assert out[1].tolist() == [1, 1]
    assert not x.any()
