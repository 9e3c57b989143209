"""Diagonal kernels: Diag, DiagPart and MatrixDiag / MatrixDiagPart / MatrixSetDiag V1-V3 (align, bands,
inferred sizes), and the errors TensorFlow gives.

Expected values were checked against TensorFlow 2.21's raw ops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32

X = np.arange(12, dtype=np.float32).reshape(3, 4)
Z = np.float32(0)

CASES = [
    # k = [-2, 3] on [3, 4]: rows from k = 3 down to k = -2; RIGHT_LEFT pads superdiagonals on the left.
    pytest.param("MatrixDiagPartV3", [X, i32(-2, 3), np.float32(9)], {},
                 [f32([[9, 9, 3], [9, 2, 7], [1, 6, 11], [0, 5, 10], [4, 9, 9], [8, 9, 9]])], id="part-band-right-left"),
    pytest.param("MatrixDiagPartV3", [X, i32(-1, 1), np.float32(9)], {"align": "LEFT_RIGHT"},
                 [f32([[1, 6, 11], [0, 5, 10], [9, 4, 9]])], id="part-band-left-right"),
    pytest.param("MatrixDiagPartV2", [X, i32(-1, 1), np.float32(9)], {}, [f32([[1, 6, 11], [0, 5, 10], [4, 9, 9]])],
                 id="part-v2-left-left"),
    pytest.param("MatrixDiagPartV3", [X, np.int32(2), Z], {}, [f32([2, 7])], id="part-single-diagonal"),
    pytest.param("MatrixDiagPartV3", [np.zeros((0, 3), np.float32), np.int32(0), Z], {}, [np.zeros((0,), np.float32)],
                 id="part-empty-matrix"),
    pytest.param("MatrixDiagPart", [np.arange(8, dtype=np.int32).reshape(2, 2, 2)], {}, [i32(0, 3, 4, 7).reshape(2, 2)],
                 id="part-v1-batched"),
    # Two diagonals into an inferred square matrix; RIGHT_LEFT: the short subdiagonal is left-aligned.
    pytest.param("MatrixDiagV3", [f32([[0, 1, 2], [3, 4, 5]]), i32(-1, 0), np.int32(-1), np.int32(-1), Z], {},
                 [f32([[0, 0, 0], [3, 1, 0], [0, 4, 2]])], id="diag-inferred-square"),
    pytest.param("MatrixDiagV3", [f32([1, 2]), np.int32(1), np.int32(3), np.int32(-1), np.float32(7)], {},
                 [f32([[7, 1, 7], [7, 7, 2], [7, 7, 7]])], id="diag-rows-given-cols-inferred"),
    pytest.param("MatrixDiagV2", [f32([[1, 2], [3, 4]]), i32(0, 1), np.int32(-1), np.int32(-1), Z], {},
                 [f32([[3, 1], [0, 4]])], id="diag-v2-left"),
    pytest.param("MatrixDiag", [np.array([[1, 2], [3, 4]], np.int64)], {},
                 [np.array([[[1, 0], [0, 2]], [[3, 0], [0, 4]]], np.int64)], id="diag-v1"),
    pytest.param("MatrixDiag", [np.zeros((2, 0), np.float32)], {}, [np.zeros((2, 0, 0), np.float32)], id="diag-v1-empty"),
    pytest.param("MatrixSetDiagV3", [X, np.ones((2, 3), np.float32), i32(-1, 0)], {"align": "LEFT_RIGHT"},
                 [f32([[1, 1, 2, 3], [1, 1, 6, 7], [8, 1, 1, 11]])], id="set-band"),
    pytest.param("MatrixSetDiag", [np.zeros((2, 3), bool), np.ones(2, bool)], {},
                 [np.array([[True, False, False], [False, True, False]])], id="set-v1-bool"),
    pytest.param("MatrixSetDiagV2", [X, f32([[7, 8, 9], [1, 2, 3]]), i32(1, 2)], {},
                 [f32([[0, 1, 7, 3], [4, 5, 2, 8], [8, 9, 10, 3]])], id="set-v2"),
    pytest.param("Diag", [i32(1, 2)], {}, [i32(1, 0, 0, 2).reshape(2, 2)], id="diag-tensor"),
    pytest.param("Diag", [np.arange(4, dtype=np.float32).reshape(2, 2)], {},
                 [np.diag(np.arange(4, dtype=np.float32)).reshape(2, 2, 2, 2)], id="diag-tensor-rank2"),
    pytest.param("DiagPart", [np.arange(36, dtype=np.float32).reshape(2, 3, 2, 3)], {},
                 [f32([[0, 7, 14], [21, 28, 35]])], id="diag-part-rank4"),
]

ERRORS = [
    pytest.param("MatrixDiagPartV3", [X, i32(0, 1, 2), Z], {}, ValueError, "only one or two elements", id="k-three"),
    pytest.param("MatrixDiagPartV3", [X, i32(1, 0), Z], {}, ValueError, "must not be larger", id="k-reversed"),
    pytest.param("MatrixDiagPartV3", [X, np.int32(4), Z], {}, ValueError,
                 "lower_diag_index is out of bound: 4. It must be between -3 and 4", id="k-out-of-bound"),
    pytest.param("MatrixDiagPartV3", [X, np.zeros(0, np.int32), Z], {}, ValueError, "at least 1 element", id="k-empty"),
    pytest.param("MatrixDiagPartV3", [X, np.int32(0), f32([0, 1])], {}, ValueError, "Padding must be scalar", id="pad-vector"),
    pytest.param("MatrixDiagPart", [f32([1, 2])], {}, ValueError, "at least 2-dim", id="part-vector"),
    pytest.param("MatrixDiagV3", [np.zeros((2, 3), np.float32), np.int32(1), np.int32(1), np.int32(-1), Z], {},
                 ValueError, "number of rows is too small", id="diag-too-few-rows"),
    pytest.param("MatrixDiagV3", [np.zeros((2, 3), np.float32), np.int32(0), np.int32(5), np.int32(5), Z], {},
                 ValueError, "not consistent", id="diag-inconsistent-size"),
    pytest.param("MatrixDiagV3", [np.zeros((3, 3), np.float32), i32(-1, 0), np.int32(-1), np.int32(-1), Z], {},
                 ValueError, "number of diagonals provided", id="diag-wrong-count"),
    pytest.param("MatrixDiagV3", [np.zeros((2, 3), np.float32), np.int32(0), i32(2), np.int32(-1), Z], {}, ValueError,
                 "num_rows must be a scalar", id="diag-rows-vector"),
    pytest.param("MatrixDiag", [np.float32(2)], {}, ValueError, "at least 1-dim", id="diag-scalar"),
    pytest.param("MatrixSetDiagV3", [X, np.zeros(4, np.float32), np.int32(0)], {}, ValueError, "Expected diagonal shape|expected diagonal shape",
                 id="set-wrong-length"),
    pytest.param("MatrixSetDiagV3", [X, np.zeros((3, 3), np.float32), i32(-1, 0)], {}, ValueError,
                 "number of diagonals provided in `diag`", id="set-wrong-count"),
    pytest.param("Diag", [np.int32(3)], {}, ValueError, "at least rank 1", id="diag-rank0"),
    pytest.param("DiagPart", [np.zeros((2, 3), np.float32)], {}, ValueError, "dimensions 0 and 1 do not match",
                 id="diag-part-mismatch"),
    pytest.param("DiagPart", [np.zeros((2, 2, 2), np.float32)], {}, ValueError, "even", id="diag-part-odd-rank"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_diagonal_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_diagonal_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


@pytest.mark.parametrize("align", ["LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT"])
def test_diag_part_and_matrix_diag_round_trip(run_kernel, align):
    """MatrixDiagV3 puts back what MatrixDiagPartV3 read, for every alignment (zeros off the band)."""
    x = np.arange(1, 21, dtype=np.float32).reshape(4, 5)
    k = i32(-2, 1)
    (band,) = run_kernel("MatrixDiagPartV3", x, k, Z, align=align)
    (rebuilt,) = run_kernel("MatrixDiagV3", band, k, np.int32(4), np.int32(5), Z, align=align)
    offsets = np.arange(5)[None, :] - np.arange(4)[:, None]
    np.testing.assert_array_equal(rebuilt, np.where((offsets >= -2) & (offsets <= 1), x, 0))
    (replaced,) = run_kernel("MatrixSetDiagV3", np.zeros_like(x), band, k, align=align)
    np.testing.assert_array_equal(replaced, rebuilt)


def test_sizes_a_request_sends_are_checked_against_the_memory_limit():
    import kernels
    from kernels.limits import AllocationTooLarge

    bound = kernels.lookup("MatrixDiagV3", "cpu").bind(np, {}, {"memory_limit": 1 << 20})
    with pytest.raises(AllocationTooLarge, match=r"MatrixDiag output of shape \[100000,100000\]"):
        bound(f32([1]), np.int32(99999), np.int32(100000), np.int32(-1), Z)  # one far diagonal, a huge matrix
    diag = kernels.lookup("Diag", "cpu").bind(np, {}, {"memory_limit": 1 << 20})
    with pytest.raises(AllocationTooLarge, match="Diag output"):
        diag(np.zeros(1000, np.float32))
