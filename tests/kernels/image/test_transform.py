"""ImageProjectiveTransformV2/V3: TensorFlow 2.21's values, a pixel-by-pixel transcription of its kernel, and
its errors. tests/fixtures/ops/image_projective_transform/ holds TensorFlow's outputs for more cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels.registry import AttrBindError

f32 = np.float32
MODES = ["REFLECT", "WRAP", "CONSTANT", "NEAREST"]


def map_coordinate(c: np.float32, size: int, mode: str) -> np.float32:
    """TensorFlow's MapCoordinate for one float32 coordinate (C's int64 <-> float conversions)."""
    if mode == "REFLECT":
        if c < 0:
            if size <= 1:
                c = f32(0)
            else:
                sz2 = 2 * size
                c = f32(sz2 * int(-c / f32(sz2))) + c
                c = c + f32(sz2) if c < -size else -c - f32(1)
        elif c > size - 1:
            if size <= 1:
                c = f32(0)
            else:
                sz2 = 2 * size
                c = c - f32(sz2 * int(c / f32(sz2)))
                if c >= size:
                    c = f32(sz2) - c - f32(1)
    elif mode == "WRAP":
        if c < 0:
            c = f32(0) if size <= 1 else c + f32(size * (int(-c / f32(size - 1)) + 1))
        elif c > size - 1:
            c = f32(0) if size <= 1 else c - f32(size * int(c / f32(size - 1)))
    if mode == "CONSTANT":
        return c
    return min(max(c, f32(0)), f32(size - 1))


def naive_transform(images, transforms, out_h, out_w, fill, interpolation, mode):
    """TensorFlow's ProjectiveGenerator, one output pixel at a time, in float32."""
    n, h, w, c = images.shape
    out = np.zeros((n, out_h, out_w, c), images.dtype)
    fill_value = np.array(f32(fill)).astype(images.dtype)

    def read(b, y, x):
        return images[b, y, x] if 0 <= y < h and 0 <= x < w else np.full(c, fill_value)

    for b in range(n):
        t = transforms[0 if len(transforms) == 1 else b].astype(f32)
        for oy in range(out_h):
            for ox in range(out_w):
                projection = t[6] * f32(ox) + t[7] * f32(oy) + f32(1)
                if projection == 0:
                    out[b, oy, ox] = fill_value
                    continue
                x = map_coordinate((t[0] * f32(ox) + t[1] * f32(oy) + t[2]) / projection, w, mode)
                y = map_coordinate((t[3] * f32(ox) + t[4] * f32(oy) + t[5]) / projection, h, mode)
                if interpolation == "NEAREST":  # std::round: halves away from zero
                    out[b, oy, ox] = read(b, int(math.copysign(math.floor(abs(y) + 0.5), y)),
                                          int(math.copysign(math.floor(abs(x) + 0.5), x)))
                    continue
                y0, x0 = f32(math.floor(y)), f32(math.floor(x))
                y1, x1 = y0 + f32(1), x0 + f32(1)
                top = (x1 - x) * read(b, int(y0), int(x0)).astype(f32) + (x - x0) * read(b, int(y0), int(x1)).astype(f32)
                bottom = (x1 - x) * read(b, int(y1), int(x0)).astype(f32) + (x - x0) * read(b, int(y1), int(x1)).astype(f32)
                out[b, oy, ox] = ((y1 - y) * top + (y - y0) * bottom).astype(images.dtype)
    return out


def rotation(angle, h, w):
    cos, sin = math.cos(angle), math.sin(angle)
    cx, cy = (w - 1) / 2, (h - 1) / 2
    return [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy, 0, 0]


def transform(run_kernel, images, transforms, shape, fill=0.0, interpolation="BILINEAR", fill_mode="CONSTANT"):
    (out,) = run_kernel("ImageProjectiveTransformV3", images, np.asarray(transforms, np.float32),
                        np.array(shape, np.int32), np.array(fill, np.float32),
                        interpolation=interpolation, fill_mode=fill_mode)
    return out


# --- TensorFlow's values -----------------------------------------------------------------------------------

RAMP = np.array([10, 20, 30, 40], np.float32).reshape(1, 1, 4, 1)
# A 1x4 ramp shifted by tx (input x = output x + tx), fill 100, CONSTANT: TensorFlow 2.21's outputs. A point
# within a pixel of the border blends the image with the fill value (bilinear) or reads the nearest pixel.
TF_SHIFTED = {
    ("BILINEAR", -0.5): [55, 15, 25, 35],
    ("BILINEAR", -0.3): [37, 17, 27, 37],
    ("BILINEAR", 0.7): [17, 27, 37, 82.00001],
    ("NEAREST", -0.5): [100, 20, 30, 40],  # round(-0.5) is -1: outside
    ("NEAREST", -0.3): [10, 20, 30, 40],
    ("NEAREST", 0.5): [20, 30, 40, 100],
}


@pytest.mark.parametrize("interpolation,tx", TF_SHIFTED)
def test_matches_tensorflow_at_the_border(run_kernel, interpolation, tx):
    out = transform(run_kernel, RAMP, [[1, 0, tx, 0, 1, 0, 0, 0]], [1, 4], 100.0, interpolation)
    np.testing.assert_array_equal(out.reshape(-1), np.array(TF_SHIFTED[(interpolation, tx)], np.float32))


# --- the rules, transcribed --------------------------------------------------------------------------------

