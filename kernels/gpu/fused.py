"""_FusedConv2D, _FusedDepthwiseConv2dNative and _FusedMatMul on the GPU: the product from the GPU conv
or cuBLAS, then one ElementwiseKernel that applies the whole epilogue in place (bias or batch-norm
scaling, the residual addend, the activation), rather than one launch per step.

Each step rounds to the data's dtype as the shared body's separate ufuncs do; the activation is computed
in `F` (float, or double for float64 data) with the same formulas as the shared kernels (Sigmoid without
overflow, LeakyRelu's alpha rounded to the dtype first). Attrs, checks and the accepted fused_ops lists
are the shared body's; dtypes other than float16/32/64 take the shared body.
"""

from __future__ import annotations

import functools
from typing import Any

import cupy

from kernels.gpu.conv import conv2d_nhwc, depthwise_conv2d_nhwc
from kernels.gpu.source import FLOAT_DTYPES, compute_dtype, compute_type, elementwise
from kernels.nn import fused as shared
from kernels.nn.window import DataFormat, Padding, from_nhwc, to_nhwc, window_from_attrs
from kernels.registry import kernel

__all__ = ["ACTIVATIONS", "apply_epilogue"]

# Each activation as a C expression of `v` (type F; `alpha` is LeakyRelu's, already in the dtype).
# NOTE: comparisons are written so that NaN falls through to `v`: max(NaN, 0) is NaN in TensorFlow too.
ACTIVATIONS = {
    None: "v",
    "Relu": "(v < (F)0) ? (F)0 : v",
    "Relu6": "(v < (F)0) ? (F)0 : ((v > (F)6) ? (F)6 : v)",
    "Elu": "(v < (F)0) ? (exp(v) - (F)1) : v",
    "LeakyRelu": "(v > (F)0) ? v : (F)(T)(v * alpha)",
    "Tanh": "tanh(v)",
    "Sigmoid": "tg_sigmoid(v)",
    "GeluExact": "(F)0.5 * v * ((F)1 + erf(v * (F)0.70710678118654752440))",
    "GeluApproximate": "(F)0.5 * v * ((F)1 + tanh((F)0.79788456080286535588 * (v + (F)0.044715 * v * v * v)))",
}

_PREAMBLE = """
// 1 / (1 + exp(-v)) without overflow: e = exp(-|v|), 1/(1+e) for v >= 0, else e/(1+e).
__device__ F tg_sigmoid(F v) {
    const F e = exp(-fabs(v));
    const F r = (F)1 / ((F)1 + e);
    return v >= (F)0 ? r : e * r;
}
"""

# The head's step on y's element i (channel i % chans), each rounded to the dtype as the shared body does.
_HEADS = {
    "bias": ("raw F_ bias", "F v = (F)(T)((F)y + bias[i % chans]);"),
    "bias_add": ("raw F_ bias, T addend", "F v = (F)(T)((F)(T)((F)y + bias[i % chans]) + (F)addend);"),
    "batch_norm": (
        "raw F_ scale, raw F_ shift",
        "F v = (F)(T)((F)(T)((F)y * scale[i % chans]) + shift[i % chans]);",
    ),
}


@functools.cache
def _epilogue_kernel(head: str, activation: str | None, f: str) -> Any:
    operands, step = _HEADS[head]
    in_params = operands.replace("F_", "float64" if f == "double" else "float32") + ", int64 chans, float64 alpha_in"
    body = (
        f"const F alpha = (F)(T)(float)alpha_in;\n{step}\ny = (T)({ACTIVATIONS[activation]});\n"
    )
    name = f"epilogue_{head}_{(activation or 'none').lower()}"
    return elementwise(name, in_params, "T y", body, f, _PREAMBLE)


def apply_epilogue(y: Any, head: str, operands: tuple, activation: str | None, alpha: float) -> Any:
    """Finish the contiguous channels-last `y` in place: head step on `operands`, then `activation`.

    operands: (bias,) for "bias", (bias, addend) for "bias_add" (addend shaped like y), (scale, shift)
    for "batch_norm"; per-channel vectors are cast to the compute dtype here."""
    if y.size == 0:
        return y
    compute = compute_dtype(y.dtype)
    # Per-channel vectors in the compute dtype; the residual addend (shaped like y) in y's dtype.
    args = [cupy.ascontiguousarray(a, dtype=y.dtype if a.shape == y.shape else compute) for a in operands]
    _epilogue_kernel(head, activation, compute_type(y.dtype))(*args, y.shape[-1], float(alpha), y)
    return y


def _batch_norm_operands(args: tuple, epsilon: float) -> tuple[Any, Any]:
    """(k, shift) of an inference batch norm, computed as the shared body computes them."""
    scale, offset, mean, variance = args
    compute = cupy.result_type(scale.dtype, cupy.float32)
    k = scale.astype(compute, copy=False) / cupy.sqrt(variance.astype(compute, copy=False) + compute.type(epsilon))
    return k, offset.astype(compute, copy=False) - mean.astype(compute, copy=False) * k


