"""Normalisation ops: fused batch normalisation (FusedBatchNorm, V2, V3), local response normalisation,
`_TensorgateLayerNorm`, the layer normalisation the optimizer (engine/passes/fuse_layer_norm.py) writes in
place of the Mean/SquaredDifference/Rsqrt/Mul/AddV2 chain Keras freezes LayerNormalization to, and
`_TensorgateRmsNorm`, the RMS normalisation of decoder and T5 blocks (engine/passes/fuse_rms_norm.py).

Batch normalisation scales each channel: y = scale * (x - mean) / sqrt(variance + epsilon) + offset. In
inference the statistics come in as inputs; with `is_training` they are the batch's own, as TensorFlow
computes them when a graph was frozen in training mode.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels.jit import use_compiled
from kernels.nn import compiled_rows, transformer_rows
from kernels.registry import kernel

__all__ = ["fused_batch_norm", "fused_batch_norm_v3", "layer_norm", "lrn", "rms_norm"]

DataFormat = Literal["NHWC", "NCHW"]


def _channel_shape(x: Any, data_format: str) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel vector against x."""
    if data_format == "NHWC":
        return (x.shape[-1],)
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _batch_norm(xp, x, scale, offset, mean, variance, epsilon, exponential_avg_factor, data_format, is_training):
    """y and the four statistics outputs shared by every FusedBatchNorm version."""
    # Half-precision inputs are normalised in float32 (the dtype of scale), as TensorFlow does.
    compute = xp.result_type(scale.dtype, xp.float32)
    channels = _channel_shape(x, data_format)
    axes = tuple(a for a in range(x.ndim) if a != (x.ndim - 1 if data_format == "NHWC" else 1))
    xc = x.astype(compute, copy=False)
    if is_training:
        batch_mean = xc.mean(axis=axes, dtype=compute)
        batch_var = xc.var(axis=axes, dtype=compute)
        count = x.size // batch_mean.size if batch_mean.size else 0
        # NOTE: y uses the biased batch variance; the variance output is the unbiased (n / (n-1)) one.
        unbiased = batch_var * (count / max(count - 1, 1))
        if exponential_avg_factor != 1.0 and mean.size:
            f = exponential_avg_factor
            running_mean = (1 - f) * mean.astype(compute) + f * batch_mean
            running_var = (1 - f) * variance.astype(compute) + f * unbiased
        else:
            running_mean, running_var = batch_mean, unbiased
        use_mean, use_var = batch_mean, batch_var
        stats = (running_mean, running_var, batch_mean, batch_var)
    else:
        use_mean, use_var = mean.astype(compute, copy=False), variance.astype(compute, copy=False)
        stats = (mean, variance, mean, variance)
    # One multiply and one add over x: y = x * k + (offset - mean * k), k = scale / sqrt(var + eps).
    k = scale.astype(compute, copy=False) / xp.sqrt(use_var + compute.type(epsilon))
    shift = offset.astype(compute, copy=False) - use_mean * k
    y = xp.multiply(xc, k.reshape(channels))
    xp.add(y, shift.reshape(channels), out=y)
    return (y.astype(x.dtype, copy=False),) + stats


@kernel("FusedBatchNorm", "FusedBatchNormV2", outputs=5)
def fused_batch_norm(
    xp,
    x,
    scale,
    offset,
    mean,
    variance,
    *,
    epsilon: float = 0.0001,
    exponential_avg_factor: float = 1.0,
    data_format: DataFormat = "NHWC",
    is_training: bool = True,
):
    """y, batch_mean, batch_variance, reserve_space_1, reserve_space_2."""
    return _batch_norm(
        xp, x, scale, offset, mean, variance, epsilon, exponential_avg_factor, data_format, is_training
    )


@kernel("FusedBatchNormV3", outputs=6)
def fused_batch_norm_v3(
    xp,
    x,
    scale,
    offset,
    mean,
    variance,
    *,
    epsilon: float = 0.0001,
    exponential_avg_factor: float = 1.0,
    data_format: DataFormat = "NHWC",
    is_training: bool = True,
):
    """As FusedBatchNormV2, plus reserve_space_3 (empty on CPU)."""
    outs = _batch_norm(
        xp, x, scale, offset, mean, variance, epsilon, exponential_avg_factor, data_format, is_training
    )
    return outs + (xp.zeros((0,), dtype=outs[1].dtype),)


