"""Compiled row loops for the transformer blocks the optimizer fuses: RMS normalisation, attention's
scaled, masked softmax, rotary position embeddings (rotate-half) and gated activations (SwiGLU, GeGLU,
ReGLU).

Each loop makes one pass per row while the row is in L1, where numpy would make a pass over the whole
tensor per operation (RMSNorm's chain is six, a masked softmax five, rotate-half six); rows are tiled
over the engine's thread pool. The kernels that call these (kernels/nn/normalization.py, attention.py,
rotary.py, projection.py) decide with `kernels.jit.use_compiled` and keep their numpy code as the twin;
each loop follows its twin's float32 operation order: exp and erf are kernels/nn/compiled_rows.py's
float32 polynomials (within a few ulps of numpy's), and sums run in eight registers (numpy's order for
rows of up to 128 values), so results agree with the twins to a few ulps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

from kernels.jit import compiled, readonly
from kernels.nn.compiled_rows import (  # the float32 exp and erf polynomials, shared with compiled_rows
    _E0,
    _E1,
    _E2,
    _E3,
    _E4,
    _E5,
    _EXP_HI,
    _EXP_LO,
    _EXPONENT_BIAS,
    _GELU_CUBIC,
    _LN2_HI,
    _LN2_LO,
    _LOG2E,
    _P0,
    _P1,
    _P2,
    _P3,
    _P4,
    _P5,
    _P6,
    _Q0,
    _Q1,
    _Q2,
    _Q3,
    _Q4,
    _ROUNDER,
    _SQRT1_2,
    _SQRT_2_OVER_PI,
)
from kernels.pool import chunks, run_tasks

__all__ = ["GATES", "gated_into", "masked_softmax_into", "rms_norm", "rotate_half"]

# Gate activation codes of `gated`, by the name the optimizer gives them.
_SILU, _GELU_EXACT, _GELU_APPROXIMATE, _RELU = range(4)
GATES = {"Silu": _SILU, "GeluExact": _GELU_EXACT, "GeluApproximate": _GELU_APPROXIMATE, "Relu": _RELU}

# Elements per tile on the thread pool, as in compiled_rows: about 0.3 ms of work a tile.
_TILE_ELEMENTS = 1 << 18

_f = numpy.float32
_ZERO, _HALF, _ONE, _MINUS_TWO = _f(0), _f(0.5), _f(1), _f(-2)
_FOUR, _MINUS_FOUR = _f(4), _f(-4)


def _tiled(rows: int, cols: int, work: Callable[[int, int], None]) -> None:
    """work(r0, r1) over tiles of rows: inline when the whole is one tile, on the engine's pool otherwise."""
    if rows * cols <= _TILE_ELEMENTS:
        work(0, rows)
        return
    run_tasks(lambda part: work(part.b0, part.b1), chunks(rows, 1, max(cols, 1), _TILE_ELEMENTS))


# --- RMS normalisation ----------------------------------------------------------------------------------


@compiled(f"void({readonly(2)}, {readonly(1)}, float32, float32, float32[:, ::1])", ops=("_TensorgateRmsNorm",))
def _rms_norm_rows(x, gamma, count, epsilon, out):  # pragma: no cover - compiled
    """out = x * (1 / sqrt(sum(x^2) / count + epsilon)) * gamma, row by row."""
    rows, cols = x.shape
    blocked = cols - cols % 8
    for i in range(rows):
        src = x[i]
        dst = out[i]
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = _ZERO
        for j in range(0, blocked, 8):
            s0 += src[j] * src[j]
            s1 += src[j + 1] * src[j + 1]
            s2 += src[j + 2] * src[j + 2]
            s3 += src[j + 3] * src[j + 3]
            s4 += src[j + 4] * src[j + 4]
            s5 += src[j + 5] * src[j + 5]
            s6 += src[j + 6] * src[j + 6]
            s7 += src[j + 7] * src[j + 7]
        s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
        for j in range(blocked, cols):
            s += src[j] * src[j]
        inv = numpy.divide(_ONE, numpy.sqrt(numpy.divide(s, count) + epsilon))
        for j in range(cols):
            dst[j] = src[j] * inv * gamma[j]


def rms_norm(x: Any, gamma: Any, epsilon: float) -> Any:
    """RMS normalisation over the last axis of a float32 array of rank >= 1 with a non-empty last axis;
    gamma is a float32 vector as long as that axis."""
    src = numpy.ascontiguousarray(x).reshape(-1, x.shape[-1])
    y = numpy.empty(src.shape, numpy.float32)
    g = numpy.ascontiguousarray(gamma, numpy.float32).reshape(-1)
    count, eps = numpy.float32(src.shape[1]), numpy.float32(epsilon)
    _tiled(src.shape[0], src.shape[1], lambda r0, r1: _rms_norm_rows(src[r0:r1], g, count, eps, y[r0:r1]))
    return y.reshape(x.shape)


