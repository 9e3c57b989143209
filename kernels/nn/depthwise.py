"""Depthwise convolution as one compiled pass: every output pixel's channel vector summed over its taps and
finished (bias, activation) while it is in cache, instead of numpy's pass per tap over the whole block.

The numpy twin is kernels.nn.conv.depthwise_conv2d_nhwc with kernels.nn.fused's epilogue; these loops compute
the same thing in the same order (float32 products summed tap by tap in filter order, then + bias, then the
activation), so the two agree to the bit on finite inputs. What the numpy body needs extra passes for is
done by indexing here: padding is a smaller tap range at the border (no padded copy). Work is split into
chunks of output rows run on the engine's thread pool (the loops release the GIL). Activations that need
exp (Sigmoid, Swish) or that the loops do not have (HardSwish) run as kernels/nn/compiled_rows.py's pass
over each chunk's rows right after the loop, while they are in cache.

With a channel multiplier of 1 (every depthwise layer of the MobileNets and EfficientNets) a tap's share
of a run of output pixels is one contiguous multiply-add over (pixels x channels) values against the tap's
weights repeated along the run: one long loop that vectorizes, where a loop per output pixel is a few
vector steps (a narrow layer has 16 to 32 channels) behind its own setup. Where a row of 3 or 5 taps all
read inside the image, they run as one such pass that keeps each sum in a register across them (in tap
order still). A horizontal stride, a multiplier or a wide layer takes the loop per output pixel, over its
channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.jit import compiled, readonly
from kernels.nn import compiled_rows
from kernels.nn.window import Window2D
from kernels.pool import chunks, run_chunks

__all__ = ["ACTIVATION_CODES", "depthwise_conv2d_compiled", "depthwise_rows"]

# Activations the loops apply themselves (the codes are what they take); others run as the numpy epilogue.
ACTIVATION_CODES = {None: 0, "Relu": 1, "Relu6": 2, "Elu": 3, "LeakyRelu": 4}

# Output bytes per chunk: a few chunks per worker so the pool's threads share the work evenly, each big
# enough that the pool's dispatch (~20 us) is noise.
_CHUNK_BYTES = 256 << 10
# Output values per segment of a row (multiplier 1): its sums, input runs and the tap weights repeated along
# it stay in L1. Wider layers (over half of it in channels) vectorize well enough a pixel at a time.
_SEGMENT_VALUES = 1024

_OPS = ("DepthwiseConv2dNative", "_FusedDepthwiseConv2dNative", "_TensorgateInvertedResidual")
_INTS = ", ".join(["int64"] * 12)


def depthwise_rows(x, w, bias, h, wd, c, kh, kw, mult, sh, sw, dh, dw, pad_t, pad_l, act, alpha, oh, ow, b0, r0, r1,
                   out) -> None:
    """Output rows [r0, r1) of image b0 of a depthwise convolution of NHWC x [?, h, wd, c] with w
    [kh, kw, c * mult], + bias (if it is not empty), then activation `act` (ACTIVATION_CODES), into out. The
    arrays come as C-contiguous float32 [pixels, channels] matrices (x, out) and [taps, channels] (w)."""
    if mult == 1 and sw == 1 and 2 * c <= _SEGMENT_VALUES:
        _contiguous_rows(x.reshape(-1), w, bias, h, wd, c, kh, kw, sh, dh, dw, pad_t, pad_l, oh, ow, b0, r0, r1, out)
    else:
        _pixel_rows(x, w, bias, h, wd, c, kh, kw, mult, sh, sw, dh, dw, pad_t, pad_l, oh, ow, b0, r0, r1, out)
    if act:
        _activation_rows(out, (b0 * oh + r0) * ow, (b0 * oh + r1) * ow, act, alpha)


@compiled(f"void({readonly(1)}, {readonly(2)}, {readonly(1)}, {_INTS}, int64, int64, int64, float32[:, ::1])", ops=_OPS)
def _contiguous_rows(src, w, bias, h, wd, c, kh, kw, sh, dh, dw, pad_t, pad_l, oh, ow, b, r0, r1,
                     out):  # pragma: no cover - compiled
    """depthwise_rows' sums and bias for a multiplier of 1 and a horizontal stride of 1; src is x flattened."""
    taps = kh * kw
    seg = max(1, min(ow, _SEGMENT_VALUES // c))
    # The taps' weights and the bias repeated along a segment, so that the loops need no modulo.
    tiled = np.empty((taps, seg * c), np.float32)
    for t in range(taps):
        for q in range(seg):
            for k in range(c):
                tiled[t, q * c + k] = w[t, k]
    has_bias = bias.shape[0] != 0
    bias_row = np.empty(seg * c if has_bias else 0, np.float32)
    for q in range(seg if has_bias else 0):
        for k in range(c):
            bias_row[q * c + k] = bias[k]
    of = out.reshape(-1)
    # NOTE: the loops go over views: an index numba cannot prove non-negative costs each element a wraparound
    # check, which keeps the loop from vectorizing (measured 10x slower).
    for r in range(r0, r1):
        top = r * sh - pad_t
        for s0 in range(0, ow, seg):
            s1 = min(s0 + seg, ow)
            o = ((b * oh + r) * ow + s0) * c  # the segment's first value
            acc = of[o : o + (s1 - s0) * c]
            for e in range((s1 - s0) * c):
                acc[e] = 0.0
            for i in range(kh):
                row = top + i * dh
                if row < 0 or row >= h:
                    continue
                first = (b * h + row) * wd - pad_l  # input column q + j * dw of the row is at first + q + j * dw
                # Columns [qa, qb) of the segment where all of a row of 3 or 5 taps read inside the image.
                qa, qb = s1, s1
                if kw == 3 or kw == 5:
                    qa = max(s0, pad_l)
                    qb = max(min(s1, wd - (kw - 1) * dw + pad_l), qa)
                if qb > qa:
                    n = (qb - qa) * c
                    dst = acc[(qa - s0) * c : (qa - s0) * c + n]
                    t = i * kw
                    a0, a1, a2 = (first + qa) * c, (first + qa + dw) * c, (first + qa + 2 * dw) * c
                    x0, x1, x2 = src[a0 : a0 + n], src[a1 : a1 + n], src[a2 : a2 + n]
                    w0, w1, w2 = tiled[t], tiled[t + 1], tiled[t + 2]
                    if kw == 3:
                        for e in range(n):
                            v = dst[e]
                            v += x0[e] * w0[e]
                            v += x1[e] * w1[e]
                            v += x2[e] * w2[e]
                            dst[e] = v
                    else:
                        # NOTE: 3 taps, then 2: a loop over all 5 needs more runtime alias checks than LLVM
                        # allows and stays scalar (5x slower). The sums keep their order.
                        for e in range(n):
                            v = dst[e]
                            v += x0[e] * w0[e]
                            v += x1[e] * w1[e]
                            v += x2[e] * w2[e]
                            dst[e] = v
                        a3, a4 = (first + qa + 3 * dw) * c, (first + qa + 4 * dw) * c
                        x3, x4 = src[a3 : a3 + n], src[a4 : a4 + n]
                        w3, w4 = tiled[t + 3], tiled[t + 4]
                        for e in range(n):
                            v = dst[e]
                            v += x3[e] * w3[e]
                            v += x4[e] * w4[e]
                            dst[e] = v
                # The other columns (all of them without such a run) tap by tap, in tap order.
                for j in range(kw):
                    off = j * dw - pad_l
                    # Output columns q whose input column q + off lies inside the image.
                    q0, q1 = max(s0, -off), min(s1, wd - off)
                    weights = tiled[i * kw + j]
                    for part in range(2):
                        u0, u1 = (q0, min(q1, qa)) if part == 0 else (max(q0, qb), q1)
                        if u1 <= u0:
                            continue
                        n = (u1 - u0) * c
                        dst = acc[(u0 - s0) * c : (u0 - s0) * c + n]
                        a = (first + u0 + j * dw) * c
                        x = src[a : a + n]
                        for e in range(n):
                            dst[e] += x[e] * weights[e]
            if has_bias:
                for e in range((s1 - s0) * c):
                    acc[e] += bias_row[e]


@compiled(f"void({readonly(2)}, {readonly(2)}, {readonly(1)}, {_INTS}, int64, int64, int64, int64, int64, "
          "float32[:, ::1])", ops=_OPS)
def _pixel_rows(x, w, bias, h, wd, c, kh, kw, mult, sh, sw, dh, dw, pad_t, pad_l, oh, ow, b, r0, r1,
                out):  # pragma: no cover - compiled
    """depthwise_rows' sums and bias a pixel at a time: each output row is its own accumulator, tap by tap,
    every output pixel's channel vector gaining its input pixel's times the tap's weights (a row index stays
    fixed across the channel loop, so that loop has no index check left in it and vectorizes)."""
    oc = c * mult
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
        if bias.shape[0] != 0:
            for q in range(op, op + ow):
                for k in range(oc):
                    out[q, k] += bias[k]


@compiled("void(float32[:, ::1], int64, int64, int64, float32)", ops=_OPS)
def _activation_rows(out, first, last, act, alpha):  # pragma: no cover - compiled
    """Activation `act` (ACTIVATION_CODES) in place on rows [first, last) of out, one loop per case so that
    each vectorizes."""
    oc = out.shape[1]
    for q in range(first, last):
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
    compiled loop. `activation` must be a key of ACTIVATION_CODES or of compiled_rows.ACTIVATIONS."""
    n, _, _, c = x.shape
    kh, kw, _, mult = filt.shape
    x = np.ascontiguousarray(x)
    w = np.ascontiguousarray(filt).reshape(kh, kw, c * mult)
    b = np.ascontiguousarray(bias, dtype=np.float32) if bias is not None else np.empty(0, np.float32)
    out = np.empty((n, win.out_h, win.out_w, c * mult), dtype=np.float32)
    if out.size == 0:
        return out
    # An activation of compiled_rows' runs over each chunk's rows after the loop has added the bias.
    row_activation = activation if activation not in ACTIVATION_CODES else None
    if row_activation is not None and row_activation not in compiled_rows.ACTIVATIONS:
        raise ValueError(f"depthwise convolution has no compiled activation {row_activation!r}")
    code, a = ACTIVATION_CODES[None if row_activation else activation], np.float32(alpha)
    h, wd = x.shape[1], x.shape[2]
    geometry = (h, wd, c, kh, kw, mult, win.stride_h, win.stride_w, win.dilation_h, win.dilation_w, win.pad_top,
                win.pad_left, code, a, win.out_h, win.out_w)
    xf, wf, of = x.reshape(-1, c), w.reshape(kh * kw, c * mult), out.reshape(-1, c * mult)

    pixels_per_image = win.out_h * win.out_w

    def work(p: Any) -> None:
        for image in range(p.b0, p.b1):
            depthwise_rows(xf, wf, b, *geometry, image, p.r0, p.r1, of)
            if row_activation is not None:
                first = image * pixels_per_image + p.r0 * win.out_w
                compiled_rows.activation_into(of[first : first + (p.r1 - p.r0) * win.out_w], row_activation, alpha)

    row_bytes = win.out_w * c * mult * 4
    budget = max(min(_CHUNK_BYTES, n * win.out_h * row_bytes // 4), row_bytes)
    run_chunks(xp, work, chunks(n, win.out_h, row_bytes, budget))
    return out
