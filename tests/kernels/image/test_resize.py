"""ResizeBilinear and ResizeNearestNeighbor: exact TensorFlow values and a loop transcription of its rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

MODES = [(False, False), (True, False), (False, True)]  # (align_corners, half_pixel_centers)


def _scale(in_size, out_size, align_corners):
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def naive_bilinear(x, out_h, out_w, align_corners, half_pixel):
    """TensorFlow's CPU kernel, transcribed pixel by pixel in float32."""
    sh, sw = _scale(x.shape[1], out_h, align_corners), _scale(x.shape[2], out_w, align_corners)
    f = np.float32
    y = np.zeros((x.shape[0], out_h, out_w, x.shape[3]), np.float32)
    for r in range(out_h):
        in_y = (f(r) + f(0.5)) * sh - f(0.5) if half_pixel else f(r) * sh
        top, bottom = max(math.floor(in_y), 0), min(math.ceil(in_y), x.shape[1] - 1)
        y_lerp = f(in_y - f(math.floor(in_y)))
        for c in range(out_w):
            in_x = (f(c) + f(0.5)) * sw - f(0.5) if half_pixel else f(c) * sw
            left, right = max(math.floor(in_x), 0), min(math.ceil(in_x), x.shape[2] - 1)
            x_lerp = f(in_x - f(math.floor(in_x)))
            tl, tr = x[:, top, left].astype(f), x[:, top, right].astype(f)
            bl, br = x[:, bottom, left].astype(f), x[:, bottom, right].astype(f)
            t = tl + (tr - tl) * x_lerp
            b = bl + (br - bl) * x_lerp
            y[:, r, c] = t + (b - t) * y_lerp
    return y


def naive_nearest(x, out_h, out_w, align_corners, half_pixel):
    def index(o, in_size, scale):
        src = (np.float32(o) + np.float32(0.5)) * scale if half_pixel else np.float32(o) * scale
        i = math.floor(src)
        if align_corners:  # roundf: halves away from zero (src >= 0)
            i += float(src) - i >= 0.5
        i = min(i, in_size - 1)
        return max(i, 0) if half_pixel else i

    sh, sw = _scale(x.shape[1], out_h, align_corners), _scale(x.shape[2], out_w, align_corners)
    y = np.zeros((x.shape[0], out_h, out_w, x.shape[3]), x.dtype)
    for r in range(out_h):
        for c in range(out_w):
            y[:, r, c] = x[:, index(r, x.shape[1], sh), index(c, x.shape[2], sw)]
    return y


SIZES = [((4, 5), (8, 10)), ((5, 7), (3, 4)), ((3, 3), (7, 5)), ((6, 6), (6, 6)), ((1, 4), (3, 1)), ((7, 9), (1, 1)), ((13, 11), (4, 6))]


@pytest.mark.parametrize("align_corners,half_pixel_centers", MODES)
@pytest.mark.parametrize("in_hw,out_hw", SIZES)
def test_bilinear_matches_tensorflow_rules_exactly(run_kernel, in_hw, out_hw, align_corners, half_pixel_centers):
    x = np.random.default_rng(0).standard_normal((2, *in_hw, 3), dtype=np.float32)
    size = np.array(out_hw, np.int32)
    (y,) = run_kernel("ResizeBilinear", x, size, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    np.testing.assert_array_equal(y, naive_bilinear(x, *out_hw, align_corners, half_pixel_centers))


@pytest.mark.parametrize("align_corners,half_pixel_centers", MODES)
@pytest.mark.parametrize("in_hw,out_hw", SIZES)
def test_nearest_matches_tensorflow_rules_exactly(run_kernel, in_hw, out_hw, align_corners, half_pixel_centers):
    x = np.random.default_rng(1).integers(0, 255, (2, *in_hw, 3)).astype(np.uint8)
    size = np.array(out_hw, np.int32)
    (y,) = run_kernel("ResizeNearestNeighbor", x, size, align_corners=align_corners, half_pixel_centers=half_pixel_centers)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, naive_nearest(x, *out_hw, align_corners, half_pixel_centers))


# Outputs of TensorFlow 2.21, hard-coded: a 2x2 image to 3x3, a 3x3 ramp to 4x5.
TF_BILINEAR = {
    (False, False): [0, 6.6666669845581055, 10, 13.333333969116211, 20, 23.33333396911621, 20, 26.666667938232422, 30],
    (True, False): [0, 5, 10, 10, 15, 20, 20, 25, 30],
    (False, True): [0, 5, 10, 10, 15, 20, 20, 25, 30],
}
TF_NEAREST = {
    (False, False): [0, 0, 1, 1, 2, 0, 0, 1, 1, 2, 3, 3, 4, 4, 5, 6, 6, 7, 7, 8],
    (True, False): [0, 1, 1, 2, 2, 3, 4, 4, 5, 5, 3, 4, 4, 5, 5, 6, 7, 7, 8, 8],
    (False, True): [0, 0, 1, 2, 2, 3, 3, 4, 5, 5, 3, 3, 4, 5, 5, 6, 6, 7, 8, 8],
}


@pytest.mark.parametrize("mode", MODES)
def test_matches_tensorflow_values(run_kernel, mode):
    img = np.array([0, 10, 20, 30], np.float32).reshape(1, 2, 2, 1)
    (y,) = run_kernel("ResizeBilinear", img, np.array([3, 3], np.int32), align_corners=mode[0], half_pixel_centers=mode[1])
    np.testing.assert_array_equal(y.reshape(-1), np.array(TF_BILINEAR[mode], np.float32))
    ramp = np.arange(9, dtype=np.int32).reshape(1, 3, 3, 1)
    (z,) = run_kernel("ResizeNearestNeighbor", ramp, np.array([4, 5], np.int32), align_corners=mode[0], half_pixel_centers=mode[1])
    np.testing.assert_array_equal(z.reshape(-1), TF_NEAREST[mode])


def test_bilinear_of_integers_is_float32(run_kernel):
    x = np.arange(12, dtype=np.uint8).reshape(1, 2, 3, 2)
    (y,) = run_kernel("ResizeBilinear", x, np.array([4, 6], np.int32), half_pixel_centers=True)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, naive_bilinear(x, 4, 6, False, True))
