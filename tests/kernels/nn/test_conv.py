"""Conv2D (grouped too), DepthwiseConv2dNative and Conv2DBackpropInput against a naive loop reference and TF values."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import from_format, to_format


def _same_or_valid(size, k, stride, dilation, padding, explicit):
    k_eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        total = max((out - 1) * stride + k_eff - size, 0)
        return total // 2, total - total // 2
    if padding == "VALID":
        return 0, 0
    return explicit


def naive_conv(x, w, stride, dilation, padding, explicit=((0, 0), (0, 0)), depthwise=False):
    """NHWC reference by plain loops; w is HWIO (or H, W, C, multiplier when depthwise)."""
    kh, kw = w.shape[:2]
    pads = [_same_or_valid(x.shape[1 + a], (kh, kw)[a], stride[a], dilation[a], padding, explicit[a]) for a in (0, 1)]
    xp = np.pad(x.astype(np.float64), [(0, 0), pads[0], pads[1], (0, 0)])
    oh = (xp.shape[1] - ((kh - 1) * dilation[0] + 1)) // stride[0] + 1
    ow = (xp.shape[2] - ((kw - 1) * dilation[1] + 1)) // stride[1] + 1
    out_c = w.shape[2] * w.shape[3] if depthwise else w.shape[3]
    y = np.zeros((x.shape[0], oh, ow, out_c))
    for n in range(x.shape[0]):
        for r in range(oh):
            for c in range(ow):
                for i in range(kh):
                    for j in range(kw):
                        v = xp[n, r * stride[0] + i * dilation[0], c * stride[1] + j * dilation[1]]
                        y[n, r, c] += (v[:, None] * w[i, j]).reshape(-1) if depthwise else v @ w[i, j]
    return y.astype(np.float32)


def naive_grouped_conv(x, w, stride, dilation, padding, explicit=((0, 0), (0, 0))):
    """A grouped Conv2D as TensorFlow defines it, by its definition: the input's channels split into
    groups of the filter's input depth, each convolved with its share of the output channels, concatenated."""
    depth = w.shape[2]
    groups = x.shape[3] // depth
    per_group = w.shape[3] // groups
    return np.concatenate([
        naive_conv(x[..., q * depth : (q + 1) * depth], w[..., q * per_group : (q + 1) * per_group],
                   stride, dilation, padding, explicit)
        for q in range(groups)
    ], axis=-1)


def naive_conv_backprop_input(in_shape, w, dy, stride, dilation, padding, explicit=((0, 0), (0, 0))):
    kh, kw = w.shape[:2]
    pads = [_same_or_valid(in_shape[1 + a], (kh, kw)[a], stride[a], dilation[a], padding, explicit[a]) for a in (0, 1)]
    dx = np.zeros((in_shape[0], in_shape[1] + sum(pads[0]) + kh * dilation[0], in_shape[2] + sum(pads[1]) + kw * dilation[1], in_shape[3]))
    for n in range(dy.shape[0]):
        for r in range(dy.shape[1]):
            for c in range(dy.shape[2]):
                for i in range(kh):
                    for j in range(kw):
                        dx[n, r * stride[0] + i * dilation[0], c * stride[1] + j * dilation[1]] += w[i, j] @ dy[n, r, c]
    return dx[:, pads[0][0] : pads[0][0] + in_shape[1], pads[1][0] : pads[1][0] + in_shape[2]].astype(np.float32)


