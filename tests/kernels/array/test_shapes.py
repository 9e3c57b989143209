"""Shape kernels: Shape/Size/Rank queries, Reshape and friends, and shape-driven constructors.

Expected values are written by hand and were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

X23 = np.arange(6, dtype=np.float32).reshape(2, 3)
EMPTY_0x3 = np.zeros((0, 3), dtype=np.float32)

CASES = [
    # Shape queries
    pytest.param("Shape", [np.zeros((2, 0, 3), np.float32)], {}, [i32(2, 0, 3)], id="shape-with-zero-dim"),
    pytest.param("Shape", [X23], {"out_type": np.dtype(np.int64)}, [i64(2, 3)], id="shape-int64"),
    pytest.param("Shape", [np.float32(1.5)], {}, [np.zeros((0,), np.int32)], id="shape-scalar"),
    pytest.param("ShapeN", [X23, np.zeros((4,), np.float32)], {"N": 2}, [i32(2, 3), i32(4)], id="shape-n"),
    pytest.param("Size", [X23], {}, [np.int32(6)], id="size"),
    pytest.param("Size", [EMPTY_0x3], {"out_type": np.dtype(np.int64)}, [np.int64(0)], id="size-empty-int64"),
    pytest.param("Rank", [np.zeros((2, 3, 1))], {}, [np.int32(3)], id="rank"),
    pytest.param("Rank", [np.float32(1)], {}, [np.int32(0)], id="rank-scalar"),
    # Reshape
    pytest.param("Reshape", [X23, i32(3, -1)], {}, [X23.reshape(3, 2)], id="reshape-infer"),
    pytest.param("Reshape", [X23, i64(-1)], {}, [X23.reshape(6)], id="reshape-flatten-int64-shape"),
    pytest.param("Reshape", [np.float32([7]), np.zeros((0,), np.int32)], {}, [np.float32(7)], id="reshape-to-scalar"),
    pytest.param("Reshape", [np.float32([7]), np.int32(1)], {}, [np.float32([7])], id="reshape-scalar-shape"),
    pytest.param("Reshape", [EMPTY_0x3, i32(0, -1)], {}, [np.zeros((0, 3), np.float32)], id="reshape-empty-zero-then-infer"),
    pytest.param("Reshape", [EMPTY_0x3, i32(-1, 0)], {}, [np.zeros((3, 0), np.float32)], id="reshape-empty-infer-then-zero"),
    pytest.param("Reshape", [EMPTY_0x3, i32(-1, 5)], {}, [np.zeros((0, 5), np.float32)], id="reshape-empty-infer-nonzero"),
    # Squeeze / ExpandDims
    pytest.param("Squeeze", [np.zeros((1, 3, 1), np.int32)], {}, [np.zeros((3,), np.int32)], id="squeeze-all"),
    pytest.param("Squeeze", [np.zeros((1, 3, 1), np.int32)], {"squeeze_dims": (-1,)}, [np.zeros((1, 3), np.int32)], id="squeeze-negative"),
    pytest.param("Squeeze", [np.zeros((1, 1), np.int32)], {"squeeze_dims": (0, 1)}, [np.int32(0)], id="squeeze-to-scalar"),
    pytest.param("ExpandDims", [X23, np.int32(0)], {}, [X23.reshape(1, 2, 3)], id="expand-front"),
    pytest.param("ExpandDims", [X23, np.int32(-1)], {}, [X23.reshape(2, 3, 1)], id="expand-back-negative"),
    pytest.param("ExpandDims", [X23, i64(1)], {}, [X23.reshape(2, 1, 3)], id="expand-vector-dim"),
    pytest.param("ExpandDims", [np.float32(2), np.int32(-1)], {}, [np.float32([2])], id="expand-scalar"),
    # Transpose
    pytest.param("Transpose", [X23, i32(1, 0)], {}, [f32([[0, 3], [1, 4], [2, 5]])], id="transpose-2d"),
    pytest.param("Transpose", [X23, i32(-1, 0)], {}, [f32([[0, 3], [1, 4], [2, 5]])], id="transpose-negative-perm"),
    pytest.param(
        "Transpose",
        [np.arange(24, dtype=np.int32).reshape(2, 3, 4), i64(2, 0, 1)],
        {},
        [np.arange(24, dtype=np.int32).reshape(2, 3, 4).transpose(2, 0, 1)],
        id="transpose-3d",
    ),
    pytest.param("Transpose", [np.zeros((0, 2), np.int8), i32(1, 0)], {}, [np.zeros((2, 0), np.int8)], id="transpose-empty"),
    pytest.param(
        "ConjugateTranspose",
        [np.array([[1 + 2j, 3 - 1j]], np.complex64), i32(1, 0)],
        {},
        [np.array([[1 - 2j], [3 + 1j]], np.complex64)],
        id="conjugate-transpose",
    ),
    pytest.param("ConjugateTranspose", [X23, i32(1, 0)], {}, [X23.T], id="conjugate-transpose-real"),
    # Constructors
    pytest.param("Fill", [i32(2, 3), np.int8(3)], {}, [np.full((2, 3), 3, np.int8)], id="fill"),
    pytest.param("Fill", [np.zeros((0,), np.int32), np.float32(2.5)], {}, [np.float32(2.5)], id="fill-scalar"),
    pytest.param("Fill", [i64(0, 2), np.float32(1)], {}, [np.zeros((0, 2), np.float32)], id="fill-empty"),
    pytest.param("ZerosLike", [np.array([True, True])], {}, [np.array([False, False])], id="zeros-like-bool"),
    pytest.param("OnesLike", [np.zeros((2, 1), np.int64)], {}, [np.ones((2, 1), np.int64)], id="ones-like"),
    pytest.param("OnesLike", [np.zeros((0,), np.float32)], {}, [np.zeros((0,), np.float32)], id="ones-like-empty"),
    pytest.param("Range", [np.int32(0), np.int32(10), np.int32(3)], {}, [i32(0, 3, 6, 9)], id="range-int"),
    pytest.param("Range", [np.int32(7), np.int32(0), np.int32(-3)], {}, [i32(7, 4, 1)], id="range-negative-delta"),
    pytest.param("Range", [np.int64(3), np.int64(3), np.int64(1)], {}, [np.zeros((0,), np.int64)], id="range-empty"),
    pytest.param(
        "Range",
        [np.float32(0), np.float32(1), np.float32(0.1)],
        {},
        # start + i*delta in float32, as TensorFlow computes it (not a running sum).
        [f32([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.90000004])],
        id="range-float32",
    ),
    pytest.param("Range", [np.float64(1), np.float64(-1), np.float64(-0.5)], {}, [np.array([1, 0.5, 0, -0.5])], id="range-float64-down"),
    # Broadcasting and tiling
    pytest.param("BroadcastTo", [f32([1, 2, 3]), i32(2, 3)], {}, [f32([[1, 2, 3], [1, 2, 3]])], id="broadcast-to"),
    pytest.param("BroadcastTo", [np.int32(4), i64(2, 2)], {}, [np.full((2, 2), 4, np.int32)], id="broadcast-to-scalar"),
    pytest.param("BroadcastTo", [f32([1]), i32(0)], {}, [np.zeros((0,), np.float32)], id="broadcast-to-empty"),
    pytest.param("BroadcastArgs", [i32(2, 1), i32(3, 1, 5)], {}, [i32(3, 2, 5)], id="broadcast-args"),
    pytest.param("BroadcastArgs", [i64(2, 1), np.zeros((0,), np.int64)], {}, [i64(2, 1)], id="broadcast-args-scalar-shape"),
    pytest.param("BroadcastArgs", [i32(0, 1), i32(1, 4)], {}, [i32(0, 4)], id="broadcast-args-zero"),
    pytest.param("Tile", [f32([[1, 2]]), i32(2, 3)], {}, [f32([[1, 2, 1, 2, 1, 2], [1, 2, 1, 2, 1, 2]])], id="tile"),
    pytest.param("Tile", [f32([[1, 2]]), i64(0, 1)], {}, [np.zeros((0, 2), np.float32)], id="tile-zero"),
    pytest.param("Tile", [np.int32(5), np.zeros((0,), np.int32)], {}, [np.int32(5)], id="tile-scalar"),
    # Checks and reinterpretation
    pytest.param("EnsureShape", [X23], {"shape": (None, 3)}, [X23], id="ensure-shape-unknown-dim"),
    pytest.param("EnsureShape", [X23], {"shape": (2, 3)}, [X23], id="ensure-shape-exact"),
    pytest.param("Bitcast", [f32([1.0])], {"type": np.dtype(np.uint8)}, [np.array([[0, 0, 128, 63]], np.uint8)], id="bitcast-to-smaller"),
    pytest.param("Bitcast", [np.array([[0, 0, 128, 63]], np.uint8)], {"type": np.dtype(np.float32)}, [f32([1.0])], id="bitcast-to-bigger"),
    pytest.param("Bitcast", [i32(1065353216, 0)], {"type": np.dtype(np.float32)}, [f32([1.0, 0.0])], id="bitcast-same-size"),
]

ERRORS = [
    pytest.param("Reshape", [X23, i32(4)], {}, ValueError, "6 values, but the requested shape has 4", id="reshape-count"),
    pytest.param("Reshape", [X23, i32(4, -1)], {}, ValueError, "requires a multiple of 4", id="reshape-not-multiple"),
    pytest.param("Reshape", [X23, i32(-1, -1)], {}, ValueError, "Only one input size may be -1", id="reshape-two-unknown"),
    pytest.param("Reshape", [X23, i32(-2, 3)], {}, ValueError, "must be non-negative", id="reshape-negative"),
    pytest.param("Squeeze", [X23], {"squeeze_dims": (1,)}, ValueError, "expected a dimension of 1, got 3", id="squeeze-not-one"),
    pytest.param("Squeeze", [X23], {"squeeze_dims": (2,)}, ValueError, "squeeze dim index 2", id="squeeze-out-of-range"),
    pytest.param("ExpandDims", [X23, np.int32(3)], {}, ValueError, "expand dim index 3", id="expand-out-of-range"),
    pytest.param("Transpose", [X23, i32(0, 0)], {}, ValueError, "1 is missing", id="transpose-repeated"),
    pytest.param("Transpose", [X23, i32(0)], {}, ValueError, "vector of size 2", id="transpose-short-perm"),
    pytest.param("Fill", [i32(2, -1), np.float32(1)], {}, ValueError, "Dimension -1 must be >= 0", id="fill-negative"),
    pytest.param("Range", [np.int32(0), np.int32(5), np.int32(0)], {}, ValueError, "delta != 0", id="range-zero-delta"),
    pytest.param("Range", [np.int32(5), np.int32(1), np.int32(1)], {}, ValueError, "start <= limit", id="range-wrong-way"),
    pytest.param("BroadcastTo", [X23, i32(3, 3)], {}, ValueError, "Incompatible shapes", id="broadcast-to-incompatible"),
    pytest.param("BroadcastArgs", [i32(2, 3), i32(3, 1, 5)], {}, ValueError, "Incompatible shapes", id="broadcast-args-incompatible"),
    pytest.param("Tile", [X23, i32(2)], {}, ValueError, "vector of length 2", id="tile-short"),
    pytest.param("Tile", [X23, i32(1, -1)], {}, ValueError, r"multiples\[1\] >= 0", id="tile-negative"),
    pytest.param("EnsureShape", [X23], {"shape": (2, 4)}, ValueError, "not compatible with expected shape", id="ensure-shape-mismatch"),
    pytest.param("EnsureShape", [X23], {"shape": (6,)}, ValueError, "not compatible", id="ensure-shape-rank"),
    pytest.param("Bitcast", [np.zeros((2, 3), np.uint8)], {"type": np.dtype(np.float32)}, ValueError, "Cannot bitcast", id="bitcast-bad-last-dim"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_shape_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_shape_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_squeeze_accepts_axis_spelling(run_kernel):
    """tf.raw_ops spells squeeze_dims as `axis`; both spellings squeeze the same dims."""
    (out,) = run_kernel("Squeeze", np.zeros((1, 3, 1)), axis=(0,))
    assert out.shape == (3, 1)


def test_reshape_leaves_its_input_alone(run_kernel):
    x = np.arange(6, dtype=np.float32)
    before = x.copy()
    (out,) = run_kernel("Reshape", x, i32(2, 3))
    np.testing.assert_array_equal(x, before)
    assert out.shape == (2, 3)


# ---- gradient shape helpers, Empty, and the identities TensorFlow's graphs carry (TensorFlow 2.21) ----

HELPERS = [
    pytest.param("BroadcastGradientArgs", [i32(2, 1, 3), i32(4, 1, 1, 3)], {}, [i32(0, 2), i32(1, 2)], id="bga"),
    # Equal shapes reduce nothing, even where they are 1; otherwise every 1 of an operand is reduced.
    pytest.param("BroadcastGradientArgs", [i32(2, 1), i32(2, 1)], {}, [i32(), i32()], id="bga-equal"),
    pytest.param("BroadcastGradientArgs", [i64(1, 1), i64(1)], {}, [i64(0, 1), i64(0, 1)], id="bga-ones"),
    pytest.param("BroadcastGradientArgs", [i32(), i32(2, 1)], {}, [i32(0, 1), i32(1)], id="bga-scalar"),
    pytest.param("BroadcastGradientArgs", [i32(1, 0), i32(3, 1)], {}, [i32(0), i32(1)], id="bga-zero-dim"),
    pytest.param("ConcatOffset", [np.int32(1), i32(2, 3, 5), i32(2, 7, 5), i32(2, 1, 5)], {"N": 3},
                 [i32(0, 0, 0), i32(0, 3, 0), i32(0, 10, 0)], id="concat-offset"),
    pytest.param("ConcatOffset", [np.int32(-2), i64(2, 3, 5), i64(2, 7, 5)], {"N": 2}, [i64(0, 0, 0), i64(0, 3, 0)],
                 id="concat-offset-negative-axis"),
    pytest.param("Empty", [i32(2, 3)], {"dtype": np.dtype(np.float32), "init": True}, [np.zeros((2, 3), np.float32)],
                 id="empty-init"),
    pytest.param("Empty", [i32(0, 2)], {"dtype": np.dtype(np.int64)}, [np.zeros((0, 2), np.int64)], id="empty-no-init"),
    pytest.param("Empty", [i32(2)], {"dtype": np.dtype(object), "init": True}, [np.array([b"", b""], dtype=object)],
                 id="empty-strings"),
    pytest.param("DeepCopy", [f32([1, 2])], {}, [f32([1, 2])], id="deep-copy"),
    pytest.param("GuaranteeConst", [i32(3)], {}, [i32(3)], id="guarantee-const"),
    pytest.param("RefIdentity", [i32(3)], {}, [i32(3)], id="ref-identity"),
]

HELPER_ERRORS = [
    pytest.param("BroadcastGradientArgs", [i32(2, 3), i32(4)], {}, r"Incompatible shapes: \[2,3\] vs. \[4\]", id="bga-bad"),
    pytest.param("ConcatOffset", [np.int32(1), i32(2, 3, 5), i32(3, 7, 5)], {"N": 2},
                 r"All dimensions except 1 must match. Input 1 has shape \[3 7 5\]", id="concat-offset-mismatch"),
    pytest.param("ConcatOffset", [np.int32(3), i32(2, 3, 5), i32(2, 7, 5)], {"N": 2}, "Concat dim is out of range: 3 vs. 3",
                 id="concat-offset-axis"),
    pytest.param("ConcatOffset", [np.int32(0), i32(2, 3, 5), i32(2, 7)], {"N": 2}, "should contain 3 elements, but got 2",
                 id="concat-offset-rank"),
    pytest.param("Empty", [i32(2, -3)], {"dtype": np.dtype(np.float32)}, "Dimension -3 must be >= 0", id="empty-negative"),
    pytest.param("Empty", [np.int32([[2]])], {"dtype": np.dtype(np.float32)}, "shape must be a vector", id="empty-matrix"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", HELPERS)
def test_shape_helper_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, message", HELPER_ERRORS)
def test_shape_helper_kernel_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)


def test_copies_are_aliased_by_the_planner():
    """DeepCopy, GuaranteeConst and RefIdentity forward their input, like Identity (no kernel writes in place)."""
    from kernels.array.identity import IDENTITY_OPS

    assert {"DeepCopy", "GuaranteeConst", "RefIdentity"} <= IDENTITY_OPS


def test_empty_checks_the_memory_limit():
    import kernels
    from kernels.limits import AllocationTooLarge

    bound = kernels.lookup("Empty", "cpu").bind(np, {"dtype": np.dtype(np.float32)}, {"memory_limit": 1 << 20})
    with pytest.raises(AllocationTooLarge, match=r"Empty output of shape \[100000,100000\]"):
        bound(i32(100000, 100000))