# --- attention's softmax --------------------------------------------------------------------------------


@compiled(f"void(float32[:, :, :, ::1], float32, {readonly(4)}, {readonly(4)}, int64, "
          "Array(uint8, 4, 'C', readonly=True), int64, int64, float32, int64, int64, int64)", ops=("_TensorgateAttention",))
def _masked_softmax_rows(scores, scale, bias, bias2, bias_terms, mask, has_mask, keep, fill, zero_masked, b0,
                         t0):  # pragma: no cover - compiled
    """scores[b, n, t] <- softmax(where(mask == keep, scores * scale + bias, fill)), then zero where the mask
    is not `keep` when `zero_masked`: in place, over the last axis. The bias is `bias_terms` (0, 1 or 2) of
    bias and bias2, added to each other first (the graph's Add of two terms). bias, bias2 and mask broadcast
    as numpy does against [b0 + b, n, t0 + t, s] (each of their dims 1 or full): scores holds the queries
    [t0, t0 + t) of batch items [b0, b0 + b)."""
    batch, heads, queries, keys = scores.shape
    b_bias, n_bias, t_bias, s_bias = bias.shape
    b_bias2, n_bias2, t_bias2, s_bias2 = bias2.shape
    b_mask, n_mask, t_mask, s_mask = mask.shape
    blocked = keys - keys % 8
    kept = keep != 0
    terms = numpy.empty(keys, numpy.float32)  # a row of the two bias terms' sum
    for b in range(batch):
        bb = b0 + b if b_bias > 1 else 0
        bb2 = b0 + b if b_bias2 > 1 else 0
        bm = b0 + b if b_mask > 1 else 0
        for n in range(heads):
            nb = n if n_bias > 1 else 0
            nb2 = n if n_bias2 > 1 else 0
            nm = n if n_mask > 1 else 0
            for t in range(queries):
                row = scores[b, n, t]
                bias_row = bias[bb, nb, t0 + t if t_bias > 1 else 0]
                bias2_row = bias2[bb2, nb2, t0 + t if t_bias2 > 1 else 0]
                mask_row = mask[bm, nm, t0 + t if t_mask > 1 else 0]
                # One loop per case, each free of branches on j, so that they vectorise.
                if bias_terms == 2:
                    if s_bias > 1 and s_bias2 > 1:
                        for j in range(keys):
                            terms[j] = bias_row[j] + bias2_row[j]
                    elif s_bias > 1:
                        for j in range(keys):
                            terms[j] = bias_row[j] + bias2_row[0]
                    elif s_bias2 > 1:
                        for j in range(keys):
                            terms[j] = bias_row[0] + bias2_row[j]
                    else:
                        shift = bias_row[0] + bias2_row[0]
                        for j in range(keys):
                            terms[j] = shift
                    for j in range(keys):
                        row[j] = row[j] * scale + terms[j]
                elif bias_terms == 1 and s_bias > 1:
                    for j in range(keys):
                        row[j] = row[j] * scale + bias_row[j]
                elif bias_terms == 1:
                    shift = bias_row[0]
                    for j in range(keys):
                        row[j] = row[j] * scale + shift
                elif scale != _ONE:
                    for j in range(keys):
                        row[j] = row[j] * scale
                if has_mask and s_mask > 1:
                    for j in range(keys):
                        if (mask_row[j] != 0) != kept:
                            row[j] = fill
                elif has_mask and (mask_row[0] != 0) != kept:
                    for j in range(keys):
                        row[j] = fill
                # The maximum in eight running maxima (eight independent chains, not one): NaN never wins a
                # comparison, so a row holding one keeps a finite maximum, but its exp is NaN and so is the
                # sum, which makes the row NaN, as the twin's NaN maximum does.
                m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = row[0]
                for j in range(0, blocked, 8):
                    v0, v1, v2, v3 = row[j], row[j + 1], row[j + 2], row[j + 3]
                    v4, v5, v6, v7 = row[j + 4], row[j + 5], row[j + 6], row[j + 7]
                    m0 = v0 if v0 > m0 else m0  # noqa: FURB136  (as the comparison below)
                    m1 = v1 if v1 > m1 else m1  # noqa: FURB136  (as the comparison below)
                    m2 = v2 if v2 > m2 else m2  # noqa: FURB136  (as the comparison below)
                    m3 = v3 if v3 > m3 else m3  # noqa: FURB136  (as the comparison below)
                    m4 = v4 if v4 > m4 else m4  # noqa: FURB136  (as the comparison below)
                    m5 = v5 if v5 > m5 else m5  # noqa: FURB136  (as the comparison below)
                    m6 = v6 if v6 > m6 else m6  # noqa: FURB136  (as the comparison below)
                    m7 = v7 if v7 > m7 else m7  # noqa: FURB136  (as the comparison below)
                m = m0
                for c in (m1, m2, m3, m4, m5, m6, m7):
                    if c > m:  # noqa: PLR1730  (not max(): the comparison decides what NaN does)
                        m = c
                for j in range(blocked, keys):
                    if row[j] > m:  # noqa: PLR1730
                        m = row[j]
                for j in range(keys):
                    e = row[j] - m
                    underflow = e < _EXP_LO
                    if underflow:
                        e = _EXP_LO
                    t2 = e * _LOG2E + _ROUNDER
                    kf = t2 - _ROUNDER
                    r = e - kf * _LN2_HI
                    r = r - kf * _LN2_LO
                    p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
                    p = p * (r * r) + r + _ONE
                    power = numpy.int32((numpy.float32(t2).view(numpy.int32) + _EXPONENT_BIAS) << 23).view(numpy.float32)
                    row[j] = _ZERO if underflow else p * power
                s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = _ZERO
                for j in range(0, blocked, 8):
                    s0 += row[j]
                    s1 += row[j + 1]
                    s2 += row[j + 2]
                    s3 += row[j + 3]
                    s4 += row[j + 4]
                    s5 += row[j + 5]
                    s6 += row[j + 6]
                    s7 += row[j + 7]
                s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
                for j in range(blocked, keys):
                    s += row[j]
                for j in range(keys):
                    row[j] = numpy.divide(row[j], s)
                if has_mask and zero_masked and s_mask > 1:
                    for j in range(keys):
                        if (mask_row[j] != 0) != kept:
                            row[j] = _ZERO
                elif has_mask and zero_masked and (mask_row[0] != 0) != kept:
                    for j in range(keys):
                        row[j] = _ZERO


