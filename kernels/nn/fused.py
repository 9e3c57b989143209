"""Fused kernels: a convolution or matmul whose bias, batch-norm scaling, residual add and activation run
as an epilogue on each output chunk while it is in cache, rather than as separate passes over the tensor.

The ops and attrs are TensorFlow's own (`_FusedConv2D`, `_FusedDepthwiseConv2dNative`, `_FusedMatMul`, as
Grappler's remapper writes them): `fused_ops` lists the fused steps in order, and the extra inputs
(`num_args` of them) are their operands: a bias (plus a residual addend for "Add"), or the scale, offset,
mean and variance of "FusedBatchNorm". Each step computes exactly what its unfused op computes.

`_TensorgateDense` (our own op; the optimizer writes it for Keras dense and attention projections, which
freeze to BatchMatMulV2 or Einsum against a weight matrix) is `_FusedMatMul` for data of any rank: the
last axis of x contracts with the first of the weights. It runs as one 2-D matmul over all rows, which
is about twice as fast as numpy's batched matmul (one GEMM per batch item) or Einsum at BERT's sizes.
On CPU, the matmuls' bias and activation (GELU, the ReLU family) run as one compiled pass over each tile
of the product's rows (kernels/nn/compiled_rows.py); the numpy steps here are its twin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal

from kernels import blas
from kernels.jit import use_compiled
from kernels.nn import activations, compiled_rows, conv_epilogue, gelu, swish
from kernels.nn.conv import conv2d_nhwc, depthwise_conv2d_nhwc
from kernels.nn.depthwise import depthwise_conv2d_compiled
from kernels.nn.window import DataFormat, Epilogue, Padding, from_nhwc, to_nhwc, window_from_attrs
from kernels.registry import kernel

__all__ = [
    "CONV_FUSED_OPS",
    "channel_epilogue",
    "check_channels",
    "dense",
    "fused_conv2d",
    "fused_depthwise_conv2d",
    "fused_mat_mul",
    "split_fused_ops",
]

# An activation applied in place to a block: fn(xp, block, leakyrelu_alpha).
Activation = Callable[[Any, Any, float], None]

# Sigmoid, Swish and HardSwish (kernels.nn.swish: fuse_swish's ops, and the squeeze-and-excite gates) are
# ours: TensorFlow's CPU kernels take only the ReLU family (and, for MatMul, Tanh, Sigmoid and GELU).
_ACTIVATIONS: dict[str, Activation] = {
    "Relu": lambda xp, y, alpha: activations.relu_into(xp, y, y),
    "Relu6": lambda xp, y, alpha: activations.relu6_into(xp, y, y),
    "Elu": lambda xp, y, alpha: activations.elu_into(xp, y, y),
    "LeakyRelu": lambda xp, y, alpha: activations.leaky_relu_into(xp, y, y, alpha),
    "Sigmoid": lambda xp, y, alpha: swish.sigmoid_into(xp, y),
    "Swish": lambda xp, y, alpha: swish.swish_into(xp, y),
    "HardSwish": lambda xp, y, alpha: swish.hard_swish_into(xp, y),
}


def _gelu_exact(xp: Any, y: Any, alpha: float) -> None:
    gelu.gelu_exact_into(xp, y)


def _gelu_approximate(xp: Any, y: Any, alpha: float) -> None:
    gelu.gelu_approximate_into(xp, y)


_MATMUL_ACTIVATIONS: dict[str, Activation] = {
    **_ACTIVATIONS,
    "Tanh": lambda xp, y, alpha: xp.tanh(y, out=y),
    "GeluExact": _gelu_exact,
    "GeluApproximate": _gelu_approximate,
}



# Activations whose conv epilogue is one compiled pass (kernels/nn/compiled_rows.py) rather than numpy's
# several; the ReLU family is one numpy pass per step over a block in cache, as fast, and stays numpy.
_ROW_EPILOGUES = frozenset({"Sigmoid", "Swish", "HardSwish"})


def _sequences(heads: Sequence[tuple[str, ...]], acts: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Every fused_ops list an op accepts: a head (what the extra inputs are for), then at most one activation."""
    return tuple(head + tail for head in heads for tail in ((), *((act,) for act in acts)))


# The extra inputs each head takes.
_HEAD_ARGS = {("BiasAdd",): 1, ("BiasAdd", "Add"): 2, ("FusedBatchNorm",): 4}
CONV_FUSED_OPS = _sequences([("BiasAdd",), ("BiasAdd", "Add"), ("FusedBatchNorm",)], list(_ACTIVATIONS))
_DEPTHWISE_FUSED_OPS = _sequences([("BiasAdd",)], list(_ACTIVATIONS))
_MATMUL_FUSED_OPS = _sequences([("BiasAdd",)], list(_MATMUL_ACTIVATIONS))
# Literal of tuples: binding a node rejects any other fused_ops list, naming it, before anything runs.
ConvFusedOps = Literal[CONV_FUSED_OPS]
DepthwiseFusedOps = Literal[_DEPTHWISE_FUSED_OPS]
MatMulFusedOps = Literal[_MATMUL_FUSED_OPS]

