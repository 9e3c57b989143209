"""Recurrent kernels: a whole LSTM or GRU recurrence over a time-major sequence in one op.

Keras writes an LSTM or GRU layer as a While loop whose body computes one time step; the planner
recognises those bodies (engine.passes.fuse_recurrence) and runs the whole loop as one of these ops
instead: the input projection of every step is one matmul (`x @ kernel`, [T*B, D] by [D, G]), then each
step multiplies the state by the recurrent kernel (one BLAS call) and computes the gates.

    _TensorgateLSTM(x, h, c, kernel, recurrent_kernel, bias, mask, output) -> (outputs, h, c)
        z = (x_t @ kernel + h @ recurrent_kernel) + bias;  i, f, g, o = split(z, 4)
        c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)
    _TensorgateGRU(x, h, kernel, input_bias, recurrent_kernel, recurrent_bias, mask, output) -> (outputs, h)
        xz, xr, xh = split(x_t @ kernel + input_bias, 3)
        reset_after:  rz, rr, rh = split(h @ recurrent_kernel + recurrent_bias, 3)
                      z = sigmoid(xz + rz);  r = sigmoid(xr + rr);  hh = tanh(xh + r * rh)
        otherwise:    z = sigmoid(xz + h @ Uz);  r = sigmoid(xr + h @ Ur);  hh = tanh(xh + (r * h) @ Uh)
        h = z * h + (1 - z) * hh

x is [T, B, D], the states [B, H]. `mask` is [T, B] (empty: no masking): where a step's row is 0, the
states keep their values and the step's output repeats the previous one, which starts from `output`
([B, H]), as Keras' masking does; with `zero_masked` it is zeros instead (Keras' zero_output_for_mask,
set by return_sequences under Bidirectional). `outputs` [T, B, H] holds every step's output.

On CPU in float32 each step's gates run as one compiled pass over the rows (sigmoid and tanh from
compiled_rows' float32 exp), with the same operation order as the numpy twin, which computes sigmoid as
the Sigmoid kernel does; the two agree to a few ulps.
"""

from __future__ import annotations

from typing import Any

import numpy

from kernels import blas
from kernels.jit import compiled, readonly, use_compiled
from kernels.math.elementwise import sigmoid
from kernels.nn.compiled_rows import (  # the float32 exp of the compiled softmax
    _E0,
    _E1,
    _E2,
    _E3,
    _E4,
    _E5,
    _EXP_LO,
    _EXPONENT_BIAS,
    _LN2_HI,
    _LN2_LO,
    _LOG2E,
    _ROUNDER,
)
from kernels.registry import kernel

__all__ = ["GRU_OP", "LSTM_OP", "gru", "lstm"]

LSTM_OP, GRU_OP = "_TensorgateLSTM", "_TensorgateGRU"

_f = numpy.float32
_ZERO, _ONE, _TWO = _f(0), _f(1), _f(2)
# tanh(v) for |v| below this is its odd Taylor polynomial (to v^11: 2e-10 off at the bound), where
# (1 - e) / (1 + e) with e = exp(-2|v|) would lose digits to cancellation.
_TANH_SMALL = _f(0.25)
_T3, _T5, _T7, _T9, _T11 = (_f(c) for c in (-1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925))


# --- compiled steps -------------------------------------------------------------------------------------
# Each step runs in stages over all rows: write the arguments a <= 0 whose exp(a) the activations need
# into e, one loop of the float32 exp over them, then the activations: sigmoid(v) = 1/(1+e) for v >= 0,
# else e/(1+e), with e = exp(-|v|), as the Sigmoid kernel computes it; tanh(|v|) = (1-e)/(1+e) with
# e = exp(-2|v|), or its Taylor polynomial for small |v|. Loops of arithmetic and selects only (numpy.divide,
# not `/`, whose zero check would stop them vectorising).


@compiled(f"void({readonly(2)}, float32[:, ::1], {readonly(1)}, {readonly(1)}, float32[:, ::1], float32[:, ::1], "
          f"{readonly(2)}, float32[:, ::1], float32[:, ::1], float32[:, ::1])", ops=(LSTM_OP,))