_NO_BIAS = numpy.zeros((1, 1, 1, 1), numpy.float32)
_NO_MASK = numpy.ones((1, 1, 1, 1), numpy.uint8)


def masked_softmax_into(scores: Any, scale: float, biases: tuple[Any, ...], mask: Any | None, keep: bool, fill: float,
                        zero_masked: bool, b0: int = 0, t0: int = 0) -> None:
    """The compiled twin of kernels/nn/attention.py's softmax step, in place on scores [b, n, t, s] (float32,
    C-contiguous), the queries [t0, t0 + t) of batch items [b0, b0 + b). `biases` holds up to two float32
    terms, added to each other before the scores; they and the mask (bool) are 4-D, C-contiguous, each dim 1
    or the whole batch's, heads', queries' or keys'."""
    if len(biases) > 2:
        raise ValueError(f"masked_softmax_into: at most two bias terms, got {len(biases)}")
    bias = biases[0] if biases else _NO_BIAS
    bias2 = biases[1] if len(biases) == 2 else _NO_BIAS
    _masked_softmax_rows(scores, numpy.float32(scale), bias, bias2, len(biases),
                         _NO_MASK if mask is None else mask.view(numpy.uint8), mask is not None, bool(keep),
                         numpy.float32(fill), bool(zero_masked), b0, t0)


# --- rotary position embeddings -------------------------------------------------------------------------

_INDEX = "Array(int64, 1, 'C', readonly=True)"


@compiled(f"void({readonly(2)}, {readonly(2)}, {readonly(2)}, {_INDEX}, {_INDEX}, float32[:, ::1])",
          ops=("_TensorgateRotary",))
def _rotate_half_rows(x, cos, sin, cos_rows, sin_rows, out):  # pragma: no cover - compiled
    """out[i] = x[i] * cos[cos_rows[i]] + concat(-x2, x1) * sin[sin_rows[i]] row by row (x1, x2 the halves of
    x[i]). Both halves in one loop over 2-D indices, which vectorises (row views offset by half do not);
    x * c - x2 * s is the chain's x * c + (-x2) * s to the bit."""
    rows, width = x.shape
    half = width // 2
    for i in range(rows):
        c = cos_rows[i]
        s = sin_rows[i]
        for j in range(half):
            out[i, j] = x[i, j] * cos[c, j] - x[i, j + half] * sin[s, j]
            out[i, j + half] = x[i, j + half] * cos[c, j + half] + x[i, j] * sin[s, j + half]


