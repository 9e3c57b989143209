"""Projective image transforms (ImageProjectiveTransformV2/V3): each output pixel samples the input image
at the point a 3x3 projective transform maps it to, bit-for-bit as TensorFlow's CPU kernel computes it.

A transform row [a0, a1, a2, b0, b1, b2, c0, c1] maps output (x, y) to input
((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k) with k = c0 x + c1 y + 1 (one row, or one per image).
Points outside the image are first mapped back into it by `fill_mode` (REFLECT, WRAP, NEAREST; CONSTANT
leaves them), then sampled by `interpolation` (NEAREST: the pixel at the point rounded half away from zero;
BILINEAR: its four neighbours); a pixel read outside the image reads `fill_value`, so in CONSTANT mode a
point within a pixel of the border blends the image with the fill value, as TensorFlow 2.21 does. Keras'
RandomRotation, RandomZoom, RandomTranslation and RandomShear lower to this op.

As in TensorFlow, coordinates and interpolation weights are float32 whatever the image dtype, and bilinear
interpolation is float32 arithmetic in TensorFlow's order, converted to the image dtype at the end
(truncating for integers); nearest interpolation copies input values. The whole output is computed at once:
coordinates per output pixel, then gathers from the image framed by a border of fill values.
"""

from __future__ import annotations

from typing import Any, Literal

import ml_dtypes
import numpy as np

from kernels.host import format_dims, host_vector
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["image_projective_transform_v2", "image_projective_transform_v3"]

_DTYPES = tuple(np.dtype(d) for d in (np.uint8, np.int32, np.int64, np.float16, np.float32, np.float64,
                                      ml_dtypes.bfloat16))

Interpolation = Literal["NEAREST", "BILINEAR"]
FillMode = Literal["REFLECT", "WRAP", "CONSTANT", "NEAREST"]


# --- checks ------------------------------------------------------------------------------------------------


def _checked_output_size(images: Any, transforms: Any, output_shape: Any) -> tuple[int, int]:
    """TensorFlow's checks, in its order (its messages append the shape without a space)."""
    if images.ndim != 4:
        raise ValueError("Input images must have rank 4")
    if np.dtype(images.dtype) not in _DTYPES:
        raise ValueError(f"ImageProjectiveTransform has no kernel for dtype {np.dtype(images.dtype).name}")
    if not (transforms.ndim == 2 and transforms.shape[0] in (images.shape[0], 1) and transforms.shape[1] == 8):
        raise ValueError("Input transform should be num_images x 8 or 1 x 8")
    if output_shape.ndim != 1:
        raise ValueError(f"output shape must be 1-dimensional{format_dims(output_shape.shape)}")
    if output_shape.shape[0] != 2:
        raise ValueError(f"output shape must have two elements{format_dims(output_shape.shape)}")
    height, width = host_vector(output_shape)
    if height <= 0 or width <= 0:
        raise ValueError("output dimensions must be positive")
    return int(height), int(width)


# --- coordinates -------------------------------------------------------------------------------------------


def _trunc_to_int(xp: Any, v: Any) -> Any:
    """C's float -> int64 conversion (toward zero; x86 gives INT64_MIN for NaN and out-of-range values)."""
    return v.astype(xp.int64)


def _reflect_below(xp: Any, c: Any, size: int) -> Any:
    # Reflect [abcd] to [dcba|abcd|dcba]; int64 products added to float32 coordinates, as in C.
    sz2 = 2 * size
    c = (sz2 * _trunc_to_int(xp, -c / xp.float32(sz2))).astype(xp.float32) + c
    return xp.where(c < xp.float32(-size), c + xp.float32(sz2), -c - xp.float32(1))


def _reflect_above(xp: Any, c: Any, size: int) -> Any:
    sz2 = 2 * size
    c = c - (sz2 * _trunc_to_int(xp, c / xp.float32(sz2))).astype(xp.float32)
    return xp.where(c >= xp.float32(size), xp.float32(sz2) - c - xp.float32(1), c)


