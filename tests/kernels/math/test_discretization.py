"""Bucketize: std::upper_bound over float32 boundaries. Expected values were read off TensorFlow 2.21;
tests/fixtures/ops/preprocessing/bucketize/ holds TensorFlow's outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32

nan, inf = float("nan"), float("inf")

CASES = [
    pytest.param(f32([-inf, -1, 0, 0.5, 1, 2, 9, inf, nan]), (0.0, 1.0, 2.0), i32(0, 0, 1, 1, 2, 3, 3, 3, 3),
                 id="ties-go-up-nan-last"),
    pytest.param(f32([-0.0, 0.0]), (0.0,), i32(1, 1), id="negative-zero-equals-zero"),
    pytest.param(f32([[1, 5], [-1, 3]]), (0.0, 3.0), np.array([[1, 2], [0, 2]], np.int32), id="matrix"),
    pytest.param(np.array([0.1, float(np.float32(0.1)), 0.2]), (0.1,), i32(0, 1, 1),
                 id="double-against-float32-boundary"),
    pytest.param(np.array([-3, 0, 1, 2, 3], np.int32), (0.5, 1.0, 2.0), i32(0, 0, 2, 3, 3), id="int32"),
    pytest.param(np.array([2**40, 16777217], np.int64), (16777216.0, 2.0**40), i32(2, 1), id="int64-via-float32"),
    pytest.param(f32([1, 2]), (), i32(0, 0), id="no-boundaries"),
    pytest.param(f32([0, 1, 2]), (1.0, 1.0, 2.0), i32(0, 2, 3), id="repeated-boundary"),
    pytest.param(f32([0, 1, 2]), (1.0, nan), i32(2, 2, 2), id="nan-boundary"),
    pytest.param(f32([-1, 0, 0.5, 1, 2, 3, 4, nan]), (0.0, nan, 1.0, 2.0, nan, 3.0), i32(2, 2, 2, 3, 5, 6, 6, 6),
                 id="nan-boundaries-binary-search"),
    pytest.param(np.float32(1.5), (1.0,), np.int32(1), id="scalar"),
    pytest.param(np.zeros((2, 0), np.float32), (1.0,), np.zeros((2, 0), np.int32), id="empty"),
]


@pytest.mark.parametrize("values, boundaries, expected", CASES)
def test_bucketize(run_kernel, values, boundaries, expected):
    assert_outputs(run_kernel("Bucketize", values, boundaries=boundaries), [expected])


def test_bucketize_agrees_with_upper_bound_on_random_data(run_kernel):
    rng = np.random.default_rng(0)
    boundaries = np.sort(rng.standard_normal(50).astype(np.float32))
    values = np.concatenate([rng.standard_normal(1000).astype(np.float32), boundaries])
    (out,) = run_kernel("Bucketize", values, boundaries=tuple(boundaries.tolist()))
    expected = [int(np.sum(boundaries <= v)) for v in values]  # the count of boundaries <= v
    assert out.tolist() == expected


def test_bucketize_unsorted_boundaries(run_kernel):
    with pytest.raises(ValueError, match="Expected sorted boundaries"):
        run_kernel("Bucketize", f32([1, 2]), boundaries=(2.0, 1.0))
