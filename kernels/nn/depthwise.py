"""Depthwise convolution as one compiled pass: every output pixel's channel vector summed over its taps and
finished (bias, activation) while it is in cache, instead of numpy's pass per tap over the whole block.

The numpy twin is kernels.nn.conv.depthwise_conv2d_nhwc with kernels.nn.fused's epilogue; these loops compute
the same thing in the same order (float32 products summed tap by tap in filter order, padding cells as zeros,
then + bias, then the activation), so the two agree to the bit on finite inputs. Work is split into chunks of
output rows run on the engine's thread pool (the loops release the GIL). Activations that need exp (Sigmoid,
Swish) or that the loops do not have (HardSwish) run as kernels/nn/compiled_rows.py's pass over each chunk's
rows right after the loop, while they are in cache.

With a channel multiplier of 1 (every depthwise layer of the MobileNets, EfficientNets, NASNet and Xception)
a tap's share of a run of output pixels is one contiguous multiply-add over (pixels x channels) values against
the tap's weights repeated along the run: one long loop that vectorizes, where a loop per output pixel is a
few vector steps (a narrow layer has 16 to 32 channels) behind its own setup. For that, the chunk's input rows
are first copied into phase rows, as the numpy body's phase images: phase p of a row holds its columns p,
p + stride, ... with zeros where they are padding, so that at any stride and dilation tap j of an output run
reads one contiguous run of a phase row, with no border cases. Taps run three at a time in one pass that keeps
each sum in a register across them (in tap order still). On one thread against the border-case loops it
replaced: 7x7 stride 2 (NASNet's first cells) 2.2x faster, 7x7 and 5x5 stride 1 1.2-1.4x, 3x3 the same. A
multiplier takes the loop per output pixel, over its channels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.jit import compiled, readonly
from kernels.nn import compiled_rows
from kernels.nn.window import Window2D
from kernels.pool import chunks, pool_size, run_chunks

__all__ = ["ACTIVATION_CODES", "INPUT_ACTIVATION_CODES", "depthwise_conv2d_compiled", "depthwise_rows"]

# Activations the loops apply themselves (the codes are what they take); others run as the numpy epilogue.
ACTIVATION_CODES = {None: 0, "Relu": 1, "Relu6": 2, "Elu": 3, "LeakyRelu": 4}
# Activations the loop applies to its input as it reads it (multiplier 1).
INPUT_ACTIVATION_CODES = {"": 0, "Relu": 1, "Relu6": 2}

# Output bytes per chunk: at most this, and a few chunks per worker so the pool's threads share the work evenly.
_CHUNK_BYTES = 256 << 10
# Multiply-adds per chunk: at least this many, so that the pool's hand-off (tens of microseconds on a busy
# machine) stays small beside the ~30 us the loop takes. A smaller convolution runs as one call on the
# caller's thread (MobileNet's and NASNet's 7x7 and 14x14 layers at batch 1: 0.11 ms in 4-7 chunks, 0.013 ms
# in one).
_MIN_CHUNK_MACS = 1 << 18
# Output values per segment of a row (multiplier 1): its sums, input runs and the tap weights repeated along
# it stay in L1 (a wider layer's segment is one pixel).
_SEGMENT_VALUES = 1024

_OPS = ("DepthwiseConv2dNative", "_FusedDepthwiseConv2dNative", "_TensorgateInvertedResidual",
        "_TensorgateSeparableConv2D")
_INTS = ", ".join(["int64"] * 12)


def depthwise_rows(x, w, bias, h, wd, c, kh, kw, mult, sh, sw, dh, dw, pad_t, pad_l, act, alpha, oh, ow, b0, r0, r1,
                   out, input_act=0) -> None:
    """Output rows [r0, r1) of image b0 of a depthwise convolution of NHWC x [?, h, wd, c] with w
    [kh, kw, c * mult], + bias (if it is not empty), then activation `act` (ACTIVATION_CODES), into out. The
    arrays come as C-contiguous float32 [pixels, channels] matrices (x, out) and [taps, channels] (w). With
    `input_act` (INPUT_ACTIVATION_CODES; a multiplier of 1 only) x is read through Relu or Relu6."""
    if mult == 1:
        _phase_rows(x.reshape(-1), w, bias, h, wd, c, kh, kw, sh, sw, dh, dw, pad_t, pad_l, oh, ow, b0, r0, r1,
                    input_act, out)
    elif input_act:
        raise ValueError("depthwise_rows reads its input through an activation only with a multiplier of 1")
    else:
        _pixel_rows(x, w, bias, h, wd, c, kh, kw, mult, sh, sw, dh, dw, pad_t, pad_l, oh, ow, b0, r0, r1, out)
    if act:
        _activation_rows(out, (b0 * oh + r0) * ow, (b0 * oh + r1) * ow, act, alpha)


@compiled(f"void({readonly(1)}, {readonly(2)}, {readonly(1)}, {_INTS}, int64, int64, int64, int64, int64, "
          "float32[:, ::1])", ops=_OPS)
def _phase_rows(src, w, bias, h, wd, c, kh, kw, sh, sw, dh, dw, pad_t, pad_l, oh, ow, b, r0, r1, input_act,
                out):  # pragma: no cover - compiled
    """depthwise_rows' sums and bias for a multiplier of 1, at any stride and dilation; src is x flattened."""
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
    # The input rows the output rows read, each split into sw phase rows (phase p, column u: input column
    # u * sw + p - pad_l), zeros where that column is padding: tap j of output column q then reads phase
    # (j * dw) % sw at column q + (j * dw) // sw, so every tap is one contiguous run along the output row.
    y0 = r0 * sh - pad_t
    y1 = (r1 - 1) * sh - pad_t + (kh - 1) * dh + 1
    width = ow + ((kw - 1) * dw) // sw
    rows = np.empty((y1 - y0) * sw * width * c, np.float32)
    for y in range(y0, y1):
        if y < 0 or y >= h:
            continue
        line = (b * h + y) * wd * c
        for p in range(sw):
            base = ((y - y0) * sw + p) * width * c
            dst = rows[base : base + width * c]
            # Phase columns [u0, u1) read inside the image: input columns u * sw + p - pad_l.
            u0 = min(max(0, (pad_l - p + sw - 1) // sw), width)
            u1 = max(min(width, (wd - 1 - p + pad_l) // sw + 1), u0)
            for e in range(u0 * c):
                dst[e] = 0.0
            for e in range(u1 * c, width * c):
                dst[e] = 0.0
            # Runs of input columns: the whole row at stride 1, a pixel at a time otherwise; through the input
            # activation as the Relu and Relu6 kernels compute it (NaN stays NaN).
            run_cells = max(u1 - u0, 1) if sw == 1 else 1
            for u in range(u0, u1, run_cells):
                a = line + (u * sw + p - pad_l) * c
                run = src[a : a + run_cells * c]
                cell = dst[u * c : (u + run_cells) * c]
                if input_act == 1:
                    for k in range(run_cells * c):
                        v = run[k]
                        cell[k] = 0.0 if v < 0 else v
                elif input_act == 2:
                    for k in range(run_cells * c):
                        v = run[k]
                        cell[k] = 0.0 if v < 0 else (6.0 if v > 6 else v)
                else:
                    for k in range(run_cells * c):
                        cell[k] = run[k]
    of = out.reshape(-1)
    # NOTE: the loops go over views: an index numba cannot prove non-negative costs each element a wraparound
    # check, which keeps the loop from vectorizing (measured 10x slower).
    for r in range(r0, r1):
        top = r * sh - pad_t
        for s0 in range(0, ow, seg):
            s1 = min(s0 + seg, ow)
            n = (s1 - s0) * c
            o = ((b * oh + r) * ow + s0) * c
            acc = of[o : o + n]
            for e in range(n):
                acc[e] = 0.0
            for i in range(kh):
                y = top + i * dh
                if y < 0 or y >= h:
                    continue
                first = (y - y0) * sw
                j = 0
                while j < kw:
                    t = i * kw + j
                    a0 = ((first + (j * dw) % sw) * width + s0 + (j * dw) // sw) * c
                    x0 = rows[a0 : a0 + n]
                    w0 = tiled[t]
                    if j + 2 < kw:
                        a1 = ((first + ((j + 1) * dw) % sw) * width + s0 + ((j + 1) * dw) // sw) * c
                        a2 = ((first + ((j + 2) * dw) % sw) * width + s0 + ((j + 2) * dw) // sw) * c
                        x1, x2 = rows[a1 : a1 + n], rows[a2 : a2 + n]
                        w1, w2 = tiled[t + 1], tiled[t + 2]
                        for e in range(n):
                            v = acc[e]
                            v += x0[e] * w0[e]
                            v += x1[e] * w1[e]
                            v += x2[e] * w2[e]
                            acc[e] = v
                        j += 3
                    elif j + 1 < kw:
                        a1 = ((first + ((j + 1) * dw) % sw) * width + s0 + ((j + 1) * dw) // sw) * c
                        x1 = rows[a1 : a1 + n]
                        w1 = tiled[t + 1]
                        for e in range(n):
                            v = acc[e]
                            v += x0[e] * w0[e]
                            v += x1[e] * w1[e]
                            acc[e] = v
                        j += 2
                    else:
                        for e in range(n):
                            acc[e] += x0[e] * w0[e]
                        j += 1
            if has_bias:
                for e in range(n):
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

    run_chunks(xp, work, _chunks(n, win, c * mult))
    return out


def _chunks(n: int, win: Window2D, channels: int) -> list[Any]:
    """Chunks of output rows for `channels` output channels: a few per pool thread, each of at least
    _MIN_CHUNK_MACS multiply-adds and at most _CHUNK_BYTES of output."""
    row_values = win.out_w * channels
    taps = win.kh * win.kw
    total = n * win.out_h * row_values * taps
    budget = min(total // (2 * pool_size()), (_CHUNK_BYTES // 4) * taps)
    return chunks(n, win.out_h, row_values * taps, max(budget, _MIN_CHUNK_MACS))