# (input HW, kernel HW, strides HW, dilations HW, padding, explicit pads per spatial axis)
GEOMETRIES = [
    ((5, 7), (3, 3), (1, 1), (1, 1), "SAME", None),
    ((6, 6), (3, 3), (2, 2), (1, 1), "SAME", None),
    ((7, 8), (3, 2), (2, 2), (1, 1), "SAME", None),
    ((9, 9), (3, 3), (1, 1), (2, 2), "SAME", None),
    ((9, 10), (3, 3), (1, 1), (2, 2), "VALID", None),
    ((8, 8), (1, 1), (1, 1), (1, 1), "VALID", None),
    ((8, 8), (1, 1), (2, 2), (1, 1), "SAME", None),
    ((11, 9), (5, 4), (3, 1), (1, 1), "VALID", None),
    ((6, 5), (3, 3), (1, 1), (1, 1), "EXPLICIT", ((1, 2), (2, 0))),
    ((6, 5), (2, 3), (2, 2), (1, 1), "EXPLICIT", ((0, 1), (1, 1))),
    ((4, 4), (5, 5), (1, 1), (1, 1), "SAME", None),
    ((10, 10), (7, 7), (2, 2), (1, 1), "SAME", None),
    ((12, 12), (3, 3), (2, 1), (1, 3), "SAME", None),
]
FORMATS = ["NHWC", "NCHW"]


