"""Image resizing (ResizeBilinear, ResizeNearestNeighbor) of NHWC batches, bit-for-bit TensorFlow's
coordinate mapping.

Each output coordinate maps to an input coordinate by a scale computed in float32: (in - 1) / (out - 1)
with `align_corners` (and out > 1), else in / out; with `half_pixel_centers` pixel centres are aligned
(bilinear: (x + 0.5) * scale - 0.5; nearest: (x + 0.5) * scale). The arithmetic is float32 and in the
same order as TensorFlow's kernels, so results match exactly, not only within a tolerance.
"""

from __future__ import annotations

from typing import Any

from kernels.registry import kernel

__all__ = ["resize_bilinear", "resize_nearest_neighbor"]


def _scale(xp: Any, in_size: int, out_size: int, align_corners: bool) -> Any:
    if align_corners and out_size > 1:
        return xp.float32(in_size - 1) / xp.float32(out_size - 1)
    return xp.float32(in_size) / xp.float32(out_size)


def _out_size(size: Any) -> tuple[int, int]:
    h, w = (int(v) for v in size.tolist())
    if h <= 0 or w <= 0:
        raise ValueError(f"output size must be positive, got [{h}, {w}]")
    return h, w


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
def resize_bilinear(xp, images, size, *, align_corners: bool = False, half_pixel_centers: bool = False):
    """Bilinear interpolation to `size` = [new_height, new_width]; the result is always float32."""
    n, h, w, c = images.shape
    out_h, out_w = _out_size(size)
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
def resize_nearest_neighbor(xp, images, size, *, align_corners: bool = False, half_pixel_centers: bool = False):
    """Nearest-neighbour resizing to `size` = [new_height, new_width]; keeps the input dtype."""
    _, h, w, _ = images.shape
    out_h, out_w = _out_size(size)
    rows = _nearest_index(xp, h, out_h, align_corners, half_pixel_centers)
    cols = _nearest_index(xp, w, out_w, align_corners, half_pixel_centers)
    return (images[:, rows][:, :, cols],)
