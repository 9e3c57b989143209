"""Image resizing (ResizeBilinear, ResizeNearestNeighbor, ResizeBicubic, ResizeArea) of NHWC batches,
bit-for-bit TensorFlow's coordinate mapping.

Each output coordinate maps to an input coordinate by a scale computed in float32: (in - 1) / (out - 1)
with `align_corners` (and out > 1), else in / out; with `half_pixel_centers` pixel centres are aligned
(bilinear: (x + 0.5) * scale - 0.5; nearest: (x + 0.5) * scale). The arithmetic is float32 and in the
same order as TensorFlow's kernels, so results match exactly, not only within a tolerance.

ResizeBicubic samples TensorFlow's 1025-entry table of the cubic kernel (Keys' a=-0.5 with half-pixel
centres, a=-0.75 without); ResizeArea averages the input cells each output cell covers, weighted by the
covered fraction. `tf.image.resize` v2 reaches these through ScaleAndTranslate instead (kernels/
scale_and_translate.py); the v1 API and Keras' legacy paths use these ops. On the CPU, bilinear and
nearest resizing of uint8 and float32 images run as compiled loops (kernels.image.resize_compiled) over the
taps computed here; the numpy bodies are their twins.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy

from kernels.image import resize_compiled
from kernels.jit import use_compiled
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["resize_area", "resize_bicubic", "resize_bilinear", "resize_nearest_neighbor"]

_UINT8, _FLOAT32 = numpy.dtype(numpy.uint8), numpy.dtype(numpy.float32)


def _scale(xp: Any, in_size: int, out_size: int, align_corners: bool) -> Any:
    if align_corners and out_size > 1:
        return xp.float32(in_size - 1) / xp.float32(out_size - 1)
    return xp.float32(in_size) / xp.float32(out_size)


def _check_output(images: Any, out_h: int, out_w: int, dtype: Any, memory_limit: int | None, op: str) -> None:
    """The output size is a value a client may send: refuse one over the memory limit before resizing."""
    if memory_limit is not None:
        shape = (images.shape[0], out_h, out_w, images.shape[-1]) if images.ndim == 4 else (out_h, out_w)
        check_elements(math.prod(shape), dtype, memory_limit, f"{op} output", shape)


def _out_size(size: Any) -> tuple[int, int]:
    h, w = (int(v) for v in size.tolist())
    if h <= 0 or w <= 0:
        raise ValueError(f"output size must be positive, got [{h}, {w}]")
    return h, w


# Output sizes up to this many pixels a side keep their taps (a model resizes to the same size on every
# request); larger ones, which a client could send to fill the cache, are computed each time.
_CACHED_SIDE = 4096


@functools.lru_cache(maxsize=256)
def _cached_taps(taps: Callable[..., Any], in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Any:
    values = taps(numpy, in_size, out_size, align_corners, half_pixel)
    for array in values if isinstance(values, tuple) else (values,):
        array.setflags(write=False)
    return values


def _host_taps(taps: Callable[..., Any], in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Any:
    """`taps` (_linear_taps or _nearest_index) as numpy arrays, read-only, for the compiled loops."""
    if out_size <= _CACHED_SIDE:
        return _cached_taps(taps, in_size, out_size, align_corners, half_pixel)
    return taps(numpy, in_size, out_size, align_corners, half_pixel)


def _compiled_dtype(xp: Any, compiled: bool, images: Any) -> bool:
    """Whether resize_compiled's loops take these images: uint8 or float32, on the CPU, when asked for."""
    return use_compiled(xp, compiled) and images.dtype in (_UINT8, _FLOAT32) and images.size > 0


