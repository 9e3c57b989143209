"""The GPU-specific kernels (kernels/gpu/) against the shared numpy kernels, on random cases.

Needs cupy and a CUDA device; skipped otherwise. numpy is the definition: float32 results agree to
float32 rounding (the GPU sums in a different order and fuses multiply-adds), float16 to a few ulp.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import kernels

cupy = pytest.importorskip("cupy")
try:
    _DEVICES = cupy.cuda.runtime.getDeviceCount()
except Exception:  # no driver or no device
    _DEVICES = 0
if _DEVICES < 1:
    pytest.skip("no CUDA device", allow_module_level=True)

_RTOL = {np.float16: 1e-2, np.float32: 1e-4, np.float64: 1e-10}


def _compare(op, inputs, attrs, dtype=np.float32):
    """Run `op` on numpy (shared kernel) and on cupy (the override); assert they agree."""
    gpu_kernel = kernels.lookup(op, "gpu")
    assert gpu_kernel.replaces is not None, f"{op} has no GPU override"
    want = kernels.lookup(op, "cpu").bind(np, attrs)(*inputs)
    got = gpu_kernel.bind(cupy, attrs)(*[cupy.asarray(x) for x in inputs])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = cupy.asnumpy(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (op, attrs, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w)
        else:
            finite = np.abs(w[np.isfinite(w)].astype(np.float64))
            scale = max(float(finite.max()), 1.0) if finite.size else 1.0
            rtol = _RTOL[np.dtype(dtype).type]
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=rtol * scale)


def _seed(*case) -> int:
    return zlib.crc32(repr(case).encode())


def _rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _to_format(data_format, x):
    return x if data_format == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def _four(data_format, h, w):
    return [1, h, w, 1] if data_format == "NHWC" else [1, 1, h, w]


_CONV_GEOMETRIES = [
    # (kh, kw, stride, dilation, padding)
    (1, 1, 1, 1, "VALID"),
    (1, 1, 2, 1, "SAME"),
    (3, 3, 1, 1, "SAME"),
    (3, 3, 2, 1, "SAME"),
    (3, 3, 1, 2, "SAME"),
    (5, 3, 2, 1, "VALID"),
    (2, 2, 2, 1, "SAME"),
    (3, 3, 1, 1, "EXPLICIT"),
    (1, 1, 1, 1, "EXPLICIT"),
]


def _explicit(data_format):
    pads = [[0, 0], [1, 2], [2, 0], [0, 0]]
    if data_format == "NCHW":
        pads = [pads[0], pads[3], pads[1], pads[2]]
    return [p for pair in pads for p in pair]


def _conv_attrs(data_format, stride, dilation, padding):
    attrs = {"strides": _four(data_format, stride, stride), "padding": padding, "data_format": data_format,
             "dilations": _four(data_format, dilation, dilation)}
    if padding == "EXPLICIT":
        attrs["explicit_paddings"] = _explicit(data_format)
    return attrs


@pytest.mark.parametrize("geometry", _CONV_GEOMETRIES)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_conv2d(geometry, data_format, dtype):
    kh, kw, stride, dilation, padding = geometry
    rng = np.random.default_rng(_seed(geometry))
    x = _to_format(data_format, _rand(rng, (2, 11, 9, 5), dtype))
    filt = _rand(rng, (kh, kw, 5, 7), dtype)
    _compare("Conv2D", [x, filt], _conv_attrs(data_format, stride, dilation, padding), dtype)


def test_conv2d_in_several_patch_chunks(monkeypatch):
    from kernels.gpu import conv as gpu_conv

    monkeypatch.setattr(gpu_conv, "_PATCH_BYTES_PER_CHUNK", 4096)  # row blocks of single images
    rng = np.random.default_rng(0)
    _compare("Conv2D", [_rand(rng, (3, 17, 13, 4)), _rand(rng, (3, 3, 4, 6))],
             {"strides": [1, 1, 1, 1], "padding": "SAME"})


def test_conv2d_integers_use_the_same_im2col():
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 5, (1, 6, 6, 3)).astype(np.int32)
    filt = rng.integers(-3, 3, (3, 3, 3, 2)).astype(np.int32)
    _compare("Conv2D", [x, filt], {"strides": [1, 2, 2, 1], "padding": "SAME"})


@pytest.mark.parametrize("geometry", _CONV_GEOMETRIES)
@pytest.mark.parametrize("mult", [1, 2])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_depthwise_conv2d(geometry, mult, data_format):
    kh, kw, stride, dilation, padding = geometry
    rng = np.random.default_rng(_seed(geometry, mult))
    x = _to_format(data_format, _rand(rng, (2, 10, 12, 6)))
    filt = _rand(rng, (kh, kw, 6, mult))
    _compare("DepthwiseConv2dNative", [x, filt], _conv_attrs(data_format, stride, dilation, padding))


_POOLS = [((2, 2), 2, "VALID"), ((3, 3), 2, "SAME"), ((3, 3), 1, "SAME"), ((2, 3), 1, "VALID"), ((5, 5), 3, "SAME")]


@pytest.mark.parametrize("op", ["MaxPool", "AvgPool"])
@pytest.mark.parametrize("pool", _POOLS)
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_pooling(op, pool, data_format, dtype):
    (kh, kw), stride, padding = pool
    rng = np.random.default_rng(7)
    x = _to_format(data_format, _rand(rng, (2, 9, 10, 3), dtype))
    attrs = {"ksize": _four(data_format, kh, kw), "strides": _four(data_format, stride, stride),
             "padding": padding, "data_format": data_format}
    _compare(op, [x], attrs, dtype)


def test_max_pool_nan_integers_explicit_padding_and_v2():
    x = np.random.default_rng(3).standard_normal((1, 6, 6, 2)).astype(np.float32)
    x[0, 2, 3, 1] = np.nan
    _compare("MaxPool", [x], {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"})
    ints = np.random.default_rng(4).integers(-100, 100, (2, 7, 5, 3)).astype(np.int32)
    _compare("MaxPool", [ints], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "SAME"})
    # A window wholly in the padding gives the lowest value, as the shared kernel does.
    _compare("MaxPool", [x], {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "EXPLICIT",
                              "explicit_paddings": [0, 0, 3, 0, 0, 2, 0, 0]})
    _compare("MaxPoolV2", [x, np.array([1, 3, 2, 1], np.int32), np.array([1, 2, 1, 1], np.int32)], {"padding": "VALID"})


_CONV_ACTIVATIONS = [None, "Relu", "Relu6", "Elu", "LeakyRelu"]
_MATMUL_ACTIVATIONS = _CONV_ACTIVATIONS + ["Tanh", "Sigmoid", "GeluExact", "GeluApproximate"]


def _with(head, activation):
    return tuple(head) + ((activation,) if activation else ())


@pytest.mark.parametrize("head", [("BiasAdd",), ("BiasAdd", "Add"), ("FusedBatchNorm",)])
@pytest.mark.parametrize("activation", _CONV_ACTIVATIONS)
@pytest.mark.parametrize("kernel_size", [1, 3])
def test_fused_conv2d(head, activation, kernel_size):
    rng = np.random.default_rng(11)
    x = _rand(rng, (2, 8, 7, 4))
    filt = _rand(rng, (kernel_size, kernel_size, 4, 6))
    if head == ("BiasAdd",):
        args = [_rand(rng, (6,))]
    elif head == ("BiasAdd", "Add"):
        args = [_rand(rng, (6,)), _rand(rng, (2, 8, 7, 6))]
    else:
        args = [_rand(rng, (6,)), _rand(rng, (6,)), _rand(rng, (6,)), np.abs(_rand(rng, (6,))) + 0.1]
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "fused_ops": _with(head, activation),
             "num_args": len(args), "leakyrelu_alpha": 0.3}
    _compare("_FusedConv2D", [x, filt, *args], attrs)


def test_fused_conv2d_broadcasting_addend_and_nchw():
    rng = np.random.default_rng(12)
    x, filt, bias = _rand(rng, (2, 8, 7, 4)), _rand(rng, (3, 3, 4, 6)), _rand(rng, (6,))
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "fused_ops": ("BiasAdd", "Add", "Relu"), "num_args": 2}
    _compare("_FusedConv2D", [x, filt, bias, _rand(rng, (1, 1, 1, 6))], attrs)
    nchw = {**attrs, "data_format": "NCHW", "fused_ops": ("BiasAdd", "Add", "Elu")}
    _compare("_FusedConv2D", [_to_format("NCHW", x), filt, bias, _rand(rng, (2, 6, 8, 7))], nchw)


@pytest.mark.parametrize("activation", _CONV_ACTIVATIONS)
def test_fused_depthwise_conv2d(activation):
    rng = np.random.default_rng(13)
    x, filt, bias = _rand(rng, (2, 9, 9, 4)), _rand(rng, (3, 3, 4, 2)), _rand(rng, (8,))
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME", "fused_ops": _with(("BiasAdd",), activation), "num_args": 1}
    _compare("_FusedDepthwiseConv2dNative", [x, filt, bias], attrs)


@pytest.mark.parametrize("activation", _MATMUL_ACTIVATIONS)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_mat_mul(activation, transpose, dtype):
    rng = np.random.default_rng(14)
    a, b = _rand(rng, (16, 24), dtype) * 2, _rand(rng, (24, 10), dtype)
    if transpose:
        a = np.ascontiguousarray(a.T)
    attrs = {"transpose_a": transpose, "fused_ops": _with(("BiasAdd",), activation), "num_args": 1}
    _compare("_FusedMatMul", [a, b, _rand(rng, (10,), dtype)], attrs, dtype)


@pytest.mark.parametrize("op", ["Erf", "Erfc"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_erf(op, dtype):
    x = np.concatenate([np.linspace(-6, 6, 1001), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dtype)
    _compare(op, [x], {}, dtype)


def test_every_override_is_tested_here():
    tested = {"Conv2D", "DepthwiseConv2dNative", "MaxPool", "MaxPoolV2", "AvgPool", "_FusedConv2D",
              "_FusedDepthwiseConv2dNative", "_FusedMatMul", "Erf", "Erfc"}
    assert kernels.overridden_ops("gpu") == tested


def test_overrides_return_device_arrays():
    """The results stay on the GPU (no round trip through the host)."""
    x = cupy.asarray(np.ones((1, 5, 5, 2), np.float32))
    f = cupy.asarray(np.ones((3, 3, 2, 1), np.float32))
    for op in ("Conv2D", "DepthwiseConv2dNative"):
        for padding in ("SAME", "VALID"):
            (y,) = kernels.lookup(op, "gpu").bind(cupy, {"strides": [1, 1, 1, 1], "padding": padding})(x, f)
            assert isinstance(y, cupy.ndarray)
