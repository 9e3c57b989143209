"""FusedBatchNorm (V1-V3) in inference and training modes, and LRN, against numpy references."""

from __future__ import annotations

import numpy as np
import pytest

EPS = 0.001


def _params(channels, seed):
    rng = np.random.default_rng(seed)
    scale, offset, mean = (rng.standard_normal(channels).astype(np.float32) for _ in range(3))
    variance = rng.random(channels).astype(np.float32) + 0.1
    return scale, offset, mean, variance


def _reference(x, scale, offset, mean, variance, data_format):
    shape = (-1,) if data_format == "NHWC" else (-1, 1, 1)
    x64 = x.astype(np.float64)
    return scale.reshape(shape) * (x64 - mean.reshape(shape)) / np.sqrt(variance.reshape(shape) + EPS) + offset.reshape(shape)


@pytest.mark.parametrize("op,outputs", [("FusedBatchNorm", 5), ("FusedBatchNormV2", 5), ("FusedBatchNormV3", 6)])
@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_inference_normalises_with_given_statistics(run_kernel, op, outputs, data_format):
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5), dtype=np.float32)
    channels = 5 if data_format == "NHWC" else 3
    scale, offset, mean, variance = _params(channels, 1)
    outs = run_kernel(op, x, scale, offset, mean, variance, epsilon=EPS, is_training=False, data_format=data_format)
    assert len(outs) == outputs
    assert outs[0].dtype == np.float32
    np.testing.assert_allclose(outs[0], _reference(x, scale, offset, mean, variance, data_format), rtol=1e-5, atol=1e-5)
    for got, want in zip(outs[1:5], (mean, variance, mean, variance)):
        np.testing.assert_array_equal(got, want)
    if outputs == 6:
        assert outs[5].shape == (0,)


@pytest.mark.parametrize("op", ["FusedBatchNorm", "FusedBatchNormV3"])
def test_training_uses_batch_statistics(run_kernel, op):
    # TensorFlow normalises with the biased batch variance but outputs the unbiased one.
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5), dtype=np.float32)
    scale, offset, _, _ = _params(5, 3)
    empty = np.zeros(0, np.float32)
    outs = run_kernel(op, x, scale, offset, empty, empty, epsilon=EPS, is_training=True)
    batch_mean, batch_var = x.mean(axis=(0, 1, 2), dtype=np.float64), x.var(axis=(0, 1, 2), dtype=np.float64)
    n = 2 * 3 * 4
    np.testing.assert_allclose(outs[0], _reference(x, scale, offset, batch_mean, batch_var, "NHWC"), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1], batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[2], batch_var * n / (n - 1), rtol=1e-5)
    np.testing.assert_allclose(outs[3], batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[4], batch_var, rtol=1e-5)


def test_training_with_exponential_average_updates_running_statistics(run_kernel):
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 5), dtype=np.float32)
    scale, offset, mean, variance = _params(5, 5)
    outs = run_kernel(
        "FusedBatchNormV3", x, scale, offset, mean, variance, epsilon=EPS, is_training=True, exponential_avg_factor=0.3
    )
    batch_mean, batch_var = x.mean(axis=(0, 1, 2), dtype=np.float64), x.var(axis=(0, 1, 2), dtype=np.float64)
    np.testing.assert_allclose(outs[1], 0.7 * mean + 0.3 * batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[2], 0.7 * variance + 0.3 * batch_var * 24 / 23, rtol=1e-5, atol=1e-6)


def test_half_input_keeps_half_output(run_kernel):
    x = np.random.default_rng(6).standard_normal((1, 2, 2, 3)).astype(np.float16)
    scale, offset, mean, variance = _params(3, 7)
    (y, *_) = run_kernel("FusedBatchNormV3", x, scale, offset, mean, variance, epsilon=EPS, is_training=False)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, _reference(x, scale, offset, mean, variance, "NHWC"), rtol=2e-3, atol=2e-3)


def _naive_lrn(x, radius, bias, alpha, beta):
    y = np.empty_like(x, dtype=np.float64)
    depth = x.shape[-1]
    for d in range(depth):
        window = x[..., max(0, d - radius) : min(depth, d + radius + 1)].astype(np.float64)
        y[..., d] = x[..., d] / (bias + alpha * (window**2).sum(axis=-1)) ** beta
    return y


@pytest.mark.parametrize("radius,bias,alpha,beta", [(5, 1.0, 1.0, 0.5), (2, 2.0, 1e-4, 0.75), (0, 1.0, 0.5, 1.0)])
def test_lrn_matches_naive_loops(run_kernel, radius, bias, alpha, beta):
    x = np.random.default_rng(8).standard_normal((2, 3, 3, 7), dtype=np.float32)
    (y,) = run_kernel("LRN", x, depth_radius=radius, bias=bias, alpha=alpha, beta=beta)
    np.testing.assert_allclose(y, _naive_lrn(x, radius, bias, alpha, beta), rtol=1e-5, atol=1e-6)