def _lstm_step(xw, rec, bias, mask, h, c, previous, out, e, cell):  # pragma: no cover - compiled
    """One LSTM step: rec holds h @ recurrent_kernel (and is overwritten), h and c are updated in place, out
    gets the step's output (previous where masked); e [B, 4H] and cell [B, 2H] are scratch. Each loop writes
    arrays it does not read at other columns (c' goes to cell, not back into rec or e), which lets LLVM
    vectorise it."""
    rows, gates = xw.shape
    units = gates // 4
    for row in range(rows):  # the gates' pre-activations, and their exp arguments (tanh's, doubled, for g)
        for j in range(gates):
            v = (xw[row, j] + rec[row, j]) + bias[j]
            rec[row, j] = v
            e[row, j] = -abs(v)
        for j in range(2 * units, 3 * units):
            e[row, j] = e[row, j] + e[row, j]
    for row in range(rows):  # the gates' exps
        for j in range(gates):
            a0 = e[row, j]
            a = _EXP_LO if a0 < _EXP_LO else a0  # noqa: FURB136  (max() would turn NaN into _EXP_LO)
            t = a * _LOG2E + _ROUNDER
            kf = t - _ROUNDER
            r = a - kf * _LN2_HI
            r = r - kf * _LN2_LO
            p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
            p = p * (r * r) + r + _ONE
            scale = numpy.int32((numpy.float32(t).view(numpy.int32) + _EXPONENT_BIAS) << 23).view(numpy.float32)
            e[row, j] = _ZERO if a0 < _EXP_LO else p * scale
    for row in range(rows):  # c' = sigmoid(f) * c + sigmoid(i) * tanh(g) into cell[:, :H]; tanh(c')'s exp argument
        for j in range(units):
            ei, ef, eg = e[row, j], e[row, units + j], e[row, 2 * units + j]
            vi, vf, vg = rec[row, j], rec[row, units + j], rec[row, 2 * units + j]
            ri = numpy.divide(_ONE, ei + _ONE)
            rf = numpy.divide(_ONE, ef + _ONE)
            si = ri if vi >= _ZERO else ei * ri
            sf = rf if vf >= _ZERO else ef * rf
            g = numpy.divide(_ONE - eg, _ONE + eg)
            g2 = vg * vg
            small = vg * (((((_T11 * g2 + _T9) * g2 + _T7) * g2 + _T5) * g2 + _T3) * g2 + _ONE)
            g = small if abs(vg) < _TANH_SMALL else (g if vg >= _ZERO else -g)
            cn = sf * c[row, j] + si * g
            cell[row, j] = cn
            cell[row, units + j] = -_TWO * abs(cn)
    # tanh(c')'s exp: the loop above written out again (one loop over a buffer chosen per stage does not vectorise)
    for row in range(rows):
        for j in range(units, 2 * units):
            a0 = cell[row, j]
            a = _EXP_LO if a0 < _EXP_LO else a0  # noqa: FURB136  (max() would turn NaN into _EXP_LO)
            t = a * _LOG2E + _ROUNDER
            kf = t - _ROUNDER
            r = a - kf * _LN2_HI
            r = r - kf * _LN2_LO
            p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
            p = p * (r * r) + r + _ONE
            scale = numpy.int32((numpy.float32(t).view(numpy.int32) + _EXPONENT_BIAS) << 23).view(numpy.float32)
            cell[row, j] = _ZERO if a0 < _EXP_LO else p * scale
    for row in range(rows):  # h' = sigmoid(o) * tanh(c')
        for j in range(units):
            eo, vo = e[row, 3 * units + j], rec[row, 3 * units + j]
            ro = numpy.divide(_ONE, eo + _ONE)
            so = ro if vo >= _ZERO else eo * ro
            cn, ec = cell[row, j], cell[row, units + j]
            tc = numpy.divide(_ONE - ec, _ONE + ec)
            c2 = cn * cn
            small = cn * (((((_T11 * c2 + _T9) * c2 + _T7) * c2 + _T5) * c2 + _T3) * c2 + _ONE)
            tc = small if abs(cn) < _TANH_SMALL else (tc if cn >= _ZERO else -tc)
            out[row, j] = so * tc
    masked = mask.shape[0] != 0
    for row in range(rows):
        if masked and mask[row] == _ZERO:
            for j in range(units):
                out[row, j] = previous[row, j]
        else:
            for j in range(units):
                h[row, j] = out[row, j]
                c[row, j] = cell[row, j]