def _linear_taps(xp: Any, in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    """For each output index: the lower and upper input index and the float32 weight of the upper."""
    scale = _scale(xp, in_size, out_size, align_corners)
    pos = xp.arange(out_size, dtype=xp.float32)
    src = (pos + xp.float32(0.5)) * scale - xp.float32(0.5) if half_pixel else pos * scale
    floor = xp.floor(src)
    lower = xp.maximum(floor.astype(xp.int64), 0)
    upper = xp.minimum(xp.ceil(src).astype(xp.int64), in_size - 1)
    # NOTE: the weight comes from the unclamped coordinate, as in TensorFlow (matters above the top edge).
    return lower, upper, (src - floor).astype(xp.float32)


@kernel("ResizeBilinear")
def resize_bilinear(xp, images, size, *, align_corners: bool = False, half_pixel_centers: bool = False,
                    memory_limit: int | None = None, compiled: bool = False):
    """Bilinear interpolation to `size` = [new_height, new_width]; the result is always float32. uint8 and
    float32 images on the CPU go through kernels.image.resize_compiled's loop (this is its twin)."""
    n, h, w, c = images.shape
    out_h, out_w = _out_size(size)
    _check_output(images, out_h, out_w, "float32", memory_limit, "ResizeBilinear")
    if _compiled_dtype(xp, compiled, images):
        out = xp.empty((n, out_h, out_w, c), xp.float32)
        resize_compiled.bilinear(xp.ascontiguousarray(images), _host_taps(_linear_taps, h, out_h, align_corners,
                                                                          half_pixel_centers),
                                 _host_taps(_linear_taps, w, out_w, align_corners, half_pixel_centers), out)
        return (out,)
    y0, y1, y_lerp = _linear_taps(xp, h, out_h, align_corners, half_pixel_centers)
    x0, x1, x_lerp = _linear_taps(xp, w, out_w, align_corners, half_pixel_centers)
    x_lerp = x_lerp[:, None]
    # Interpolate along x within the two source rows, then between the rows, as TensorFlow does.
    top_rows = images[:, y0].astype(xp.float32, copy=False)
    bottom_rows = images[:, y1].astype(xp.float32, copy=False)
    top_left, top_right = top_rows[:, :, x0], top_rows[:, :, x1]
    top = top_left + (top_right - top_left) * x_lerp
    bottom_left, bottom_right = bottom_rows[:, :, x0], bottom_rows[:, :, x1]
    bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
    return (top + (bottom - top) * y_lerp[:, None, None],)


def _nearest_index(xp: Any, in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Any:
    scale = _scale(xp, in_size, out_size, align_corners)
    pos = xp.arange(out_size, dtype=xp.float32)
    src = (pos + xp.float32(0.5)) * scale if half_pixel else pos * scale
    index = xp.floor(src)
    if align_corners:
        # roundf: halves round away from zero (src >= 0 here), unlike numpy's round-half-to-even.
        index = index + (src - index >= xp.float32(0.5))
    index = xp.minimum(index.astype(xp.int64), in_size - 1)
    return xp.maximum(index, 0) if half_pixel else index


@kernel("ResizeNearestNeighbor")
def resize_nearest_neighbor(xp, images, size, *, align_corners: bool = False, half_pixel_centers: bool = False,
                            memory_limit: int | None = None, compiled: bool = False):
    """Nearest-neighbour resizing to `size` = [new_height, new_width]; keeps the input dtype. uint8 and
    float32 images on the CPU go through kernels.image.resize_compiled's loop (this is its twin)."""
    n, h, w, c = images.shape
    out_h, out_w = _out_size(size)
    _check_output(images, out_h, out_w, images.dtype, memory_limit, "ResizeNearestNeighbor")
    if _compiled_dtype(xp, compiled, images):
        out = xp.empty((n, out_h, out_w, c), images.dtype)
        resize_compiled.nearest(xp.ascontiguousarray(images), _host_taps(_nearest_index, h, out_h, align_corners,
                                                                         half_pixel_centers),
                                _host_taps(_nearest_index, w, out_w, align_corners, half_pixel_centers), out)
        return (out,)
    rows = _nearest_index(xp, h, out_h, align_corners, half_pixel_centers)
    cols = _nearest_index(xp, w, out_w, align_corners, half_pixel_centers)
    return (images[:, rows][:, :, cols],)


# --- bicubic ----------------------------------------------------------------------------------------------

_CUBIC_TABLE_SIZE = 1024


def _cubic_coeffs(a: float) -> Any:
    """TensorFlow's [1025, 2] float32 table of the cubic kernel at x = i/1024 and x + 1, computed in double."""
    import numpy as np

    x = (np.arange(_CUBIC_TABLE_SIZE + 1, dtype=np.float64) / _CUBIC_TABLE_SIZE).astype(np.float32).astype(np.float64)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    x1 = x + 1.0
    far = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
    return np.stack([near, far], axis=1).astype(np.float32)


def _cubic_taps(xp: Any, in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    """For each output index: 4 input indices [out, 4] and their float32 weights [out, 4].

    With half_pixel_centers TensorFlow uses Keys' kernel (a=-0.5) and gives taps outside the image zero
    weight, renormalising the rest; without, a=-0.75 and the taps are clamped to the edge."""
    import numpy as np

    # NOTE: measured on TensorFlow 2.21: with align_corners, a one-pixel input still maps by in / out.
    scale = np.float32(_scale(np, in_size, out_size, align_corners and in_size > 1))
    table = _cubic_coeffs(-0.5 if half_pixel else -0.75)
    pos = np.arange(out_size, dtype=np.float32)
    src = (pos + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else pos * scale
    floor = np.floor(src)
    in_loc = floor.astype(np.int64)
    offset = np.rint((src - floor) * np.float32(_CUBIC_TABLE_SIZE)).astype(np.int64)
    weights = np.stack([table[offset, 1], table[offset, 0], table[_CUBIC_TABLE_SIZE - offset, 0],
                        table[_CUBIC_TABLE_SIZE - offset, 1]], axis=1)
    taps = in_loc[:, None] + np.arange(-1, 3)
    indices = np.clip(taps, 0, in_size - 1)
    if half_pixel:
        weights = np.where(indices == taps, weights, np.float32(0))
        total = ((weights[:, 0] + weights[:, 1]) + weights[:, 2]) + weights[:, 3]
        ok = np.abs(total) >= np.float32(1000.0) * np.finfo(np.float32).tiny
        inverse = np.float32(1) / np.where(ok, total, np.float32(1))
        weights = np.where(ok[:, None], weights * inverse[:, None], weights)
    return xp.asarray(indices), xp.asarray(weights.astype(np.float32))


def _check_resize(images: Any, size: Any, align_corners: bool, half_pixel_centers: bool) -> tuple[int, int]:
    if half_pixel_centers and align_corners:
        raise ValueError("If half_pixel_centers is True, align_corners must be False.")
    if images.ndim != 4:
        raise ValueError(f"input must be 4-dimensional{list(images.shape)}")
    if images.shape[3] <= 0:
        raise ValueError("image must have at least one channel")
    if images.shape[1] <= 0 or images.shape[2] <= 0:
        raise ValueError("input image must be of non-zero size")
    if size.ndim != 1:
        raise ValueError(f"shape_t must be 1-dimensional{list(size.shape)}")
    if size.shape[0] != 2:
        raise ValueError(f"shape_t must have two elements{list(size.shape)}")
    h, w = (int(v) for v in size.tolist())
    if h <= 0 or w <= 0:
        raise ValueError("output dimensions must be positive")
    return h, w


@kernel("ResizeBicubic")
def resize_bicubic(xp, images, size, *, align_corners: bool = False, half_pixel_centers: bool = False,
                   memory_limit: int | None = None):
    """Bicubic interpolation to `size` = [new_height, new_width] over a 4x4 neighbourhood; float32 out.

    As in TensorFlow, each of the 4 source columns is first interpolated over the 4 rows, then the 4
    results over the columns, each a left-to-right float32 sum of value * weight."""
    out_h, out_w = _check_resize(images, size, align_corners, half_pixel_centers)
    _check_output(images, out_h, out_w, "float32", memory_limit, "ResizeBicubic")
    _, h, w, _ = images.shape
    rows, row_w = _cubic_taps(xp, h, out_h, align_corners, half_pixel_centers)
    cols, col_w = _cubic_taps(xp, w, out_w, align_corners, half_pixel_centers)
    x = images.astype(xp.float32, copy=False)
    by_rows = x[:, rows[:, 0]] * row_w[None, :, 0, None, None]
    for k in range(1, 4):
        by_rows = by_rows + x[:, rows[:, k]] * row_w[None, :, k, None, None]
    out = by_rows[:, :, cols[:, 0]] * col_w[None, None, :, 0, None]
    for k in range(1, 4):
        out = out + by_rows[:, :, cols[:, k]] * col_w[None, None, :, k, None]
    return (out,)


# --- area -------------------------------------------------------------------------------------------------


def _area_spans(in_size: int, out_size: int, scale: Any):
    """Per output index: the first input index, the window length and the float32 share of each input
    index in the window ([out, length]), as TensorFlow's ResizeArea computes them."""
    import numpy as np

    pos = np.arange(out_size, dtype=np.float32)
    lo, hi = pos * scale, (pos + np.float32(1)) * scale
    start = np.floor(lo).astype(np.int64)
    end = np.ceil(hi).astype(np.int64)
    length = max(int((end - start).max()), 1)
    i = start[:, None] + np.arange(length)
    fi, fi1 = i.astype(np.float32), (i + 1).astype(np.float32)
    lo, hi = lo[:, None], hi[:, None]
    # NOTE: TensorFlow mixes a double 1.0 into the float ternary; every value is exact in float32 anyway.
    share = np.where(fi < lo, np.where(fi1 > hi, scale, fi1 - lo), np.where(fi1 > hi, hi - fi, np.float32(1)))
    valid = i < end[:, None]
    return start, end, np.clip(i, 0, in_size - 1), np.where(valid, share, np.float32(0)).astype(np.float32), valid


@kernel("ResizeArea")
def resize_area(xp, images, size, *, align_corners: bool = False, memory_limit: int | None = None):
    """Area-weighted average of the input pixels each output pixel covers; float32 out.

    Summation follows TensorFlow's order: along a row, the first pixel times its share, the inner pixels
    whole, the last times its share; then those row sums times each row's share, over the rows; then
    times 1 / (height_scale * width_scale)."""
    import numpy as np

    out_h, out_w = _check_resize(images, size, align_corners, False)
    _check_output(images, out_h, out_w, "float32", memory_limit, "ResizeArea")
    _, h, w, _ = images.shape
    # NOTE: as for bicubic, TensorFlow 2.21 maps a one-pixel side by in / out even with align_corners.
    h_scale = np.float32(_scale(np, h, out_h, align_corners and h > 1))
    w_scale = np.float32(_scale(np, w, out_w, align_corners and w > 1))
    x = images.astype(xp.float32, copy=False)

    x_start, x_end, x_idx, x_share, _ = _area_spans(w, out_w, w_scale)
    first, last = x_idx[:, 0], np.clip(x_end - 1, 0, w - 1)
    last_share = x_share[np.arange(out_w), x_end - x_start - 1]
    rows = x[:, :, xp.asarray(first)] * xp.asarray(x_share[:, 0])[None, None, :, None]
    for k in range(1, x_idx.shape[1] - 1):
        inner = (x_start + k < x_end - 1)
        col = x[:, :, xp.asarray(x_idx[:, k])]
        rows = rows + xp.where(xp.asarray(inner)[None, None, :, None], col, xp.float32(0))
    has_last = x_start + 1 != x_end
    tail = x[:, :, xp.asarray(last)] * xp.asarray(last_share)[None, None, :, None]
    rows = rows + xp.where(xp.asarray(has_last)[None, None, :, None], tail, xp.float32(0))

    _, _, y_idx, y_share, y_valid = _area_spans(h, out_h, h_scale)
    out = xp.zeros((x.shape[0], out_h, out_w, x.shape[3]), dtype=xp.float32)
    for k in range(y_idx.shape[1]):
        term = rows[:, xp.asarray(y_idx[:, k])] * xp.asarray(y_share[:, k])[None, :, None, None]
        out = out + xp.where(xp.asarray(y_valid[:, k])[None, :, None, None], term, xp.float32(0))
    with np.errstate(divide="ignore"):  # a zero scale (align_corners onto one row) gives inf, as in C
        scale = np.float32(np.float64(1.0) / np.float64(h_scale * w_scale))
    return (out * scale,)
