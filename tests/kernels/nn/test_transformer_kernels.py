"""The kernels the optimizer writes for transformer blocks (_TensorgateLayerNorm, _TensorgateGelu,
_TensorgateDense) equal, within float32 rounding, the float64 formulas of the chains they replace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels.math import special

rng = np.random.default_rng(3)


@pytest.mark.parametrize("shape, param_shape", [((2, 5, 16), (1, 1, 16)), ((7, 16), (16,)), ((3, 16), ())])
def test_layer_norm_matches_the_two_pass_formula(run_kernel, shape, param_shape):
    # A mean far from zero: a one-pass E[x^2] - E[x]^2 in float32 would lose most digits of the variance.
    x = (rng.standard_normal(shape) + 100).astype(np.float32)
    gamma = rng.standard_normal(param_shape).astype(np.float32)
    beta = rng.standard_normal(param_shape).astype(np.float32)
    (y,) = run_kernel("_TensorgateLayerNorm", x, gamma, beta, epsilon=1e-6)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-6) * gamma + beta
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_layer_norm_broadcasts_gamma_as_the_chain_does(run_kernel):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    gamma = rng.standard_normal((3, 1, 8)).astype(np.float32)  # makes the output larger than x
    (y,) = run_kernel("_TensorgateLayerNorm", x, gamma, np.float32(0), epsilon=1e-3)
    assert y.shape == (3, 4, 8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu(run_kernel, dtype, approximate):
    x = np.concatenate([np.linspace(-12, 12, 4001), [0.0, -0.0]]).astype(dtype)
    x64 = x.astype(np.float64)
    if approximate:
        want = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        want = 0.5 * x64 * special.erfc(np, -x64 / math.sqrt(2))[0]
    (y,) = run_kernel("_TensorgateGelu", x, approximate=approximate)
    assert y.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)


def test_gelu_keeps_nan(run_kernel):
    (y,) = run_kernel("_TensorgateGelu", np.array([np.nan, np.inf], np.float32))
    assert np.isnan(y[0]) and y[1] == np.inf


@pytest.mark.parametrize("fused_ops", [("BiasAdd",), ("BiasAdd", "Relu"), ("BiasAdd", "GeluExact")])
@pytest.mark.parametrize("x_shape, w_shape", [((2, 5, 8), (8, 6)), ((3, 8), (8, 2, 3)), ((8,), (8, 4))])
def test_dense_is_a_matmul_over_the_last_axis(run_kernel, fused_ops, x_shape, w_shape):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[1:]).astype(np.float32)
    (y,) = run_kernel("_TensorgateDense", x, w, b, fused_ops=fused_ops, num_args=1)
    want = np.tensordot(x.astype(np.float64), w, axes=1) + b
    if "Relu" in fused_ops:
        want = np.maximum(want, 0)
    if "GeluExact" in fused_ops:
        want = 0.5 * want * special.erfc(np, -want / math.sqrt(2))[0]
    assert y.shape == x_shape[:-1] + w_shape[1:]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_dense_rejects_a_bias_of_the_wrong_shape(run_kernel):
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="bias has shape"):
        run_kernel("_TensorgateDense", x, np.ones((8, 4), np.float32), np.ones(3, np.float32), fused_ops=("BiasAdd",), num_args=1)
