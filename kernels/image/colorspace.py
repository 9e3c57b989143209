"""Colour-space kernels over the last axis of RGB images: RGBToHSV and HSVToRGB (tf.image.rgb_to_hsv and
back), and the adjustments tf.image and Keras' colour augmentation lower to: AdjustContrastv2 (scale each
channel's deviation from its per-image mean), AdjustSaturation and AdjustHue.

Each follows its TensorFlow CPU kernel's float arithmetic step for step, and they differ from one another
as TensorFlow's do: RGBToHSV divides by the range as (1 / range) * (1 / 6), AdjustSaturation as
1 / (6 * range) with the hue offsets added in double; AdjustHue works on a hue in [0, 6) and the min/max
of the pixel, never forming saturation. The contrast mean is TensorFlow's pairwise fold of each image.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel

__all__ = ["rgb_to_hsv", "hsv_to_rgb", "adjust_contrast_v2", "adjust_saturation", "adjust_hue"]

_F = np.float32


def _check_rgb(images: Any, min_rank: int) -> None:
    if images.ndim < min_rank:
        if min_rank == 1:
            raise ValueError(f"input must be at least 1D{format_dims(images.shape)}")
        raise ValueError(f"input must be at least 3-D, got shape{format_dims(images.shape)}")
    channels = images.shape[-1]
    if channels != 3:
        if min_rank == 1:
            raise ValueError(f"input must have 3 channels but input only has {channels} channels.")
        raise ValueError(f"input must have 3 channels but instead has {channels} channels.")


def _scalar(value: Any, what: str) -> Any:
    """The 0-d `value` as a host scalar of its dtype (a cupy array would not convert implicitly)."""
    if value.ndim != 0:
        raise ValueError(f"{what} must be scalar: {format_dims(value.shape)}")
    return value.dtype.type(value.item())


@kernel("RGBToHSV")
def rgb_to_hsv(xp, images):
    """[..., 3] RGB in [0, 1] to hue, saturation, value, in the input's float dtype."""
    _check_rgb(images, 1)
    t = images.dtype.type
    r, g, b = images[..., 0], images[..., 1], images[..., 2]
    v = xp.maximum(xp.maximum(r, g), b)
    spread = v - xp.minimum(xp.minimum(r, g), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = xp.where(v > 0, spread / v, t(0))
        norm = (t(1) / spread) * (t(1) / t(6))
        h = xp.where(r == v, norm * (g - b), xp.where(g == v, norm * (b - r) + t(2) / t(6), norm * (r - g) + t(4) / t(6)))
    h = xp.where(spread > 0, h, t(0))
    h = xp.where(h < 0, h + t(1), h)
    return (xp.stack([h, s, v], axis=-1).astype(images.dtype, copy=False),)


@kernel("HSVToRGB")
def hsv_to_rgb(xp, images):
    """[..., 3] hue, saturation, value to RGB, in the input's float dtype."""
    _check_rgb(images, 1)
    t = images.dtype.type
    h, s, v = images[..., 0], images[..., 1], images[..., 2]
    dh = h * t(6)

    def ramp(delta: Any) -> Any:
        return xp.minimum(xp.maximum(delta, t(0)), t(1))

    dr = ramp(xp.abs(dh - t(3)) - t(1))
    dg = ramp(-xp.abs(dh - t(2)) + t(2))
    db = ramp(-xp.abs(dh - t(4)) + t(2))
    one_s = -s + t(1)
    out = [(one_s + s * d) * v for d in (dr, dg, db)]
    return (xp.stack(out, axis=-1).astype(images.dtype, copy=False),)


def _fold_sum(xp: Any, planes: Any) -> Any:
    """Sum over axis 1 of [batch, pixels, channels] as TensorFlow's contrast kernel folds it: repeatedly add
    the back half onto the front half (the middle row staying put when the count is odd)."""
    remaining = planes.shape[1]
    acc = planes
    while remaining > 1:
        right = remaining // 2
        left = remaining - right
        front = acc[:, :right] + acc[:, left:left + right]
        acc = xp.concatenate([front, acc[:, right:left]], axis=1)
        remaining = left
    return acc[:, 0]


@kernel("AdjustContrastv2")
def adjust_contrast_v2(xp, images, contrast_factor):
    """mean + factor * (x - mean), the mean per image and channel over [..., height, width, channels]."""
    if images.ndim < 3:
        raise ValueError(f"input must be at least 3-D, got shape{format_dims(images.shape)}")
    factor = _F(_scalar(contrast_factor, "contrast_factor"))
    if images.size == 0:
        return (xp.zeros(images.shape, dtype=images.dtype),)
    h, w, c = images.shape[-3:]
    planes = images.astype(xp.float32, copy=False).reshape(-1, h * w, c)
    mean = _fold_sum(xp, planes) * (_F(1.0) / _F(h * w))
    out = mean[:, None, :] + factor * (planes - mean[:, None, :])
    return (out.reshape(images.shape).astype(images.dtype, copy=False),)


@kernel("AdjustSaturation")
def adjust_saturation(xp, images, scale):
    """Scale each pixel's HSV saturation by `scale` (clipped to [0, 1]) and convert back."""
    _check_rgb(images, 3)
    factor = _F(_scalar(scale, "scale"))
    x = images.astype(xp.float32, copy=False)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    vv = xp.maximum(r, xp.maximum(g, b))
    spread = vv - xp.minimum(r, xp.minimum(g, b))
    with np.errstate(divide="ignore", invalid="ignore"):
        s = xp.where(vv > 0, spread / vv, _F(0))
        norm = _F(1.0) / (_F(6.0) * spread)
        # NOTE: TensorFlow adds 2/6 and 4/6 as doubles, then rounds the hue to float.
        hh = xp.where(r == vv, norm * (g - b),
                      xp.where(g == vv, ((norm * (b - r)).astype(xp.float64) + 2.0 / 6.0).astype(xp.float32),
                               ((norm * (r - g)).astype(xp.float64) + 4.0 / 6.0).astype(xp.float32)))
    hh = xp.where(spread <= 0, _F(0), hh)
    hh = xp.where(hh < 0, hh + _F(1), hh)
    s = xp.minimum(_F(1.0), xp.maximum(_F(0.0), s * factor))
    c = s * vv
    m = vv - c
    dh = hh * _F(6)
    category = _truncate(xp, dh)
    fmodu = _wrap(xp, dh, low_inclusive=False, period=_F(2.0))
    x_ = c * (_F(1) - xp.abs(fmodu - _F(1)))
    zero = xp.zeros_like(c)
    table = {0: (c, x_, zero), 1: (x_, c, zero), 2: (zero, c, x_), 3: (zero, x_, c), 4: (x_, zero, c), 5: (c, zero, x_)}
    out = []
    for ch in range(3):
        value = zero
        for cat, parts in table.items():
            value = xp.where(category == cat, parts[ch], value)
        out.append(value + m)
    return (xp.stack(out, axis=-1).astype(images.dtype, copy=False),)


def _truncate(xp: Any, v: Any) -> Any:
    """static_cast<int>: toward zero; NaN and out-of-range values to a category no case takes."""
    finite = xp.isfinite(v) & (xp.abs(v) < 2**31)
    return xp.where(finite, xp.trunc(xp.where(finite, v, 0)), -(2**31)).astype(xp.int64)


def _wrap(xp: Any, v: Any, *, low_inclusive: bool, period: Any, max_steps: int = 64) -> Any:
    """TensorFlow's `while (v < 0) v += p; while (v >= p) v -= p` (for `low_inclusive=False` the first loop
    is `v <= 0`), stepping as it does. After `max_steps` steps a value still outside (a hue delta of
    thousands of turns, where TensorFlow would loop for a very long time or forever) is wrapped by fmod."""
    below = (lambda a: a < 0) if low_inclusive else (lambda a: a <= 0)
    for _ in range(max_steps):
        step = below(v)
        if not bool(step.any()):
            break
        v = xp.where(step, v + period, v)
    for _ in range(max_steps):
        step = v >= period
        if not bool(step.any()):
            break
        v = xp.where(step, v - period, v)
    outside = below(v) | (v >= period)
    if bool(outside.any()):
        v = xp.where(outside & xp.isfinite(v), xp.mod(v, period).astype(v.dtype), v)
    return v


@kernel("AdjustHue")
def adjust_hue(xp, images, delta):
    """Rotate each pixel's hue by `delta` turns, keeping its min and max channel."""
    _check_rgb(images, 3)
    d = _F(_scalar(delta, "delta"))
    x = images.astype(xp.float32, copy=False)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    # Which channel is max, mid and min, with TensorFlow's tie-breaking, and the hue category 0..5.
    r_lt_g = r < g
    cat = xp.where(r_lt_g, xp.where(b < r, 1, xp.where(b > g, 3, 2)), xp.where(b < g, 0, xp.where(b > r, 4, 5)))
    v_max = xp.where(r_lt_g, xp.where(b > g, b, g), xp.where(b > r, b, r))
    v_min = xp.where(r_lt_g, xp.where(b < r, b, r), xp.where(b < g, b, g))
    v_mid = xp.where(cat == 0, g, xp.where(cat == 1, r, xp.where(cat == 2, b, xp.where(cat == 3, g,
                                                                                       xp.where(cat == 4, r, b)))))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (v_mid - v_min) / (v_max - v_min)
    h = cat.astype(xp.float32) + xp.where(cat % 2 == 0, ratio, _F(1) - ratio)
    h = xp.where(v_max == v_min, _F(0), h)
    h = h + d * _F(6)
    h = _wrap(xp, h, low_inclusive=True, period=_F(6))
    category = _truncate(xp, h)
    frac = h - category.astype(xp.float32)
    frac = xp.where(category % 2 == 0, frac, _F(1) - frac)
    mid = v_min + frac * (v_max - v_min)
    table = {0: (v_max, mid, v_min), 1: (mid, v_max, v_min), 2: (v_min, v_max, mid),
             3: (v_min, mid, v_max), 4: (mid, v_min, v_max)}
    out = []
    for ch in range(3):
        value = (v_max, v_min, mid)[ch]  # case 5 and default
        for c, parts in table.items():
            value = xp.where(category == c, parts[ch], value)
        out.append(value)
    return (xp.stack(out, axis=-1).astype(images.dtype, copy=False),)
