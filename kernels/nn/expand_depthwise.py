"""`_TensorgateExpandDepthwise`: the first half of a squeeze-and-excitation MBConv block (EfficientNet's,
MobileNetV3's): a 1x1 expansion and a depthwise convolution, each with its bias and activation, computed in
bands of output rows so that the expanded tensor never reaches memory; its second output is the spatial
mean of the first, the block's squeeze, summed while each band is in cache.

The optimizer (engine/passes/fuse_squeeze_excite.py) writes it in place of

    _FusedConv2D(x, 1x1 expand, BiasAdd[, act]) -> _FusedDepthwiseConv2dNative(BiasAdd[, act])

when what reads the depthwise output is a `_TensorgateSqueezeExcite` (kernels.nn.squeeze_excite), which then
takes the mean instead of computing it. (kernels.nn.inverted_residual does this for MobileNetV2's blocks,
whose projection follows the depthwise step at once; a squeeze-and-excitation block needs the whole
depthwise output for its mean before it can project.) The expanded tensor is the block's widest: at batch
32 EfficientNet-B0's expansions write and read back over 400 MB. A block without expansion (`expand=False`,
EfficientNet's first) is the depthwise step and the mean.

The numpy twin is the chain itself: the fused kernels on whole tensors, then the Mean kernel (what runs without
numba, on other dtypes, or with `PlanOptions(compiled_kernels=False)`). The banded path computes the same
products (BLAS may round a row differently by the size of the matrix it is in), the depthwise sums in the
same order, and the mean from per-band sums added in float64, so the two agree to float32 rounding.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from kernels import jit, pool
from kernels.math.reductions import reduce_mean
from kernels.nn import compiled_rows, depthwise, fused, window
from kernels.registry import kernel

__all__ = ["ACTIVATIONS", "expand_depthwise"]

# The activations either step may end in (each a compiled pass of kernels/nn/compiled_rows.py or the depthwise loop's).
ACTIVATIONS = ("", "Relu", "Relu6", "Sigmoid", "Swish", "HardSwish")
Activation = Literal[ACTIVATIONS]

# Bytes of expanded activations per band (kernels.nn.inverted_residual's measured size).
_BAND_BYTES = 1 << 20


def _fused_ops(activation: str) -> tuple[str, ...]:
    return ("BiasAdd", activation) if activation else ("BiasAdd",)


def _twin(xp, x, ef, eb, df, db, attrs, expand_activation, depthwise_activation, compiled):
    """The chain as the unfused graph runs it: the fused kernels on whole tensors, then the Mean kernel."""
    h = x
    if ef is not None:
        h = fused.fused_conv2d(xp, x, ef, eb, strides=(1, 1, 1, 1), padding="VALID",
                               fused_ops=_fused_ops(expand_activation), num_args=1, compiled=compiled)[0]
    y = fused.fused_depthwise_conv2d(xp, h, df, db, **attrs, fused_ops=_fused_ops(depthwise_activation), num_args=1,
                                     compiled=compiled)[0]
    return y, reduce_mean(xp, y, np.array([1, 2]), keep_dims=True)[0]


@kernel("_TensorgateExpandDepthwise", devices=("cpu",), outputs=2)
def expand_depthwise(
    xp,
    x,
    *inputs,
    strides: tuple[int, ...],
    padding: Literal["SAME", "VALID", "EXPLICIT"],
    explicit_paddings: tuple[int, ...] = (),
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    expand: bool = True,
    expand_activation: Activation = "",
    depthwise_activation: Activation = "",
    compiled: bool = False,
):
    """NHWC x -> 1x1 conv (expand_filter [1, 1, in, mid]) + bias + activation -> depthwise conv (depthwise_filter
    [kh, kw, mid, 1], strides/padding/dilations as DepthwiseConv2dNative's) + bias + activation: that output,
    and its mean over height and width [N, 1, 1, mid].

    Inputs after x: expand_filter, expand_bias (unless `expand` is False), depthwise_filter, depthwise_bias."""
    wanted = 4 if expand else 2
    if len(inputs) != wanted:
        raise ValueError(f"_TensorgateExpandDepthwise with expand={expand} takes {wanted + 1} inputs, "
                         f"got {len(inputs) + 1}")
    if x.ndim != 4:
        raise ValueError(f"_TensorgateExpandDepthwise: x must be NHWC, got shape {list(x.shape)}")
    ef, eb = inputs[:2] if expand else (None, None)
    df, db = inputs[-2:]
    attrs = {"strides": strides, "padding": padding, "explicit_paddings": explicit_paddings, "dilations": dilations}
    # The banded path takes the shapes the optimizer writes the op for; anything else (a grouped expansion, a
    # channel multiplier) runs as the chain, whose kernels check it.
    c_in = x.shape[3]
    mid = df.shape[2] if df.ndim == 4 else -1
    plain = (df.ndim == 4 and df.shape[3] == 1 and tuple(db.shape) == (mid,)
             and (ef is None and c_in == mid
                  or ef is not None and tuple(ef.shape) == (1, 1, c_in, mid) and tuple(eb.shape) == (mid,)))
    if not (plain and jit.use_compiled(xp, compiled, x.dtype, *(a.dtype for a in inputs))):
        return _twin(xp, x, ef, eb, df, db, attrs, expand_activation, depthwise_activation, compiled)
    win = window.window_from_attrs(x.shape[1:3], df.shape[:2], strides, padding, explicit_paddings, "NHWC", dilations)
    return _banded(x, ef, eb, df, db, win, expand_activation, depthwise_activation)


def _banded(x, ef, eb, df, db, win: window.Window2D, expand_activation: str, depthwise_activation: str):
    n, height, width, c_in = x.shape
    kh, kw, mid, _ = df.shape
    x = np.ascontiguousarray(x)
    w_expand = None if ef is None else np.ascontiguousarray(ef).reshape(c_in, mid)
    eb = None if eb is None else np.ascontiguousarray(eb)
    w_depthwise = np.ascontiguousarray(df).reshape(kh * kw, mid)
    db = np.ascontiguousarray(db)
    sh, sw, dh, dw = win.stride_h, win.stride_w, win.dilation_h, win.dilation_w
    halo = (kh - 1) * dh
    out = np.empty((n, win.out_h, win.out_w, mid), np.float32)
    mean = np.zeros((n, 1, 1, mid), np.float32)
    if out.size == 0:
        mean[...] = np.nan  # the mean of nothing, as the Mean kernel gives it
        return out, mean
    rows = max(1, (_BAND_BYTES // (width * mid * 4) - halo) // sh)
    bands = [(b, r, min(r + rows, win.out_h)) for b in range(n) for r in range(0, win.out_h, rows)]
    # The depthwise loop applies the ReLU family itself; other activations are compiled_rows' pass after it.
    code = depthwise.ACTIVATION_CODES.get(depthwise_activation or None, 0)
    after = depthwise_activation if depthwise_activation and code == 0 else ""
    sums = np.empty((len(bands), mid), np.float64)

    def work(index: int) -> None:
        b, r0, r1 = bands[index]
        # Input rows the band's windows read, within the image (the rest is padding, which reads nothing).
        first, last = r0 * sh - win.pad_top, (r1 - 1) * sh - win.pad_top + halo
        i0, i1 = max(first, 0), min(last + 1, height)
        i1 = max(i1, i0)
        expanded = x[b, i0:i1].reshape(-1, c_in)
        if w_expand is not None:
            expanded = np.matmul(expanded, w_expand)
            if expand_activation:
                compiled_rows.bias_activation_into(expanded, eb, expand_activation)
            else:
                expanded += eb
        block = out[b, r0:r1].reshape(-1, mid)
        # The band's row 0 is image row i0, and its output row 0 is output row r0: padding shifts by both.
        depthwise.depthwise_rows(expanded, w_depthwise, db, i1 - i0, width, mid, kh, kw, 1, sh, sw, dh, dw,
                                 win.pad_top + i0 - r0 * sh, win.pad_left, code, np.float32(0), r1 - r0, win.out_w,
                                 0, 0, r1 - r0, block)
        if after:
            compiled_rows.activation_into(block, after)
        sums[index] = block.sum(axis=0, dtype=np.float64)

    pool.run_tasks(work, range(len(bands)))
    # The per-band sums added in float64, in band order, and rounded once.
    totals = np.zeros((n, mid), np.float64)
    for index, (b, _, _) in enumerate(bands):
        totals[b] += sums[index]
    mean[:, 0, 0] = (totals / (win.out_h * win.out_w)).astype(np.float32)
    return out, mean
