"""The compiled row loops (kernels.nn.compiled_rows) held to their numpy twins: the matmul epilogues
(`_FusedMatMul`, `_TensorgateDense`) and `_TensorgateGelu` bit for bit (GELU's approximate form within
float32 rounding: it computes tanh through its own exp), Softmax and `_TensorgateLayerNorm` within a few
ulps; on odd sizes, one row, rows tiled over the thread pool, non-contiguous inputs, NaN and infinities."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

rng = np.random.default_rng(19)

# Values where a formula could go wrong: NaN, infinities, signed zeros, erf's clamp at |x / sqrt 2| = 4,
# exp's range ends in GELU's tanh, the largest floats.
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5.656854, -5.656854, 5.66, -5.66, 9.0, -9.0, 30.0, -30.0,
                  1e-30, -1e-30, 3e38, -3e38, 6.0, 6.0000005, -1e-45], np.float32)
# (rows, units): one row, odd sizes, and enough rows to be tiled over the pool.
SHAPES = [(1, 1), (3, 7), (1, 1027), (300, 257)]


def _run(op, *inputs, compiled, **attrs):
    fn = kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})
    return fn(*inputs)[0]


def _both(op, *inputs, **attrs):
    """(compiled, twin) outputs of one kernel, after checking that neither wrote to its inputs."""
    before = [x.copy() for x in inputs]
    got = _run(op, *inputs, compiled=True, **attrs)
    twin = _run(op, *inputs, compiled=False, **attrs)
    for x, x0 in zip(inputs, before):
        np.testing.assert_array_equal(x, x0)
    assert got.shape == twin.shape and got.dtype == twin.dtype
    return got, twin


def _values(shape, scale=3.0):
    x = np.asarray(rng.standard_normal(shape) * scale, np.float32)
    flat = x.reshape(-1)
    flat[: min(flat.size, EDGES.size)] = EDGES[: flat.size]
    return x


@pytest.mark.parametrize("activation", [None, "Relu", "Relu6", "LeakyRelu", "GeluExact", "GeluApproximate"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["_FusedMatMul", "_TensorgateDense"])
def test_matmul_epilogue_equals_twin(op, shape, activation):
    rows, units = shape
    # A product with one term per output, so the edge values reach the epilogue as they are.
    a = _values((rows, 1))
    b = rng.choice(np.array([1, -1, 0.5], np.float32), size=(1, units))
    bias = rng.standard_normal(units).astype(np.float32)
    fused_ops = ("BiasAdd",) + ((activation,) if activation else ())
    got, twin = _both(op, a, b, bias, fused_ops=fused_ops, num_args=1, leakyrelu_alpha=0.3)
    if activation == "GeluApproximate":
        np.testing.assert_allclose(got, twin, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, twin)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 1.0, 1.5, -0.5])
def test_leaky_relu_epilogue_for_any_alpha(alpha):
    a, b = _values((64, 1)), np.ones((1, 9), np.float32)
    got, twin = _both("_FusedMatMul", a, b, np.zeros(9, np.float32), fused_ops=("BiasAdd", "LeakyRelu"), num_args=1,
                      leakyrelu_alpha=alpha)
    np.testing.assert_array_equal(got, twin)


def test_dense_epilogue_with_real_products():
    x = rng.standard_normal((2, 65, 48)).astype(np.float32)
    w = rng.standard_normal((48, 4, 33)).astype(np.float32)
    bias = rng.standard_normal((4, 33)).astype(np.float32)
    got, twin = _both("_TensorgateDense", x, w, bias, fused_ops=("BiasAdd", "GeluExact"), num_args=1)
    np.testing.assert_array_equal(got, twin)


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("shape", [(), (1,), (5, 3), (2, 3, 1000), (40, 2000)], ids=str)
def test_gelu_equals_twin(shape, approximate):
    x = _values(shape, scale=4.0)
    got, twin = _both("_TensorgateGelu", x, approximate=approximate)
    if approximate:
        np.testing.assert_allclose(got, twin, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, twin)


def test_gelu_of_non_contiguous_and_empty_inputs():
    x = _values((30, 20))[:, ::3]
    got, twin = _both("_TensorgateGelu", x)
    np.testing.assert_array_equal(got, twin)
    got, twin = _both("_TensorgateGelu", np.zeros((0, 4), np.float32))
    assert got.shape == (0, 4)


def _assert_softmax_close(got, twin):
    # exp differs from numpy's in the last places, and values below exp(-87) flush to zero.
    np.testing.assert_allclose(got, twin, rtol=2e-6, atol=1e-37)


@pytest.mark.parametrize("shape", [(1, 1), (4, 7), (2, 3, 129), (8, 4, 128, 128), (5, 1000)], ids=str)
def test_softmax_equals_twin(shape):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    got, twin = _both("Softmax", x)
    _assert_softmax_close(got, twin)
    np.testing.assert_allclose(got.sum(-1), 1, rtol=1e-5)


def test_softmax_rows_with_nan_infinities_and_masks():
    x = (rng.standard_normal((9, 37)) * 3).astype(np.float32)
    x[0, 5] = np.nan
    x[1, 0] = np.inf
    x[2, :] = -np.inf
    x[3, 10:] = -1e9  # an attention mask
    x[4, 3] = -np.inf
    x[5, :] = 3e38
    x[6, ::2] = -100  # exp underflows to a denormal in numpy, to zero here
    x[7, :] = -1e-45
    x[8, 0] = 88.0
    got, twin = _both("Softmax", x)
    _assert_softmax_close(got, twin)


def test_softmax_of_non_contiguous_empty_and_float64_inputs():
    x = (rng.standard_normal((16, 40)) * 4).astype(np.float32)
    _assert_softmax_close(*_both("Softmax", x.T))
    _assert_softmax_close(*_both("Softmax", x[:, 1::2]))
    assert _both("Softmax", np.zeros((0, 5), np.float32))[0].shape == (0, 5)
    got, twin = _both("Softmax", x.astype(np.float64))
    np.testing.assert_array_equal(got, twin)


def _assert_layer_norm_close(got, twin):
    np.testing.assert_allclose(got, twin, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("param_shape", ["vector", "keras", "scalar", "one"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 9, 24), (2100, 128), (2, 5, 256), (300, 300), (4, 1001)],
                         ids=str)
def test_layer_norm_equals_twin(shape, param_shape):
    channels = shape[-1]
    pshape = {"vector": (channels,), "keras": (1,) * (len(shape) - 1) + (channels,), "scalar": (), "one": (1,)}
    # A mean far from zero: the variance must be computed from deviations, in both.
    x = (rng.standard_normal(shape) + 100).astype(np.float32)
    gamma = rng.standard_normal(pshape[param_shape]).astype(np.float32)
    beta = rng.standard_normal(pshape[param_shape]).astype(np.float32)
    got, twin = _both("_TensorgateLayerNorm", x, gamma, beta, epsilon=1e-6)
    _assert_layer_norm_close(got, twin)


def test_layer_norm_edge_rows_and_broadcasting_parameters():
    x = rng.standard_normal((6, 16)).astype(np.float32)
    x[0, 3] = np.nan
    x[1, :] = 2.5  # no variance: with epsilon 0, 0 / 0
    x[2, 0] = np.inf
    x[3, :] = 1e30
    gamma, beta = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    for epsilon in (0.0, 1e-3):
        _assert_layer_norm_close(*_both("_TensorgateLayerNorm", x, gamma, beta, epsilon=epsilon))
    # Parameters that grow the output are left to the twin; a non-contiguous x is copied.
    got, twin = _both("_TensorgateLayerNorm", x, rng.standard_normal((3, 1, 16)).astype(np.float32), beta,
                      epsilon=1e-3)
    assert got.shape == (3, 6, 16)
    _assert_layer_norm_close(got, twin)
    _assert_layer_norm_close(*_both("_TensorgateLayerNorm", x.T[:8].T, gamma[:8], beta[:8], epsilon=1e-3))
    assert _both("_TensorgateLayerNorm", np.zeros((0, 16), np.float32), gamma, beta, epsilon=1e-3)[0].shape == (0, 16)