def _table_rows(table: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """(table's rows as a C-contiguous [rows, width] array, for each row of an array of `shape` the row of the
    table that broadcasting pairs it with): the last axis of `table` must be the array's own."""
    lead = table.shape[:-1]
    flat = numpy.ascontiguousarray(table, numpy.float32).reshape(-1, table.shape[-1])
    index = numpy.arange(flat.shape[0], dtype=numpy.int64).reshape(lead)
    index = index.reshape((1,) * (len(shape) - 1 - len(lead)) + lead)
    return flat, numpy.ascontiguousarray(numpy.broadcast_to(index, shape[:-1])).reshape(-1)


def rotate_half(x: Any, cos: Any, sin: Any) -> Any:
    """x * cos + concat(-x2, x1) * sin over the last axis, for float32 x of rank >= 1 with an even last axis;
    cos and sin float32, of rank at most x's, broadcasting to x's shape with x's last axis as their own."""
    src = numpy.ascontiguousarray(x).reshape(-1, x.shape[-1])
    y = numpy.empty(src.shape, numpy.float32)
    cos2, cos_rows = _table_rows(cos, x.shape)
    sin2, sin_rows = _table_rows(sin, x.shape)
    _tiled(src.shape[0], src.shape[1],
           lambda r0, r1: _rotate_half_rows(src[r0:r1], cos2, sin2, cos_rows[r0:r1], sin_rows[r0:r1], y[r0:r1]))
    return y.reshape(x.shape)


# --- gated activations ----------------------------------------------------------------------------------


@compiled(f"void({readonly(2)}, float32[:, ::1], int64)", ops=("_TensorgateGatedProjection",))
def _gated_rows(y, out, gate):  # pragma: no cover - compiled
    """out[i, j] = activation(y[i, j]) * y[i, units + j], units = out's width."""
    rows, units = out.shape
    for i in range(rows):
        src = y[i]
        dst = out[i]
        for j in range(units):
            v = src[j]
            if gate == _SILU:
                # v * sigmoid(v), sigmoid without overflow: e = exp(-|v|); 1 / (1 + e) or e / (1 + e).
                e = -v if v > _ZERO else v
                underflow = e < _EXP_LO
                if underflow:
                    e = _EXP_LO
                t = e * _LOG2E + _ROUNDER
                kf = t - _ROUNDER
                r = e - kf * _LN2_HI
                r = r - kf * _LN2_LO
                p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
                p = p * (r * r) + r + _ONE
                e = p * numpy.int32((numpy.float32(t).view(numpy.int32) + _EXPONENT_BIAS) << 23).view(numpy.float32)
                if underflow:
                    e = _ZERO
                sig = numpy.divide(_ONE, _ONE + e) if v >= _ZERO else numpy.divide(e, _ONE + e)
                a = v * sig
            elif gate == _GELU_EXACT:
                t = v * _SQRT1_2
                if t > _FOUR:
                    t = _FOUR
                elif t < _MINUS_FOUR:
                    t = _MINUS_FOUR
                t2 = t * t
                p = t2 * _P0 + _P1
                p = p * t2 + _P2
                p = p * t2 + _P3
                p = p * t2 + _P4
                p = p * t2 + _P5
                p = p * t2 + _P6
                q = t2 * _Q0 + _Q1
                q = q * t2 + _Q2
                q = q * t2 + _Q3
                q = q * t2 + _Q4
                t = numpy.divide(t * p, q)
                a = v * _HALF * (t + _ONE)
            elif gate == _GELU_APPROXIMATE:
                e = (v * v * v * _GELU_CUBIC + v) * _SQRT_2_OVER_PI * _MINUS_TWO
                saturated = e > _EXP_HI
                if e < _EXP_LO:
                    e = _EXP_LO
                elif e > _EXP_HI:
                    e = _EXP_HI
                t = e * _LOG2E + _ROUNDER
                kf = t - _ROUNDER
                r = e - kf * _LN2_HI
                r = r - kf * _LN2_LO
                p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
                p = p * (r * r) + r + _ONE
                scale = numpy.int32((numpy.float32(t).view(numpy.int32) + _EXPONENT_BIAS) << 23).view(numpy.float32)
                a = v * _ZERO if saturated else numpy.divide(v, _ONE + p * scale)
            else:
                a = _ZERO if v < _ZERO else v  # noqa: FURB136  (NaN stays NaN; max() would not say so)
            dst[j] = a * src[units + j]


def gated_into(y: Any, gate: str, out: Any) -> None:
    """out <- activation(y[:, :units]) * y[:, units:] for C-contiguous float32 matrices y [rows, 2 * units] and
    out [rows, units], in the calling thread; `gate` is a key of GATES."""
    _gated_rows(y, out, GATES[gate])