TRANSFORMS = {
    "rotation": lambda h, w: [rotation(0.7, h, w), rotation(-2.2, h, w)],
    "projective": lambda h, w: [[1.3, 0.4, -3.5, -0.2, 0.9, 2.5, 0.03, -0.02]],
    "far_outside": lambda h, w: [[2.5, 0.3, -17, -0.2, 1.7, 19, 0, 0], [-1, 0, 4.5, 0, -1, 3.5, 0, 0]],
    "through_zero": lambda h, w: [[1, 0, 0, 0, 1, 0, -0.5, 0.25]],
}


@pytest.mark.parametrize("interpolation", ["NEAREST", "BILINEAR"])
@pytest.mark.parametrize("fill_mode", MODES)
@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("hw", [(5, 7), (1, 4), (6, 1)])
def test_matches_tensorflows_rules_exactly(run_kernel, interpolation, fill_mode, name, hw):
    images = np.random.default_rng(0).standard_normal((2, *hw, 3)).astype(np.float32)
    transforms = np.array(TRANSFORMS[name](*hw), np.float32)
    out = transform(run_kernel, images, transforms, [6, 8], 0.5, interpolation, fill_mode)
    want = naive_transform(images, transforms, 6, 8, 0.5, interpolation, fill_mode)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.float16, np.float64])
@pytest.mark.parametrize("interpolation", ["NEAREST", "BILINEAR"])
def test_other_dtypes_interpolate_in_float32(run_kernel, dtype, interpolation):
    images = np.random.default_rng(1).integers(0, 256, (2, 5, 6, 2)).astype(dtype)
    transforms = np.array([rotation(0.4, 5, 6), rotation(1.9, 5, 6)], np.float32)
    out = transform(run_kernel, images, transforms, [7, 4], 7.0, interpolation, "REFLECT")
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, naive_transform(images, transforms, 7, 4, 7.0, interpolation, "REFLECT"))


def test_identity_keeps_the_image_and_v2_fills_with_zero(run_kernel):
    images = np.random.default_rng(2).standard_normal((3, 4, 5, 2)).astype(np.float32)
    identity = [[1, 0, 0, 0, 1, 0, 0, 0]]
    for interpolation in ("NEAREST", "BILINEAR"):
        np.testing.assert_array_equal(transform(run_kernel, images, identity, [4, 5], 9.0, interpolation), images)
    (shifted,) = run_kernel("ImageProjectiveTransformV2", images, np.array([[1, 0, 10, 0, 1, 0, 0, 0]], np.float32),
                            np.array([4, 5], np.int32), interpolation="NEAREST")
    assert not shifted.any()


def test_non_square_output_and_one_transform_for_every_image(run_kernel):
    images = np.random.default_rng(3).standard_normal((3, 8, 6, 2)).astype(np.float32)
    scale = [[0.6, 0.1, -0.75, 0.0, 1.4, 0.5, 0, 0]]
    out = transform(run_kernel, images, scale, [5, 12], -2.0)
    assert out.shape == (3, 5, 12, 2)
    np.testing.assert_array_equal(out, naive_transform(images, np.array(scale, np.float32), 5, 12, -2.0,
                                                       "BILINEAR", "CONSTANT"))


# --- errors, in TensorFlow's words -------------------------------------------------------------------------

IMAGES = np.zeros((2, 4, 5, 1), np.float32)
IDENTITY = np.array([[1, 0, 0, 0, 1, 0, 0, 0]] * 2, np.float32)

ERRORS = [
    ("rank_3_images", (IMAGES[0], IDENTITY, [3, 3], 0.0), "Input images must have rank 4"),
    ("transform_of_7", (IMAGES, IDENTITY[:, :7], [3, 3], 0.0), "Input transform should be num_images x 8 or 1 x 8"),
    ("three_transforms_for_two_images", (IMAGES, np.zeros((3, 8), np.float32), [3, 3], 0.0),
     "Input transform should be num_images x 8 or 1 x 8"),
    ("transform_vector", (IMAGES, IDENTITY[0], [3, 3], 0.0), "Input transform should be num_images x 8 or 1 x 8"),
    ("output_shape_matrix", (IMAGES, IDENTITY, [[3, 3]], 0.0), r"output shape must be 1-dimensional\[1,2\]"),
    ("output_shape_of_3", (IMAGES, IDENTITY, [3, 3, 1], 0.0), r"output shape must have two elements\[3\]"),
    ("output_shape_zero", (IMAGES, IDENTITY, [0, 3], 0.0), "output dimensions must be positive"),
    ("fill_value_vector", (IMAGES, IDENTITY, [3, 3], [0.0, 1.0]), r"fill_value must be a scalar\[2\]"),
]


@pytest.mark.parametrize("inputs,message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(run_kernel, inputs, message):
    images, transforms, shape, fill = inputs
    with pytest.raises(ValueError, match=message):
        run_kernel("ImageProjectiveTransformV3", images, np.asarray(transforms, np.float32),
                   np.array(shape, np.int32), np.array(fill, np.float32), interpolation="BILINEAR")


@pytest.mark.parametrize("attrs,message", [
    ({"interpolation": "BILINEAR", "fill_mode": "MIRROR"}, "attr 'fill_mode' is 'MIRROR'"),
    ({"interpolation": "BICUBIC"}, "attr 'interpolation' is 'BICUBIC'"),
    ({}, "attr 'interpolation' is required"),
])
def test_unknown_modes_are_refused_when_the_kernel_is_bound(run_kernel, attrs, message):
    with pytest.raises(AttrBindError, match=message):
        run_kernel("ImageProjectiveTransformV3", IMAGES, IDENTITY, np.array([4, 5], np.int32), np.float32(0), **attrs)
