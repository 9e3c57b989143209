"""2-D pooling (MaxPool, MaxPoolV2, AvgPool): the max or mean of each sliding window, channel by channel.

Windows follow the geometry of `kernels.nn.window` (SAME / VALID / EXPLICIT). A window only reads its real
input cells, so padding never enters a max (NaN wins it, as on the GPU), and AvgPool divides by the number
of real cells in each window, as TensorFlow does.

On CPU float32 NHWC data, each chunk of output rows is one compiled pass (`_pool_rows`) over long contiguous
runs of output pixels, two or three taps at a time (on one thread, a 3x3 average pool of NASNet's 44-channel
layers ran 3x faster than numpy's pass per tap, a 3x3 stride-2 max pool 3.4x, a 2x2 one 1.7x). The numpy body is its twin: each of the kh * kw
taps is one vectorised ufunc over a block of output pixels, touching only the output positions where it reads a
real cell. Both sum a window's cells in tap order (row-major) and divide by the same float32 count, so the two
agree (to the bit, but for the sign of a zero sum).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels.jit import compiled, readonly, use_compiled
from kernels.nn.window import Window2D, window_from_attrs
from kernels.pool import Chunk, chunks, pool_size, run_chunks
from kernels.registry import kernel

__all__ = ["avg_pool", "max_pool", "max_pool_v2", "pool_window"]

DataFormat = Literal["NHWC", "NCHW"]

# Bytes of output per chunk: about one L2 cache.
_BYTES_PER_CHUNK = 2 << 20
# The compiled pass: input cells read per chunk, at least _MIN_CELLS (a hand-off to the pool costs tens of
# microseconds, about what a compiled pass over this many cells takes) and at most _MAX_CELLS.
_MIN_CELLS = 1 << 17
_MAX_CELLS = 1 << 21
_OPS = ("MaxPool", "MaxPoolV2", "AvgPool")
# Output values per segment of a row: its results and the input runs it reads stay in L1.
_SEGMENT_VALUES = 1024


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
    # A tap that covers every output position initialises the block; otherwise start from the identity. A
    # max may take the taps in any order; a sum takes them in tap order, as the compiled pass does.
    order = sorted(win.taps(), key=lambda t: not win.covers(*t)) if combine == "max" else list(win.taps())
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


@compiled(f"void({readonly(4)}, int64, int64, int64, int64, int64, int64, int64, int64, int64, int64, int64, "
          "float32[:, :, :, ::1])", ops=_OPS)
def _pool_rows(x, kh, kw, sh, sw, pad_t, pad_l, average, b0, b1, r0, r1, out):  # pragma: no cover - compiled
    """Output rows [r0, r1) of images [b0, b1) of a pooling of NHWC x: each window's max (NaN wins), or with
    `average` its sum in tap order, divided by its count of real cells.

    As the depthwise loop does (kernels.nn.depthwise), the input rows are first copied into phase rows, padded
    with the reduction's identity (0 for a sum, -inf for a max, which neither changes): tap j of a run of output
    pixels then reads one contiguous run of a phase row, and two or three taps combine in one pass over the run."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    ow = out.shape[2]
    identity = np.float32(0.0) if average else np.float32(-np.inf)
    seg = max(1, min(ow, _SEGMENT_VALUES // c))
    width = ow + (kw - 1) // sw
    # Each output column's count of real columns in its window, per value (an average's divisor, with the rows').
    columns = np.empty(ow * c, np.float32)
    for q in range(ow):
        left = q * sw - pad_l
        count = np.float32(max(min(kw, w - left) - max(0, -left), 0))
        for k in range(c):
            columns[q * c + k] = count
    y0 = r0 * sh - pad_t
    y1 = (r1 - 1) * sh - pad_t + kh
    rows = np.empty((y1 - y0) * sw * width * c, np.float32)
    for b in range(b0, b1):
        xf = x[b].reshape(-1)
        nans = 0  # NaN inputs: only then does the max take the slower loop that lets NaN win
        for y in range(max(y0, 0), min(y1, h)):
            for p in range(sw):
                base = ((y - y0) * sw + p) * width * c
                dst = rows[base : base + width * c]
                # Phase columns [u0, u1) read inside the image: input columns u * sw + p - pad_l.
                u0 = min(max(0, (pad_l - p + sw - 1) // sw), width)
                u1 = max(min(width, (w - 1 - p + pad_l) // sw + 1), u0)
                for e in range(u0 * c):
                    dst[e] = identity
                for e in range(u1 * c, width * c):
                    dst[e] = identity
                for u in range(u0, u1):
                    a = (y * w + u * sw + p - pad_l) * c
                    cell = dst[u * c : (u + 1) * c]
                    src = xf[a : a + c]
                    for k in range(c):
                        v = src[k]
                        cell[k] = v
                        nans += 1 if np.isnan(v) else 0
        of = out[b].reshape(-1)
        for r in range(r0, r1):
            top = r * sh - pad_t
            i0, i1 = max(0, -top), min(kh, h - top)
            for s0 in range(0, ow, seg):
                n = (min(s0 + seg, ow) - s0) * c
                acc = of[(r * ow + s0) * c : (r * ow + s0) * c + n]
                for e in range(n):
                    acc[e] = identity
                for i in range(i0, i1):
                    first = (top + i - y0) * sw
                    j = 0
                    while j < kw:
                        a0 = ((first + j % sw) * width + s0 + j // sw) * c
                        x0 = rows[a0 : a0 + n]
                        if j + 2 < kw:
                            a1 = ((first + (j + 1) % sw) * width + s0 + (j + 1) // sw) * c
                            a2 = ((first + (j + 2) % sw) * width + s0 + (j + 2) // sw) * c
                            x1, x2 = rows[a1 : a1 + n], rows[a2 : a2 + n]
                            if average:
                                for e in range(n):
                                    v = acc[e]
                                    v += x0[e]
                                    v += x1[e]
                                    v += x2[e]
                                    acc[e] = v
                            elif nans:
                                for e in range(n):
                                    v, e0, e1, e2 = acc[e], x0[e], x1[e], x2[e]
                                    v = e0 if (e0 > v or np.isnan(e0)) else v
                                    v = e1 if (e1 > v or np.isnan(e1)) else v
                                    acc[e] = e2 if (e2 > v or np.isnan(e2)) else v
                            else:
                                for e in range(n):
                                    v, e0, e1, e2 = acc[e], x0[e], x1[e], x2[e]
                                    v = e0 if e0 > v else v  # noqa: FURB136  (as the NaN-aware loop spells it)
                                    v = e1 if e1 > v else v  # noqa: FURB136  (as the NaN-aware loop spells it)
                                    acc[e] = e2 if e2 > v else v  # noqa: FURB136  (as the NaN-aware loop spells it)
                            j += 3
                        elif j + 1 < kw:
                            a1 = ((first + (j + 1) % sw) * width + s0 + (j + 1) // sw) * c
                            x1 = rows[a1 : a1 + n]
                            if average:
                                for e in range(n):
                                    v = acc[e]
                                    v += x0[e]
                                    v += x1[e]
                                    acc[e] = v
                            elif nans:
                                for e in range(n):
                                    v, e0, e1 = acc[e], x0[e], x1[e]
                                    v = e0 if (e0 > v or np.isnan(e0)) else v
                                    acc[e] = e1 if (e1 > v or np.isnan(e1)) else v
                            else:
                                for e in range(n):
                                    v, e0, e1 = acc[e], x0[e], x1[e]
                                    v = e0 if e0 > v else v  # noqa: FURB136  (as the NaN-aware loop spells it)
                                    acc[e] = e1 if e1 > v else v  # noqa: FURB136  (as the NaN-aware loop spells it)
                            j += 2
                        else:
                            if average:
                                for e in range(n):
                                    acc[e] += x0[e]
                            elif nans:
                                for e in range(n):
                                    v, e0 = acc[e], x0[e]
                                    acc[e] = e0 if (e0 > v or np.isnan(e0)) else v
                            else:
                                for e in range(n):
                                    v, e0 = acc[e], x0[e]
                                    acc[e] = e0 if e0 > v else v  # noqa: FURB136  (as the NaN-aware loop spells it)
                            j += 1
                if average:
                    real_rows = np.float32(i1 - i0)
                    counts = columns[s0 * c : s0 * c + n]
                    for e in range(n):
                        # numpy's division: no zero check (numba's `/` checks, which keeps the loop scalar).
                        acc[e] = np.divide(acc[e], real_rows * counts[e])


def _pool_compiled(xp: Any, x: Any, win: Window2D, average: bool) -> Any:
    """`_pool` of float32 NHWC x by the compiled pass, chunks of output rows on the engine's pool; for an
    average, already divided by each window's count of real cells."""
    x = np.ascontiguousarray(x)
    n, _, _, c = x.shape
    out = np.empty((n, win.out_h, win.out_w, c), np.float32)
    if out.size == 0:
        return out
    row_cells = win.out_w * c * win.kh * win.kw
    total = n * win.out_h * row_cells
    budget = min(max(total // (2 * pool_size()), _MIN_CELLS), _MAX_CELLS)
    geometry = (win.kh, win.kw, win.stride_h, win.stride_w, win.pad_top, win.pad_left, int(average))
    run_chunks(xp, lambda p: _pool_rows(x, *geometry, p.b0, p.b1, p.r0, p.r1, out),
               chunks(n, win.out_h, row_cells, budget))
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


def _fast(xp: Any, x: Any, win: Window2D, layout: _Layout, compiled: bool) -> bool:
    """Whether the compiled pass computes this pooling: CPU float32 NHWC, dilation 1 (pooling has none)."""
    return layout.nhwc and use_compiled(xp, compiled, x.dtype) and win.dilation_h == win.dilation_w == 1


def _max_pool(xp, x, ksize, strides, padding, explicit_paddings, data_format, compiled):
    layout = _Layout(data_format)
    win = pool_window(layout.hw(x), ksize, strides, padding, explicit_paddings, data_format)
    if _fast(xp, x, win, layout, compiled):
        return (_pool_compiled(xp, x, win, average=False),)
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
    compiled: bool = False,
):
    """The maximum of each ksize window; padding cells never win."""
    return _max_pool(xp, input, ksize, strides, padding, explicit_paddings, data_format, compiled)


@kernel("MaxPoolV2")
def max_pool_v2(
    xp,
    input,
    ksize,
    strides,
    *,
    padding: Literal["SAME", "VALID"],
    data_format: DataFormat = "NHWC",
    compiled: bool = False,
):
    """MaxPool with ksize and strides given as int32 tensors rather than attrs."""
    return _max_pool(xp, input, ksize, strides, padding, (), data_format, compiled)


@kernel("AvgPool")
def avg_pool(
    xp,
    value,
    *,
    ksize: tuple[int, ...],
    strides: tuple[int, ...],
    padding: Literal["SAME", "VALID"],
    data_format: DataFormat = "NHWC",
    compiled: bool = False,
):
    """The mean of each ksize window over its real cells: SAME windows at the border divide by fewer."""
    layout = _Layout(data_format)
    win = pool_window(layout.hw(value), ksize, strides, padding, (), data_format)
    if _fast(xp, value, win, layout, compiled):
        return (_pool_compiled(xp, value, win, average=True),)
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
