"""`_TensorgateInvertedResidual`: MobileNetV2's inverted-residual block (1x1 expand, depthwise, 1x1 project,
optional residual add) as one op, computed in bands of output rows so that the expanded tensor never
reaches memory.

The optimizer (engine/passes/fuse_inverted_residual.py) writes it in place of the chain

    _FusedConv2D(1x1, BiasAdd[, Relu|Relu6]) -> _FusedDepthwiseConv2dNative(BiasAdd[, Relu|Relu6])
        -> _FusedConv2D(1x1, BiasAdd[, Add residual])

whose expanded activation is 6 times wider than the block's input and output: at batch 32 the first
blocks write and read back ~150 MB of it, several times (expand's output, its epilogue, the depthwise's
input). Here each band of output rows expands only the input rows it reads (its rows plus the window's
halo), into a buffer that fits in L2, runs the depthwise loop (kernels.nn.depthwise) on it, and projects
the result straight into the output; bands run on the engine's pool. TensorFlow runs the three ops
one after another.

The numpy twin is the chain itself: the three fused kernels called in order on whole tensors (what runs
without numba, on float64, or with `PlanOptions(compiled_kernels=False)`). The banded path computes the
same sums in the same order (each GEMM row is the same dot products, the depthwise taps in filter
order, epilogues in the same order); BLAS may round a row differently by the size of the matrix it is in
(OpenBLAS has separate kernels for small matrices), so the two agree to float32 rounding (on MobileNetV2's
shapes, to the bit).

The underscore marks an op of ours, not TensorFlow's; graphs never contain it until the optimizer writes it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from kernels import jit, pool
from kernels.nn import compiled_rows, depthwise, fused, window
from kernels.registry import kernel

__all__ = ["inverted_residual"]

Activation = Literal["", "Relu", "Relu6"]

# Bytes of expanded activations per band. Measured on 2 cores (block_1 of MobileNetV2, batch 8, one thread):
# 256 KB bands (2 output rows) took 27.6 ms, 1 MB (11 rows) 19.8 ms, 4 MB 19.7 ms; the whole-tensor chain 60+.
_BAND_BYTES = 1 << 20


def _fused_ops(activation: str, *head: str) -> tuple[str, ...]:
    return (*head, activation) if activation else head


def _twin(xp, x, ef, eb, df, db, pf, pb, addend, attrs, expand_activation, depthwise_activation, compiled):
    """The chain as the unfused graph runs it (with the depthwise's compiled loop when allowed)."""
    pointwise = dict(strides=(1, 1, 1, 1), padding="VALID")
    h = x
    if ef is not None:
        h = fused.fused_conv2d(xp, x, ef, eb, **pointwise, fused_ops=_fused_ops(expand_activation, "BiasAdd"),
                               num_args=1)[0]
    d = fused.fused_depthwise_conv2d(xp, h, df, db, **attrs, fused_ops=_fused_ops(depthwise_activation, "BiasAdd"),
                                     num_args=1, compiled=compiled)[0]
    if addend is None:
        return fused.fused_conv2d(xp, d, pf, pb, **pointwise, fused_ops=("BiasAdd",), num_args=1)[0]
    return fused.fused_conv2d(xp, d, pf, pb, addend, **pointwise, fused_ops=("BiasAdd", "Add"), num_args=2)[0]


@kernel("_TensorgateInvertedResidual", devices=("cpu",))
def inverted_residual(
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
    """NHWC x -> 1x1 conv (expand_filter [1, 1, in, mid]) + bias + activation -> depthwise conv
    (depthwise_filter [kh, kw, mid, 1], strides/padding/dilations as DepthwiseConv2dNative's) + bias +
    activation -> 1x1 conv (project_filter [1, 1, mid, out]) + bias (+ the one optional addend).

    Inputs after x: expand_filter, expand_bias (unless `expand` is False: a block without expansion, such as
    MobileNetV2's first), depthwise_filter, depthwise_bias, project_filter, project_bias, [addend]."""
    head = 6 if expand else 4
    if not head <= len(inputs) <= head + 1:
        raise ValueError(f"_TensorgateInvertedResidual with expand={expand} takes {head + 1} or {head + 2} inputs, "
                         f"got {len(inputs) + 1}")
    ef, eb = inputs[:2] if expand else (None, None)
    df, db, pf, pb = inputs[head - 4 : head]
    residual = inputs[head] if len(inputs) > head else None
    attrs = dict(strides=strides, padding=padding, explicit_paddings=explicit_paddings, dilations=dilations)
    n, height, width, c_in = x.shape
    kh, kw, mid, mult = df.shape
    win = window.window_from_attrs((height, width), (kh, kw), strides, padding, explicit_paddings, "NHWC", dilations)
    c_out = pf.shape[-1]
    banded = (
        jit.use_compiled(xp, compiled, x.dtype, *(a.dtype for a in inputs))
        and x.ndim == 4 and mult == 1
        and (ef is None and c_in == mid or ef is not None and tuple(ef.shape) == (1, 1, c_in, mid)
             and eb.shape == (mid,))
        and tuple(pf.shape[:3]) == (1, 1, mid) and db.shape == (mid,) and pb.shape == (c_out,)
        and (residual is None or tuple(residual.shape) == (n, win.out_h, win.out_w, c_out))
    )
    if not banded:
        return (_twin(xp, x, ef, eb, df, db, pf, pb, residual, attrs, expand_activation, depthwise_activation,
                      compiled),)
    return (_banded(x, ef, eb, df, db, pf, pb, residual, win, expand_activation, depthwise_activation),)


def _banded(x, ef, eb, df, db, pf, pb, residual, win: window.Window2D, expand_activation: str,
            depthwise_activation: str):
    n, height, width, c_in = x.shape
    kh, kw, mid, _ = df.shape
    c_out = pf.shape[-1]
    x = np.ascontiguousarray(x)
    w_expand = None if ef is None else np.ascontiguousarray(ef).reshape(c_in, mid)
    w_project = np.ascontiguousarray(pf).reshape(mid, c_out)
    w_depthwise = np.ascontiguousarray(df).reshape(kh * kw, mid)
    db, pb = np.ascontiguousarray(db), np.ascontiguousarray(pb)
    sh, sw, dh, dw = win.stride_h, win.stride_w, win.dilation_h, win.dilation_w
    halo = (kh - 1) * dh
    out = np.empty((n, win.out_h, win.out_w, c_out), np.float32)
    if out.size == 0:
        return out
    rows = max(1, (_BAND_BYTES // (width * mid * 4) - halo) // sh)
    if n < pool.pool_size():
        # Too few images for the pool's threads: at least a band per thread, or the late blocks (14x14, 7x7,
        # a band each at batch 1) run on one core. Their halos' rows are expanded twice, less than it saves.
        rows = min(rows, -(-win.out_h // pool.pool_size()))
    code = depthwise.ACTIVATION_CODES[depthwise_activation or None]

    def work(band: tuple[int, int, int]) -> None:
        b, r0, r1 = band
        # Input rows the band's windows read, within the image (the rest is padding, which reads nothing).
        first, last = r0 * sh - win.pad_top, (r1 - 1) * sh - win.pad_top + halo
        i0, i1 = max(first, 0), min(last + 1, height)
        i1 = max(i1, i0)
        expanded = x[b, i0:i1].reshape(-1, c_in)
        if w_expand is not None:
            expanded = np.matmul(expanded, w_expand)
            if expand_activation:  # the matmul epilogue's compiled pass, as a dense layer's
                compiled_rows.bias_activation_into(expanded, eb, expand_activation)
            else:
                expanded += eb
        reduced = np.empty(((r1 - r0) * win.out_w, mid), np.float32)
        # The band's row 0 is image row i0, and its output row 0 is output row r0: padding shifts by both.
        depthwise.depthwise_rows(expanded, w_depthwise, db, i1 - i0, width, mid, kh, kw, 1, sh, sw, dh, dw,
                                 win.pad_top + i0 - r0 * sh, win.pad_left, code, np.float32(0), r1 - r0, win.out_w,
                                 0, 0, r1 - r0, reduced)
        block = out[b, r0:r1].reshape(-1, c_out)
        np.matmul(reduced, w_project, out=block)
        block += pb
        if residual is not None:
            block += residual[b, r0:r1].reshape(-1, c_out)

    pool.run_tasks(work, [(b, r, min(r + rows, win.out_h)) for b in range(n) for r in range(0, win.out_h, rows)])
    return out
