"""The sparse segment reductions' compiled loop (kernels.math.segments_compiled) held to its numpy twin
(kernels.math.segments): SparseSegment{Sum,Mean,SqrtN} and their WithNumSegments forms on float32 data, with
empty and repeated segments, 1-D and wide rows, int32 and int64 indices and ids, and bad ids or indices, where
both must raise TensorFlow's error. Sums are added in order where the twin's reduceat may pair them
differently, so values agree within float32 rounding; the golden cases (tests/fixtures/ops/sparse) hold both
to TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

OPS = ["SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"]


def run(op, *inputs, compiled):
    fn = kernels.lookup(op, "cpu").bind(np, {}, {"compiled": compiled})
    try:
        return fn(*inputs)[0]
    except ValueError as e:
        return str(e)


def case(rng):
    rows, n = int(rng.integers(1, 10)), int(rng.integers(0, 20))
    shape = (rows,) if rng.random() < 0.3 else (rows, int(rng.integers(0, 5)))
    data = rng.normal(size=shape).astype(np.float32)
    low, high = (-1, rows + 1) if rng.random() < 0.1 else (0, rows)
    indices = rng.integers(low, high, n).astype(rng.choice([np.int32, np.int64]))
    ids = np.sort(rng.integers(0, 6, n)).astype(rng.choice([np.int32, np.int64]))
    if n > 1 and rng.random() < 0.1:
        ids[0], ids[-1] = ids[-1], ids[0]  # out of order
    return data, indices, ids


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("with_num_segments", [False, True])
def test_compiled_equals_twin(op, with_num_segments):
    rng = np.random.default_rng(len(op) + with_num_segments)
    errors = 0
    for _ in range(500):
        inputs = case(rng)
        if with_num_segments:
            inputs += (np.int32(int(rng.integers(0, 9))),)
        name = op + "WithNumSegments" if with_num_segments else op
        got, twin = run(name, *inputs, compiled=True), run(name, *inputs, compiled=False)
        if isinstance(twin, str) or isinstance(got, str):
            assert got == twin
            errors += 1
            continue
        assert got.dtype == twin.dtype == np.float32 and got.shape == twin.shape
        np.testing.assert_allclose(got, twin, rtol=2e-6, atol=1e-6)
    assert 10 < errors < 400


def test_mean_of_an_embedding_bag():
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    out = run("SparseSegmentMean", table, np.array([5, 0, 2], np.int32), np.array([0, 0, 2], np.int64),
              compiled=True)
    np.testing.assert_array_equal(out, [[5, 6], [0, 0], [4, 5]])
    sqrt_n = run("SparseSegmentSqrtN", table, np.array([5, 0], np.int32), np.array([1, 1], np.int64), compiled=True)
    np.testing.assert_allclose(sqrt_n, [[0, 0], [10 / np.sqrt(2), 12 / np.sqrt(2)]], rtol=1e-6)
