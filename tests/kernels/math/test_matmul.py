"""MatMul, BatchMatMul (V1-V3) and Einsum against numpy references and TensorFlow values."""

from __future__ import annotations

import numpy as np
import pytest


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_mat_mul_transposes(run_kernel, transpose_a, transpose_b):
    a, b = _r(3, 4, seed=1), _r(4, 5, seed=2)
    (y,) = run_kernel(
        "MatMul",
        np.ascontiguousarray(a.T) if transpose_a else a,
        np.ascontiguousarray(b.T) if transpose_b else b,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
    )
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_mat_mul_matches_tensorflow_values(run_kernel):
    a = np.array([[1, 2], [3, 4]], np.float32)
    b = np.array([[5, 6], [7, 8]], np.float32)
    (y,) = run_kernel("MatMul", a, b, transpose_a=True)  # TensorFlow 2.21: [[26, 30], [38, 44]]
    np.testing.assert_array_equal(y, [[26, 30], [38, 44]])


@pytest.mark.parametrize("op", ["BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"])
@pytest.mark.parametrize("adj_x", [False, True])
@pytest.mark.parametrize("adj_y", [False, True])
def test_batch_mat_mul_adjoints(run_kernel, op, adj_x, adj_y):
    x, y = _r(2, 3, 4, seed=3), _r(2, 4, 5, seed=4)
    attrs = dict(adj_x=adj_x, adj_y=adj_y)
    if op == "BatchMatMulV3":
        attrs["Tout"] = np.dtype(np.float32)
    (z,) = run_kernel(
        op,
        np.ascontiguousarray(x.transpose(0, 2, 1)) if adj_x else x,
        np.ascontiguousarray(y.transpose(0, 2, 1)) if adj_y else y,
        **attrs,
    )
    want = np.einsum("bij,bjk->bik", x.astype(np.float64), y)
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-5)


def test_batch_mat_mul_v2_broadcasts_batch_dims(run_kernel):
    x, y = _r(2, 1, 3, 4, seed=5), _r(5, 4, 6, seed=6)
    (z,) = run_kernel("BatchMatMulV2", x, y)
    assert z.shape == (2, 5, 3, 6)
    want = np.array([[x[i, 0].astype(np.float64) @ y[j] for j in range(5)] for i in range(2)])
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-5)


def test_adjoint_conjugates_complex(run_kernel):
    x = (_r(2, 3, 4, seed=7) + 1j * _r(2, 3, 4, seed=8)).astype(np.complex64)
    y = (_r(2, 5, 4, seed=9) + 1j * _r(2, 5, 4, seed=10)).astype(np.complex64)
    (z,) = run_kernel("BatchMatMulV2", x, y, adj_y=True)
    want = np.array([x[b].astype(np.complex128) @ y[b].conj().T for b in range(2)])
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-5)


def test_batch_mat_mul_v3_casts_int8_to_tout(run_kernel):
    x = np.array([[[100, 100]]], np.int8)
    y = np.array([[[100], [100]]], np.int8)
    (z,) = run_kernel("BatchMatMulV3", x, y, Tout=np.dtype(np.int32))
    assert z.dtype == np.int32
    np.testing.assert_array_equal(z, [[[20000]]])  # no int8 overflow


# Einsum cases: equation, operand shapes. The reference is numpy's own einsum in float64.
EINSUM_CASES = [
    ("abc,cde->abde", [(2, 3, 4), (4, 5, 6)]),  # Keras MultiHeadAttention query/key/value projections
    ("abcd,cde->abe", [(2, 3, 4, 5), (4, 5, 6)]),  # ... output projection
    ("aecd,abcd->acbe", [(2, 3, 4, 5), (2, 6, 4, 5)]),  # ... attention scores
    ("acbe,aecd->abcd", [(2, 3, 4, 5), (2, 5, 3, 6)]),  # ... attention-weighted values
    ("BTNH,BSNH->BNTS", [(2, 3, 4, 5), (2, 6, 4, 5)]),
    ("BNTS,BSNH->BTNH", [(2, 4, 3, 6), (2, 6, 4, 5)]),  # written through a strided view of the output
    ("bij,bjk->kib", [(2, 3, 4), (2, 4, 5)]),  # an output no BLAS call can write: transposed afterwards
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (5, 6)]),
    ("...d,dh->...h", [(2, 3, 4), (4, 5)]),
    ("ab...,b...->a...", [(2, 3, 4), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]),
    ("abc,abc->ab", [(2, 3, 4), (2, 3, 4)]),
    ("ab,b->a", [(3, 4), (4,)]),
    ("abc,bd->ad", [(2, 3, 4), (3, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ijk->", [(2, 3, 4)]),
    ("ij,jk", [(3, 4), (4, 5)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES)
def test_einsum_matches_reference(run_kernel, equation, shapes):
    inputs = [_r(*s, seed=i) for i, s in enumerate(shapes)]
    (y,) = run_kernel("Einsum", *inputs, equation=equation)
    want = np.einsum(equation, *[x.astype(np.float64) for x in inputs])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_einsum_matches_tensorflow_values(run_kernel):
    a = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    b = np.arange(6, dtype=np.float32).reshape(3, 2, 1)
    (y,) = run_kernel("Einsum", a, b, equation="abc,cde->abde")  # TensorFlow 2.21
    np.testing.assert_array_equal(y.reshape(-1), [10, 13, 28, 40])
