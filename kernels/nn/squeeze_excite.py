"""`_TensorgateSqueezeExcite`: a squeeze-and-excitation block (EfficientNet's, MobileNetV3's) as one op, with the
1x1 projection that follows it when there is one.

The optimizer (engine/passes/fuse_squeeze_excite.py) writes it in place of

    g = gate(_FusedConv2D(_FusedConv2D(Mean(x, [1, 2]), 1x1 reduce, BiasAdd[, act]), 1x1 expand, BiasAdd, act))
    y = Mul(x, g)                                                  (the excitation)
    [y = _FusedConv2D(y, 1x1 project, BiasAdd[, Add residual][, act])]

where gate is the expand step's activation (Sigmoid; Relu6 for a hard sigmoid, whose + 3 the folds have
moved into the bias) times `gate_multiplier` and divided by `gate_divisor` where those are not 1. The
squeeze and the two small convolutions on it run exactly as the unfused ops do (the same kernels on the
[N, 1, 1, C] mean), a few microseconds instead of a dozen instructions with their own dispatch (Keras
freezes the squeeze's reshape as Shape, StridedSlice, Pack and Reshape). With a projection, the excitation
is applied chunk by chunk of pixels right before the chunk's GEMM, while it is in cache, so that the
excited tensor (as large as the block's widest) is never written and read back.

With `squeezed`, the mean comes in as an input: kernels.nn.expand_depthwise computes it while it writes x.

The numpy twin is the chain itself: the excitation as one Mul, then the projection's fused kernel on the
whole tensor (what runs without numba, on other dtypes, or with `PlanOptions(compiled_kernels=False)`).
The chunked path multiplies the same values and runs GEMMs on the same chunks of rows as the projection's
own 1x1 path (kernels.nn.conv), so the two agree to the bit. The underscore marks an op of ours, not
TensorFlow's; graphs never contain it until the optimizer writes it.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np

from kernels import blas
from kernels.jit import use_compiled
from kernels.math.reductions import reduce_mean
from kernels.nn import fused
from kernels.pool import chunks, run_tasks
from kernels.registry import kernel

__all__ = ["GATES", "squeeze_excite"]

# The activations of the expand step that make a gate (a hard sigmoid is Relu6 scaled by 1/6).
GATES = ("Sigmoid", "Relu6")

# Bytes of a projection chunk's input and output rows, as kernels.nn.conv's 1x1 path chunks them: the
# chunks must be the same for the GEMMs (and so the results) to be the same.
_PATCH_BYTES_PER_CHUNK = 4 << 20

_ONES = (1, 1, 1, 1)


def _pointwise(xp: Any, x: Any, filt: Any, bias: Any, activation: str, compiled: bool) -> Any:
    """A 1x1 _FusedConv2D (BiasAdd then `activation`, if any) of a [N, 1, 1, C] tensor, computed as that kernel
    computes it (one GEMM over the N rows, then its epilogue), without its geometry's overhead (the block's
    two small convolutions would otherwise be a third of its time at batch 1)."""
    fused_ops = ("BiasAdd", activation) if activation else ("BiasAdd",)
    head, fn = fused.split_fused_ops("_FusedConv2D", fused_ops, 1)
    n, c, o = x.shape[0], filt.shape[2], filt.shape[3]
    fused.check_channels("_FusedConv2D", (bias,), o)
    y = blas.matmul(xp, x.reshape(n, c), xp.ascontiguousarray(filt).reshape(c, o)).reshape(n, 1, 1, o)
    fused.channel_epilogue(xp, head, (bias,), fn, 0.0001, 0.2, None, activation or None, compiled)(
        y, (slice(0, n), slice(0, 1)))
    return y


def _gate(xp: Any, squeezed: Any, reduce_filter: Any, reduce_bias: Any, expand_filter: Any, expand_bias: Any,
          reduce_activation: str, gate_activation: str, multiplier: float, divisor: float, compiled: bool) -> Any:
    """The excitation gate [N, 1, 1, C] of the block's squeeze (its input's spatial mean [N, 1, 1, C])."""
    reduced = _pointwise(xp, squeezed, reduce_filter, reduce_bias, reduce_activation, compiled)
    gate = _pointwise(xp, reduced, expand_filter, expand_bias, gate_activation, compiled)
    if multiplier != 1.0:
        gate = xp.multiply(gate, gate.dtype.type(multiplier))
    if divisor != 1.0:
        gate = xp.divide(gate, gate.dtype.type(divisor))
    return gate


def _excited_projection(xp: Any, x: Any, gate: Any, filt: Any, args: tuple[Any, ...],
                        fused_ops: tuple[str, ...], compiled: bool) -> Any:
    """_FusedConv2D(x * gate, 1x1 filt, *args, fused_ops), each chunk of pixels excited right before its GEMM,
    in the chunks kernels.nn.conv's 1x1 path uses."""
    n, h, w, c = x.shape
    o = filt.shape[3]
    head, activation = fused.split_fused_ops("_FusedConv2D", fused_ops, len(args))
    name = fused_ops[-1] if activation is not None else None
    addend = args[1] if head == ("BiasAdd", "Add") else None
    fused.check_channels("_FusedConv2D", args[:1], o)
    epilogue = fused.channel_epilogue(xp, head, args[:1], activation, 0.0001, 0.2, addend, name, compiled)
    w_mat = np.ascontiguousarray(filt).reshape(c, o)
    out = np.empty((n, h, w, o), np.float32)
    parts = chunks(n, h, w * (c + o) * out.itemsize, _PATCH_BYTES_PER_CHUNK)
    parallel = blas.blas_threads_limited() and len(parts) >= 2

    def work(p: Any) -> None:
        block = out[p.b0 : p.b1, p.r0 : p.r1]
        pixels = (p.b1 - p.b0) * (p.r1 - p.r0) * w
        excited = x[p.b0 : p.b1, p.r0 : p.r1] * gate[p.b0 : p.b1]
        (np.matmul if parallel else functools.partial(blas.matmul, np))(
            excited.reshape(pixels, c), w_mat, out=block.reshape(pixels, o))
        epilogue(block, (slice(p.b0, p.b1), slice(p.r0, p.r1)))

    if parallel:
        run_tasks(work, parts)
    else:
        for p in parts:
            work(p)
    return out