@kernel("LRN")
def lrn(
    xp,
    input,
    *,
    depth_radius: int = 5,
    bias: float = 1.0,
    alpha: float = 1.0,
    beta: float = 0.5,
):
    """Local response normalisation over the last axis: x / (bias + alpha * sum of squares within
    depth_radius channels) ** beta."""
    sq = xp.square(input)
    depth = input.shape[-1]
    window = xp.zeros_like(sq)
    # One shifted add per channel offset: depth_radius is small, and this keeps float32 sums exact to
    # the same order as TensorFlow's (no cumulative-sum cancellation).
    for d in range(-depth_radius, depth_radius + 1):
        lo, hi = max(0, -d), min(depth, depth - d)
        if hi > lo:
            window[..., lo:hi] += sq[..., lo + d : hi + d]
    scale = xp.asarray(bias, dtype=input.dtype) + xp.asarray(alpha, dtype=input.dtype) * window
    return (input / scale ** xp.asarray(beta, dtype=input.dtype),)


def _channel_vector(param: Any, x: Any) -> Any | None:
    """param as a [C] vector when it broadcasts against x [..., C] like one (shape [C], [1, ..., C] or a
    single value) without growing x; None otherwise."""
    channels = x.shape[-1]
    if param.ndim > x.ndim or param.size not in (1, channels) or (param.ndim and param.shape[-1] != param.size):
        return None
    return np.ascontiguousarray(np.broadcast_to(param.reshape(-1), (channels,)))


@kernel("_TensorgateLayerNorm")
def layer_norm(xp, x, gamma, beta, *, epsilon: float, compiled: bool = False):
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta, the statistics over the last axis.

    gamma and beta broadcast against x exactly as in the chain this replaces (Keras reshapes them to
    [1, ..., C]). The variance is the mean of squared deviations from the mean, as Keras computes it:
    a one-pass sum of squares minus the squared mean would cancel catastrophically in float32 when the
    mean is large against the spread. The deviations are computed once, into the output buffer, and
    their sum of squares is a row-wise dot product that makes no temporary.

    This numpy code is the twin of kernels/nn/compiled_rows.py's one pass per row, which runs where gamma
    and beta are per-channel vectors.
    """
    if use_compiled(xp, compiled, x.dtype, gamma.dtype, beta.dtype) and x.ndim and x.size:
        g, b = _channel_vector(gamma, x), _channel_vector(beta, x)
        if g is not None and b is not None:
            return (compiled_rows.layer_norm(x, g, b, epsilon),)
    mean = x.mean(axis=-1, keepdims=True)
    y = xp.subtract(x, mean)
    flat = y.reshape(-1, y.shape[-1])
    ssq = xp.einsum("ij,ij->i", flat, flat).reshape(mean.shape)
    ssq *= ssq.dtype.type(1 / max(x.shape[-1], 1))
    ssq += ssq.dtype.type(epsilon)
    # rsqrt as TensorFlow computes it, 1 / sqrt (not sqrt of the reciprocal).
    xp.sqrt(ssq, out=ssq)
    xp.divide(y, ssq, out=y)
    if np.broadcast_shapes(y.shape, gamma.shape, beta.shape) == y.shape:
        xp.multiply(y, gamma, out=y)
        xp.add(y, beta, out=y)
    else:
        y = y * gamma + beta
    return (y.astype(x.dtype, copy=False),)


@kernel("_TensorgateRmsNorm")
def rms_norm(xp, x, gamma, *, epsilon: float, compiled: bool = False):
    """x * (1 / sqrt(mean(x^2) + epsilon)) * gamma, the mean over the last axis (RMSNorm: Llama's, Gemma's
    with gamma = 1 + scale, T5's). gamma broadcasts against x as in the chain this replaces.

    The sum of squares is a row-wise dot product (no temporary the size of x); 1 / sqrt is computed as a
    division, as TensorFlow computes Rsqrt. This numpy code is the twin of kernels/nn/transformer_rows.py's
    one pass per row, which runs where gamma is a per-channel vector.
    """
    if x.ndim == 0:
        raise ValueError("_TensorgateRmsNorm: x is a scalar; it normalises over a last axis")
    if use_compiled(xp, compiled, x.dtype, gamma.dtype) and x.size:
        g = _channel_vector(gamma, x)
        if g is not None:
            return (transformer_rows.rms_norm(x, g, epsilon),)
    flat = x.reshape(-1, x.shape[-1])
    ssq = xp.einsum("ij,ij->i", flat, flat).reshape(tuple(x.shape[:-1]) + (1,))
    with np.errstate(invalid="ignore", divide="ignore"):  # an empty last axis: 0 / 0, NaN as in TensorFlow
        ssq /= ssq.dtype.type(x.shape[-1])
    ssq += ssq.dtype.type(epsilon)
    xp.sqrt(ssq, out=ssq)
    xp.divide(ssq.dtype.type(1), ssq, out=ssq)
    y = xp.multiply(x, ssq)
    if np.broadcast_shapes(y.shape, gamma.shape) == y.shape:
        xp.multiply(y, gamma, out=y, casting="unsafe")
    else:
        y = y * gamma
    return (y.astype(x.dtype, copy=False),)
