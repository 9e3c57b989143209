"""2-D pooling (MaxPool, MaxPoolV2, AvgPool): the max or mean of each sliding window, channel by channel.

Windows follow the geometry of `kernels.nn.window` (SAME / VALID / EXPLICIT). Each of the kh * kw
taps is one vectorised ufunc over a block of output pixels; a tap only touches the output positions
where it reads a real input cell, so padding never enters a max, and AvgPool divides by the number of
real cells in each window, as TensorFlow does.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels.nn.window import Window2D, window_from_attrs
from kernels.pool import Chunk, chunks, run_chunks
from kernels.registry import kernel

__all__ = ["max_pool", "max_pool_v2", "avg_pool", "pool_window"]

DataFormat = Literal["NHWC", "NCHW"]

# Bytes of output per chunk: about one L2 cache.
_BYTES_PER_CHUNK = 2 << 20


class _Layout:
    """Where the spatial axes are, so taps index NHWC and NCHW tensors alike without transposing."""

    def __init__(self, data_format: str):
        self.nhwc = data_format == "NHWC"

    def hw(self, x: Any) -> tuple[int, int]:
        return (x.shape[1], x.shape[2]) if self.nhwc else (x.shape[2], x.shape[3])

    def at(self, batch: slice, rows: slice, cols: slice) -> tuple[slice, ...]:
        return (batch, rows, cols) if self.nhwc else (batch, slice(None), rows, cols)

    def out_shape(self, x: Any, win: Window2D) -> tuple[int, ...]:
        if self.nhwc:
            return (x.shape[0], win.out_h, win.out_w, x.shape[3])
        return (x.shape[0], x.shape[1], win.out_h, win.out_w)

    def row_bytes(self, x: Any, win: Window2D) -> int:
        channels = x.shape[3] if self.nhwc else x.shape[1]
        return win.out_w * channels * x.itemsize


def _pool(xp: Any, x: Any, win: Window2D, layout: _Layout, combine: str) -> Any:
    """Reduce every window with `combine` ("max" or "sum") over its real (non-padding) cells."""
    out = xp.empty(layout.out_shape(x, win), dtype=x.dtype)
    # A tap that covers every output position initialises the block; otherwise start from the identity.
    order = sorted(win.taps(), key=lambda t: not win.covers(*t))
    ufunc = xp.maximum if combine == "max" else xp.add

    def work(p: Chunk) -> None:
        block = out[layout.at(slice(p.b0, p.b1), slice(p.r0, p.r1), slice(None))]
        for k, (i, j) in enumerate(order):
            out_rows, out_cols, in_rows, in_cols = win.tap(i, j, p.rows)
            src = x[layout.at(slice(p.b0, p.b1), in_rows, in_cols)]
            if k == 0 and win.covers(i, j, p.rows):
                block[...] = src
                continue
            if k == 0:
                block[...] = _identity(xp, x.dtype, combine)
            dst = block[layout.at(slice(None), out_rows, out_cols)]
            ufunc(dst, src, out=dst)

    run_chunks(xp, work, chunks(x.shape[0], win.out_h, layout.row_bytes(x, win), _BYTES_PER_CHUNK))
    return out


def _identity(xp: Any, dtype: Any, combine: str) -> Any:
    if combine == "sum":
        return 0
    # NOTE: TensorFlow pads MaxPool with -inf (the lowest value for integer types).
    # Dtype facts come from numpy on either backend: cupy arrays carry numpy dtypes.
    return -np.inf if np.dtype(dtype).kind in "fc" else np.iinfo(dtype).min


def _ints(values: Any) -> tuple[int, ...]:
    """An attr tuple, or a small int32 tensor on the host or device, as Python ints."""
    return tuple(int(v) for v in (values.tolist() if hasattr(values, "tolist") else values))


def pool_window(in_hw: tuple[int, int], ksize: Any, strides: Any, padding: str, explicit_paddings: Any,
                data_format: str) -> Window2D:
    """The windows of a pooling node over an `in_hw` image; `ksize` and `strides` (attrs, or MaxPoolV2's
    int32 tensors) list the batch and channel entries too, in data_format order."""
    ksize = _ints(ksize)
    k_hw = (ksize[1], ksize[2]) if data_format == "NHWC" else (ksize[2], ksize[3])
    return window_from_attrs(in_hw, k_hw, _ints(strides), padding, explicit_paddings, data_format)


def _max_pool(xp, x, ksize, strides, padding, explicit_paddings, data_format):
    layout = _Layout(data_format)
    win = pool_window(layout.hw(x), ksize, strides, padding, explicit_paddings, data_format)
    return (_pool(xp, x, win, layout, "max"),)


@kernel("MaxPool")
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
    """The maximum of each ksize window; padding cells never win."""
    return _max_pool(xp, input, ksize, strides, padding, explicit_paddings, data_format)


@kernel("MaxPoolV2")
def max_pool_v2(
    xp,
    input,
    ksize,
    strides,
    *,
    padding: Literal["SAME", "VALID"],
    data_format: DataFormat = "NHWC",
):
    """MaxPool with ksize and strides given as int32 tensors rather than attrs."""
    return _max_pool(xp, input, ksize, strides, padding, (), data_format)


@kernel("AvgPool")
def avg_pool(
    xp,
    value,
    *,
    ksize: tuple[int, ...],
    strides: tuple[int, ...],
    padding: Literal["SAME", "VALID"],
    data_format: DataFormat = "NHWC",
):
    """The mean of each ksize window over its real cells: SAME windows at the border divide by fewer."""
    layout = _Layout(data_format)
    win = pool_window(layout.hw(value), ksize, strides, padding, (), data_format)
    total = _pool(xp, value, win, layout, "sum")
    rows, cols = win.row_counts()
    # Real cells per window = (real rows) * (real columns): the window is a rectangle clipped to the image.
    counts = xp.asarray(rows, dtype=total.dtype)[:, None] * xp.asarray(cols, dtype=total.dtype)[None, :]
    if layout.nhwc:
        counts = counts[:, :, None]
    if total.dtype.kind in "iu":
        return (total // counts,)
    xp.divide(total, counts, out=total)  # total is ours, fresh from _pool
    return (total,)