def _attrs(strides, dilations, padding, explicit, data_format):
    if data_format == "NHWC":
        attrs = dict(strides=(1, *strides, 1), dilations=(1, *dilations, 1))
        pads = (0, 0, *(explicit or ((0, 0), (0, 0)))[0], *(explicit or ((0, 0), (0, 0)))[1], 0, 0)
    else:
        attrs = dict(strides=(1, 1, *strides), dilations=(1, 1, *dilations))
        pads = (0, 0, 0, 0, *(explicit or ((0, 0), (0, 0)))[0], *(explicit or ((0, 0), (0, 0)))[1])
    attrs.update(padding=padding, data_format=data_format)
    if padding == "EXPLICIT":
        attrs["explicit_paddings"] = pads
    return attrs


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("hw,k,strides,dilations,padding,explicit", GEOMETRIES)
def test_conv2d_matches_naive_loops(run_kernel, hw, k, strides, dilations, padding, explicit, data_format):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, *hw, 3), dtype=np.float32)
    w = rng.standard_normal((*k, 3, 4), dtype=np.float32)
    (y,) = run_kernel("Conv2D", to_format(data_format, x), w, **_attrs(strides, dilations, padding, explicit, data_format))
    want = naive_conv(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    np.testing.assert_allclose(from_format(data_format, y), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("hw,k,strides,dilations,padding,explicit", GEOMETRIES)
def test_depthwise_conv2d_matches_naive_loops(run_kernel, hw, k, strides, dilations, padding, explicit, multiplier, data_format):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, *hw, 3), dtype=np.float32)
    w = rng.standard_normal((*k, 3, multiplier), dtype=np.float32)
    attrs = _attrs(strides, dilations, padding, explicit, data_format)
    (y,) = run_kernel("DepthwiseConv2dNative", to_format(data_format, x), w, **attrs)
    want = naive_conv(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)), depthwise=True)
    np.testing.assert_allclose(from_format(data_format, y), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("hw,k,strides,dilations,padding,explicit", GEOMETRIES)
def test_conv2d_backprop_input_matches_naive_loops(run_kernel, hw, k, strides, dilations, padding, explicit, data_format):
    rng = np.random.default_rng(2)
    in_shape = (2, *hw, 3)
    w = rng.standard_normal((*k, 3, 4), dtype=np.float32)
    out_shape = naive_conv(np.zeros(in_shape, np.float32), w, strides, dilations, padding, explicit or ((0, 0), (0, 0))).shape
    dy = rng.standard_normal(out_shape, dtype=np.float32)
    sizes = np.array(in_shape if data_format == "NHWC" else (2, 3, *hw), np.int32)
    attrs = _attrs(strides, dilations, padding, explicit, data_format)
    (dx,) = run_kernel("Conv2DBackpropInput", sizes, w, to_format(data_format, dy), **attrs)
    want = naive_conv_backprop_input(in_shape, w, dy, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    np.testing.assert_allclose(from_format(data_format, dx), want, rtol=1e-5, atol=1e-5)


# (groups, filter input depth, output channels per group). The kernels take three routes, all covered: one
# input channel per group (groups == channels) is a depthwise convolution, with multiplier 1 and 2; a few
# shallow groups run with the block-diagonal dense filter; deeper or many groups (on the GPU: over 64) as
# grouped GEMMs.
GROUPINGS = [(4, 1, 1), (4, 1, 2), (2, 2, 3), (3, 2, 1), (3, 6, 2), (2, 24, 3), (40, 4, 1), (66, 2, 1)]


@pytest.mark.parametrize("data_format", FORMATS)
@pytest.mark.parametrize("groups,depth,per_group", GROUPINGS, ids=lambda v: str(v))
@pytest.mark.parametrize("hw,k,strides,dilations,padding,explicit", GEOMETRIES)
def test_grouped_conv2d_matches_per_group_loops(run_kernel, hw, k, strides, dilations, padding, explicit, groups,
                                                 depth, per_group, data_format):
    rng = np.random.default_rng(5)
    batch = 1 if groups > 32 else 2  # the per-group reference loops are slow with many groups
    x = rng.standard_normal((batch, *hw, groups * depth), dtype=np.float32)
    # Scaled so that outputs are about 1 whatever the depth: the tolerance is float32 rounding of that.
    w = rng.standard_normal((*k, depth, groups * per_group), dtype=np.float32) / np.float32(np.sqrt(k[0] * k[1] * depth))
    x0, w0 = x.copy(), w.copy()
    attrs = _attrs(strides, dilations, padding, explicit, data_format)
    (y,) = run_kernel("Conv2D", to_format(data_format, x), w, **attrs)
    want = naive_grouped_conv(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    assert y.dtype == np.float32
    np.testing.assert_allclose(from_format(data_format, y), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
@pytest.mark.parametrize("depth", [1, 3, 24])
def test_grouped_conv2d_keeps_other_dtypes(run_kernel, dtype, depth):
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 4, (2, 7, 6, 4 * depth)).astype(dtype)
    w = rng.integers(-3, 4, (3, 3, depth, 8)).astype(dtype)
    (y,) = run_kernel("Conv2D", x, w, strides=(1, 2, 1, 1), padding="SAME")
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, naive_grouped_conv(x, w, (2, 1), (1, 1), "SAME").astype(dtype))


@pytest.mark.parametrize("op", ["Conv2D", "_FusedConv2D"])
@pytest.mark.parametrize("x_depth,filter_shape,message", [
    (6, (3, 3, 4, 4), "input depth must be evenly divisible by filter depth: 6 vs 4"),
    (6, (3, 3, 2, 4), "output depth must be evenly divisible by number of groups: 4 vs 3"),
    (8, (1, 1, 1, 4), "output depth must be evenly divisible by number of groups: 4 vs 8"),
])
def test_input_depth_not_a_multiple_of_the_filter_depth_is_an_error(run_kernel, op, x_depth, filter_shape, message):
    x = np.ones((1, 5, 5, x_depth), np.float32)
    w = np.ones(filter_shape, np.float32)
    attrs = dict(strides=(1, 1, 1, 1), padding="SAME")
    args = ()
    if op == "_FusedConv2D":
        args, attrs = (np.zeros(filter_shape[3], np.float32),), dict(attrs, fused_ops=("BiasAdd",), num_args=1)
    with pytest.raises(ValueError, match=message):
        run_kernel(op, x, w, *args, **attrs)


SOBEL = np.array([[1, 0, -1], [2, 0, -2], [1, 0, -1]], np.float32).reshape(3, 3, 1, 1)
RAMP = np.arange(1, 17, dtype=np.float32).reshape(1, 4, 4, 1)

# Outputs of TensorFlow 2.21 for these inputs, hard-coded.
TF_CASES = [
    ("Conv2D", (RAMP, SOBEL), dict(strides=(1, 2, 2, 1), padding="SAME"), [-8, 28, -6, 41]),
    (
        "Conv2D",
        (RAMP, SOBEL),
        dict(strides=(1, 1, 1, 1), padding="SAME"),
        [-10, -6, -6, 13, -24, -8, -8, 28, -40, -8, -8, 44, -38, -6, -6, 41],
    ),
    (
        "DepthwiseConv2dNative",
        (np.concatenate([RAMP, 2 * RAMP], -1), np.concatenate([SOBEL, np.ones_like(SOBEL)], 2)),
        dict(strides=(1, 2, 2, 1), padding="SAME"),
        [-8, 108, 28, 90, -6, 144, 41, 108],
    ),
    (
        "Conv2DBackpropInput",
        (np.array([1, 4, 4, 1], np.int32), SOBEL, np.ones((1, 2, 2, 1), np.float32)),
        dict(strides=(1, 2, 2, 1), padding="SAME"),
        [1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0],
    ),
]


@pytest.mark.parametrize("op,inputs,attrs,want", TF_CASES)
def test_matches_tensorflow_values(run_kernel, op, inputs, attrs, want):
    (y,) = run_kernel(op, *inputs, **attrs)
    np.testing.assert_array_equal(y.reshape(-1), np.array(want, np.float32))


def test_conv2d_keeps_float32_and_leaves_inputs_untouched(run_kernel):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 5, 5, 2), dtype=np.float32)
    w = rng.standard_normal((3, 3, 2, 2), dtype=np.float32)
    x0, w0 = x.copy(), w.copy()
    for op in ("Conv2D", "DepthwiseConv2dNative"):
        (y,) = run_kernel(op, x, w, strides=(1, 1, 1, 1), padding="SAME")
        assert y.dtype == np.float32
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


