"""The compiled depthwise convolution (kernels.nn.depthwise) held to its numpy twin (kernels.nn.conv's body with
kernels.nn.fused's epilogue): equal to the bit on finite inputs, at every stride, padding, dilation and
multiplier, with every activation it applies itself."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import jit
from kernels.nn import conv, fused

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

# (batch, height, width, channels, kernel, stride, padding, multiplier, dilation)
GEOMETRIES = [
    (2, 9, 11, 8, 3, 1, "SAME", 1, 1),
    (1, 10, 10, 16, 3, 2, "SAME", 1, 1),
    (3, 7, 7, 5, 5, 2, "VALID", 1, 1),
    (1, 8, 9, 3, 3, 1, "SAME", 2, 1),
    (1, 12, 12, 4, 3, 1, "SAME", 1, 2),
    (2, 14, 14, 32, 7, 1, "SAME", 1, 1),
    (1, 1, 1, 4, 3, 2, "SAME", 1, 1),
    (1, 2, 3, 4, 5, 1, "SAME", 1, 1),  # a kernel larger than the image: every tap range clipped
    (2, 6, 6, 3, 3, 3, "VALID", 3, 1),
    (1, 11, 13, 6, 7, 2, "SAME", 1, 1),  # NASNet's 7x7 stride 2: phase rows at every tap offset
    (2, 9, 9, 8, 3, 2, "SAME", 1, 2),  # a stride and a dilation: taps on both phases
    (1, 6, 7, 600, 3, 1, "SAME", 1, 1),  # wider than a row segment: segments of one pixel
]


def _case(geometry, seed=0):
    n, h, w, c, k, s, pad, mult, d = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    f = rng.standard_normal((k, k, c, mult)).astype(np.float32)
    bias = rng.standard_normal(c * mult).astype(np.float32)
    return x, f, bias, dict(strides=(1, s, s, 1), padding=pad, dilations=(1, d, d, 1))


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("activation", [None, "Relu", "Relu6", "LeakyRelu", "Elu"])
def test_fused_equals_twin(geometry, activation):
    x, f, bias, attrs = _case(geometry)
    fused_ops = ("BiasAdd",) + ((activation,) if activation else ())
    kw = dict(attrs, fused_ops=fused_ops, num_args=1, leakyrelu_alpha=0.3)
    twin = fused.fused_depthwise_conv2d(np, x, f, bias, **kw, compiled=False)[0]
    got = fused.fused_depthwise_conv2d(np, x, f, bias, **kw, compiled=True)[0]
    assert got.shape == twin.shape and got.dtype == twin.dtype
    if activation == "Elu":  # exp: numpy's SIMD expf and LLVM's may differ in the last place
        np.testing.assert_allclose(got, twin, rtol=2e-7, atol=2e-7)
    else:
        np.testing.assert_array_equal(got, twin)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_plain_equals_twin(geometry):
    x, f, _, attrs = _case(geometry, seed=1)
    twin = conv.depthwise_conv2d(np, x, f, **attrs)[0]
    np.testing.assert_array_equal(conv.depthwise_conv2d(np, x, f, **attrs, compiled=True)[0], twin)


@pytest.mark.parametrize("alpha", [0.0, -0.5, 1.0, 2.5])
def test_leaky_relu_alphas(alpha):
    x, f, bias, attrs = _case(GEOMETRIES[0], seed=2)
    kw = dict(attrs, fused_ops=("BiasAdd", "LeakyRelu"), num_args=1, leakyrelu_alpha=alpha)
    np.testing.assert_array_equal(fused.fused_depthwise_conv2d(np, x, f, bias, **kw, compiled=True)[0],
                                  fused.fused_depthwise_conv2d(np, x, f, bias, **kw, compiled=False)[0])


def test_nan_and_inf_propagate_like_the_twin():
    x, f, bias, attrs = _case(GEOMETRIES[0], seed=3)
    x = x.copy()
    x[0, 2, 3, 1], x[1, 4, 4, 2], x[0, 0, 0, 0] = np.nan, np.inf, -np.inf
    kw = dict(attrs, fused_ops=("BiasAdd", "Relu6"), num_args=1)
    got = fused.fused_depthwise_conv2d(np, x, f, bias, **kw, compiled=True)[0]
    np.testing.assert_array_equal(got, fused.fused_depthwise_conv2d(np, x, f, bias, **kw, compiled=False)[0])
    assert np.isnan(got).any()


def test_nchw_non_contiguous_and_read_only_inputs():
    x, f, bias, attrs = _case(GEOMETRIES[1], seed=4)
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    f.flags.writeable = bias.flags.writeable = False  # constants are read-only arrays
    kw = dict(strides=(1, 1, 2, 2), padding="SAME", data_format="NCHW", fused_ops=("BiasAdd", "Relu"), num_args=1)
    np.testing.assert_array_equal(fused.fused_depthwise_conv2d(np, nchw, f, bias, **kw, compiled=True)[0],
                                  fused.fused_depthwise_conv2d(np, nchw, f, bias, **kw, compiled=False)[0])


def test_empty_batch():
    x, f, bias, attrs = _case(GEOMETRIES[0])
    got = conv.depthwise_conv2d(np, x[:0], f, **attrs, compiled=True)[0]
    assert got.shape == (0, 9, 11, 8)


def test_float64_runs_the_twin():
    x, f, _, attrs = _case(GEOMETRIES[0])
    got = conv.depthwise_conv2d(np, x.astype(np.float64), f.astype(np.float64), **attrs, compiled=True)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, conv.depthwise_conv2d(np, x, f, **attrs)[0], rtol=1e-5, atol=1e-5)
