"""`_TensorgatePreactivatedConv2D`: a 1x1 convolution whose input is first scaled, shifted and activated channel by
channel (a batch norm and ReLU before the convolution: DenseNet's layers and transitions, pre-activation ResNets),
as one op that applies that prologue to each chunk of input pixels right before the chunk's GEMM.

The optimizer (engine/passes/fuse_preactivation.py) writes it in place of the chain

    Mul(x, scale) -> Add(., shift) [-> Relu | Relu6] -> Conv2D 1x1 | _FusedConv2D 1x1(fused_ops)

which Keras 3 freezes a BatchNormalization and ReLU before a convolution to (its statistics folded into
`scale` and `shift`; fold_batch_norm and fold_affine can only fold a batch norm into the convolution before
it). Unfused, the three elementwise ops are three passes over the whole tensor, each reading and writing it (in
DenseNet121 at batch 32, the concatenated features: a fifth of the model's time); here each chunk of pixels is
scaled, shifted and activated into a buffer that stays in cache, which the GEMM reads.

On CPU float32 the prologue is a compiled loop (`_prologue_rows`); the numpy twin is the chain itself (the
elementwise kernels on the whole tensor, then the convolution). The loop computes x * scale, then + shift,
then the activation, each rounded to float32 as numpy's ufuncs round it, so the GEMM's inputs are the twin's to
the bit; BLAS may round a row differently by the size of the matrix it is in, so the outputs agree to float32
rounding.

The underscore marks an op of ours, not TensorFlow's; graphs never contain it until the optimizer writes it.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np

from kernels import blas, pool
from kernels.jit import compiled, readonly, use_compiled
from kernels.nn import activations
from kernels.nn.conv import conv2d
from kernels.nn.fused import CONV_FUSED_OPS, channel_epilogue, check_channels, fused_conv2d, split_fused_ops
from kernels.registry import kernel

__all__ = ["POINTWISE_OPS", "PROLOGUE_ACTIVATIONS", "preactivated_conv2d"]

# The prologue's activation: none, Relu or Relu6 (the codes are what the compiled loop takes).
PROLOGUE_ACTIVATIONS = {"": 0, "Relu": 1, "Relu6": 2}
# The convolution's fused steps: none (a plain Conv2D), or any of _FusedConv2D's lists.
POINTWISE_OPS = ((),) + CONV_FUSED_OPS
PrologueActivation = Literal[tuple(PROLOGUE_ACTIVATIONS)]
PointwiseOps = Literal[POINTWISE_OPS]

# Bytes of input and output pixels per chunk: the prologue's buffer and the GEMM's output stay in L2, and the
# GEMM has rows enough (at least 256 pixels of a 512-channel layer).
_CHUNK_BYTES = 1 << 20

_OPS = ("_TensorgatePreactivatedConv2D",)


@compiled(f"void({readonly(2)}, {readonly(1)}, {readonly(1)}, int64, float32[:, ::1])", ops=_OPS)
def _prologue_rows(x, scale, shift, activation, out):  # pragma: no cover - compiled
    """out = activation(x * scale + shift) row by row (activation: PROLOGUE_ACTIVATIONS' code): the product
    rounded to float32, then the sum, as the twin's ufuncs do (no fused multiply-add)."""
    rows, c = x.shape
    for p in range(rows):
        src, dst = x[p], out[p]
        for k in range(c):
            dst[k] = src[k] * scale[k]
        for k in range(c):
            dst[k] = dst[k] + shift[k]
        if activation == 1:
            for k in range(c):
                v = dst[k]
                dst[k] = 0.0 if v < 0 else v
        elif activation == 2:
            for k in range(c):
                v = dst[k]
                dst[k] = 0.0 if v < 0 else (6.0 if v > 6 else v)


def _prologue_twin(xp: Any, x: Any, scale: Any, shift: Any, activation: str) -> Any:
    """The chain's elementwise ops as the unfused graph runs them, on the whole tensor."""
    y = xp.add(xp.multiply(x, scale), shift)
    if activation == "Relu":
        activations.relu_into(xp, y, y)
    elif activation == "Relu6":
        activations.relu6_into(xp, y, y)
    return y


@kernel("_TensorgatePreactivatedConv2D", devices=("cpu",))
def preactivated_conv2d(
    xp,
    x,
    scale,
    shift,
    filter,
    *args,
    prologue_activation: PrologueActivation = "",
    fused_ops: PointwiseOps = (),
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    compiled: bool = False,
):
    """NHWC x [n, h, w, c] -> activation(x * scale + shift) (scale and shift per channel, [c]) -> 1x1 convolution
    with `filter` [1, 1, c, out], stride 1, then fused_ops as _FusedConv2D's on `args` (bias, residual addend,
    batch norm, activation)."""
    if x.ndim != 4 or filter.ndim != 4 or tuple(filter.shape[:2]) != (1, 1) or filter.shape[2] != x.shape[3]:
        raise ValueError(f"_TensorgatePreactivatedConv2D needs an NHWC input and a 1x1 filter of its depth, got "
                         f"{list(x.shape)} and {list(filter.shape)}")
    check_channels("_TensorgatePreactivatedConv2D", (scale, shift), x.shape[3])
    if not fused_ops and args:
        raise ValueError(f"_TensorgatePreactivatedConv2D without fused_ops takes no extra inputs, got {len(args)}")
    head, activation = split_fused_ops("_FusedConv2D", tuple(fused_ops), len(args)) if fused_ops else ((), None)
    channels = filter.shape[3]
    per_channel = args[:1] if head == ("BiasAdd", "Add") else args
    check_channels("_TensorgatePreactivatedConv2D", per_channel, channels)
    addend = args[1] if head == ("BiasAdd", "Add") else None
    fast = (use_compiled(xp, compiled, x.dtype, scale.dtype, shift.dtype, filter.dtype, *(a.dtype for a in args))
            and (addend is None or tuple(addend.shape) == (*x.shape[:3], channels)))
    if not fast:
        y = _prologue_twin(xp, x, scale, shift, prologue_activation)
        pointwise = {"strides": (1, 1, 1, 1), "padding": "VALID"}
        if fused_ops:
            return fused_conv2d(xp, y, filter, *args, **pointwise, fused_ops=fused_ops, num_args=len(args),
                                epsilon=epsilon, leakyrelu_alpha=leakyrelu_alpha)
        return conv2d(xp, y, filter, **pointwise)
    epilogue = None
    if fused_ops:
        name = fused_ops[-1] if activation is not None else None
        epilogue = channel_epilogue(xp, head, per_channel, activation, epsilon, leakyrelu_alpha, addend, name,
                                    compiled)
    return (_chunked(x, scale, shift, PROLOGUE_ACTIVATIONS[prologue_activation], filter, epilogue),)


def _chunked(x: Any, scale: Any, shift: Any, code: int, filt: Any, epilogue: Any) -> Any:
    n, h, w, c = x.shape
    o = filt.shape[3]
    x = np.ascontiguousarray(x)
    scale, shift = np.ascontiguousarray(scale), np.ascontiguousarray(shift)
    w_mat = np.ascontiguousarray(filt).reshape(c, o)
    out = np.empty((n, h, w, o), np.float32)
    if out.size == 0:
        return out
    parts = pool.chunks(n, h, w * (c + o) * 4, _CHUNK_BYTES)
    parallel = blas.blas_threads_limited() and len(parts) >= 2
    most = max((p.b1 - p.b0) * (p.r1 - p.r0) for p in parts) * w

    def work(p: pool.Chunk, buffer: Any | None = None) -> None:
        pixels = (p.b1 - p.b0) * (p.r1 - p.r0) * w
        activated = np.empty((pixels, c), np.float32) if buffer is None else buffer[:pixels]
        _prologue_rows(x[p.b0 : p.b1, p.r0 : p.r1].reshape(pixels, c), scale, shift, code, activated)
        block = out[p.b0 : p.b1, p.r0 : p.r1]
        # One chunk: its GEMM may take the pool's threads (kernels.blas); several: each chunk is one pool task.
        gemm = np.matmul if parallel else functools.partial(blas.matmul, np)
        gemm(activated, w_mat, out=block.reshape(pixels, o))
        if epilogue is not None:
            epilogue(block, (slice(p.b0, p.b1), slice(p.r0, p.r1)))

    if parallel:
        pool.run_tasks(work, parts)
    else:
        buffer = np.empty((most, c), np.float32)
        for p in parts:
            work(p, buffer)
    return out
