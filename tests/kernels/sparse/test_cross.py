"""Feature crosses: SparseCross (hashed and joined), SparseCrossV2 and SparseCrossHashed, with TensorFlow's
FingerprintCat64 chaining, its walk over a column's entries and its errors. Expected values and messages were
read off TensorFlow 2.21; tests/fixtures/ops/sparse/cross/ holds TensorFlow's outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.strings.hash_functions import fingerprint_cat64
from tests.kernels.checks import assert_outputs, i64

STRING, INT64 = np.dtype(object), np.dtype(np.int64)


def ix(*rows) -> np.ndarray:
    return np.array(rows, np.int64).reshape(-1, 2)


def strings(*values, shape=None) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() for v in values]
    return out.reshape(shape) if shape else out


A_IX, A_V, A_SHAPE = ix([0, 0], [0, 1], [1, 0]), strings("a", "b", "c"), i64(2, 2)
DENSE = strings("x", "y", shape=(2, 1))
HASHED = {"N": 1, "hashed_output": True, "hash_key": 0xDECAFCAFFE, "sparse_types": (STRING,),
          "dense_types": (STRING,), "out_type": INT64, "internal_type": INT64}
JOINED = {"N": 1, "hashed_output": False, "num_buckets": 0, "hash_key": 0, "sparse_types": (STRING,),
          "dense_types": (STRING,), "out_type": STRING, "internal_type": STRING}
CROSS_IX = ix([0, 0], [0, 1], [1, 0])
SALT = i64(1, 2)

CASES = [
    pytest.param("SparseCross", [A_IX, A_V, A_SHAPE, DENSE], {**HASHED, "num_buckets": 100},
                 [CROSS_IX, i64(92, 4, 60), i64(2, 2)], id="hashed"),
    pytest.param("SparseCross", [A_IX, i64(5, -6, 7), A_SHAPE, np.array([[1], [2]], np.int64)],
                 {**HASHED, "num_buckets": 0, "sparse_types": (INT64,), "dense_types": (INT64,)},
                 [CROSS_IX, i64(6945244610988568008, 7621000775046452297, 609562168227158215), i64(2, 2)],
                 id="hashed-ints-raw-no-buckets"),
    pytest.param("SparseCross", [A_IX, A_V, A_SHAPE, DENSE], JOINED,
                 [CROSS_IX, strings("a_X_x", "b_X_x", "c_X_y"), i64(2, 2)], id="joined"),
    pytest.param("SparseCross", [A_IX, i64(5, -6, 7), A_SHAPE, np.array([[1], [2]], np.int64)],
                 {**JOINED, "internal_type": INT64, "sparse_types": (INT64,), "dense_types": (INT64,)},
                 [CROSS_IX, strings("5_X_1", "-6_X_1", "7_X_2"), i64(2, 2)], id="joined-ints-in-decimal"),
    pytest.param("SparseCross", [ix([1, 0], [0, 1], [1, 0]), A_V, A_SHAPE, DENSE], JOINED,
                 [ix([1, 0]), strings("a_X_y"), i64(2, 1)], id="walk-stops-at-unordered-row"),
    pytest.param("SparseCrossV2", [A_IX, A_V, A_SHAPE, strings("x", "z", "y", "w", shape=(2, 2)),
                                   np.array(b"--", dtype=object)],
                 {"N": 1, "sparse_types": (STRING,), "dense_types": (STRING,)},
                 [ix([0, 0], [0, 1], [0, 2], [0, 3], [1, 0], [1, 1]),
                  strings("a--x", "a--z", "b--x", "b--z", "c--y", "c--w"), i64(2, 4)], id="v2-separator"),
    pytest.param("SparseCrossHashed", [A_IX, A_V, A_SHAPE, DENSE, np.int64(1000), np.array(False), SALT],
                 {"N": 1, "sparse_types": (STRING,), "dense_types": (STRING,)},
                 [CROSS_IX, i64(638, 120, 396), i64(2, 2)], id="hashed-v2-farmhash"),
    pytest.param("SparseCrossHashed", [A_IX, A_V, A_SHAPE, DENSE, np.int64(1000), np.array(True), SALT],
                 {"N": 1, "sparse_types": (STRING,), "dense_types": (STRING,)},
                 [CROSS_IX, i64(934, 816, 293), i64(2, 2)], id="hashed-v2-siphash"),
    pytest.param("SparseCrossHashed", [A_IX, i64(5, 2**40 + 5, 7), A_SHAPE, np.array([[1], [2]], np.int64),
                                       np.int64(0), np.array(False), SALT],
                 {"N": 1, "sparse_types": (INT64,), "dense_types": (INT64,)},
                 [CROSS_IX, i64(6197316711451890290, 6197316711451890290, 8349923875077516147), i64(2, 2)],
                 id="hashed-v2-int-low-bytes"),
    pytest.param("SparseCrossHashed", [A_IX, i64(5, 2**40 + 5, 7), A_SHAPE, strings("q", "r", shape=(2, 1)),
                                       np.int64(1000), np.array(True), SALT],
                 {"N": 1, "sparse_types": (INT64,), "dense_types": (STRING,)},
                 [CROSS_IX, i64(6, 6, 598), i64(2, 2)], id="hashed-v2-int-siphash"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_crosses(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


def test_fingerprint_cat64_is_not_symmetric():
    assert fingerprint_cat64(1, 2) != fingerprint_cat64(2, 1)
    assert 0 <= fingerprint_cat64(2**64 - 1, 2**64 - 1) < 2**64


ERRORS = [
    pytest.param("SparseCross", [A_IX, i64(5, -6, 7), A_SHAPE, DENSE],
                 {**JOINED, "sparse_types": (INT64,)}, "Input values should be of internal type 7 but received 9",
                 id="internal-type"),
    pytest.param("SparseCross", [ix([0, 0]), strings("a"), i64(3, 2), DENSE], JOINED,
                 "Expected batch size 3 got 2 at dense tensor 0", id="batch-size"),
    pytest.param("SparseCross", [np.zeros((1, 3), np.int64), strings("a"), A_SHAPE, DENSE], JOINED,
                 "Expected D2 of index to be 2 got 3 at position 0", id="index-width"),
    pytest.param("SparseCross", [A_IX, strings("a"), A_SHAPE, DENSE], JOINED,
                 "Expected size of values to be 3 got 1 at position 0", id="values-size"),
    pytest.param("SparseCross", [A_IX, A_V, i64(2, 2, 1), DENSE], JOINED,
                 r"shape should imply a 2D tensor, but got \[3\] at position 0", id="shape-2d"),
    pytest.param("SparseCross", [A_IX, A_V, A_SHAPE, strings("x", "y")], JOINED,
                 r"Dense inputs should be a matrix but received shape \[2\] at position 0", id="dense-matrix"),
    pytest.param("SparseCrossHashed", [A_IX, A_V, A_SHAPE, DENSE, np.int64(10), np.array(True), i64(1)],
                 {"N": 1, "sparse_types": (STRING,), "dense_types": (STRING,)},
                 'Input "salt" must have length 2 but has length 1', id="salt"),
    pytest.param("SparseCrossV2", [A_IX, A_V, A_SHAPE, DENSE, np.array([b"--"], dtype=object)],
                 {"N": 1, "sparse_types": (STRING,), "dense_types": (STRING,)},
                 "Input separator should be a scalar. Received: Tensor<type: string shape: \\[1\\] values: -->",
                 id="separator"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", ERRORS)
def test_cross_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
