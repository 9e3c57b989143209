"""CropAndResize: boxes cut from a batch of images and resampled to one crop size (tf.image.crop_and_resize,
the ROI pooling of detection models), bilinear or nearest, with TensorFlow's coordinate rules.

A box [y1, x1, y2, x2] is in normalised coordinates: y1 * (height - 1) is its first row. With crop_height
> 1 the crop's rows step by (y2 - y1) * (height - 1) / (crop_height - 1) from there; with one row, the
row is the box's centre. Rows and columns falling outside [0, size - 1] take `extrapolation_value`. The
coordinates are float32 as in TensorFlow (the one-row centre in double, rounded once), so the sampled
positions, and the bilinear lerps done in TensorFlow's order, match it exactly.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels.host import format_dims
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["crop_and_resize"]

_F = np.float32


def _positions(lo: np.ndarray, hi: np.ndarray, size: int, crop: int) -> np.ndarray:
    """[boxes, crop] float32 sampling positions along one axis of the image."""
    extent = _F(size - 1)
    if crop > 1:
        step = (hi - lo) * extent / _F(crop - 1)
        return lo[:, None] * extent + np.arange(crop, dtype=_F)[None, :] * step[:, None]
    # NOTE: `0.5 * (y1 + y2) * (h - 1)` is double arithmetic in TensorFlow, rounded to float at the end.
    centre = (0.5 * (lo + hi).astype(np.float64) * float(size - 1)).astype(_F)
    return centre[:, None]


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """roundf for v >= 0 (where it is used): halves away from zero, without the error of floor(v + 0.5)."""
    down = np.floor(v)
    return down + (v - down >= _F(0.5))


def _check(image: Any, boxes: Any, box_ind: Any, crop_size: Any) -> tuple[int, int, int]:
    if image.ndim != 4:
        raise ValueError(f"input image must be 4-D{format_dims(image.shape)}")
    if image.shape[1] <= 0 or image.shape[2] <= 0:
        raise ValueError("image dimensions must be positive")
    if boxes.ndim != 2:
        raise ValueError(f"boxes must be 2-D, got: {format_dims(boxes.shape)}")
    if box_ind.ndim != 1:
        raise ValueError(f"box_indices must be rank 1 but is shape {format_dims(box_ind.shape)}")
    num_boxes = 0
    if boxes.size or box_ind.size:
        num_boxes = boxes.shape[0]
        if boxes.shape[1] != 4:
            raise ValueError("boxes must have 4 columns")
        if box_ind.shape[0] != num_boxes:
            raise ValueError("box_index has incompatible shape")
    if crop_size.ndim != 1:
        raise ValueError(f"crop_size must be 1-D{format_dims(crop_size.shape)}")
    if crop_size.shape[0] != 2:
        raise ValueError(f"crop_size must have two elements{format_dims(crop_size.shape)}")
    crop_h, crop_w = (int(v) for v in crop_size.tolist())
    if crop_h <= 0 or crop_w <= 0:
        raise ValueError("crop dimensions must be positive")
    return num_boxes, crop_h, crop_w


@kernel("CropAndResize")
def crop_and_resize(xp, image, boxes, box_ind, crop_size, *, method: Literal["bilinear", "nearest"] = "bilinear",
                    extrapolation_value: float = 0.0, memory_limit: int | None = None):
    """[num_boxes, crop_height, crop_width, depth] float32 crops of `image` [batch, h, w, depth]."""
    num_boxes, crop_h, crop_w = _check(image, boxes, box_ind, crop_size)
    batch, height, width, depth = image.shape
    # crop_size is a value a client may send; bilinear sampling holds six float32 arrays of the output's size.
    shape = (num_boxes, crop_h, crop_w, depth)
    check_elements(6 * num_boxes * crop_h * crop_w * depth, np.float32, memory_limit,
                   "CropAndResize output and its sampling arrays", shape)
    index = np.asarray(box_ind.tolist(), dtype=np.int64).reshape(-1)[:num_boxes]
    if index.size and (index.min() < 0 or index.max() >= batch):
        raise ValueError("box_index has values outside [0, batch_size)")
    b = np.asarray(boxes.tolist(), dtype=_F).reshape(num_boxes, 4)
    if not np.isfinite(b).all():
        raise ValueError("Boxes contains at least one element that is not finite")
    in_y = _positions(b[:, 0], b[:, 2], height, crop_h)  # [boxes, crop_h or 1]
    in_x = _positions(b[:, 1], b[:, 3], width, crop_w)
    in_y = np.broadcast_to(in_y, (num_boxes, crop_h))
    in_x = np.broadcast_to(in_x, (num_boxes, crop_w))
    y_ok = (in_y >= 0) & (in_y <= _F(height - 1))
    x_ok = (in_x >= 0) & (in_x <= _F(width - 1))
    fill = _F(extrapolation_value)
    ok = xp.asarray(y_ok[:, :, None] & x_ok[:, None, :])[..., None]
    n = xp.asarray(index)[:, None, None]
    img = image
    if method == "nearest":
        # roundf: halves away from zero (positions here are >= 0 where used)
        rows = np.clip(_round_half_away(in_y), 0, height - 1).astype(np.int64)
        cols = np.clip(_round_half_away(in_x), 0, width - 1).astype(np.int64)
        picked = img[n, xp.asarray(rows)[:, :, None], xp.asarray(cols)[:, None, :]].astype(xp.float32)
        return (xp.where(ok, picked, fill),)
    top = np.clip(np.floor(in_y), 0, height - 1).astype(np.int64)
    bottom = np.clip(np.ceil(in_y), 0, height - 1).astype(np.int64)
    left = np.clip(np.floor(in_x), 0, width - 1).astype(np.int64)
    right = np.clip(np.ceil(in_x), 0, width - 1).astype(np.int64)
    y_lerp = xp.asarray((in_y - np.floor(in_y)).astype(_F))[:, :, None, None]
    x_lerp = xp.asarray((in_x - np.floor(in_x)).astype(_F))[:, None, :, None]
    t, bt = xp.asarray(top)[:, :, None], xp.asarray(bottom)[:, :, None]
    lf, rt = xp.asarray(left)[:, None, :], xp.asarray(right)[:, None, :]
    top_left, top_right = img[n, t, lf].astype(xp.float32), img[n, t, rt].astype(xp.float32)
    bottom_left, bottom_right = img[n, bt, lf].astype(xp.float32), img[n, bt, rt].astype(xp.float32)
    upper = top_left + (top_right - top_left) * x_lerp
    lower = bottom_left + (bottom_right - bottom_left) * x_lerp
    with np.errstate(invalid="ignore"):
        out = upper + (lower - upper) * y_lerp
    return (xp.where(ok, out, fill),)
