"""Joining and splitting kernels: ConcatV2/Concat, Pack/Unpack, Split/SplitV.

Expected values are written by hand and were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32

A = f32([[1, 2], [3, 4]])
B = f32([[5, 6]])
X25 = np.arange(10, dtype=np.int32).reshape(2, 5)

CASES = [
    # ConcatV2: axis is the LAST input
    pytest.param("ConcatV2", [A, B, np.int32(0)], {"N": 2}, [f32([[1, 2], [3, 4], [5, 6]])], id="concat-v2-axis0"),
    pytest.param("ConcatV2", [A, A, np.int32(-1)], {"N": 2}, [f32([[1, 2, 1, 2], [3, 4, 3, 4]])], id="concat-v2-negative-axis"),
    pytest.param("ConcatV2", [A, np.zeros((0, 2), np.float32), B, np.int64(0)], {"N": 3}, [f32([[1, 2], [3, 4], [5, 6]])], id="concat-v2-with-empty"),
    pytest.param(
        "ConcatV2",
        [np.array([True]), np.array([False, True]), np.int32(0)],
        {"N": 2},
        [np.array([True, False, True])],
        id="concat-v2-bool-odd-sizes",
    ),
    # Concat v1: axis is the FIRST input
    pytest.param("Concat", [np.int32(1), A, f32([[9], [8]])], {"N": 2}, [f32([[1, 2, 9], [3, 4, 8]])], id="concat-v1"),
    # Pack / Unpack
    pytest.param("Pack", [i32(1, 2), i32(3, 4)], {"N": 2}, [i32(1, 2, 3, 4).reshape(2, 2)], id="pack-axis0"),
    pytest.param("Pack", [i32(1, 2), i32(3, 4)], {"N": 2, "axis": 1}, [np.array([[1, 3], [2, 4]], np.int32)], id="pack-axis1"),
    pytest.param("Pack", [i32(1, 2), i32(3, 4), i32(5, 6)], {"N": 3, "axis": -1}, [np.array([[1, 3, 5], [2, 4, 6]], np.int32)], id="pack-negative-axis"),
    pytest.param("Pack", [np.float32(1), np.float32(2)], {"N": 2}, [f32([1, 2])], id="pack-scalars"),
    pytest.param("Pack", [np.zeros((0,), np.float32)], {"N": 1}, [np.zeros((1, 0), np.float32)], id="pack-one-empty"),
    pytest.param("Unpack", [X25], {"num": 2}, [i32(0, 1, 2, 3, 4), i32(5, 6, 7, 8, 9)], id="unpack-axis0"),
    pytest.param("Unpack", [X25], {"num": 5, "axis": -1}, [i32(0, 5), i32(1, 6), i32(2, 7), i32(3, 8), i32(4, 9)], id="unpack-negative-axis"),
    pytest.param("Unpack", [i32(7, 8)], {"num": 2}, [np.int32(7), np.int32(8)], id="unpack-to-scalars"),
    pytest.param("Unpack", [np.zeros((0, 2), np.float32)], {"num": 2, "axis": 1}, [np.zeros((0,), np.float32)] * 2, id="unpack-empty"),
    # Split: inputs (axis, value)
    pytest.param("Split", [np.int32(1), np.arange(6, dtype=np.int32).reshape(1, 6)], {"num_split": 3},
                 [i32(0, 1).reshape(1, 2), i32(2, 3).reshape(1, 2), i32(4, 5).reshape(1, 2)], id="split"),
    pytest.param("Split", [np.int32(-2), X25], {"num_split": 2}, [X25[:1], X25[1:]], id="split-negative-axis"),
    pytest.param("Split", [np.int32(0), np.zeros((0, 3), np.float32)], {"num_split": 2}, [np.zeros((0, 3), np.float32)] * 2, id="split-empty"),
    # SplitV: inputs (value, size_splits, axis)
    pytest.param("SplitV", [X25, i32(1, 3, 1), np.int32(1)], {"num_split": 3}, [X25[:, :1], X25[:, 1:4], X25[:, 4:]], id="split-v"),
    pytest.param("SplitV", [X25, np.array([2, -1], np.int64), np.int32(-1)], {"num_split": 2}, [X25[:, :2], X25[:, 2:]], id="split-v-infer"),
    pytest.param("SplitV", [X25, i32(0, 5), np.int32(1)], {"num_split": 2}, [np.zeros((2, 0), np.int32), X25], id="split-v-zero-part"),
    pytest.param("SplitV", [X25, i32(2), np.int32(0)], {"num_split": 1}, [X25], id="split-v-one-part"),
]

ERRORS = [
    pytest.param("ConcatV2", [A, f32([[1, 2, 3]]), np.int32(0)], {"N": 2}, ValueError, "Dimension 1 in both shapes must be equal", id="concat-mismatch"),
    pytest.param("ConcatV2", [A, A, np.int32(2)], {"N": 2}, ValueError, r"range \[-2, 2\), but got 2", id="concat-axis-range"),
    pytest.param("ConcatV2", [np.float32(1), np.float32(2), np.int32(0)], {"N": 2}, ValueError, "Can't concatenate scalars", id="concat-scalars"),
    pytest.param("ConcatV2", [A, f32([1, 2]), np.int32(0)], {"N": 2}, ValueError, "Ranks of all input tensors should match", id="concat-ranks"),
    pytest.param("Pack", [i32(1, 2), i32(3)], {"N": 2}, ValueError, "Shapes of all inputs must match", id="pack-mismatch"),
    pytest.param("Pack", [i32(1, 2), i32(3, 4)], {"N": 2, "axis": 2}, ValueError, r"axis = 2 not in \[-2, 2\)", id="pack-axis-range"),
    pytest.param("Unpack", [X25], {"num": 3, "axis": 1}, ValueError, "must equal 3", id="unpack-wrong-num"),
    pytest.param("Split", [np.int32(1), X25], {"num_split": 2}, ValueError, "evenly divide", id="split-uneven"),
    pytest.param("Split", [np.int32(2), X25], {"num_split": 2}, ValueError, "split_dim", id="split-axis-range"),
    pytest.param("SplitV", [X25, i32(1, 3), np.int32(1)], {"num_split": 2}, ValueError, "Determined shape must", id="split-v-short"),
    pytest.param("SplitV", [X25, i32(1, 7, -1), np.int32(1)], {"num_split": 3}, ValueError, "Determined shape must", id="split-v-too-long"),
    pytest.param("SplitV", [X25, i32(-1), np.int32(0)], {"num_split": 1}, ValueError, "only one output", id="split-v-one-unknown"),
    pytest.param("SplitV", [X25, i32(1, -1, -1), np.int32(1)], {"num_split": 3}, ValueError, "only be one -1", id="split-v-two-unknown"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_joining_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_joining_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


@pytest.mark.parametrize(
    "op, attrs, expected",
    [("Split", {"num_split": 4}, 4), ("SplitV", {"num_split": 2}, 2), ("Unpack", {"num": 3}, 3)],
)
def test_output_count_follows_attrs(op, attrs, expected):
    """The planner learns how many outputs a split node has from its attrs alone."""
    import kernels

    assert kernels.lookup(op, "cpu").num_outputs(attrs) == expected


def test_parallel_concat_stacks_rows(run_kernel):
    rows = [f32([[1, 2]]), f32([[3, 4]]), f32([[5, 6]])]
    assert_outputs(run_kernel("ParallelConcat", *rows, shape=(3, 2), N=3), [f32([[1, 2], [3, 4], [5, 6]])])


@pytest.mark.parametrize(
    "values, shape, message",
    [([f32([[1, 2], [3, 4]]), f32([[5, 6]])], (3, 2), "size 1 in the first dimension"),
     ([f32([[1, 2]]), f32([[5, 6, 7]])], (2, 2), "same shape"),
     ([f32([[1, 2]]), f32([[5, 6]])], (3, 2), "does not match")],
)
def test_parallel_concat_errors(run_kernel, values, shape, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("ParallelConcat", *values, shape=shape)