def _wrap_below(xp: Any, c: Any, size: int) -> Any:
    # Wrap [abcd] to [abcd|abcd|abcd]; TensorFlow divides by size - 1 and shifts by multiples of size.
    return c + (size * (_trunc_to_int(xp, -c / xp.float32(size - 1)) + 1)).astype(xp.float32)


def _wrap_above(xp: Any, c: Any, size: int) -> Any:
    return c - (size * _trunc_to_int(xp, c / xp.float32(size - 1))).astype(xp.float32)


_OUTSIDE_MAPS = {"REFLECT": (_reflect_below, _reflect_above), "WRAP": (_wrap_below, _wrap_above)}


def _map_coordinate(xp: Any, c: Any, size: int, fill_mode: str) -> Any:
    """TensorFlow's MapCoordinate: float32 coordinates brought into [0, size - 1] (CONSTANT: unchanged)."""
    if fill_mode == "CONSTANT":
        return c
    if fill_mode in _OUTSIDE_MAPS:
        # Only the points outside move (NaN is neither below nor above); an image one pixel wide maps them to 0.
        below, above = c < 0, c > xp.float32(size - 1)
        c = c.copy()
        for outside, move in zip((below, above), _OUTSIDE_MAPS[fill_mode]):
            if bool(outside.any()):
                c[outside] = move(xp, c[outside], size) if size > 1 else xp.float32(0)
    # NOTE: clamped as Eigen's scalar_clamp_op does (NaN stays NaN); REFLECT and WRAP can end at size - 0.5.
    return xp.minimum(xp.maximum(c, xp.float32(0)), xp.float32(size - 1))


def _input_coordinates(xp: Any, transforms: Any, height: int, width: int) -> tuple[Any, Any, Any]:
    """Per transform row and output pixel: input x, input y (float32, [T, height, width]) and whether the
    projection is non-zero (TensorFlow fills pixels whose projection is 0)."""
    t = [transforms[:, i, None, None].astype(xp.float32) for i in range(8)]
    out_x = xp.arange(width, dtype=xp.float32)[None, None, :]
    out_y = xp.arange(height, dtype=xp.float32)[None, :, None]
    projection = t[6] * out_x + t[7] * out_y + xp.float32(1)
    in_x = (t[0] * out_x + t[1] * out_y + t[2]) / projection
    in_y = (t[3] * out_x + t[4] * out_y + t[5]) / projection
    return in_x, in_y, projection != 0


def _round_half_away(xp: Any, c: Any) -> Any:
    """std::round: to the nearest integer, halves away from zero (numpy's rint rounds them to even)."""
    magnitude = xp.abs(c)
    whole = xp.floor(magnitude)
    return xp.copysign(whole + (magnitude - whole >= xp.float32(0.5)), c)


# --- sampling ----------------------------------------------------------------------------------------------


# The image is padded with a border of fill values this wide: a neighbour index clamped into [-2, size]
# then reads fill exactly when the unclamped one is outside the image, and so does the neighbour after it.
_BORDER = 2


def _clamped_index(xp: Any, c: Any, size: int) -> Any:
    """Integer-valued float32 coordinates as int64 indices into the padded image (NaN: into the border)."""
    return xp.where(c >= -_BORDER, xp.minimum(c, xp.float32(size)), xp.float32(-_BORDER)).astype(xp.int64) + _BORDER


