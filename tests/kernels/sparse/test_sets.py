"""Set ops: SetSize and the dense/sparse set operations (a-b, b-a, intersection, union), with TensorFlow's
group walk and errors. Expected values and messages were read off TensorFlow 2.21;
tests/fixtures/ops/sparse/sets/ holds TensorFlow's outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, i32, i64


def ix(*rows, rank=2) -> np.ndarray:
    return np.array(rows, np.int64).reshape(-1, rank)


A = np.array([[1, 2, 3, 3], [4, 5, 6, 6]], np.int32)
B = np.array([[3, 1, 9], [7, 7, 7]], np.int32)
SP_IX, SP_V, SP_SHAPE = ix([0, 0], [0, 1], [1, 0]), i32(3, 2, 5), i64(2, 2)

CASES = [
    pytest.param("SetSize", [ix([0, 0], [0, 1], [1, 0], [1, 2]), i32(5, 5, 3, 4), i64(3, 4)], {}, [i32(1, 2, 0)],
                 id="set-size"),
    pytest.param("SetSize", [ix([0, 0, 0], [0, 0, 1], [1, 1, 0], rank=3), i32(1, 2, 1), i64(2, 2, 3)], {},
                 [np.array([[2, 0], [0, 1]], np.int32)], id="set-size-rank-3"),
    pytest.param("DenseToDenseSetOperation", [A, B], {"set_operation": "intersection"},
                 [ix([0, 0], [0, 1]), i32(1, 3), i64(2, 2)], id="dense-intersection"),
    pytest.param("DenseToDenseSetOperation", [A, B], {"set_operation": "a-b"},
                 [ix([0, 0], [1, 0], [1, 1], [1, 2]), i32(2, 4, 5, 6), i64(2, 3)], id="dense-a-minus-b"),
    pytest.param("DenseToDenseSetOperation", [A, B], {"set_operation": "B-A"},
                 [ix([0, 0], [1, 0]), i32(9, 7), i64(2, 1)], id="dense-b-minus-a-any-case"),
    pytest.param("DenseToDenseSetOperation", [np.array([[b"b", b"a"]], dtype=object),
                                              np.array([[b"c", b""]], dtype=object)], {"set_operation": "union"},
                 [ix([0, 0], [0, 1], [0, 2], [0, 3]), np.array([b"", b"a", b"b", b"c"], dtype=object), i64(1, 4)],
                 id="dense-union-strings"),
    pytest.param("DenseToSparseSetOperation", [A, SP_IX, SP_V, SP_SHAPE], {"set_operation": "intersection"},
                 [ix([0, 0], [0, 1], [1, 0]), i32(2, 3, 5), i64(2, 2)], id="dense-sparse-intersection"),
    pytest.param("DenseToSparseSetOperation", [A, ix(), i32(), SP_SHAPE], {"set_operation": "b-a"},
                 [ix(), i32(), i64(2, 0)], id="dense-sparse-empty"),
    pytest.param("SparseToSparseSetOperation", [ix([0, 0], [0, 1], [0, 2], [1, 1]), i32(1, 2, 2, 4), i64(3, 3),
                                                ix([0, 0], [2, 0]), i32(2, 8), i64(3, 3)], {"set_operation": "union"},
                 [ix([0, 0], [0, 1], [1, 0], [2, 0]), i32(1, 2, 4, 8), i64(3, 2)], id="sparse-sparse-union"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_sets(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


ERRORS = [
    pytest.param("SetSize", [ix([1, 0], [0, 1]), i32(1, 2), i64(2, 2)], {},
                 r"indices\[1\] = \[0,1\] is out of order", id="set-size-order"),
    pytest.param("SetSize", [ix([0, 1], [0, 1]), i32(1, 2), i64(2, 2)], {}, r"indices\[1\] = \[0,1\] is repeated",
                 id="set-size-repeat"),
    pytest.param("SetSize", [ix([0], [1], rank=1), i32(1, 2), i64(2)], {}, "Invalid rank 1.", id="set-size-rank"),
    pytest.param("DenseToDenseSetOperation", [A, B], {"set_operation": "xor"}, "Invalid set_operation xor.",
                 id="bad-operation"),
    pytest.param("DenseToDenseSetOperation", [A, np.ones((3, 1), np.int32)], {"set_operation": "union"},
                 r"Mismatched shapes \[2\] vs \[3\]", id="mismatched-groups"),
    pytest.param("DenseToDenseSetOperation", [i32(3, 1), i32(2)], {"set_operation": "union"},
                 r"Shape \[2\] has rank 1 < 2", id="dense-rank"),
    pytest.param("DenseToSparseSetOperation", [A, ix([1, 0], [0, 1]), i32(3, 2), SP_SHAPE],
                 {"set_operation": "union"}, r"indices\[1\] = \[0,1\] is out of order", id="sparse-order"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", ERRORS)
def test_set_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
