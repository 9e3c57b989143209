"""Conv2D and DepthwiseConv2dNative on the GPU.

Conv2D is im2col plus GEMM: an ElementwiseKernel writes each output pixel's receptive field (kh * kw * c
values in HWIO filter order, zeros for padding) as one row of a patch matrix, and cuBLAS multiplies it by
the [kh * kw * c, o] filter matrix straight into the output. Patches are built a chunk of images (or rows)
at a time so their buffer stays bounded. A 1x1 convolution that reads no padding is the GEMM alone, on the
strided pixels. cupy 14 ships no cuDNN, so this is the path for every convolution. A grouped Conv2D runs as
the depthwise kernel when each group has one input channel, else with its block-diagonal dense filter (or,
past 64 groups, as the shared body's grouped GEMMs).

DepthwiseConv2dNative is one thread per output element, summing its channel's taps in filter order.
"""

from __future__ import annotations

from typing import Any

import cupy

from kernels.gpu.source import FLOAT_DTYPES, compute_type, elementwise
from kernels.nn import conv as shared
from kernels.nn.window import DataFormat, Padding, Window2D, from_nhwc, to_nhwc, window_from_attrs
from kernels.pool import chunks
from kernels.registry import kernel

__all__ = ["conv2d_nhwc", "depthwise_conv2d_nhwc", "supports_depthwise"]

# Bytes of im2col patches per chunk: large GEMMs keep the GPU busy; the bound keeps big batches in memory.
_PATCH_BYTES_PER_CHUNK = 128 << 20
# A grouped Conv2D of at most this many groups runs as a plain one with the block-diagonal dense filter: on an
# H100, one im2col and one cuBLAS GEMM doing g times the arithmetic beat the shared body's grouped GEMMs 2-5x
# at batch 8 (4 to 32 groups, 3x3 and 1x1) and were within 0.1 ms at batch 1.
_DENSE_GROUPS = 64

# Output pixel p of the chunk (images from b0, rows from r0, `rows` rows each) and column k of its patch
# row: k = (ki * k_w + kj) * chans + ch, the HWIO order of the filter matrix's rows.
_IM2COL = """
const long long width = k_h * k_w * chans;
const long long k = i % width, p = i / width;
const long long ch = k % chans, tap = k / chans;
const long long kj = tap % k_w, ki = tap / k_w;
const long long col = p % out_w, rest = p / out_w;
const long long row = r0 + rest % rows, b = b0 + rest / rows;
const long long ir = row * s_h - pad_t + ki * d_h, ic = col * s_w - pad_l + kj * d_w;
patch = (ir >= 0 && ir < in_h && ic >= 0 && ic < in_w) ? x[((b * in_h + ir) * in_w + ic) * chans + ch] : (T)0.0f;
"""
_IM2COL_PARAMS = (
    "raw T x, int64 in_h, int64 in_w, int64 chans, int64 k_h, int64 k_w, int64 s_h, int64 s_w, int64 d_h, "
    "int64 d_w, int64 pad_t, int64 pad_l, int64 out_w, int64 rows, int64 b0, int64 r0"
)

# Output element i of an NHWC [n, out_h, out_w, chans * mult] result: channel oc = ch * mult + m.
_DEPTHWISE = """
const long long oc = i % (chans * mult);
long long rest = i / (chans * mult);
const long long col = rest % out_w;
rest /= out_w;
const long long row = rest % out_h, b = rest / out_h;
const long long ch = oc / mult, m = oc % mult;
F acc = 0;
for (long long ki = 0; ki < k_h; ++ki) {
    const long long ir = row * s_h - pad_t + ki * d_h;
    if (ir < 0 || ir >= in_h) continue;
    for (long long kj = 0; kj < k_w; ++kj) {
        const long long ic = col * s_w - pad_l + kj * d_w;
        if (ic < 0 || ic >= in_w) continue;
        acc += (F)x[((b * in_h + ir) * in_w + ic) * chans + ch] * (F)f[((ki * k_w + kj) * chans + ch) * mult + m];
    }
}
y = (T)acc;
"""
_DEPTHWISE_PARAMS = (
    "raw T x, raw T f, int64 in_h, int64 in_w, int64 chans, int64 mult, int64 k_h, int64 k_w, int64 s_h, "
    "int64 s_w, int64 d_h, int64 d_w, int64 pad_t, int64 pad_l, int64 out_h, int64 out_w"
)


def _reads_no_padding(win: Window2D) -> bool:
    """Whether every window of a 1x1 filter lies inside the image."""
    return (
        win.pad_top == win.pad_left == 0
        and (win.out_h - 1) * win.stride_h < win.in_h
        and (win.out_w - 1) * win.stride_w < win.in_w
    )