# What each fused op accepts: its fused_ops sequences and its activations.
_SPECS = {
    "_FusedConv2D": (CONV_FUSED_OPS, _ACTIVATIONS),
    "_FusedDepthwiseConv2dNative": (_DEPTHWISE_FUSED_OPS, _ACTIVATIONS),
    "_FusedMatMul": (_MATMUL_FUSED_OPS, _MATMUL_ACTIVATIONS),
}


@functools.lru_cache(maxsize=512)
def split_fused_ops(op: str, fused: tuple[str, ...], num_args: int) -> tuple[tuple[str, ...], Activation | None]:
    """(head, activation or None) of a fused_ops list; ValueError naming it if `op` does not support it, or
    if the node has the wrong number of extra inputs for it. Memoized: it runs on every call of a kernel
    whose matmul may take only microseconds."""
    supported, acts = _SPECS[op]
    if fused not in supported:
        raise ValueError(f"{op} does not support fused_ops {list(fused)}; supported: {[list(f) for f in supported]}")
    activation = acts.get(fused[-1])
    head = fused[:-1] if activation is not None else fused
    if num_args != _HEAD_ARGS[head]:
        raise ValueError(f"{op} with fused_ops {list(fused)} takes {_HEAD_ARGS[head]} extra inputs, got {num_args}")
    return head, activation


def channel_epilogue(
    xp: Any,
    head: tuple[str, ...],
    args: Sequence[Any],
    activation: Activation | None,
    epsilon: float,
    leakyrelu_alpha: float,
    addend: Any | None = None,
    name: str | None = None,
    compiled: bool = False,
) -> Epilogue:
    """The in-place epilogue for an NHWC output block: head's per-channel step, residual add, activation.
    With `compiled` (a plan's CPU float32 kernels) and one of _ROW_EPILOGUES as `name`, the activation is
    kernels/nn/compiled_rows.py's pass over the block; with a ReLU-family `name` (or none) after a bias and an
    addend, the three steps are kernels/nn/conv_epilogue.py's one pass (the numpy steps below are their twin)."""
    if head[0] == "FusedBatchNorm":
        scale, offset, mean, variance = args
        # As the FusedBatchNorm kernel (inference): y = x * k + (offset - mean * k), k = scale / sqrt(var + eps).
        compute = xp.result_type(scale.dtype, xp.float32)
        k = scale.astype(compute, copy=False) / xp.sqrt(variance.astype(compute, copy=False) + compute.type(epsilon))
        shift = offset.astype(compute, copy=False) - mean.astype(compute, copy=False) * k
    else:
        bias = args[0]
        if bias.ndim != 1:
            raise ValueError(f"bias must be 1-D, got shape {list(bias.shape)}")

    fast = head[0] == "BiasAdd" and use_compiled(xp, compiled, bias.dtype, *(() if addend is None else (addend.dtype,)))
    rows = name in _ROW_EPILOGUES and fast

    def finish(block: Any, where: tuple[slice, slice]) -> None:
        if rows and block.dtype == xp.float32 and block.flags.c_contiguous:
            # numpy's bias add is one fast pass; the activation then runs over the block as long rows.
            xp.add(block, bias, out=block)
            if addend is not None:
                xp.add(block, addend[where], out=block)
            compiled_rows.activation_into(block, name, leakyrelu_alpha)
            return
        if head[0] == "FusedBatchNorm":
            xp.multiply(block, k, out=block)
            xp.add(block, shift, out=block)
        else:
            xp.add(block, bias, out=block)
        if addend is not None:
            xp.add(block, addend[where], out=block)
        if activation is not None:
            activation(xp, block, leakyrelu_alpha)

    if fast and (name is not None or addend is not None):
        # Bias, addend and a ReLU-family activation as one compiled pass (kernels/nn/conv_epilogue.py); a bias
        # alone stays numpy's one pass.
        return conv_epilogue.compiled_epilogue(head, name, bias, addend, leakyrelu_alpha, finish) or finish
    return finish


def check_channels(op: str, args: Sequence[Any], channels: int) -> None:
    for a in args:
        if a.ndim != 1 or a.shape[0] != channels:
            raise ValueError(f"{op}: a per-channel input has shape {list(a.shape)}; expected [{channels}]")