@compiled(f"void({readonly(2)}, float32[:, ::1], {readonly(1)}, {readonly(1)}, float32[:, ::1], {readonly(2)}, "
          "float32[:, ::1], float32[:, ::1], int64)", ops=(GRU_OP,))
def _gru_step(xw, rec, recurrent_bias, mask, h, previous, out, e, phase):  # pragma: no cover - compiled
    """A GRU step in phases (e is scratch [B, 3H]):

    0 (reset_after=False, first half): rec [B, 2H] holds h @ Uzr; leaves z in rec[:, :H] and r * h in
      rec[:, H:], for the caller's (r * h) @ Uh into out;
    1 (reset_after=False, second half): rec as phase 0 left it, out holding (r * h) @ Uh;
    2 (reset_after): rec [B, 3H] holds h @ U: the whole step.
    Phases 1 and 2 update h in place and write the step's output to out (previous where masked)."""
    rows = xw.shape[0]
    units = xw.shape[1] // 3
    for stage in range(2):
        width = 0
        if stage == 0 and phase != 1:  # z's and r's pre-activations and exp arguments
            width = 2 * units
            for row in range(rows):
                for j in range(2 * units):
                    v = xw[row, j] + (rec[row, j] + recurrent_bias[j]) if phase == 2 else xw[row, j] + rec[row, j]
                    rec[row, j] = v
                    e[row, j] = -abs(v)
        elif stage == 1:
            if phase != 1:  # z, r = sigmoid(...)
                for row in range(rows):
                    for j in range(2 * units):
                        ev, v = e[row, j], rec[row, j]
                        rv = numpy.divide(_ONE, ev + _ONE)
                        rec[row, j] = rv if v >= _ZERO else ev * rv
            if phase == 0:
                for row in range(rows):
                    for j in range(units):
                        rec[row, units + j] = rec[row, units + j] * h[row, j]
                return
            width = units  # the candidate's argument, and its tanh's exp argument
            for row in range(rows):
                for j in range(units):
                    if phase == 2:
                        v = xw[row, 2 * units + j] + rec[row, units + j] * (rec[row, 2 * units + j]
                                                                            + recurrent_bias[2 * units + j])
                    else:
                        v = xw[row, 2 * units + j] + out[row, j]
                    e[row, 2 * units + j] = v
                    e[row, j] = -_TWO * abs(v)
        for row in range(rows):
            for j in range(width):
                a0 = e[row, j]
                a = _EXP_LO if a0 < _EXP_LO else a0  # noqa: FURB136  (max() would turn NaN into _EXP_LO)
                t = a * _LOG2E + _ROUNDER
                kf = t - _ROUNDER
                r = a - kf * _LN2_HI
                r = r - kf * _LN2_LO
                p = ((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5
                p = p * (r * r) + r + _ONE
                scale = numpy.int32((numpy.float32(t).view(numpy.int32) + _EXPONENT_BIAS) << 23).view(numpy.float32)
                e[row, j] = _ZERO if a0 < _EXP_LO else p * scale
    masked = mask.shape[0] != 0
    for row in range(rows):  # h' = z * h + (1 - z) * tanh(candidate)
        if masked and mask[row] == _ZERO:
            for j in range(units):
                out[row, j] = previous[row, j]
            continue
        for j in range(units):
            v, ev = e[row, 2 * units + j], e[row, j]
            hh = numpy.divide(_ONE - ev, _ONE + ev)
            v2 = v * v
            small = v * (((((_T11 * v2 + _T9) * v2 + _T7) * v2 + _T5) * v2 + _T3) * v2 + _ONE)
            hh = small if abs(v) < _TANH_SMALL else (hh if v >= _ZERO else -hh)
            z = rec[row, j]
            hn = z * h[row, j] + (_ONE - z) * hh
            h[row, j] = hn
            out[row, j] = hn


# --- the kernels ----------------------------------------------------------------------------------------


def _check(x: Any, h: Any, kernel: Any, recurrent_kernel: Any, biases: tuple, mask: Any, output: Any, gates: int) -> int:
    """The unit count, after checking the shapes the docstring promises; ValueError naming the mismatch."""
    if x.ndim != 3 or h.ndim != 2 or kernel.ndim != 2 or recurrent_kernel.ndim != 2:
        raise ValueError(f"expected x [T, B, D], states [B, H] and 2-D kernels; got x {list(x.shape)}, state "
                         f"{list(h.shape)}, kernel {list(kernel.shape)}, recurrent kernel {list(recurrent_kernel.shape)}")
    batch, units = h.shape
    if (kernel.shape != (x.shape[2], gates * units) or recurrent_kernel.shape != (units, gates * units)
            or x.shape[1] != batch or output.shape != h.shape or any(b.shape != (gates * units,) for b in biases)):
        raise ValueError(f"shapes do not make a recurrence of {units} units: x {list(x.shape)}, state "
                         f"{list(h.shape)}, kernel {list(kernel.shape)}, recurrent kernel {list(recurrent_kernel.shape)}, "
                         f"output {list(output.shape)}, biases {[list(b.shape) for b in biases]}")
    if mask.size and mask.shape != x.shape[:2]:
        raise ValueError(f"mask {list(mask.shape)} does not match x {list(x.shape)}: expected [T, B]")
    return units


def _projected(xp: Any, x: Any, kernel: Any, bias: Any | None) -> Any:
    """x_t @ kernel (+ bias) for every step at once: [T, B, G]."""
    steps, batch, _ = x.shape
    xw = xp.matmul(xp.ascontiguousarray(x).reshape(steps * batch, -1), kernel)
    if bias is not None:
        xw += bias
    return xw.reshape(steps, batch, -1)


def _masked(xp: Any, mask: Any, step: int, new: Any, old: Any) -> Any:
    return new if not mask.size else xp.where(mask[step][:, None] != 0, new, old)


@kernel(LSTM_OP, outputs=3)
def lstm(xp, x, h, c, kernel, recurrent_kernel, bias, mask, output, *, zero_masked: bool = False,
         compiled: bool = False):
    """Keras' LSTM recurrence (see the module docstring): (outputs [T, B, H], h, c)."""
    units = _check(x, h, kernel, recurrent_kernel, (bias,), mask, output, 4)
    steps = x.shape[0]
    outputs = xp.empty((steps, *h.shape), h.dtype)
    zeros = xp.zeros(output.shape, output.dtype) if zero_masked else None
    xw = _projected(xp, x, kernel, None)
    if use_compiled(xp, compiled, x.dtype, h.dtype, c.dtype, kernel.dtype, recurrent_kernel.dtype, bias.dtype):
        h, c = numpy.array(h, order="C"), numpy.array(c, order="C")
        bias, output = numpy.ascontiguousarray(bias), numpy.ascontiguousarray(output)
        rec = numpy.empty((h.shape[0], 4 * units), numpy.float32)
        scratch = numpy.empty((h.shape[0], 4 * units), numpy.float32)
        cell = numpy.empty((h.shape[0], 2 * units), numpy.float32)
        step_mask = mask.astype(numpy.float32) if mask.size else numpy.empty(0, numpy.float32)
        for t in range(steps):
            blas.matmul(xp, h, recurrent_kernel, out=rec)
            _lstm_step(xw[t], rec, bias, step_mask[t] if mask.size else step_mask, h, c,
                       zeros if zero_masked else outputs[t - 1] if t else output, outputs[t], scratch, cell)
        return outputs, h, c
    previous = output
    for t in range(steps):
        z = (xw[t] + blas.matmul(xp, h, recurrent_kernel)) + bias
        i, f, g, o = (z[:, k * units:(k + 1) * units] for k in range(4))
        c_new = sigmoid(xp, f)[0] * c + sigmoid(xp, i)[0] * xp.tanh(g)
        h_new = sigmoid(xp, o)[0] * xp.tanh(c_new)
        previous = outputs[t] = _masked(xp, mask, t, h_new, zeros if zero_masked else previous)
        h, c = _masked(xp, mask, t, h_new, h), _masked(xp, mask, t, c_new, c)
    return outputs, h, c


@kernel(GRU_OP, outputs=2)
def gru(xp, x, h, kernel, input_bias, recurrent_kernel, recurrent_bias, mask, output, *, reset_after: bool,
        zero_masked: bool = False, compiled: bool = False):
    """Keras' GRU recurrence (see the module docstring; `recurrent_bias` is unused unless `reset_after`):
    (outputs [T, B, H], h)."""
    units = _check(x, h, kernel, recurrent_kernel, (input_bias, recurrent_bias), mask, output, 3)
    steps = x.shape[0]
    outputs = xp.empty((steps, *h.shape), h.dtype)
    xw = _projected(xp, x, kernel, input_bias)
    zeros = xp.zeros(output.shape, output.dtype) if zero_masked else None
    u_zr, u_h = recurrent_kernel[:, :2 * units], recurrent_kernel[:, 2 * units:]
    if use_compiled(xp, compiled, x.dtype, h.dtype, kernel.dtype, input_bias.dtype, recurrent_kernel.dtype,
                    recurrent_bias.dtype):
        h = numpy.array(h, order="C")
        recurrent_bias, output = numpy.ascontiguousarray(recurrent_bias), numpy.ascontiguousarray(output)
        rec = numpy.empty((h.shape[0], (3 if reset_after else 2) * units), numpy.float32)
        scratch = numpy.empty((h.shape[0], 3 * units), numpy.float32)
        step_mask = mask.astype(numpy.float32) if mask.size else numpy.empty(0, numpy.float32)
        u_zr, u_h = numpy.ascontiguousarray(u_zr), numpy.ascontiguousarray(u_h)
        for t in range(steps):
            m = step_mask[t] if mask.size else step_mask
            previous = zeros if zero_masked else outputs[t - 1] if t else output
            if reset_after:
                blas.matmul(xp, h, recurrent_kernel, out=rec)
                _gru_step(xw[t], rec, recurrent_bias, m, h, previous, outputs[t], scratch, 2)
                continue
            blas.matmul(xp, h, u_zr, out=rec)
            _gru_step(xw[t], rec, recurrent_bias, m, h, previous, outputs[t], scratch, 0)
            blas.matmul(xp, rec[:, units:], u_h, out=outputs[t])
            _gru_step(xw[t], rec, recurrent_bias, m, h, previous, outputs[t], scratch, 1)
        return outputs, h
    previous = output
    for t in range(steps):
        xz, xr, xh = (xw[t][:, k * units:(k + 1) * units] for k in range(3))
        if reset_after:
            rec = blas.matmul(xp, h, recurrent_kernel) + recurrent_bias
            z = sigmoid(xp, xz + rec[:, :units])[0]
            r = sigmoid(xp, xr + rec[:, units:2 * units])[0]
            hh = xp.tanh(xh + r * rec[:, 2 * units:])
        else:
            rec = blas.matmul(xp, h, u_zr)
            z = sigmoid(xp, xz + rec[:, :units])[0]
            r = sigmoid(xp, xr + rec[:, units:])[0]
            hh = xp.tanh(xh + blas.matmul(xp, r * h, u_h))
        h_new = z * h + (_ONE - z) * hh
        previous = outputs[t] = _masked(xp, mask, t, h_new, zeros if zero_masked else previous)
        h = _masked(xp, mask, t, h_new, h)
    return outputs, h