def conv2d_nhwc(x: Any, filt: Any, win: Window2D) -> Any:
    """Conv2D of an NHWC cupy array with an HWIO filter: a fresh, contiguous NHWC result. A grouped filter
    with one input channel per group runs as the depthwise kernel; other grouped filters as a plain Conv2D
    with the block-diagonal dense filter, or (very many groups) the shared body's grouped GEMMs on cupy."""
    n, _, _, c = x.shape
    kh, kw, _, o = filt.shape
    groups = shared.conv_groups(c, filt.shape)
    if groups > 1 and filt.shape[2] == 1 and supports_depthwise(x, filt):
        # Output channel o = c * (o / groups) + k reads input channel c: DepthwiseConv2dNative's layout.
        return depthwise_conv2d_nhwc(x, filt.reshape(kh, kw, c, o // c), win)
    if groups > _DENSE_GROUPS:
        return shared.conv2d_nhwc(cupy, x, filt, win)
    if groups > 1:
        filt = shared.block_diagonal_filter(cupy, filt, groups)
    dtype = cupy.result_type(x.dtype, filt.dtype)
    width = kh * kw * c
    w_mat = cupy.ascontiguousarray(filt, dtype=dtype).reshape(width, o)
    if kh == kw == 1 and _reads_no_padding(win):
        # 1x1: the output pixels read input pixels (0, 0), (0, s_w), ...: one GEMM over them.
        pixels = x[:, : (win.out_h - 1) * win.stride_h + 1 : win.stride_h, : (win.out_w - 1) * win.stride_w + 1 : win.stride_w]
        pixels = cupy.ascontiguousarray(pixels, dtype=dtype).reshape(-1, c)
        return cupy.matmul(pixels, w_mat).reshape(n, win.out_h, win.out_w, o)
    if n * win.out_h * win.out_w * o == 0 or width == 0:
        return cupy.zeros((n, win.out_h, win.out_w, o), dtype=dtype)
    x = cupy.ascontiguousarray(x, dtype=dtype)
    out = cupy.empty((n, win.out_h, win.out_w, o), dtype=dtype)
    parts = chunks(n, win.out_h, win.out_w * width * out.itemsize, _PATCH_BYTES_PER_CHUNK)
    buffer = cupy.empty((max((p.b1 - p.b0) * (p.r1 - p.r0) for p in parts) * win.out_w, width), dtype=dtype)
    im2col = elementwise("im2col", _IM2COL_PARAMS, "T patch", _IM2COL)
    flat_x = x.reshape(-1)
    for p in parts:
        pixels = (p.b1 - p.b0) * (p.r1 - p.r0) * win.out_w
        patches = buffer[:pixels]
        im2col(
            flat_x, win.in_h, win.in_w, c, kh, kw, win.stride_h, win.stride_w, win.dilation_h, win.dilation_w,
            win.pad_top, win.pad_left, win.out_w, p.r1 - p.r0, p.b0, p.r0, patches,
        )
        # The block is whole images, or rows of one image: contiguous, so the reshape is a view.
        cupy.matmul(patches, w_mat, out=out[p.b0 : p.b1, p.r0 : p.r1].reshape(pixels, o))
    return out


def supports_depthwise(x: Any, filt: Any) -> bool:
    """Whether the depthwise kernel handles these dtypes (floats); others take the shared body."""
    return cupy.result_type(x.dtype, filt.dtype) in FLOAT_DTYPES


def depthwise_conv2d_nhwc(x: Any, filt: Any, win: Window2D) -> Any:
    """DepthwiseConv2dNative of an NHWC cupy array with a [kh, kw, c, mult] filter (float dtypes)."""
    n, _, _, c = x.shape
    kh, kw, _, mult = filt.shape
    dtype = cupy.result_type(x.dtype, filt.dtype)
    x = cupy.ascontiguousarray(x, dtype=dtype).reshape(-1)
    f = cupy.ascontiguousarray(filt, dtype=dtype).reshape(-1)
    out = cupy.empty((n, win.out_h, win.out_w, c * mult), dtype=dtype)
    if out.size == 0:
        return out
    depthwise = elementwise("depthwise", _DEPTHWISE_PARAMS, "T y", _DEPTHWISE, compute_type(dtype))
    depthwise(
        x, f, win.in_h, win.in_w, c, mult, kh, kw, win.stride_h, win.stride_w, win.dilation_h, win.dilation_w,
        win.pad_top, win.pad_left, win.out_h, win.out_w, out,
    )
    return out


@kernel("Conv2D", devices=("gpu",), override=True)
def conv2d(
    xp,
    x,
    filter,
    *,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
):
    """Conv2D as im2col + cuBLAS GEMM (a 1x1 convolution as the GEMM alone)."""
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    return (from_nhwc(xp, conv2d_nhwc(xs, filter, win), data_format),)


@kernel("DepthwiseConv2dNative", devices=("gpu",), override=True)
def depthwise_conv2d(
    xp,
    x,
    filter,
    *,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
):
    """DepthwiseConv2dNative as one CUDA thread per output element."""
    if not supports_depthwise(x, filter):
        return shared.depthwise_conv2d(
            xp, x, filter, strides=strides, padding=padding, explicit_paddings=explicit_paddings,
            data_format=data_format, dilations=dilations,
        )
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    return (from_nhwc(xp, depthwise_conv2d_nhwc(xs, filter, win), data_format),)
