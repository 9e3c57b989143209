"""Resizing and colour kernels: identities a user relies on, and TensorFlow's errors. Values were checked
against TensorFlow 2.21 bit for bit; tests/fixtures/ops/images/ holds its outputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import f32


def x(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, shape).astype(np.float32)


@pytest.mark.parametrize("op", ["ResizeBicubic", "ResizeArea"])
def test_resize_to_the_same_size_is_the_identity(run_kernel, op):
    images = x(2, 5, 7, 3)
    (out,) = run_kernel(op, images, np.array([5, 7], np.int32))
    np.testing.assert_allclose(out, images, rtol=1e-6, atol=1e-6)


def test_resize_area_of_a_constant_is_the_constant(run_kernel):
    (out,) = run_kernel("ResizeArea", np.full((1, 9, 6, 2), 3.5, np.float32), np.array([4, 5], np.int32))
    np.testing.assert_allclose(out, 3.5, rtol=1e-6)


@pytest.mark.parametrize("kernel_type", ["lanczos3", "lanczos5", "gaussian", "box", "triangle", "keyscubic",
                                         "mitchellcubic"])
def test_scale_and_translate_preserves_a_constant(run_kernel, kernel_type):
    (out,) = run_kernel("ScaleAndTranslate", np.full((1, 8, 8, 1), 2.0, np.float32), np.array([3, 13], np.int32),
                        f32([3 / 8, 13 / 8]), f32([0, 0]), kernel_type=kernel_type)
    np.testing.assert_allclose(out, 2.0, rtol=1e-5)


def test_crop_and_resize_of_the_whole_image_is_the_image(run_kernel):
    images = x(2, 4, 6, 3)
    (out,) = run_kernel("CropAndResize", images, f32([[0, 0, 1, 1]]), np.array([1], np.int32),
                        np.array([4, 6], np.int32))
    np.testing.assert_allclose(out[0], images[1], rtol=1e-6)


def test_hsv_round_trip(run_kernel):
    rgb = x(3, 4, 3)
    (hsv,) = run_kernel("RGBToHSV", rgb)
    (back,) = run_kernel("HSVToRGB", hsv)
    np.testing.assert_allclose(back, rgb, atol=1e-6)


def test_adjustments_with_neutral_factors_change_nothing(run_kernel):
    rgb = x(2, 3, 4, 3)
    np.testing.assert_allclose(run_kernel("AdjustContrastv2", rgb, np.float32(1))[0], rgb, atol=1e-6)
    np.testing.assert_allclose(run_kernel("AdjustSaturation", rgb, np.float32(1))[0], rgb, atol=1e-6)
    np.testing.assert_allclose(run_kernel("AdjustHue", rgb, np.float32(0))[0], rgb, atol=1e-6)
    # a whole turn of hue, and a huge one (TensorFlow would loop; here it is wrapped)
    np.testing.assert_allclose(run_kernel("AdjustHue", rgb, np.float32(1))[0], rgb, atol=1e-5)
    assert np.isfinite(run_kernel("AdjustHue", rgb, np.float32(1e9))[0]).all()


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("ResizeBicubic", [x(1, 2, 2, 1), np.array([3, 3], np.int32)], {"align_corners": True, "half_pixel_centers": True},
     "If half_pixel_centers is True, align_corners must be False."),
    ("ResizeArea", [x(2, 2, 1), np.array([3, 3], np.int32)], {}, "input must be 4-dimensional"),
    ("ResizeBicubic", [x(1, 2, 2, 1), np.array([0, 3], np.int32)], {}, "output dimensions must be positive"),
    ("ScaleAndTranslate", [x(1, 2, 2, 1), np.array([3, 3], np.int32), f32([1, 1]), f32([0, 0])],
     {"kernel_type": "cubic"}, "Unrecognized kernel type: cubic"),
    ("ScaleAndTranslate", [x(1, 2, 2, 1), np.array([3, 3], np.int32), f32([0, 1]), f32([0, 0])], {},
     "Scale must be greater than zero."),
    ("CropAndResize", [x(1, 2, 2, 1), f32([[0, 0, 1, 1]]), np.array([1], np.int32), np.array([2, 2], np.int32)], {},
     r"box_index has values outside \[0, batch_size\)"),
    ("CropAndResize", [x(1, 2, 2, 1), f32([[0, 0, np.nan, 1]]), np.array([0], np.int32), np.array([2, 2], np.int32)],
     {}, "Boxes contains at least one element that is not finite"),
    ("RGBToHSV", [x(2, 4)], {}, "input must have 3 channels but input only has 4 channels."),
    ("AdjustHue", [x(2, 3), np.float32(0.1)], {}, r"input must be at least 3-D, got shape\[2,3\]"),
    ("AdjustSaturation", [x(1, 2, 3), f32([0.5])], {}, r"scale must be scalar: \[1\]"),
    ("AdjustContrastv2", [x(1, 2, 3), f32([0.5])], {}, r"contrast_factor must be scalar: \[1\]"),
])
def test_errors_are_tensorflows(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
