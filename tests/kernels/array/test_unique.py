"""UniqueV2 and UniqueWithCountsV2: distinct slices along an axis in order of first appearance, NaN and -0.0
as TensorFlow compares them, and TensorFlow's errors. Expected values and messages were read off TensorFlow
2.21; tests/fixtures/ops/sparse/unique/ holds TensorFlow's outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

NAN = float("nan")
X = np.array([[1, 0, 1], [2, 3, 2], [1, 0, 1]], np.int32)
NONE = np.zeros(0, np.int32)

CASES = [
    pytest.param("UniqueV2", [X, i64(0)], {}, [X[:2], i32(0, 1, 0)], id="axis-0"),
    pytest.param("UniqueV2", [X, i32(1)], {}, [X[:, :2], i32(0, 1, 0)], id="axis-1"),
    pytest.param("UniqueV2", [X, i32(-1)], {"out_idx": np.dtype(np.int64)}, [X[:, :2], i64(0, 1, 0)],
                 id="axis-negative-int64-idx"),
    pytest.param("UniqueV2", [i32(3, 1, 3), NONE], {}, [i32(3, 1), i32(0, 1, 0)], id="vector-no-axis"),
    pytest.param("UniqueWithCountsV2", [X, i32(1)], {}, [X[:, :2], i32(0, 1, 0), i32(2, 1)], id="with-counts"),
    pytest.param("UniqueV2", [np.array([[[1, 2], [1, 2], [0, 0]], [[5, 5], [5, 5], [1, 1]]], np.int32), i32(1)], {},
                 [np.array([[[1, 2], [0, 0]], [[5, 5], [1, 1]]], np.int32), i32(0, 0, 1)], id="rank-3-axis-1"),
    pytest.param("UniqueV2", [np.array([[NAN, 1], [NAN, 1], [0, 1]], np.float32), i32(0)], {},
                 [np.array([[NAN, 1], [NAN, 1], [0, 1]], np.float32), i32(0, 1, 2)], id="nan-rows-distinct"),
    pytest.param("UniqueV2", [f32([-0.0, 0.0, 1.0]), i32(0)], {}, [f32([-0.0, 1.0]), i32(0, 0, 1)],
                 id="zeros-equal"),
    pytest.param("UniqueV2", [np.zeros((0, 3), np.int32), i32(1)], {}, [np.zeros((0, 1), np.int32), i32(0, 0, 0)],
                 id="empty-slices-equal"),
    pytest.param("UniqueV2", [np.zeros((0, 3), np.int32), i32(0)], {}, [np.zeros((0, 3), np.int32), i32()],
                 id="no-slices"),
    pytest.param("UniqueV2", [np.array([[b"a", b"b", b"a"], [b"c", b"d", b"c"]], dtype=object), i32(1)], {},
                 [np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object), i32(0, 1, 0)], id="strings"),
    pytest.param("UniqueWithCountsV2", [np.array([True, False, True]), i32(0)], {},
                 [np.array([True, False]), i32(0, 1, 0), i32(2, 1)], id="bools"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_unique_v2(run_kernel, op, inputs, attrs, expected):
    outs = run_kernel(op, *inputs, **attrs)
    assert_outputs(outs, expected)
    if outs[0].dtype.kind == "f":  # the first zero seen is kept, sign included
        np.testing.assert_array_equal(np.signbit(outs[0]), np.signbit(expected[0]))


ERRORS = [
    pytest.param("UniqueV2", [X, NONE], "unique expects a 1D vector.", id="matrix-no-axis"),
    pytest.param("UniqueV2", [X, i32(2)], r"axis has to be between \[0, 2\)", id="axis-range"),
    pytest.param("UniqueV2", [X, i32(0, 1)], "axis does not support input tensors larger than 1 elements",
                 id="two-axes"),
    pytest.param("UniqueV2", [X, np.int32(0)], "axis expects a 1D vector.", id="scalar-axis"),
    pytest.param("UniqueWithCountsV2", [np.int32(3), NONE], "unique expects a 1D vector.", id="scalar-input"),
]


@pytest.mark.parametrize("op, inputs, message", ERRORS)
def test_unique_v2_errors(run_kernel, op, inputs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs)
