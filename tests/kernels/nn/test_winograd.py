"""Winograd F(2x2, 3x3) convolution (kernels.nn.winograd): the convolution against a float64 loop reference and
the direct path, its compiled transforms held to their numpy twins, its float32 error at realistic
magnitudes, and the `_TensorgateWinogradConv2D` op against _FusedConv2D."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import blas
from kernels.jit import AVAILABLE
from kernels.nn import winograd
from kernels.nn.conv import conv2d_nhwc
from kernels.nn.window import Window2D
from kernels.pool import Chunk
from tests.kernels.nn.test_conv import naive_conv

rng = np.random.default_rng(19)
needs_numba = pytest.mark.skipif(not AVAILABLE, reason="numba is not installed")
COMPILED = [False, pytest.param(True, marks=needs_numba)]

# (input NHWC shape, output channels, padding, explicit pads per spatial axis)
GEOMETRIES = [
    ((2, 7, 9, 5), 6, "SAME", None),
    ((1, 8, 8, 16), 4, "VALID", None),
    ((3, 5, 6, 4), 3, "SAME", None),
    ((1, 1, 1, 3), 2, "SAME", None),  # one pixel: every tap but the centre reads padding
    ((1, 3, 3, 2), 2, "VALID", None),  # one output pixel
    ((1, 2, 9, 1), 1, "SAME", None),  # one row of tiles, one channel
    ((2, 6, 5, 3), 4, "EXPLICIT", ((1, 2), (2, 0))),
    ((1, 4, 4, 3), 2, "EXPLICIT", ((3, 3), (0, 4))),  # padding wider than a tile
]


@pytest.fixture(params=["pool_tasks", "pool_phases", "inline", "blas_threads"])
def schedule(request, monkeypatch):
    """How the work is spread (kernels.nn.winograd.winograd_conv2d_nhwc): chunk tasks on the pool, phases split
    over the pool, all on the caller's thread (the GEMMs too small to split; all three with BLAS single-threaded,
    as a Session has it), or BLAS's own threads."""
    monkeypatch.setattr(blas, "blas_threads_limited", lambda: request.param != "blas_threads")
    monkeypatch.setattr(winograd, "_MIN_TASK_BYTES", 0 if request.param == "pool_tasks" else 1 << 40)
    if request.param == "pool_phases":  # the cases here are small: every product is split, as a large one is
        monkeypatch.setattr(blas, "SPLIT_MIN_FLOPS", 0)
    return request.param


def _window(shape, padding, explicit) -> Window2D:
    return Window2D.make(shape[1:3], (3, 3), (1, 1), (1, 1), padding, explicit or ((0, 0), (0, 0)))


def _case(shape, k, scale=1.0):
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    w = (rng.standard_normal((3, 3, shape[3], k)) / np.sqrt(9 * max(shape[3], 1))).astype(np.float32)
    return x, w


@pytest.mark.parametrize("compiled", COMPILED)
@pytest.mark.parametrize("shape, k, padding, explicit", GEOMETRIES)
def test_matches_the_convolution(shape, k, padding, explicit, compiled, schedule):
    x, w = _case(shape, k)
    win = _window(shape, padding, explicit)
    y = winograd.winograd_conv2d_nhwc(np, x, winograd.winograd_filter(np, w), win, compiled=compiled)
    want = naive_conv(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), padding, explicit or ((0, 0), (0, 0)))
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max()))