@pytest.mark.parametrize("op,filter_shape", [
    ("Conv2D", (3, 3, 64, 8)),
    ("DepthwiseConv2dNative", (3, 3, 64, 1)),
    ("Conv2D", (3, 3, 32, 32)),  # grouped, two groups of 32: grouped GEMMs
    ("Conv2D", (3, 3, 2, 32)),  # grouped, 32 groups of 2: the block-diagonal dense filter
    ("Conv2D", (3, 3, 1, 64)),  # grouped, one channel per group: depthwise
])
def test_large_image_split_into_row_blocks_matches_naive_loops(run_kernel, op, filter_shape):
    # An image larger than one chunk of work: results must not depend on how the work is split.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 80, 80, 64), dtype=np.float32)
    w = rng.standard_normal(filter_shape, dtype=np.float32)
    (y,) = run_kernel(op, x, w, strides=(1, 1, 1, 1), padding="SAME")
    for r0 in (0, 40, 71):  # interior windows around chunk borders, checked on a small crop
        crop = x[:, r0 : r0 + 9, 30:39]
        if op == "DepthwiseConv2dNative":
            want = naive_conv(crop, w, (1, 1), (1, 1), "VALID", depthwise=True)
        else:
            want = naive_grouped_conv(crop, w, (1, 1), (1, 1), "VALID")
        np.testing.assert_allclose(y[:, r0 + 1 : r0 + 8, 31:38], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,padding", [(3, "SAME"), (1, "VALID")])
def test_grouped_conv2d_chunks_on_the_pool_match_per_group_loops(monkeypatch, k, padding):
    """With BLAS single-threaded (a Session's default), a grouped convolution's chunks run as pool tasks, each
    with patches of its own: the results must not depend on it."""
    from kernels import blas
    from kernels.nn import conv

    blas.limit_blas_threads()
    monkeypatch.setattr(conv, "_PATCH_BYTES_PER_CHUNK", 4096)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 11, 10, 56), dtype=np.float32)
    w = rng.standard_normal((k, k, 8, 56), dtype=np.float32) / np.float32(np.sqrt(k * k * 8))
    y = conv.conv2d(np, x, w, strides=(1, 1, 1, 1), padding=padding)[0]
    np.testing.assert_allclose(y, naive_grouped_conv(x, w, (1, 1), (1, 1), padding), rtol=1e-5, atol=1e-5)