def _sample(xp: Any, images: Any, transforms: Any, height: int, width: int, fill_value: Any,
            interpolation: str, fill_mode: str) -> Any:
    batch, in_h, in_w, channels = images.shape
    in_x, in_y, defined = _input_coordinates(xp, transforms, height, width)
    x = _map_coordinate(xp, in_x, in_w, fill_mode)
    y = _map_coordinate(xp, in_y, in_h, fill_mode)

    padded_w = in_w + 2 * _BORDER
    padded = xp.empty((batch, in_h + 2 * _BORDER, padded_w, channels), dtype=images.dtype)
    padded[...] = fill_value
    padded[:, _BORDER:_BORDER + in_h, _BORDER:_BORDER + in_w] = images
    table = padded.reshape(-1, channels)
    image_offsets = (xp.arange(batch, dtype=xp.int64) * (padded.shape[1] * padded_w))[:, None]

    def corner_index(yy: Any, xx: Any) -> Any:
        index = _clamped_index(xp, yy, in_h) * padded_w + _clamped_index(xp, xx, in_w)
        return (index.reshape(index.shape[0], -1) + image_offsets).reshape(-1)

    def read(index: Any) -> Any:
        return xp.take(table, index, axis=0).reshape(batch, -1, channels)

    if interpolation == "NEAREST":
        out = read(corner_index(_round_half_away(xp, y), _round_half_away(xp, x)))
    else:
        y0, x0 = xp.floor(y), xp.floor(x)
        y1, x1 = y0 + xp.float32(1), x0 + xp.float32(1)

        def weight(w: Any) -> Any:
            return w.reshape(w.shape[0], -1, 1)

        def lerp(w0: Any, a: Any, w1: Any, b: Any) -> Any:
            # w0 * a + w1 * b in float32, each product rounded, then the sum; in place, into a's buffer.
            a = a.astype(xp.float32, copy=False)
            a *= w0
            a += w1 * b
            return a

        wx0, wx1, wy0, wy1 = weight(x1 - x), weight(x - x0), weight(y1 - y), weight(y - y0)
        i00 = corner_index(y0, x0)
        top = lerp(wx0, read(i00), wx1, read(i00 + 1).astype(xp.float32, copy=False))
        bottom = lerp(wx0, read(i00 + padded_w), wx1, read(i00 + padded_w + 1).astype(xp.float32, copy=False))
        out = lerp(wy0, top, wy1, bottom).astype(images.dtype, copy=False)
    if not bool(defined.all()):
        # A pixel whose projection is 0 (a point at infinity) is the fill value.
        out = xp.where(defined.reshape(defined.shape[0], -1, 1), out, fill_value)
    return out.reshape(batch, height, width, channels)


def _project(xp: Any, images: Any, transforms: Any, output_shape: Any, fill: float, interpolation: str,
             fill_mode: str, memory_limit: int | None) -> Any:
    height, width = _checked_output_size(images, transforms, output_shape)
    batch, _, _, channels = images.shape
    # The output shape is a value a client may send; the sampling's float32 coordinates and weights
    # take several times the output: count four float32 values per output value.
    check_elements(4 * batch * height * width * channels, np.float32, memory_limit,
                   "ImageProjectiveTransform output and its sampling arrays", (batch, height, width, channels))
    # NOTE: infinite and NaN coordinates (projections near 0) go through the same arithmetic as in C, and
    # float -> int conversions of them give what x86 gives: numpy's warnings about them are expected.
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        fill_value = xp.asarray(np.float32(fill)).astype(images.dtype)  # static_cast<T>(float)
        if batch == 0 or channels == 0:
            return xp.zeros((batch, height, width, channels), dtype=images.dtype)
        return _sample(xp, images, transforms, height, width, fill_value, interpolation, fill_mode)


@kernel("ImageProjectiveTransformV3")
def image_projective_transform_v3(xp, images, transforms, output_shape, fill_value, *,
                                  interpolation: Interpolation, fill_mode: FillMode = "CONSTANT",
                                  memory_limit: int | None = None):
    """`images` [N, H, W, C] sampled through `transforms` ([N or 1, 8], output -> input) into an
    `output_shape` = [new_height, new_width] image; points outside read the scalar `fill_value`."""
    if fill_value.ndim != 0:
        _checked_output_size(images, transforms, output_shape)
        raise ValueError(f"fill_value must be a scalar{format_dims(fill_value.shape)}")
    return (_project(xp, images, transforms, output_shape, float(fill_value), interpolation, fill_mode, memory_limit),)


@kernel("ImageProjectiveTransformV2")
def image_projective_transform_v2(xp, images, transforms, output_shape, *,
                                  interpolation: Interpolation, fill_mode: FillMode = "CONSTANT",
                                  memory_limit: int | None = None):
    """ImageProjectiveTransformV3 with a fill value of 0."""
    return (_project(xp, images, transforms, output_shape, 0.0, interpolation, fill_mode, memory_limit),)
