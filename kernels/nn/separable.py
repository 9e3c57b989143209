"""`_TensorgateSeparableConv2D`: a depthwise convolution and the 1x1 convolution that reads it (a separable
convolution: Keras' SeparableConv2D, or a hand-written depthwise + pointwise pair such as MobileNet's) as one op,
computed in bands of output rows so that the depthwise result never reaches memory.

The optimizer (engine/passes/fuse_separable.py) writes it in place of the chain

    [Relu | Relu6 ->] DepthwiseConv2dNative | _FusedDepthwiseConv2dNative(BiasAdd[, activation])
        -> Conv2D 1x1 | _FusedConv2D 1x1(fused_ops)

Each band of output rows (several whole images, or rows of one image) runs the depthwise loop
(kernels.nn.depthwise, straight from the input: padding is a smaller tap range, no copy; with an input
activation, NASNet's and Xception's ReLU before each separable convolution, from the band's input rows
activated into a buffer of their own) into a buffer that
stays in L2, then one GEMM of that buffer with the pointwise filter into the output, then the pointwise
epilogue (bias, residual add, activation) while the block is in cache; bands run on the engine's pool.
TensorFlow runs the two convolutions one after another, the depthwise result a full round trip through
memory (NASNet's and Xception's separable convolutions at batch 32: tens of megabytes each).

The numpy twin is the chain itself: the two kernels called in order on whole tensors (what runs without
numba, on other dtypes, or with `PlanOptions(compiled_kernels=False)`), and what a convolution too small to
cut into bands runs too. The banded path computes the same sums in the same order (the same depthwise loop,
each GEMM row the same dot product); BLAS may round a row differently by the size of the matrix it is in, so
the two agree to float32 rounding.

The underscore marks an op of ours, not TensorFlow's; graphs never contain it until the optimizer writes it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels import jit, pool
from kernels.nn import activations, depthwise, window
from kernels.nn.conv import conv2d, depthwise_conv2d
from kernels.nn.fused import (
    CONV_FUSED_OPS,
    channel_epilogue,
    check_channels,
    fused_conv2d,
    fused_depthwise_conv2d,
    split_fused_ops,
)
from kernels.registry import kernel

__all__ = ["DEPTHWISE_OPS", "INPUT_ACTIVATIONS", "POINTWISE_OPS", "separable_conv2d"]

# The depthwise step: none, or a bias and an activation the compiled loop applies itself.
DEPTHWISE_OPS = ((),) + tuple(("BiasAdd",) + ((a,) if a else ()) for a in depthwise.ACTIVATION_CODES)
# The pointwise step: none (a plain Conv2D), or any of _FusedConv2D's lists.
POINTWISE_OPS = ((),) + CONV_FUSED_OPS
# The activation applied to the input before the depthwise step: none, Relu or Relu6.
INPUT_ACTIVATIONS = ("", "Relu", "Relu6")
DepthwiseOps = Literal[DEPTHWISE_OPS]
PointwiseOps = Literal[POINTWISE_OPS]
InputActivation = Literal[INPUT_ACTIVATIONS]

# Bytes of depthwise output per band: it stays in L2 between the depthwise loop writing it and the GEMM
# reading it.
_BAND_BYTES = 256 << 10
# A band's GEMM needs rows enough to run at full speed, and rereads the pointwise filter: a band holds at least
# _MIN_BAND_PIXELS pixels, and at least 4 * in * out / (in + out), so that reading the filter costs at most a
# quarter of the band's own traffic. Where that takes more than _MAX_BAND_BYTES of depthwise output (the wide
# layers: 512 channels and more), the result would not stay in cache anyway, and the pair runs unfused (at
# 1024 channels and batch 32, bands of 49 pixels ran 1.7x slower than the two kernels on whole tensors).
_MIN_BAND_PIXELS = 256
_MAX_BAND_BYTES = 1 << 20
# Multiply-adds (depthwise and pointwise) per band: at least this many, so that the pool's hand-off stays
# small beside the band's work; a smaller convolution is one band, and runs unfused.
_MIN_BAND_MACS = 1 << 20


def _activated(xp: Any, x: Any, activation: str, out: Any | None = None) -> Any:
    """x through the input activation (as the Relu and Relu6 kernels compute it), into `out` if given."""
    if not activation:
        return x
    out = xp.empty_like(x) if out is None else out
    return (activations.relu_into if activation == "Relu" else activations.relu6_into)(xp, x, out)


def _twin(xp, x, df, dw_args, pf, pw_args, attrs, depthwise_ops, fused_ops, alpha, epsilon, compiled):
    """The chain as the unfused graph runs it (the depthwise by its compiled loop where allowed)."""
    if depthwise_ops:
        h = fused_depthwise_conv2d(xp, x, df, *dw_args, **attrs, fused_ops=depthwise_ops, num_args=1,
                                   leakyrelu_alpha=alpha, compiled=compiled)[0]
    else:
        h = depthwise_conv2d(xp, x, df, **attrs, compiled=compiled)[0]
    pointwise = {"strides": (1, 1, 1, 1), "padding": "VALID"}
    if fused_ops:
        return fused_conv2d(xp, h, pf, *pw_args, **pointwise, fused_ops=fused_ops, num_args=len(pw_args),
                            epsilon=epsilon, leakyrelu_alpha=alpha)[0]
    return conv2d(xp, h, pf, **pointwise)[0]


@kernel("_TensorgateSeparableConv2D", devices=("cpu",))
def separable_conv2d(
    xp,
    x,
    depthwise_filter,
    *inputs,
    strides: tuple[int, ...],
    padding: Literal["SAME", "VALID", "EXPLICIT"],
    explicit_paddings: tuple[int, ...] = (),
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    depthwise_ops: DepthwiseOps = (),
    fused_ops: PointwiseOps = (),
    input_activation: InputActivation = "",
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    compiled: bool = False,
):
    """NHWC x -> input_activation (none, Relu or Relu6) -> depthwise convolution (depthwise_filter
    [kh, kw, c, multiplier], strides/padding/dilations as DepthwiseConv2dNative's), then depthwise_ops (a bias and activation) -> 1x1 convolution (pointwise_filter
    [1, 1, c * multiplier, out]), then fused_ops as _FusedConv2D's (bias, residual addend, batch norm with
    epsilon, activation); leakyrelu_alpha applies to both steps.

    Inputs after the depthwise filter: the depthwise bias (when depthwise_ops is not empty), the pointwise
    filter, then the pointwise step's operands."""
    n_dw = 1 if depthwise_ops else 0
    if len(inputs) < n_dw + 1:
        raise ValueError(f"_TensorgateSeparableConv2D takes a pointwise filter after {n_dw} depthwise operand(s), "
                         f"got {len(inputs)} input(s) after the depthwise filter")
    dw_args, pf, pw_args = inputs[:n_dw], inputs[n_dw], inputs[n_dw + 1 :]
    head, activation = split_fused_ops("_FusedConv2D", tuple(fused_ops), len(pw_args)) if fused_ops else ((), None)
    if not fused_ops and pw_args:
        raise ValueError(f"_TensorgateSeparableConv2D without fused_ops takes no pointwise operands, got {len(pw_args)}")
    if depthwise_filter.ndim != 4 or pf.ndim != 4 or tuple(pf.shape[:2]) != (1, 1):
        raise ValueError(f"_TensorgateSeparableConv2D needs a 4-D depthwise filter and a 1x1 pointwise filter, got "
                         f"{list(depthwise_filter.shape)} and {list(pf.shape)}")
    attrs = {"strides": strides, "padding": padding, "explicit_paddings": explicit_paddings, "dilations": dilations}
    kh, kw, c, mult = depthwise_filter.shape
    mid, c_out = c * mult, pf.shape[3]
    if x.ndim != 4 or x.shape[3] != c or pf.shape[2] != mid:
        raise ValueError(f"_TensorgateSeparableConv2D: input {list(x.shape)}, depthwise filter "
                         f"{list(depthwise_filter.shape)} and pointwise filter {list(pf.shape)} do not chain")
    check_channels("_TensorgateSeparableConv2D", dw_args, mid)
    per_channel = pw_args[:1] if head == ("BiasAdd", "Add") else pw_args
    check_channels("_TensorgateSeparableConv2D", per_channel, c_out)
    win = window.window_from_attrs(x.shape[1:3], (kh, kw), strides, padding, explicit_paddings, "NHWC", dilations)
    addend = pw_args[1] if head == ("BiasAdd", "Add") else None
    banded = (
        jit.use_compiled(xp, compiled, x.dtype, depthwise_filter.dtype, pf.dtype, *(a.dtype for a in inputs))
        and (addend is None or tuple(addend.shape) == (x.shape[0], win.out_h, win.out_w, c_out))
    )
    bands = _bands(x.shape[0], win, kh * kw, mid, c_out) if banded else []
    if len(bands) < 2:
        return (_twin(xp, _activated(xp, x, input_activation), depthwise_filter, dw_args, pf, pw_args, attrs,
                      tuple(depthwise_ops), tuple(fused_ops), leakyrelu_alpha, epsilon, compiled),)
    epilogue = None
    if fused_ops:
        name = fused_ops[-1] if activation is not None else None
        epilogue = channel_epilogue(xp, head, per_channel, activation, epsilon, leakyrelu_alpha, addend, name,
                                    compiled)
    act = depthwise_ops[1] if len(depthwise_ops) > 1 else None
    return (_banded(x, input_activation, depthwise_filter, dw_args[0] if dw_args else None, pf, win, act,
                    leakyrelu_alpha, epilogue, bands),)