# The projection: a linear bottleneck (MBConv's), with the block's residual add or without.
ProjectFusedOps = Literal[(), ("BiasAdd",), ("BiasAdd", "Add")]
ReduceActivation = Literal["", "Relu", "Relu6", "Elu", "Sigmoid", "Swish", "HardSwish"]


def _check_filter(name: str, filt: Any, rows: int, cols: int | None) -> None:
    if filt.ndim != 4 or filt.shape[:3] != (1, 1, rows) or (cols is not None and filt.shape[3] != cols):
        want = f"[1, 1, {rows}, {cols if cols is not None else 'O'}]"
        raise ValueError(f"_TensorgateSqueezeExcite: the {name} filter must be {want}, got {list(filt.shape)}")


@kernel("_TensorgateSqueezeExcite")
def squeeze_excite(
    xp,
    x,
    *inputs,
    reduce_activation: ReduceActivation = "",
    gate_activation: Literal[GATES],
    gate_multiplier: float = 1.0,
    gate_divisor: float = 1.0,
    project_fused_ops: ProjectFusedOps = (),
    squeezed: bool = False,
    compiled: bool = False,
):
    """NHWC x times its squeeze-and-excitation gate; with `project_fused_ops`, that product's 1x1 _FusedConv2D.

    Inputs after x: [x's spatial mean [N, 1, 1, C], when `squeezed` (kernels.nn.expand_depthwise computes it
    with x)], reduce_filter, reduce_bias, expand_filter, expand_bias, then with a projection its filter, its
    bias and, for "Add", the residual addend."""
    if x.ndim != 4:
        raise ValueError(f"_TensorgateSqueezeExcite: x must be NHWC, got shape {list(x.shape)}")
    fused_ops = tuple(project_fused_ops)
    wanted = int(squeezed) + 4 + (len(fused_ops) + 1 if fused_ops else 0)
    if len(inputs) != wanted:
        raise ValueError(f"_TensorgateSqueezeExcite with project_fused_ops {list(fused_ops)} and squeezed={squeezed} "
                         f"takes {1 + wanted} inputs, got {1 + len(inputs)}")
    mean = inputs[0] if squeezed else None
    reduce_filter, reduce_bias, expand_filter, expand_bias = inputs[int(squeezed) : int(squeezed) + 4]
    project = inputs[int(squeezed) + 4 :]
    _check_filter("reduce", reduce_filter, x.shape[3], None)
    _check_filter("expand", expand_filter, reduce_filter.shape[3], x.shape[3])
    if mean is None:
        (mean,) = reduce_mean(xp, x, np.array([1, 2]), keep_dims=True)
    elif tuple(mean.shape) != (x.shape[0], 1, 1, x.shape[3]):
        raise ValueError(f"_TensorgateSqueezeExcite: the mean must be [{x.shape[0]}, 1, 1, {x.shape[3]}], got "
                         f"{list(mean.shape)}")
    gate = _gate(xp, mean, reduce_filter, reduce_bias, expand_filter, expand_bias, reduce_activation, gate_activation,
                 gate_multiplier, gate_divisor, compiled)
    if not fused_ops:
        return (xp.multiply(x, gate),)
    filt, args = project[0], tuple(project[1:])
    _check_filter("projection", filt, x.shape[3], None)
    whole_addend = len(args) == 1 or tuple(args[1].shape) == (*x.shape[:3], filt.shape[3])
    if use_compiled(xp, compiled, x.dtype, filt.dtype, *(a.dtype for a in args)) and whole_addend and x.size:
        return (_excited_projection(xp, np.ascontiguousarray(x), gate, filt, args, fused_ops, compiled),)
    return fused.fused_conv2d(xp, xp.multiply(x, gate), filt, *args, strides=_ONES, padding="VALID",
                              fused_ops=fused_ops, num_args=len(args), compiled=compiled)
