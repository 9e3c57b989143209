"""Slicing kernels: Slice, StridedSlice with every mask, ReverseV2, Pad, PadV2, MirrorPad.

Expected values are written by hand (as numpy indexing of the same data where that reads clearer)
and were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

X = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
V5 = np.arange(5, dtype=np.float32)


def strided(x, begin, end, strides, expected, case_id, **masks):
    return pytest.param("StridedSlice", [x, i32(*begin), i32(*end), i32(*strides)], masks, [expected], id=case_id)


STRIDED_SLICE = [
    strided(X, (0, 1), (2, 3), (1, 1), X[0:2, 1:3], "ss-basic-implicit-trailing-dims"),
    strided(V5, (-1,), (-6,), (-1,), f32([4, 3, 2, 1, 0]), "ss-negative-stride-clamps-to-front"),
    strided(V5, (0,), (0,), (-2,), f32([4, 2, 0]), "ss-masks-with-negative-stride", begin_mask=1, end_mask=1),
    strided(V5, (-10,), (10,), (1,), V5, "ss-out-of-range-clamped"),
    strided(V5, (10,), (-10,), (-3,), f32([4, 1]), "ss-out-of-range-clamped-backwards"),
    strided(V5, (3,), (1,), (1,), np.zeros((0,), np.float32), "ss-empty-range"),
    strided(V5, (-2,), (0,), (1,), f32([3, 4]), "ss-end-mask", end_mask=1),
    strided(V5, (0,), (2,), (1,), f32([0, 1]), "ss-begin-mask-ignores-begin", begin_mask=1),
    strided(X, (0, 0), (0, 0), (-1, -2), X[::-1, ::-2], "ss-reverse-2d-masked", begin_mask=3, end_mask=3),
    strided(X, (1,), (2,), (1,), X[1], "ss-shrink", shrink_axis_mask=1),
    strided(X, (-1,), (0,), (1,), X[-1], "ss-shrink-negative-begin", shrink_axis_mask=1),
    strided(V5, (-1,), (0,), (1,), np.float32(4), "ss-shrink-reads-begin-despite-mask", shrink_axis_mask=1, begin_mask=1),
    strided(V5, (1,), (0,), (2,), np.float32(1), "ss-shrink-ignores-end-and-stride", shrink_axis_mask=1),
    strided(X, (1, 2, 3), (2, 3, 4), (1, 1, 1), np.int32(23), "ss-shrink-to-scalar", shrink_axis_mask=7),
    strided(X, (0, 1), (0, 2), (1, 1), X[..., 1], "ss-ellipsis-first", ellipsis_mask=1, shrink_axis_mask=2),
    strided(X, (1, 0, 2), (2, 0, 3), (1, 1, 1), X[1, :, 2], "ss-ellipsis-middle", ellipsis_mask=2, shrink_axis_mask=5),
    strided(X, (0, 0), (0, 0), (1, 1), X[..., None], "ss-ellipsis-then-new-axis", ellipsis_mask=1, new_axis_mask=2),
    strided(X, (0, 0, 0), (0, 0, 1), (1, 1, 1), X[:, None, 0], "ss-new-axis-and-shrink",
            begin_mask=1, end_mask=1, new_axis_mask=2, shrink_axis_mask=4),
    strided(X, (0, 1), (1, 1), (1, 1), np.zeros((1, 0, 3, 4), np.int32), "ss-new-axis-wins-over-shrink",
            new_axis_mask=1, shrink_axis_mask=1),
    strided(X, (0, 1), (1, 2), (1, 1), X[..., 1:2], "ss-ellipsis-wins-over-new-axis", ellipsis_mask=1, new_axis_mask=1),
    strided(np.float32(5), (0,), (0,), (1,), f32([5]), "ss-new-axis-on-scalar", new_axis_mask=1),
    strided(np.zeros((0, 3), np.float32), (0, 0), (1, 2), (1, 1), np.zeros((0, 2), np.float32), "ss-empty-input"),
    strided(X, (), (), (), X, "ss-empty-spec"),
    pytest.param("StridedSlice", [X, i64(0, -1), i64(2, -4), i64(1, -1)], {}, [X[0:2, -1:-4:-1]], id="ss-int64-spec"),
]

CASES = STRIDED_SLICE + [
    # Slice: begin and size per dim, size -1 means "to the end"
    pytest.param("Slice", [X, i32(0, 1, 1), i32(2, -1, 2)], {}, [X[0:2, 1:, 1:3]], id="slice"),
    pytest.param("Slice", [X, i64(1, 0, 0), i64(1, 3, 0)], {}, [np.zeros((1, 3, 0), np.int32)], id="slice-zero-size-int64"),
    pytest.param("Slice", [V5, i32(5), i32(-1)], {}, [np.zeros((0,), np.float32)], id="slice-begin-at-end"),
    pytest.param("Slice", [np.float32(3), np.zeros((0,), np.int32), np.zeros((0,), np.int32)], {}, [np.float32(3)], id="slice-scalar"),
    # ReverseV2
    pytest.param("ReverseV2", [X, i32(1)], {}, [X[:, ::-1]], id="reverse-one-axis"),
    pytest.param("ReverseV2", [X, i64(-1, 0)], {}, [X[::-1, :, ::-1]], id="reverse-negative-axis"),
    pytest.param("ReverseV2", [X, np.zeros((0,), np.int32)], {}, [X], id="reverse-no-axis"),
    pytest.param("ReverseV2", [np.array([True, False, False]), i32(0)], {}, [np.array([False, False, True])], id="reverse-bool"),
    pytest.param("ReverseV2", [np.zeros((2, 0), np.float32), i32(1)], {}, [np.zeros((2, 0), np.float32)], id="reverse-empty"),
    # Pad / PadV2
    pytest.param("Pad", [f32([[1, 2]]), i32(1, 0, 0, 2).reshape(2, 2)], {}, [f32([[0, 0, 0, 0], [1, 2, 0, 0]])], id="pad"),
    pytest.param("Pad", [f32([[1, 2]]), np.zeros((2, 2), np.int64)], {}, [f32([[1, 2]])], id="pad-nothing"),
    pytest.param("Pad", [np.zeros((0, 2), np.int32), i32(1, 1, 0, 0).reshape(2, 2)], {}, [np.zeros((2, 2), np.int32)], id="pad-empty"),
    pytest.param("Pad", [np.float32(7), np.zeros((0, 2), np.int32)], {}, [np.float32(7)], id="pad-scalar"),
    pytest.param("PadV2", [i32(1, 2, 3), i32(2, 1).reshape(1, 2), np.int32(-1)], {}, [i32(-1, -1, 1, 2, 3, -1)], id="pad-v2"),
    # MirrorPad
    pytest.param("MirrorPad", [f32([1, 2, 3]), i32(2, 2).reshape(1, 2)], {"mode": "REFLECT"}, [f32([3, 2, 1, 2, 3, 2, 1])], id="mirror-reflect"),
    pytest.param("MirrorPad", [f32([1, 2, 3]), i32(3, 3).reshape(1, 2)], {"mode": "SYMMETRIC"},
                 [f32([3, 2, 1, 1, 2, 3, 3, 2, 1])], id="mirror-symmetric-full"),
    pytest.param("MirrorPad", [f32([1, 2, 3]), i32(0, 1).reshape(1, 2)], {"mode": "SYMMETRIC"}, [f32([1, 2, 3, 3])], id="mirror-symmetric-one-side"),
    pytest.param(
        "MirrorPad",
        [np.array([[1, 2, 3], [4, 5, 6]], np.int32), i64(1, 1, 2, 0).reshape(2, 2)],
        {"mode": "REFLECT"},
        [np.array([[6, 5, 4, 5, 6], [3, 2, 1, 2, 3], [6, 5, 4, 5, 6], [3, 2, 1, 2, 3]], np.int32)],
        id="mirror-reflect-2d",
    ),
    pytest.param(
        "MirrorPad",
        [np.array([[1, 2, 3], [4, 5, 6]], np.int32), i32(1, 0, 1, 1).reshape(2, 2)],
        {"mode": "SYMMETRIC"},
        [np.array([[1, 1, 2, 3, 3], [1, 1, 2, 3, 3], [4, 4, 5, 6, 6]], np.int32)],
        id="mirror-symmetric-2d",
    ),
]


def strided_error(begin, end, strides, message, case_id, **masks):
    return pytest.param("StridedSlice", [X, i32(*begin), i32(*end), i32(*strides)], masks, ValueError, message, id=case_id)


ERRORS = [
    strided_error((0,), (1,), (0,), r"strides\[0\] must be non-zero", "ss-zero-stride"),
    strided_error((2,), (3,), (1,), "slice index 2 of dimension 0 out of bounds", "ss-shrink-out-of-range", shrink_axis_mask=1),
    strided_error((1,), (0,), (-1,), "only stride 1 allowed", "ss-shrink-negative-stride", shrink_axis_mask=1),
    strided_error((0, 0), (1, 1), (1, 1), "Multiple ellipses", "ss-two-ellipses", ellipsis_mask=3),
    strided_error((0, 0, 0, 0), (1, 1, 1, 1), (1, 1, 1, 1), "Index out of range using input dim 3", "ss-too-many-dims"),
    strided_error((0, 0), (1, 1), (1,), "equal size", "ss-length-mismatch"),
    pytest.param("Slice", [X, i32(3, 0, 0), i32(-1, -1, -1)], {}, ValueError, r"begin\[0\] in \[0, 2\], but got 3", id="slice-begin-range"),
    pytest.param("Slice", [X, i32(1, 0, 0), i32(2, -1, -1)], {}, ValueError, r"size\[0\] in \[0, 1\], but got 2", id="slice-size-range"),
    pytest.param("Slice", [X, i32(0, 0), i32(1, 1)], {}, ValueError, "size 3", id="slice-short-spec"),
    pytest.param("ReverseV2", [X, i32(0, -3)], {}, ValueError, "axis 0 specified more than once", id="reverse-duplicate"),
    pytest.param("ReverseV2", [X, i32(3)], {}, ValueError, "out of valid range", id="reverse-out-of-range"),
    pytest.param("Pad", [X, i32(0, 0, 0, 0).reshape(2, 2)], {}, ValueError, "rank", id="pad-wrong-rank"),
    pytest.param("Pad", [f32([1]), i32(-1, 0).reshape(1, 2)], {}, ValueError, "non-negative", id="pad-negative"),
    pytest.param("MirrorPad", [f32([1, 2]), i32(2, 0).reshape(1, 2)], {"mode": "REFLECT"}, ValueError, "less than the dimension size", id="mirror-reflect-too-wide"),
    pytest.param("MirrorPad", [f32([1, 2]), i32(0, 3).reshape(1, 2)], {"mode": "SYMMETRIC"}, ValueError, "no greater than", id="mirror-symmetric-too-wide"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_slicing_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_slicing_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_strided_slice_returns_a_view_on_numpy():
    """The hot path indexes once with basic indices: no copy of the sliced data."""
    import kernels

    fn = kernels.lookup("StridedSlice", "cpu").bind(np, {"shrink_axis_mask": 1})
    (out,) = fn(X, i32(1, 0), i32(2, 3), i32(1, 2))
    assert np.shares_memory(out, X)
    np.testing.assert_array_equal(out, X[1, 0:3:2])


def test_padding_leaves_input_alone(run_kernel):
    x = f32([1, 2, 3])
    run_kernel("MirrorPad", x, i32(2, 2).reshape(1, 2), mode="REFLECT")
    run_kernel("PadV2", x, i32(1, 1).reshape(1, 2), np.float32(9))
    np.testing.assert_array_equal(x, f32([1, 2, 3]))


# ---- Roll, Reverse (v1), ReverseSequence: checked against TensorFlow 2.21's raw ops ----

R = np.arange(12, dtype=np.float32).reshape(3, 4)
SEQ = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

ROTATIONS = [
    pytest.param("Roll", [R, np.int32(1), np.int32(0)], {}, [R[[2, 0, 1]]], id="roll-rows"),
    pytest.param("Roll", [R, i64(1, -5), i64(0, -1)], {}, [np.roll(R, (1, -5), (0, 1))], id="roll-vector-negative"),
    pytest.param("Roll", [R, i32(1, 2), i32(1, 1)], {}, [np.roll(R, 3, 1)], id="roll-repeated-axis-adds"),
    pytest.param("Roll", [R, np.int64(-13), np.int32(1)], {}, [np.roll(R, -1, 1)], id="roll-mixed-index-types"),
    pytest.param("Roll", [R, np.zeros(0, np.int32), np.zeros(0, np.int32)], {}, [R], id="roll-no-axes"),
    pytest.param("Roll", [np.zeros((0, 3), np.float32), np.int32(1), np.int32(0)], {}, [np.zeros((0, 3), np.float32)],
                 id="roll-empty"),
    pytest.param("Roll", [np.array([b"a", b"b", b"c"], dtype=object), np.int64(1), np.int32(0)], {},
                 [np.array([b"c", b"a", b"b"], dtype=object)], id="roll-strings"),
    pytest.param("Reverse", [SEQ, np.array([True, False, True])], {}, [SEQ[::-1, :, ::-1]], id="reverse-v1"),
    pytest.param("Reverse", [np.float32(2), np.zeros(0, bool)], {}, [np.float32(2)], id="reverse-v1-scalar"),
    pytest.param("ReverseSequence", [SEQ, i64(2, 4)], {"seq_dim": 2, "batch_dim": 0},
                 [np.stack([SEQ[0][:, [1, 0, 2, 3]], SEQ[1][:, ::-1]])], id="reverse-sequence"),
    pytest.param("ReverseSequence", [SEQ, i32(0, 1, 4)], {"seq_dim": 2, "batch_dim": 1},
                 [np.stack([SEQ[:, 0], SEQ[:, 1], SEQ[:, 2, ::-1]], axis=1)], id="reverse-sequence-batch-dim-1"),
    pytest.param("ReverseSequence", [SEQ, i32(3, 2, 1, 0)], {"seq_dim": 1, "batch_dim": 2},
                 [np.stack([SEQ[:, ::-1, 0], SEQ[:, [1, 0, 2], 1], SEQ[:, :, 2], SEQ[:, :, 3]], axis=2)],
                 id="reverse-sequence-batch-after-seq"),
]

ROTATION_ERRORS = [
    pytest.param("Roll", [R, np.int32(1), np.int32(2)], {}, "axis 2 is out of range", id="roll-axis"),
    pytest.param("Roll", [R, np.int32(1), np.int32(-3)], {}, "axis -1 is out of range", id="roll-negative-axis"),
    pytest.param("Roll", [R, i32(1, 2), np.int32(0)], {}, "same size", id="roll-mismatch"),
    pytest.param("Roll", [R, np.int32([[1]]), np.int32([[0]])], {}, r"scalar or a 1-D vector. Found: \[1,1\]",
                 id="roll-matrix-shift"),
    pytest.param("Roll", [np.float32(3), np.int32(1), np.int32(0)], {}, "1-D or higher", id="roll-scalar"),
    pytest.param("Reverse", [SEQ, np.array([True, False])], {}, "same number of values", id="reverse-v1-dims"),
    pytest.param("ReverseSequence", [SEQ, i64(2, 5)], {"seq_dim": 2, "batch_dim": 0}, r"seq_lens\(1\) > input.dims\(2\)",
                 id="reverse-sequence-too-long"),
    pytest.param("ReverseSequence", [SEQ, i64(2, -1)], {"seq_dim": 2, "batch_dim": 0}, r"seq_lens\(1\) < 0",
                 id="reverse-sequence-negative"),
    pytest.param("ReverseSequence", [SEQ, i64(2, 3, 1)], {"seq_dim": 2, "batch_dim": 0},
                 r"Length of seq_lengths != input.dims\(0\), \(3 vs. 2\)", id="reverse-sequence-count"),
    pytest.param("ReverseSequence", [SEQ, i64(2, 3)], {"seq_dim": 0, "batch_dim": 0}, "batch_dim == seq_dim == 0",
                 id="reverse-sequence-same-dims"),
    pytest.param("ReverseSequence", [SEQ, i64(2, 3)], {"seq_dim": 3, "batch_dim": 0}, "seq_dim must be < input rank",
                 id="reverse-sequence-seq-dim"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", ROTATIONS)
def test_rotation_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, message", ROTATION_ERRORS)
def test_rotation_kernel_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