def _bands(n: int, win: window.Window2D, taps: int, mid: int, c_out: int) -> list[pool.Chunk]:
    """Bands of output rows (whole images, or rows of one image) of about _BAND_BYTES of depthwise output, and
    big enough for their GEMM and their pool task (see _MIN_BAND_PIXELS and _MIN_BAND_MACS); none where such a
    band would not stay in cache."""
    pixels = max(_MIN_BAND_PIXELS, 4 * mid * c_out // (mid + c_out), _BAND_BYTES // (4 * mid),
                 -(-_MIN_BAND_MACS // (mid * (taps + c_out))))
    if pixels * mid * 4 > _MAX_BAND_BYTES:
        return []
    return pool.chunks(n, win.out_h, win.out_w, pixels)


def _banded(x: Any, input_activation: str, df: Any, db: Any | None, pf: Any, win: window.Window2D,
            activation: str | None, alpha: float, epilogue: window.Epilogue | None, bands: list[pool.Chunk]) -> Any:
    n, height, width, c = x.shape
    kh, kw, _, mult = df.shape
    mid, c_out = c * mult, pf.shape[3]
    x = np.ascontiguousarray(x)
    w_depthwise = np.ascontiguousarray(df).reshape(kh * kw, mid)
    w_pointwise = np.ascontiguousarray(pf).reshape(mid, c_out)
    bias = np.empty(0, np.float32) if db is None else np.ascontiguousarray(db)
    out = np.empty((n, win.out_h, win.out_w, c_out), np.float32)
    sh, halo = win.stride_h, (kh - 1) * win.dilation_h
    code = depthwise.ACTIVATION_CODES[activation]
    in_code = depthwise.INPUT_ACTIVATION_CODES[input_activation] if mult == 1 else 0

    def work(band: pool.Chunk) -> None:
        rows = band.r1 - band.r0
        pixels = rows * win.out_w
        reduced = np.empty(((band.b1 - band.b0) * pixels, mid), np.float32)
        # The input rows the band's windows read, within the image (the rest is padding, which reads nothing).
        i0 = max(band.r0 * sh - win.pad_top, 0)
        i1 = max(min((band.r1 - 1) * sh - win.pad_top + halo + 1, height), i0)
        # With a multiplier of 1 the loop reads the input through the activation itself; otherwise the band's
        # input rows are activated into a buffer first.
        activated = np.empty((i1 - i0) * width * c if input_activation and mult != 1 else 0, np.float32)
        for k, image in enumerate(range(band.b0, band.b1)):
            rows_in = x[image, i0:i1].reshape(-1, c)
            if mult != 1:
                rows_in = _activated(np, rows_in, input_activation, activated.reshape(-1, c))
            # The loop sees those rows as a whole image and the band's rows as its whole output: its first
            # output row r0 and input row i0 shift the padding by both.
            depthwise.depthwise_rows(rows_in, w_depthwise, bias, i1 - i0, width, c, kh, kw,
                                     mult, sh, win.stride_w, win.dilation_h, win.dilation_w,
                                     win.pad_top + i0 - band.r0 * sh, win.pad_left, code, np.float32(alpha), rows,
                                     win.out_w, 0, 0, rows, reduced[k * pixels : (k + 1) * pixels], in_code)
        block = out[band.b0 : band.b1, band.r0 : band.r1]
        np.matmul(reduced, w_pointwise, out=block.reshape(-1, c_out))
        if epilogue is not None:
            epilogue(block, (slice(band.b0, band.b1), slice(band.r0, band.r1)))

    pool.run_tasks(work, bands)
    return out
