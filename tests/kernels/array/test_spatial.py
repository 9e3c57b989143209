"""DepthToSpace, SpaceToDepth, SpaceToBatchND and BatchToSpaceND against index-by-index references."""

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