@kernel("_FusedConv2D")
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
    fused_ops: ConvFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    use_cudnn_on_gpu: bool = True,
    compiled: bool = False,
):
    """Conv2D (grouped too: an input deeper than the filter), then BiasAdd (optionally + a residual addend) or
    FusedBatchNorm, then an optional activation (as one compiled pass on CPU float32 where
    kernels/nn/compiled_rows.py has it)."""
    head, activation = split_fused_ops("_FusedConv2D", tuple(fused_ops), len(args))
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    channels = filter.shape[3]
    per_channel = args[:1] if head == ("BiasAdd", "Add") else args
    check_channels("_FusedConv2D", per_channel, channels)
    addend = None
    if head == ("BiasAdd", "Add"):
        addend = to_nhwc(args[1], data_format)
        if tuple(addend.shape) != (xs.shape[0], win.out_h, win.out_w, channels):
            # A broadcasting addend: the optimizer fuses without knowing shapes, so do what the unfused
            # graph does: add it (broadcasting) after the convolution, then the activation.
            epilogue = channel_epilogue(xp, ("BiasAdd",), per_channel, None, epsilon, leakyrelu_alpha)
            y = from_nhwc(xp, conv2d_nhwc(xp, xs, filter, win, epilogue), data_format) + args[1]
            if activation is not None:
                activation(xp, y, leakyrelu_alpha)
            return (y,)
    name = fused_ops[-1] if activation is not None else None
    epilogue = channel_epilogue(xp, head, per_channel, activation, epsilon, leakyrelu_alpha, addend, name, compiled)
    return (from_nhwc(xp, conv2d_nhwc(xp, xs, filter, win, epilogue), data_format),)


@kernel("_FusedDepthwiseConv2dNative")
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
    fused_ops: DepthwiseFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    compiled: bool = False,
):
    """DepthwiseConv2dNative, then BiasAdd, then an optional activation: one compiled pass on CPU float32
    (kernels.nn.depthwise), else the numpy body with its epilogue per chunk."""
    head, activation = split_fused_ops("_FusedDepthwiseConv2dNative", tuple(fused_ops), len(args))
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    check_channels("_FusedDepthwiseConv2dNative", args, filter.shape[2] * filter.shape[3])
    if use_compiled(xp, compiled, xs.dtype, filter.dtype, args[0].dtype):
        act = fused_ops[-1] if activation is not None else None
        y = depthwise_conv2d_compiled(xp, xs, filter, win, args[0], act, leakyrelu_alpha)
        return (from_nhwc(xp, y, data_format),)
    epilogue = channel_epilogue(xp, head, args, activation, epsilon, leakyrelu_alpha)
    return (from_nhwc(xp, depthwise_conv2d_nhwc(xp, xs, filter, win, epilogue), data_format),)


def _matmul_epilogue(
    xp: Any, y: Any, bias: Any, fused_ops: Sequence[str], activation: Activation | None, alpha: float, compiled: bool
) -> None:
    """y <- activation(y + bias), in place on a matmul's [rows, units] product: one compiled pass over each
    tile of rows where kernels/nn/compiled_rows.py has the activation, numpy's passes otherwise (the twin).
    A bias alone stays numpy's: one in-place add is one pass already, as fast as the compiled loop."""
    name = fused_ops[-1] if activation is not None else None
    if name in compiled_rows.ACTIVATIONS and use_compiled(xp, compiled, y.dtype, bias.dtype):
        compiled_rows.bias_activation_into(y, bias, name, alpha)
        return
    xp.add(y, bias, out=y)
    if activation is not None:
        activation(xp, y, alpha)


@kernel("_FusedMatMul")
def fused_mat_mul(
    xp,
    a,
    b,
    *args,
    transpose_a: bool = False,
    transpose_b: bool = False,
    fused_ops: MatMulFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    compiled: bool = False,
):
    """MatMul, then BiasAdd, then an optional activation, in place on the product."""
    _, activation = split_fused_ops("_FusedMatMul", tuple(fused_ops), len(args))
    y = blas.matmul(xp, a.T if transpose_a else a, b.T if transpose_b else b)
    check_channels("_FusedMatMul", args, y.shape[1])
    _matmul_epilogue(xp, y, args[0], fused_ops, activation, leakyrelu_alpha, compiled)
    return (y,)



@kernel("_TensorgateDense")
def dense(
    xp,
    x,
    weights,
    *args,
    fused_ops: MatMulFusedOps,
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    compiled: bool = False,
):
    """x [..., K] contracted with weights [K, *units], then + bias [*units], then an optional activation:
    the output is [..., *units]."""
    _, activation = split_fused_ops("_FusedMatMul", tuple(fused_ops), len(args))
    units = tuple(weights.shape[1:])
    bias = args[0]
    if tuple(bias.shape) != units:
        raise ValueError(f"_TensorgateDense: bias has shape {list(bias.shape)}; expected {list(units)}")
    rows = x.reshape(-1, x.shape[-1])
    y = blas.matmul(xp, rows, weights.reshape(weights.shape[0], -1))
    _matmul_epilogue(xp, y, bias.reshape(-1), fused_ops, activation, leakyrelu_alpha, compiled)
    return (y.reshape(tuple(x.shape[:-1]) + units),)
