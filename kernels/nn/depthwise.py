"""Depthwise convolution as one compiled pass: every output pixel's channel vector summed over its taps and
finished (bias, activation) while it is in registers, instead of numpy's pass per tap over the whole block.

The numpy twin is kernels.nn.conv.depthwise_conv2d_nhwc with kernels.nn.fused's epilogue; this loop computes the
same thing in the same order (float32 products summed tap by tap in filter order, then + bias, then the
activation), so the two agree to the bit on finite inputs. What the numpy body needs extra passes for is
done by indexing here: stride 2 reads the input at stride 2 (no de-interleaved phase copies), and padding
is a smaller tap range at the border (no padded copy). Work is split into chunks of output rows run on the
engine's thread pool (the loop releases the GIL).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.jit import compiled, readonly
from kernels.nn.window import Window2D
from kernels.pool import chunks, run_chunks

__all__ = ["ACTIVATION_CODES", "depthwise_rows", "depthwise_conv2d_compiled"]

# Activations the loop applies itself (the codes are what it takes); others run as the numpy epilogue.
ACTIVATION_CODES = {None: 0, "Relu": 1, "Relu6": 2, "Elu": 3, "LeakyRelu": 4}

# Output bytes per chunk: a few chunks per worker so the pool's threads share the work evenly, each big
# enough that the pool's dispatch (~20 us) is noise.
_CHUNK_BYTES = 256 << 10


@compiled(
    f"void({readonly(2)}, {readonly(2)}, {readonly(1)}, int64, int64, int64, int64, int64, int64, int64, int64,"
    " int64, int64, int64, int64, int64, float32, int64, int64, int64, int64, int64, float32[:, ::1])",
    ops=("DepthwiseConv2dNative", "_FusedDepthwiseConv2dNative", "_TensorgateInvertedResidual"),
)
def depthwise_rows(x, w, bias, h, wd, c, kh, kw, mult, sh, sw, dh, dw, pad_t, pad_l, act, alpha,
                   oh, ow, b0, r0, r1, out):  # pragma: no cover
    """Output rows [r0, r1) of image b0 of a depthwise convolution of NHWC x [?, h, wd, c] with w
    [kh, kw, c * mult], + bias (if it is not empty), then activation `act` (ACTIVATION_CODES). The arrays
    come as [pixels, channels] matrices (x, out) and [taps, channels] (w): a view made inside the loop would
    cost a reference count each, while a row index stays fixed across the channel loop, so that loop has
    no index check left in it and vectorizes.

    Each output row is its own accumulator: tap by tap, every output pixel's channel vector gains its input
    pixel's times the tap's weights, a contiguous multiply-add that vectorizes; a tap's range of output
    columns is cut to the ones that read inside the image, which is how padding costs nothing."""
    oc = c * mult
    b = b0
    for r in range(r0, r1):
        op = (b * oh + r) * ow  # the output row's first pixel
        for q in range(ow):
            for k in range(oc):
                out[op + q, k] = 0.0
        top = r * sh - pad_t
        for i in range(kh):
            row = top + i * dh
            if row < 0 or row >= h:
                continue
            xp_ = (b * h + row) * wd
            for j in range(kw):
                off = j * dw - pad_l
                # Output columns q whose input column q * sw + off lies inside the image.
                q0 = 0 if off >= 0 else (-off + sw - 1) // sw
                q1 = min(ow, (wd - 1 - off) // sw + 1)
                t = i * kw + j
                for q in range(q0, q1):
                    xq = xp_ + q * sw + off
                    oq = op + q
                    if mult == 1:
                        for k in range(oc):
                            out[oq, k] += x[xq, k] * w[t, k]
                    else:
                        for ch in range(c):
                            v = x[xq, ch]
                            for m in range(mult):
                                out[oq, ch * mult + m] += v * w[t, ch * mult + m]
        # The epilogue, one loop per case so that each vectorizes.
        for q in range(op, op + ow):
            if bias.shape[0] != 0:
                for k in range(oc):
                    out[q, k] += bias[k]
            if act == 1:
                for k in range(oc):
                    if out[q, k] < 0:
                        out[q, k] = 0.0
            elif act == 2:
                for k in range(oc):
                    v = out[q, k]
                    out[q, k] = 0.0 if v < 0 else (6.0 if v > 6 else v)
            elif act == 3:
                for k in range(oc):
                    v = out[q, k]
                    if v < 0:
                        out[q, k] = np.exp(v) - np.float32(1.0)
            elif act == 4:
                for k in range(oc):
                    v = out[q, k]
                    s = v * alpha
                    if alpha > 0 and alpha <= 1:
                        out[q, k] = s if s > v else v
                    elif alpha > 1:
                        out[q, k] = s if s < v else v
                    elif not v > 0:
                        out[q, k] = s


def depthwise_conv2d_compiled(
    xp: Any, x: Any, filt: Any, win: Window2D, bias: Any | None = None, activation: str | None = None,
    alpha: float = 0.2,
) -> Any:
    """DepthwiseConv2dNative (+ bias, + activation) of float32 NHWC `x` and a [kh, kw, c, mult] filter, by the
    compiled loop. `activation` must be a key of ACTIVATION_CODES."""
    n, _, _, c = x.shape
    kh, kw, _, mult = filt.shape
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(filt).reshape(kh, kw, c * mult)
    b = np.ascontiguousarray(bias, dtype=np.float32) if bias is not None else np.empty(0, np.float32)
    out = np.empty((n, win.out_h, win.out_w, c * mult), dtype=np.float32)
    if out.size == 0:
        return out
    code, a = ACTIVATION_CODES[activation], np.float32(alpha)
    h, wd = x.shape[1], x.shape[2]
    geometry = (h, wd, c, kh, kw, mult, win.stride_h, win.stride_w, win.dilation_h, win.dilation_w, win.pad_top,
                win.pad_left, code, a, win.out_h, win.out_w)
    xf, wf, of = x.reshape(-1, c), w.reshape(kh * kw, c * mult), out.reshape(-1, c * mult)

    def work(p: Any) -> None:
        for image in range(p.b0, p.b1):
            depthwise_rows(xf, wf, b, *geometry, image, p.r0, p.r1, of)

    row_bytes = win.out_w * c * mult * 4
    budget = max(min(_CHUNK_BYTES, n * win.out_h * row_bytes // 4), row_bytes)
    run_chunks(xp, work, chunks(n, win.out_h, row_bytes, budget))
    return out
