"""MaxPool, MaxPoolV2 and AvgPool on the GPU: one CUDA thread per output element of an NHWC tensor.

A thread visits its window's taps that lie inside the image: padding never wins a max (a window wholly in
padding gives the dtype's lowest value, as the shared body does), NaN wins every max, and AvgPool divides
by the number of real cells (rows inside times columns inside), as TensorFlow does with SAME padding.
NCHW tensors are transposed to NHWC and back.
"""

from __future__ import annotations

from typing import Any, Literal

import cupy
import numpy as np

from kernels.gpu.source import FLOAT_DTYPES, compute_type, elementwise
from kernels.nn import pooling as shared
from kernels.nn.window import DataFormat, Window2D
from kernels.registry import kernel

__all__ = ["pool_nhwc"]

# Decomposes output element i of [n, out_h, out_w, chans] and walks the taps inside the image; `visit`
# consumes x's element at offset `at`.
_WINDOW = """
const long long ch = i % chans;
long long rest = i / chans;
const long long col = rest % out_w;
rest /= out_w;
const long long row = rest % out_h, b = rest / out_h;
long long cells = 0;
for (long long ki = 0; ki < k_h; ++ki) {{
    const long long ir = row * s_h - pad_t + ki;
    if (ir < 0 || ir >= in_h) continue;
    for (long long kj = 0; kj < k_w; ++kj) {{
        const long long ic = col * s_w - pad_l + kj;
        if (ic < 0 || ic >= in_w) continue;
        const long long at = ((b * in_h + ir) * in_w + ic) * chans + ch;
        ++cells;
        {visit}
    }}
}}
"""
_PARAMS = (
    "raw T x, int64 in_h, int64 in_w, int64 chans, int64 k_h, int64 k_w, int64 s_h, int64 s_w, "
    "int64 pad_t, int64 pad_l, int64 out_h, int64 out_w"
)
# NOTE: `v != v` is true for NaN only: NaN wins, as numpy's maximum (and TensorFlow's max pool) has it.
_MAX = "T best = (T)(float)lowest;\n" + _WINDOW.format(visit="const T v = x[at]; if (v > best || v != v) best = v;") + "y = best;\n"
_AVG = "F total = 0;\n" + _WINDOW.format(visit="total += (F)x[at];") + "y = (T)(total / (F)cells);\n"


def pool_nhwc(x: Any, win: Window2D, combine: str) -> Any:
    """Max ("max") or mean ("avg") of every window of a contiguous NHWC cupy array."""
    n, _, _, c = x.shape
    out = cupy.empty((n, win.out_h, win.out_w, c), dtype=x.dtype)
    if out.size == 0:
        return out
    geometry = (win.in_h, win.in_w, c, win.kh, win.kw, win.stride_h, win.stride_w, win.pad_top, win.pad_left,
                win.out_h, win.out_w)
    flat = x.reshape(-1)
    if combine == "max":
        # The dtype's lowest value, exact as a float: -inf, or -2**(bits-1) or 0 for integers.
        lowest = -np.inf if x.dtype.kind == "f" else float(np.iinfo(x.dtype).min)
        elementwise("max_pool", _PARAMS + ", float64 lowest", "T y", _MAX)(flat, *geometry, lowest, out)
    else:
        elementwise("avg_pool", _PARAMS, "T y", _AVG, compute_type(x.dtype))(flat, *geometry, out)
    return out


def _nhwc(x: Any, data_format: str) -> Any:
    return cupy.ascontiguousarray(x if data_format == "NHWC" else x.transpose(0, 2, 3, 1))


def _from_nhwc(y: Any, data_format: str) -> Any:
    return y if data_format == "NHWC" else cupy.ascontiguousarray(y.transpose(0, 3, 1, 2))


def _supported(x: Any, combine: str) -> bool:
    if combine == "avg":
        return x.dtype in FLOAT_DTYPES
    return x.dtype in FLOAT_DTYPES or x.dtype.kind in "iu"


def _pool(xp, x, ksize, strides, padding, explicit_paddings, data_format, combine):
    xs = _nhwc(x, data_format)
    win = shared.pool_window(xs.shape[1:3], ksize, strides, padding, explicit_paddings, data_format)
    return (_from_nhwc(pool_nhwc(xs, win, combine), data_format),)


@kernel("MaxPool", devices=("gpu",), override=True)
def max_pool(
    xp,
    input,
    *,
    ksize: tuple[int, ...],
    strides: tuple[int, ...],
    padding: Literal["SAME", "VALID", "EXPLICIT"],
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
):
    """The maximum of each ksize window, one CUDA thread per output element."""
    if not _supported(input, "max"):
        return shared.max_pool(xp, input, ksize=ksize, strides=strides, padding=padding,
                               explicit_paddings=explicit_paddings, data_format=data_format)
    return _pool(xp, input, ksize, strides, padding, explicit_paddings, data_format, "max")


@kernel("MaxPoolV2", devices=("gpu",), override=True)
def max_pool_v2(xp, input, ksize, strides, *, padding: Literal["SAME", "VALID"], data_format: DataFormat = "NHWC"):
    """MaxPool with ksize and strides given as int32 tensors."""
    if not _supported(input, "max"):
        return shared.max_pool_v2(xp, input, ksize, strides, padding=padding, data_format=data_format)
    return _pool(xp, input, ksize, strides, padding, (), data_format, "max")


@kernel("AvgPool", devices=("gpu",), override=True)
def avg_pool(
    xp,
    value,
    *,
    ksize: tuple[int, ...],
    strides: tuple[int, ...],
    padding: Literal["SAME", "VALID"],
    data_format: DataFormat = "NHWC",
):
    """The mean of each window over its real cells, one CUDA thread per output element."""
    if not _supported(value, "avg"):
        return shared.avg_pool(xp, value, ksize=ksize, strides=strides, padding=padding, data_format=data_format)
    return _pool(xp, value, ksize, strides, padding, (), data_format, "avg")
