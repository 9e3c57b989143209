"""The sparse kernels' compiled loops held to their numpy twins: SparseFillEmptyRows' regrouping and SparseToDense's
positions (kernels.sparse.index_loops), the hashed crosses of SparseCross and SparseCrossHashed
(kernels.sparse.cross_compiled). The twins are the living definition: on random inputs with empty rows,
unordered, repeated and out-of-range indices, several columns of strings and integers, the compiled paths
give the same outputs to the bit, and the same error where the twin raises one. The golden cases under
tests/fixtures/ops/sparse run both paths against TensorFlow (tests/engine/runtime/test_golden.py)."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit
from tests.kernels.sparse.test_cross import CASES as CROSS_CASES

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

STRING, INT64 = np.dtype(object), np.dtype(np.int64)


def run(op, *inputs, compiled, **attrs):
    """The kernel's outputs, or its error as text (the same error is part of the contract)."""
    fn = kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})
    try:
        return fn(*inputs)
    except (ValueError, IndexError) as e:
        return f"{type(e).__name__}: {e}"


def assert_same_as_twin(op, *inputs, **attrs):
    """Compiled and twin agree (outputs to the bit, or the error); neither writes to its inputs. Returns the
    twin's outputs."""
    before = [np.array(x, copy=True) for x in inputs]
    got = run(op, *inputs, compiled=True, **attrs)
    twin = run(op, *inputs, compiled=False, **attrs)
    for x, x0 in zip(inputs, before):
        np.testing.assert_array_equal(x, x0)
    if isinstance(twin, str) or isinstance(got, str):
        assert got == twin
        return twin
    assert len(got) == len(twin)
    for g, t in zip(got, twin):
        assert g.dtype == t.dtype and g.shape == t.shape
        np.testing.assert_array_equal(g, t)
    return twin


def random_indices(rng, rows: int, rank: int, n: int) -> np.ndarray:
    """n index rows of a [rows, 5, ...] tensor: sorted or not, with repeats, now and then one out of range."""
    ix = rng.integers(0, rows, (n, rank)).astype(np.int64)
    if rng.random() < 0.5:
        ix = ix[np.lexsort(ix.T[::-1])]
    if n and rng.random() < 0.1:
        ix[rng.integers(n), rng.integers(rank)] = rng.choice([-1, rows + 5])
    return ix


@pytest.mark.parametrize("seed", range(3))
def test_fill_empty_rows_compiled_equals_twin(seed):
    rng = np.random.default_rng(seed)
    kinds = {"unmoved": 0, "moved": 0, "errors": 0}
    for _ in range(400):
        rank, rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 9)), int(rng.integers(0, 14))
        ix = random_indices(rng, rows, rank, n)
        dtype = rng.choice([np.int64, np.float32, object])
        values = rng.integers(0, 100, n).astype(dtype)
        default = np.array(-1, dtype=values.dtype)
        out = assert_same_as_twin("SparseFillEmptyRows", ix, values, np.array([rows] + [5] * (rank - 1), np.int64),
                                  default)
        if isinstance(out, str):
            kinds["errors"] += 1
        else:
            kinds["unmoved" if out[0].shape == ix.shape and np.array_equal(out[0], ix) else "moved"] += 1
    assert min(kinds.values()) > 10, kinds  # every path taken: in place, regrouped or filled, and errors


def test_fill_empty_rows_without_empty_rows_keeps_the_values():
    ix = np.array([[0, 0], [1, 0], [1, 1], [2, 0]], np.int64)
    values = np.array([b"a", b"b", b"c", b"d"], dtype=object)
    out = assert_same_as_twin("SparseFillEmptyRows", ix, values, np.array([3, 2], np.int64), np.array(b"", object))
    np.testing.assert_array_equal(out[2], [False, False, False])
    np.testing.assert_array_equal(out[3], [0, 1, 2, 3])


@pytest.mark.parametrize("seed", range(3))
def test_sparse_to_dense_compiled_equals_twin(seed):
    rng = np.random.default_rng(seed)
    errors = 0
    for _ in range(400):
        rank, rows, n = int(rng.integers(1, 4)), int(rng.integers(1, 8)), int(rng.integers(0, 12))
        ix = random_indices(rng, rows, rank, n)
        if n and rng.random() < 0.4:
            ix = np.unique(ix, axis=0)  # sorted and distinct: valid unless out of range
        shape = np.array([rows] + [5] * (rank - 1), np.int64)
        values = rng.normal(size=ix.shape[0]).astype(np.float32) if rng.random() < 0.8 else np.float32(7)
        indices = ix[:, 0] if rank == 1 and rng.random() < 0.5 else ix  # a vector of indices into a vector
        for validate in (True, False):
            out = assert_same_as_twin("SparseToDense", indices, shape, values, np.float32(0),
                                      validate_indices=validate)
            errors += isinstance(out, str)
    assert errors > 20


def random_column(rng, batch: int, kind: str, sparse: bool):
    """A sparse column (indices, values, shape) or a dense [batch, k] one, of strings or int64."""
    def features(shape):
        if kind == "int":
            return rng.integers(-(2**62), 2**62, shape)
        out = np.empty(shape, dtype=object)
        out.reshape(-1)[:] = [bytes(rng.choice(list(b"abcd"), int(rng.integers(0, 4)))) for _ in range(out.size)]
        return out

    if not sparse:
        return features((batch, int(rng.integers(0, 3))))
    n = int(rng.integers(0, 3 * batch + 1))
    rows = np.sort(rng.integers(0, max(batch, 1), n))
    if n > 1 and rng.random() < 0.1:
        rows[rng.integers(n)] = rng.integers(-1, batch + 2)  # TensorFlow's walk stops there
    return np.stack([rows, np.zeros(n, np.int64)], axis=1), features(n), np.array([batch, 5], np.int64)


@pytest.mark.parametrize("seed", range(3))
def test_hashed_crosses_compiled_equal_twin(seed):
    rng = np.random.default_rng(seed)
    crossed = 0
    for _ in range(120):
        batch = int(rng.integers(0, 5))
        kinds_sparse = [str(rng.choice(["str", "int"])) for _ in range(int(rng.integers(0, 3)))]
        kinds_dense = [str(rng.choice(["str", "int"])) for _ in range(int(rng.integers(0 if kinds_sparse else 1, 2)))]
        sparse = [random_column(rng, batch, k, True) for k in kinds_sparse]
        dense = [random_column(rng, batch, k, False) for k in kinds_dense]
        columns = [s[0] for s in sparse] + [s[1] for s in sparse] + [s[2] for s in sparse] + dense
        types = {"N": len(sparse), "sparse_types": tuple(STRING if k == "str" else INT64 for k in kinds_sparse),
                 "dense_types": tuple(STRING if k == "str" else INT64 for k in kinds_dense)}
        buckets = int(rng.choice([0, 1, 7, 1000]))
        out = assert_same_as_twin("SparseCross", *columns, hashed_output=True, num_buckets=buckets,
                                  hash_key=int(rng.integers(0, 2**40)), out_type=INT64, internal_type=INT64,
                                  **types)
        crossed += 0 if isinstance(out, str) else out[1].size
        assert_same_as_twin("SparseCrossHashed", *columns, np.int64(buckets), np.array(rng.random() < 0.5),
                            np.array([1, 2], np.int64), **types)
    assert crossed > 200


@pytest.mark.parametrize("op, inputs, attrs, expected", CROSS_CASES)
def test_cross_cases_take_the_compiled_loop_alike(op, inputs, attrs, expected):
    assert_same_as_twin(op, *inputs, **attrs)
