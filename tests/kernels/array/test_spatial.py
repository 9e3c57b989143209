"""DepthToSpace, SpaceToDepth, SpaceToBatch(ND), BatchToSpace(ND) and the patch extractors against index-by-index
references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest


def naive_depth_to_space(x, b):
    n, h, w, c = x.shape
    cc = c // (b * b)
    y = np.zeros((n, h * b, w * b, cc), x.dtype)
    for r, col, i, j in itertools.product(range(h), range(w), range(b), range(b)):
        y[:, r * b + i, col * b + j] = x[:, r, col, (i * b + j) * cc : (i * b + j + 1) * cc]
    return y


def naive_space_to_batch(x, block, pads):
    m = len(block)
    x = np.pad(x, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)] * (x.ndim - 1 - m))
    batch = x.shape[0]
    out_spatial = [s // b for s, b in zip(x.shape[1 : 1 + m], block)]
    y = np.zeros((batch * int(np.prod(block)), *out_spatial, *x.shape[1 + m :]), x.dtype)
    for offsets in itertools.product(*[range(b) for b in block]):
        k = int(np.ravel_multi_index(offsets, block)) if block else 0
        index = (slice(None),) + tuple(slice(o, None, b) for o, b in zip(offsets, block))
        y[k * batch : (k + 1) * batch] = x[index]
    return y


@pytest.mark.parametrize("block,shape", [(2, (2, 3, 4, 8)), (3, (1, 2, 2, 18)), (2, (1, 1, 1, 4))])
def test_depth_to_space_and_back(run_kernel, block, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (y,) = run_kernel("DepthToSpace", x, block_size=block)
    np.testing.assert_array_equal(y, naive_depth_to_space(x, block))
    (z,) = run_kernel("SpaceToDepth", y, block_size=block)
    np.testing.assert_array_equal(z, x)


def test_nchw_is_nhwc_transposed(run_kernel):
    x = np.random.default_rng(1).standard_normal((2, 3, 4, 8)).astype(np.float32)
    (y,) = run_kernel("DepthToSpace", x.transpose(0, 3, 1, 2), block_size=2, data_format="NCHW")
    np.testing.assert_array_equal(y.transpose(0, 2, 3, 1), naive_depth_to_space(x, 2))
    (z,) = run_kernel("SpaceToDepth", y, block_size=2, data_format="NCHW")
    np.testing.assert_array_equal(z, x.transpose(0, 3, 1, 2))


def test_depth_to_space_matches_tensorflow_values(run_kernel):
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    (y,) = run_kernel("DepthToSpace", x, block_size=2)  # TensorFlow 2.21
    np.testing.assert_array_equal(y.reshape(2, 4), [[0, 1, 4, 5], [2, 3, 6, 7]])


CASES = [
    ((2, 4, 6, 3), [2, 2], [[0, 0], [0, 0]]),
    ((1, 5, 7, 2), [2, 3], [[1, 0], [0, 2]]),
    ((3, 5, 2), [2], [[1, 2]]),
    ((2, 4, 4, 2, 3), [2, 2, 1], [[0, 0], [2, 2], [0, 1]]),
    ((1, 3, 3, 1), [2, 2], [[1, 0], [1, 0]]),
]


@pytest.mark.parametrize("shape,block,pads", CASES)
def test_space_to_batch_and_back(run_kernel, shape, block, pads):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    block_shape, paddings = np.array(block, np.int32), np.array(pads, np.int32)
    (y,) = run_kernel("SpaceToBatchND", x, block_shape, paddings)
    np.testing.assert_array_equal(y, naive_space_to_batch(x, block, pads))
    (z,) = run_kernel("BatchToSpaceND", y, block_shape, paddings)  # cropping the padding restores x
    np.testing.assert_array_equal(z, x)


def test_space_to_batch_matches_tensorflow_values(run_kernel):
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 2, 2, 1)
    (y,) = run_kernel("SpaceToBatchND", x, np.array([2, 2], np.int32), np.zeros((2, 2), np.int32))
    np.testing.assert_array_equal(y.reshape(-1), [1, 2, 3, 4])  # TensorFlow 2.21: shape [4, 1, 1, 1]
    assert y.shape == (4, 1, 1, 1)


# ---- ExtractImagePatches / ExtractVolumePatches, SpaceToBatch / BatchToSpace (v1) ----


def naive_patches(x, ksizes, strides, rates, padding):
    """Window by window, zero outside the (SAME-padded) input; out_size and the padding before as
    TensorFlow's GetWindowedOutputSize computes them."""
    spatial = x.shape[1:-1]
    sizes, befores = [], []
    for n, k, s, r in zip(spatial, ksizes, strides, rates):
        eff = (k - 1) * r + 1
        if padding == "VALID":
            sizes.append(max((n - eff + s) // s, 0))
            befores.append(0)
        else:
            out = -(-n // s)
            sizes.append(out)
            befores.append(max((out - 1) * s + eff - n, 0) // 2)
    out = np.zeros((x.shape[0], *sizes, int(np.prod(ksizes)) * x.shape[-1]), x.dtype)
    for position in itertools.product(*(range(o) for o in sizes)):
        pieces = []
        for offsets in itertools.product(*(range(k) for k in ksizes)):
            coords = [p * s + o * r - b for p, s, o, r, b in zip(position, strides, offsets, rates, befores)]
            inside = all(0 <= c < n for c, n in zip(coords, spatial))
            pieces.append(x[(slice(None), *coords)] if inside else np.zeros((x.shape[0], x.shape[-1]), x.dtype))
        out[(slice(None), *position)] = np.concatenate(pieces, axis=-1)
    return out


PATCHES = [
    ((1, 3, 2, 1), (1, 2, 1, 1), (1, 1, 2, 1), "SAME"),
    ((1, 2, 2, 1), (1, 3, 2, 1), (1, 1, 1, 1), "VALID"),
    ((1, 3, 3, 1), (1, 2, 2, 1), (1, 3, 1, 1), "SAME"),
    ((1, 6, 2, 1), (1, 1, 1, 1), (1, 1, 1, 1), "VALID"),  # taller than the image: no rows
    ((1, 1, 1, 1), (1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
]


@pytest.mark.parametrize("ksizes, strides, rates, padding", PATCHES)
def test_extract_image_patches(run_kernel, ksizes, strides, rates, padding):
    x = np.random.default_rng(3).standard_normal((2, 5, 7, 3)).astype(np.float32)
    (y,) = run_kernel("ExtractImagePatches", x, ksizes=ksizes, strides=strides, rates=rates, padding=padding)
    np.testing.assert_array_equal(y, naive_patches(x, ksizes[1:3], strides[1:3], rates[1:3], padding))


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_extract_volume_patches(run_kernel, padding):
    x = np.random.default_rng(4).standard_normal((1, 3, 5, 4, 2)).astype(np.float32)
    (y,) = run_kernel("ExtractVolumePatches", x, ksizes=(1, 2, 3, 2, 1), strides=(1, 1, 2, 2, 1), padding=padding)
    np.testing.assert_array_equal(y, naive_patches(x, (2, 3, 2), (1, 2, 2), (1, 1, 1), padding))


def test_extract_image_patches_matches_tensorflow_values(run_kernel):
    x = np.arange(16, dtype=np.int32).reshape(1, 4, 4, 1)
    (y,) = run_kernel("ExtractImagePatches", x, ksizes=(1, 2, 2, 1), strides=(1, 2, 2, 1), rates=(1, 1, 1, 1),
                      padding="VALID")
    np.testing.assert_array_equal(y.reshape(4, 4), [[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]])


@pytest.mark.parametrize(
    "op, x, attrs, message",
    [
        ("ExtractImagePatches", np.zeros((1, 4, 4, 1), np.float32),
         {"ksizes": (2, 2, 2, 1), "strides": (1, 1, 1, 1), "rates": (1, 1, 1, 1), "padding": "VALID"},
         "Only support ksizes across space"),
        ("ExtractImagePatches", np.zeros((1, 5, 4, 1), np.float32),
         {"ksizes": (1, 5, 2, 1), "strides": (1, 2, 1, 1), "rates": (1, 2, 1, 1), "padding": "VALID"},
         "Computed output size would be negative: -1"),
        ("ExtractImagePatches", np.zeros((4, 4, 1), np.float32),
         {"ksizes": (1, 2, 2, 1), "strides": (1, 1, 1, 1), "rates": (1, 1, 1, 1), "padding": "VALID"},
         "4-dimensional"),
        ("ExtractVolumePatches", np.zeros((1, 2, 2, 2, 1), np.float32),
         {"ksizes": (1, 1, 1, 1), "strides": (1, 1, 1, 1, 1), "padding": "VALID"}, "Length for attr 'ksizes'"),
        ("SpaceToBatch", np.zeros((2, 4, 6, 3), np.float32), {"block_size": 2}, "not divisible"),
        ("SpaceToBatch", np.zeros((4, 6, 3), np.float32), {"block_size": 2}, "Input rank should be: 4"),
    ],
)
def test_patch_and_v1_errors(run_kernel, op, x, attrs, message):
    extra = [np.array([[0, 0], [1, 0]], np.int32)] if op == "SpaceToBatch" else []
    with pytest.raises(ValueError, match=message):
        run_kernel(op, x, *extra, **attrs)


def test_v1_space_to_batch_is_the_nd_op_with_a_square_block(run_kernel):
    x = np.random.default_rng(5).standard_normal((2, 4, 6, 3)).astype(np.float32)
    pads = np.array([[0, 2], [1, 1]], np.int32)
    (y,) = run_kernel("SpaceToBatch", x, pads, block_size=2)
    np.testing.assert_array_equal(y, naive_space_to_batch(x, [2, 2], pads.tolist()))
    (z,) = run_kernel("BatchToSpace", y, pads.astype(np.int64), block_size=2)
    np.testing.assert_array_equal(z, x)


@pytest.mark.parametrize(
    "crops, block, message",
    [([[0, -1], [0, 0]], 2, "Crops must be non-negative"), ([[3, 2], [0, 0]], 2, r"cropped_shape\[0\]=-1"),
     ([[0, 0]], 2, r"crops should have shape \[2, 2\]"), ([[0, 0], [0, 0]], 1, "at least minimum 2")],
)
def test_batch_to_space_v1_errors(run_kernel, crops, block, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("BatchToSpace", np.zeros((8, 2, 3, 1), np.float32), np.array(crops, np.int32), block_size=block)