def _activation_name(fused: tuple[str, ...], head: tuple[str, ...]) -> str | None:
    return fused[-1] if len(fused) > len(head) else None


@kernel("_FusedConv2D", devices=("gpu",), override=True)
def fused_conv2d(
    xp,
    x,
    filter,
    *args,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    fused_ops: shared.ConvFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    use_cudnn_on_gpu: bool = True,
):
    """Conv2D (im2col + GEMM), then the fused steps in one kernel."""
    fused = tuple(fused_ops)
    head, activation = shared.split_fused_ops("_FusedConv2D", fused, len(args))
    if cupy.result_type(x.dtype, filter.dtype) not in FLOAT_DTYPES:
        return shared.fused_conv2d(
            xp, x, filter, *args, strides=strides, padding=padding, explicit_paddings=explicit_paddings,
            data_format=data_format, dilations=dilations, fused_ops=fused_ops, num_args=num_args,
            epsilon=epsilon, leakyrelu_alpha=leakyrelu_alpha, use_cudnn_on_gpu=use_cudnn_on_gpu,
        )
    name = _activation_name(fused, head)
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    channels = filter.shape[3]
    per_channel = args[:1] if head == ("BiasAdd", "Add") else args
    shared.check_channels("_FusedConv2D", per_channel, channels)
    y = conv2d_nhwc(xs, filter, win)
    if head == ("FusedBatchNorm",):
        return (from_nhwc(xp, apply_epilogue(y, "batch_norm", _batch_norm_operands(args, epsilon), name, leakyrelu_alpha), data_format),)
    if head == ("BiasAdd",):
        return (from_nhwc(xp, apply_epilogue(y, "bias", args, name, leakyrelu_alpha), data_format),)
    addend = to_nhwc(args[1], data_format)
    if tuple(addend.shape) == y.shape:
        return (from_nhwc(xp, apply_epilogue(y, "bias_add", (args[0], addend), name, leakyrelu_alpha), data_format),)
    # A broadcasting addend: as the unfused graph does, add it after the bias, then the activation.
    out = from_nhwc(xp, apply_epilogue(y, "bias", args[:1], None, leakyrelu_alpha), data_format) + args[1]
    if activation is not None:
        activation(xp, out, leakyrelu_alpha)
    return (out,)


@kernel("_FusedDepthwiseConv2dNative", devices=("gpu",), override=True)
def fused_depthwise_conv2d(
    xp,
    x,
    filter,
    *args,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    fused_ops: shared.DepthwiseFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
):
    """DepthwiseConv2dNative (one thread per output), then BiasAdd and the activation in one kernel."""
    fused = tuple(fused_ops)
    head, _ = shared.split_fused_ops("_FusedDepthwiseConv2dNative", fused, len(args))
    if cupy.result_type(x.dtype, filter.dtype) not in FLOAT_DTYPES:
        return shared.fused_depthwise_conv2d(
            xp, x, filter, *args, strides=strides, padding=padding, explicit_paddings=explicit_paddings,
            data_format=data_format, dilations=dilations, fused_ops=fused_ops, num_args=num_args,
            epsilon=epsilon, leakyrelu_alpha=leakyrelu_alpha,
        )
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    shared.check_channels("_FusedDepthwiseConv2dNative", args, filter.shape[2] * filter.shape[3])
    y = depthwise_conv2d_nhwc(xs, filter, win)
    return (from_nhwc(xp, apply_epilogue(y, "bias", args, _activation_name(fused, head), leakyrelu_alpha), data_format),)


@kernel("_FusedMatMul", devices=("gpu",), override=True)
def fused_mat_mul(
    xp,
    a,
    b,
    *args,
    transpose_a: bool = False,
    transpose_b: bool = False,
    fused_ops: shared.MatMulFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
):
    """cuBLAS MatMul, then BiasAdd and the activation in one kernel, in place on the product."""
    fused = tuple(fused_ops)
    head, _ = shared.split_fused_ops("_FusedMatMul", fused, len(args))
    if cupy.result_type(a.dtype, b.dtype) not in FLOAT_DTYPES:
        return shared.fused_mat_mul(
            xp, a, b, *args, transpose_a=transpose_a, transpose_b=transpose_b, fused_ops=fused_ops,
            num_args=num_args, epsilon=epsilon, leakyrelu_alpha=leakyrelu_alpha,
        )
    y = cupy.matmul(a.T if transpose_a else a, b.T if transpose_b else b)
    shared.check_channels("_FusedMatMul", args, y.shape[1])
    return (apply_epilogue(y, "bias", args, _activation_name(fused, head), leakyrelu_alpha),)
