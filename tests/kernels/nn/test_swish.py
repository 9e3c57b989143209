"""Swish, hard swish and sigmoid as fused epilogues (kernels.nn.swish, compiled_rows, fused, depthwise): each
numpy twin equals the unfused ops it stands for, and each compiled pass equals its twin (hard swish to the
bit; sigmoid and swish, whose exp is the compiled loops' own polynomial, within float32 rounding)."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

rng = np.random.default_rng(23)

# NaN, infinities, signed zeros, the hard swish's corners (-3, 3), exp's flush below -87, huge values.
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 3.0, -3.0000002, 2.9999998, -87.5, -100.0, 88.5, 1e-30,
                  -1e-30, 3e38, -3e38, 6.0, -6.0], np.float32)
SWISH_TOL = {"rtol": 2e-6, "atol": 1e-35}
ACTIVATIONS = ["Sigmoid", "Swish", "HardSwish"]
needs_numba = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")


def _run(op, *inputs, compiled=False, **attrs):
    return kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})(*inputs)


def _values(shape, scale=4.0):
    x = np.asarray(rng.standard_normal(shape) * scale, np.float32)
    flat = x.reshape(-1)
    flat[: min(flat.size, EDGES.size)] = EDGES[: flat.size]
    return x


def _unfused(name, y):
    """The activation as the unfused graph computes it, op by op."""
    if name == "Sigmoid":
        return _run("Sigmoid", y)[0]
    if name == "Swish":
        return _run("Mul", y, _run("Sigmoid", y)[0])[0]
    shifted = _run("AddV2", y, np.float32(3))[0]
    return _run("Mul", y, _run("Mul", _run("Relu6", shifted)[0], np.float32(1 / 6))[0])[0]


def _assert_close(name, got, want):
    if name == "HardSwish":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, **SWISH_TOL)


@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (300, 1031)], ids=str)
@pytest.mark.parametrize("op, name", [("_TensorgateSwish", "Swish"), ("_TensorgateHardSwish", "HardSwish")])
def test_standalone_twin_is_the_unfused_chain(op, name, shape):
    x = _values(shape)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(_run(op, x)[0], _unfused(name, x))


@needs_numba
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (300, 1031)], ids=str)
@pytest.mark.parametrize("op, name", [("_TensorgateSwish", "Swish"), ("_TensorgateHardSwish", "HardSwish")])
def test_standalone_compiled_equals_twin(op, name, shape):
    x = _values(shape)
    x.flags.writeable = False  # a constant or a caller's feed
    with np.errstate(all="ignore"):
        got, twin = _run(op, x, compiled=True)[0], _run(op, x)[0]
    assert got.shape == twin.shape == x.shape and got.dtype == twin.dtype
    _assert_close(name, got, twin)


def test_standalone_float64_and_empty():
    x = _values((4, 6)).astype(np.float64)
    with np.errstate(all="ignore"):
        got = _run("_TensorgateSwish", x, compiled=True)[0]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, _unfused("Swish", x))
    assert _run("_TensorgateHardSwish", np.zeros((0, 3), np.float32), compiled=True)[0].shape == (0, 3)


def _conv_case(channels=5, out_channels=7):
    # Finite values: the edge values go through the matmul's epilogue (one term per output) and alone.
    x = rng.standard_normal((2, 6, 7, channels)).astype(np.float32) * 3
    filt = rng.standard_normal((3, 3, channels, out_channels)).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    return x, filt, bias


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("op", ["_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedMatMul"])
def test_fused_twin_is_the_unfused_chain(op, name):
    x, filt, bias = _conv_case()
    if op == "_FusedMatMul":
        x, filt = x.reshape(-1, 5), filt[0, 0]
        plain = _run("MatMul", x, filt)[0]
        attrs = {}
    elif op == "_FusedConv2D":
        attrs = {"strides": (1, 1, 1, 1), "padding": "SAME"}
        plain = _run("Conv2D", x, filt, **attrs)[0]
    else:
        filt, bias = filt[:, :, :, :2], rng.standard_normal(10).astype(np.float32)
        attrs = {"strides": (1, 2, 2, 1), "padding": "SAME"}
        plain = _run("DepthwiseConv2dNative", x, filt, **attrs)[0]
    with np.errstate(all="ignore"):
        want = _unfused(name, _run("BiasAdd", plain, bias)[0])
        got = _run(op, x, filt, bias, fused_ops=("BiasAdd", name), num_args=1, **attrs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_numba
@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("op", ["_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedMatMul"])
def test_fused_compiled_epilogue_equals_twin(op, name):
    x, filt, bias = _conv_case()
    if op == "_FusedMatMul":
        # One term per output, so that the edge values reach the epilogue as they are.
        x, filt = _values((300, 1)), rng.choice(np.array([1, -1, 0.5], np.float32), size=(1, 9))
        bias, attrs = rng.standard_normal(9).astype(np.float32), {}
    elif op == "_FusedConv2D":
        attrs = {"strides": (1, 2, 2, 1), "padding": "VALID"}
    else:
        filt, bias = filt[:, :, :, :1], bias[:5]
        attrs = {"strides": (1, 1, 1, 1), "padding": "SAME"}
    kw = dict(attrs, fused_ops=("BiasAdd", name), num_args=1)
    with np.errstate(all="ignore"):
        got, twin = _run(op, x, filt, bias, compiled=True, **kw)[0], _run(op, x, filt, bias, **kw)[0]
    _assert_close(name, got, twin)


@needs_numba
@pytest.mark.parametrize("name", ["Swish", "HardSwish"])
def test_conv_residual_then_activation_compiled_equals_twin(name):
    x, filt, bias = _conv_case()
    addend = rng.standard_normal((2, 6, 7, 7)).astype(np.float32)
    kw = {"strides": (1, 1, 1, 1), "padding": "SAME", "fused_ops": ("BiasAdd", "Add", name), "num_args": 2}
    got = _run("_FusedConv2D", x, filt, bias, addend, compiled=True, **kw)[0]
    _assert_close(name, got, _run("_FusedConv2D", x, filt, bias, addend, **kw)[0])


# -- the depthwise loop for a multiplier of 1 (runs along whole rows) ----------------------------------------

# (batch, height, width, channels, kernel, strides, padding or explicit pads, dilation)
DEPTHWISE = [
    (2, 9, 40, 32, 3, (1, 1), "SAME", 1),  # rows longer than a segment: several segments a row
    (1, 8, 9, 16, 5, (1, 1), "SAME", 2),  # 5 taps a row, dilated: the fused run is short
    (1, 7, 12, 24, 3, (2, 1), "VALID", 1),  # a vertical stride alone keeps rows contiguous
    (2, 6, 6, 8, 3, (1, 1), [[0, 0], [2, 0], [0, 3], [0, 0]], 1),  # lopsided explicit padding
    (1, 5, 4, 4, 5, (1, 1), "SAME", 1),  # more columns of taps than of image: no fused run at all
    (1, 6, 6, 513, 3, (1, 1), "SAME", 1),  # too wide for a segment: the loop per pixel
    (1, 6, 8, 8, 7, (1, 1), "SAME", 1),  # 7 taps a row: tap by tap
]


@needs_numba
@pytest.mark.parametrize("activation", [None, "Relu6", "LeakyRelu", "Swish", "HardSwish"])
@pytest.mark.parametrize("geometry", DEPTHWISE, ids=str)
def test_depthwise_rows_equal_twin(geometry, activation):
    n, h, w, c, k, strides, padding, d = geometry
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    filt = rng.standard_normal((k, k, c, 1)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    attrs = {"strides": (1, *strides, 1), "dilations": (1, d, d, 1), "padding": padding}
    if not isinstance(padding, str):
        attrs.update(padding="EXPLICIT", explicit_paddings=tuple(v for pair in padding for v in pair))
    kw = dict(attrs, fused_ops=("BiasAdd",) + ((activation,) if activation else ()), num_args=1, leakyrelu_alpha=0.3)
    got = _run("_FusedDepthwiseConv2dNative", x, filt, bias, compiled=True, **kw)[0]
    twin = _run("_FusedDepthwiseConv2dNative", x, filt, bias, **kw)[0]
    if activation == "Swish":
        np.testing.assert_allclose(got, twin, **SWISH_TOL)
    else:
        np.testing.assert_array_equal(got, twin)
    plain = dict(attrs)
    np.testing.assert_array_equal(_run("DepthwiseConv2dNative", x, filt, compiled=True, **plain)[0],
                                  _run("DepthwiseConv2dNative", x, filt, **plain)[0])