@needs_numba
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf - inf, in the pool's threads too
@pytest.mark.parametrize("shape, k, padding, explicit", GEOMETRIES)
def test_compiled_transforms_equal_their_twins_to_the_bit(shape, k, padding, explicit):
    x, w = _case(shape, k)
    x.reshape(-1)[rng.choice(x.size, size=max(x.size // 10, 1), replace=False)] = [np.nan, np.inf, -np.inf][x.size % 3]
    win = _window(shape, padding, explicit)
    u = winograd.winograd_filter(np, w)
    twin = winograd.winograd_conv2d_nhwc(np, x, u, win, compiled=False)
    loop = winograd.winograd_conv2d_nhwc(np, x, u, win, compiled=True)
    np.testing.assert_array_equal(loop, twin)


@needs_numba
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_each_transform_equals_its_twin_on_a_piece_of_the_tiles():
    """A piece (image 1, tile rows [1, 3)) written at a tile offset, as the kernel's thread-pool pieces are."""
    x, _ = _case((2, 7, 9, 5), 1)
    x[1, 2, 3, 1] = np.nan
    win = _window(x.shape, "SAME", None)
    piece = Chunk(1, 2, 1, 3)  # tile rows here
    v = [np.full((16, 20, 5), -1.0, np.float32) for _ in range(2)]
    for out, compiled in zip(v, (False, True)):
        winograd.input_tiles(np, x, win, piece, out, 7, compiled=compiled)
    np.testing.assert_array_equal(v[1], v[0])
    assert (v[0][:, :7] == -1).all() and (v[0][:, 7 + 10 :] == -1).all()  # 2 tile rows x 5 tiles, nothing else

    m = rng.standard_normal((16, 20, 4)).astype(np.float32)
    m[3, 9, 2] = np.inf
    y = [np.full((2, 7, 9, 4), -1.0, np.float32) for _ in range(2)]
    for out, compiled in zip(y, (False, True)):
        winograd.output_tiles(np, m, piece, out, 7, compiled=compiled)
    np.testing.assert_array_equal(y[1], y[0])
    assert (y[0][0] == -1).all() and (y[0][1, :2] == -1).all() and (y[0][1, 6:] == -1).all()


@pytest.mark.parametrize("compiled", COMPILED)
@pytest.mark.parametrize("shape, k, padding", [
    ((0, 5, 5, 3), 4, "SAME"),  # no images
    ((2, 2, 2, 3), 4, "VALID"),  # no output pixels
    ((1, 5, 5, 0), 4, "SAME"),  # no input channels: zeros
    ((1, 5, 5, 3), 0, "SAME"),  # no output channels
])
def test_empty(shape, k, padding, compiled):
    x, w = _case(shape, k)
    win = _window(shape, padding, None)
    y = winograd.winograd_conv2d_nhwc(np, x, winograd.winograd_filter(np, w), win, compiled=compiled)
    np.testing.assert_array_equal(y, np.zeros((shape[0], win.out_h, win.out_w, k), np.float32))


@pytest.mark.parametrize("compiled", COMPILED)
def test_strided_input_and_small_chunks(monkeypatch, compiled, schedule):
    """A non-contiguous input (channels sliced out of an NCHW tensor) and chunks of a few tile rows of one
    image give what one chunk of a contiguous copy gives."""
    nchw = rng.standard_normal((3, 12, 11, 13)).astype(np.float32)
    x = nchw.transpose(0, 2, 3, 1)[..., 2:9]
    _, w = _case(x.shape, 5)
    win = _window(x.shape, "SAME", None)
    u = winograd.winograd_filter(np, w)
    whole = winograd.winograd_conv2d_nhwc(np, np.ascontiguousarray(x), u, win, compiled=compiled)
    monkeypatch.setattr(winograd, "_CHUNK_BYTES", 2 * 6 * 16 * (7 + 5) * 4)  # two tile rows per chunk
    np.testing.assert_array_equal(winograd.winograd_conv2d_nhwc(np, x, u, win, compiled=compiled), whole)


@pytest.mark.parametrize("compiled", COMPILED)
@pytest.mark.parametrize("scale", [1.0, 1e3, 1e-3])
def test_float32_error_at_realistic_magnitudes(scale, compiled):
    """A ResNet-like layer (He-initialised weights, post-ReLU input, 64 channels): Winograd's error, relative
    to the output's scale, stays within a few times the direct convolution's and far inside the golden
    fixtures' tolerance (1e-5 of the output scale)."""
    x = np.maximum(rng.standard_normal((2, 14, 14, 64)), 0).astype(np.float32) * np.float32(scale)
    w = (rng.standard_normal((3, 3, 64, 64)) * np.sqrt(2 / (9 * 64))).astype(np.float32)
    win = _window(x.shape, "SAME", None)
    exact = conv2d_nhwc(np, x.astype(np.float64), w.astype(np.float64), win)
    out_scale = np.abs(exact).max()
    direct = np.abs(conv2d_nhwc(np, x, w, win) - exact).max() / out_scale
    y = winograd.winograd_conv2d_nhwc(np, x, winograd.winograd_filter(np, w), win, compiled=compiled)
    error = np.abs(y - exact).max() / out_scale
    assert error <= max(4 * direct, 1e-6) and error < 2e-6, (error, direct)


# --- the op --------------------------------------------------------------------------------------------------

CONV_ATTRS = dict(strides=(1, 1, 1, 1), padding="SAME")
FUSED = [
    ((), 0),
    (("BiasAdd",), 1),
    (("BiasAdd", "Relu"), 1),
    (("BiasAdd", "Add", "Relu6"), 2),
    (("FusedBatchNorm", "LeakyRelu"), 4),
]


def _fused_args(fused_ops, y_shape):
    k = y_shape[-1]
    if not fused_ops:
        return []
    if fused_ops[0] == "FusedBatchNorm":
        return [rng.standard_normal(k).astype(np.float32), rng.standard_normal(k).astype(np.float32),
                rng.standard_normal(k).astype(np.float32), rng.random(k).astype(np.float32) + 0.5]
    bias = [rng.standard_normal(k).astype(np.float32)]
    return bias + [rng.standard_normal(y_shape).astype(np.float32)] if "Add" in fused_ops else bias


# (input shape, output channels): enough tiles and channels for Winograd, and too few channels for it.
SIZES = [((2, 20, 20, 64), 72), ((1, 6, 6, 64), 8)]


@pytest.mark.parametrize("shape, k", SIZES, ids=["winograd", "direct"])
@pytest.mark.parametrize("fused_ops, num_args", FUSED, ids=lambda f: "+".join(f) if isinstance(f, tuple) else None)
def test_op_computes_the_fused_convolution(run_kernel, shape, k, fused_ops, num_args):
    x, w = _case(shape, k)
    args = _fused_args(fused_ops, (*shape[:3], k))
    attrs = dict(CONV_ATTRS, fused_ops=fused_ops, num_args=num_args)
    (y,) = run_kernel("_TensorgateWinogradConv2D", x, w, winograd.winograd_filter(np, w), *args, **attrs)
    if fused_ops:
        (want,) = run_kernel("_FusedConv2D", x, w, *args, **attrs)
    else:
        (want,) = run_kernel("Conv2D", x, w, **CONV_ATTRS)
    if winograd.prefers_winograd(shape[0], shape[1], shape[2], shape[3], k):
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-5 * np.abs(want).max())
    else:
        np.testing.assert_array_equal(y, want)  # the direct convolution itself


@needs_numba
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_op_with_compiled_transforms(data_format):
    x, w = _case((2, 20, 20, 64), 72)
    args = _fused_args(("BiasAdd", "Relu"), (2, 20, 20, 72))
    if data_format == "NCHW":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    strides = (1, 1, 1, 1)
    attrs = dict(strides=strides, padding="SAME", data_format=data_format, fused_ops=("BiasAdd", "Relu"), num_args=1)
    op = kernels.lookup("_TensorgateWinogradConv2D", "cpu")
    u = winograd.winograd_filter(np, w)
    (loop,) = op.bind(np, attrs, {"compiled": True})(x, w, u, *args)
    (twin,) = op.bind(np, attrs, {"compiled": False})(x, w, u, *args)
    np.testing.assert_array_equal(loop, twin)
    (want,) = kernels.lookup("_FusedConv2D", "cpu").bind(np, attrs)(x, w, *args)
    np.testing.assert_allclose(loop, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_grouped_and_float64_data_take_the_direct_path(run_kernel):
    x, w = _case((2, 20, 20, 128), 64)
    w = w[:, :, :64]  # a 64-deep filter on 128-deep data: two groups
    (y,) = run_kernel("_TensorgateWinogradConv2D", x, w, winograd.winograd_filter(np, w), **CONV_ATTRS)
    np.testing.assert_array_equal(y, run_kernel("Conv2D", x, w, **CONV_ATTRS)[0])
    x64, w64 = x[..., :64].astype(np.float64), w.astype(np.float64)
    (y,) = run_kernel("_TensorgateWinogradConv2D", x64, w64, winograd.winograd_filter(np, w), **CONV_ATTRS)
    np.testing.assert_array_equal(y, run_kernel("Conv2D", x64, w64, **CONV_ATTRS)[0])


def test_op_checks_the_transformed_filter(run_kernel):
    x, w = _case((1, 8, 8, 64), 64)
    with pytest.raises(ValueError, match="transformed filter has shape"):
        run_kernel("_TensorgateWinogradConv2D", x, w, winograd.winograd_filter(np, w)[:, :8], **CONV_ATTRS)
