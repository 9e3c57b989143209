"""The recurrent kernels (`_TensorgateLSTM`, `_TensorgateGRU`): the compiled steps held to their numpy twins
on random shapes (one row, one unit, odd sizes), with and without masks, on saturating and tiny values; the
twins held to the recurrence written out in float64; inputs left alone; shapes that make no recurrence
refused."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit
from kernels.nn.recurrent import GRU_OP, LSTM_OP

rng = np.random.default_rng(32)

# (steps, batch, features, units)
SHAPES = [(1, 1, 1, 1), (5, 3, 4, 6), (9, 1, 7, 5), (4, 33, 16, 17)]
NO_MASK = np.empty(0, np.float32)


def _f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _lstm_inputs(steps, batch, features, units, scale=1.0, masked=False):
    h, c = _f32(batch, units), _f32(batch, units)
    mask = rng.integers(0, 2, (steps, batch)).astype(bool) if masked else NO_MASK
    return (_f32(steps, batch, features, scale=scale), h, c, _f32(features, 4 * units, scale=scale / 2),
            _f32(units, 4 * units, scale=scale / 2), _f32(4 * units, scale=scale), mask, _f32(batch, units))


def _gru_inputs(steps, batch, features, units, scale=1.0, masked=False):
    mask = rng.integers(0, 2, (steps, batch)).astype(bool) if masked else NO_MASK
    return (_f32(steps, batch, features, scale=scale), _f32(batch, units), _f32(features, 3 * units, scale=scale / 2),
            _f32(3 * units, scale=scale), _f32(units, 3 * units, scale=scale / 2), _f32(3 * units, scale=scale), mask,
            _f32(batch, units))


def _run(op, inputs, compiled, **attrs):
    return kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})(*inputs)


def _both(op, inputs, **attrs):
    before = [x.copy() for x in inputs]
    got = _run(op, inputs, True, **attrs)
    twin = _run(op, inputs, False, **attrs)
    for x, x0 in zip(inputs, before):
        np.testing.assert_array_equal(x, x0)
    return got, twin


needs_numba = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")


@needs_numba
@pytest.mark.parametrize("masked, zero_masked", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compiled_lstm_matches_its_twin(shape, masked, zero_masked):
    got, twin = _both(LSTM_OP, _lstm_inputs(*shape, masked=masked), zero_masked=zero_masked)
    assert [a.shape for a in got] == [a.shape for a in twin]
    for a, b in zip(got, twin):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)


@needs_numba
@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("masked, zero_masked", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_compiled_gru_matches_its_twin(shape, masked, zero_masked, reset_after):
    got, twin = _both(GRU_OP, _gru_inputs(*shape, masked=masked), reset_after=reset_after, zero_masked=zero_masked)
    for a, b in zip(got, twin):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)


@needs_numba
@pytest.mark.parametrize("scale", [1e-4, 30.0, 300.0], ids=["tiny", "saturating", "beyond exp's range"])
def test_compiled_steps_agree_on_tiny_and_saturated_gates(scale):
    for a, b in zip(*_both(LSTM_OP, _lstm_inputs(6, 4, 3, 5, scale=scale))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(*_both(GRU_OP, _gru_inputs(6, 4, 3, 5, scale=scale), reset_after=True)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_numba
def test_nan_in_a_step_reaches_the_outputs_of_both():
    inputs = list(_lstm_inputs(4, 2, 3, 5))
    inputs[0] = inputs[0].copy()
    inputs[0][2, 1, 0] = np.nan
    got, twin = _both(LSTM_OP, inputs)
    for a, b in zip(got, twin):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    assert np.isnan(got[0][2:, 1]).all() and not np.isnan(got[0][:, 0]).any()


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


@pytest.mark.parametrize("zero_masked", [False, True])
def test_lstm_twin_is_the_recurrence(zero_masked):
    x, h, c, w, u, b, mask, output = _lstm_inputs(5, 3, 4, 6, masked=True)
    mask[1] = [True, False, False]  # some step masked on each row
    outputs, h_last, c_last = _run(LSTM_OP, (x, h, c, w, u, b, mask, output), False, zero_masked=zero_masked)
    h, c, out = (a.astype(np.float64) for a in (h, c, output))
    for t in range(5):
        i, f, g, o = np.split(x[t] @ w.astype(np.float64) + h @ u + b, 4, axis=1)
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_new = _sigmoid(o) * np.tanh(c_new)
        keep = mask[t][:, None]
        out = np.where(keep, h_new, 0.0 if zero_masked else out)
        h, c = np.where(keep, h_new, h), np.where(keep, c_new, c)
        np.testing.assert_allclose(outputs[t], out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_last, h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c_last, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_twin_is_the_recurrence(reset_after):
    x, h, w, b_in, u, b_rec, _, output = _gru_inputs(5, 3, 4, 6)
    outputs, h_last = _run(GRU_OP, (x, h, w, b_in, u, b_rec, NO_MASK, output), False, reset_after=reset_after)
    h = h.astype(np.float64)
    for t in range(5):
        xz, xr, xh = np.split(x[t] @ w.astype(np.float64) + b_in, 3, axis=1)
        if reset_after:
            rz, rr, rh = np.split(h @ u + b_rec, 3, axis=1)
            z, r = _sigmoid(xz + rz), _sigmoid(xr + rr)
            hh = np.tanh(xh + r * rh)
        else:
            rz, rr = np.split(h @ u[:, :12], 2, axis=1)
            z, r = _sigmoid(xz + rz), _sigmoid(xr + rr)
            hh = np.tanh(xh + (r * h) @ u[:, 12:])
        h = z * h + (1 - z) * hh
        np.testing.assert_allclose(outputs[t], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_last, h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_shapes_that_make_no_recurrence_are_refused(compiled):
    x, h, c, w, u, b, mask, output = _lstm_inputs(3, 2, 4, 5)
    with pytest.raises(ValueError, match="shapes do not make a recurrence of 5 units"):
        _run(LSTM_OP, (x, h, c, w[:, :-1], u, b, mask, output), compiled)
    with pytest.raises(ValueError, match=r"biases \[\[19\]\]"):
        _run(LSTM_OP, (x, h, c, w, u, b[:-1], mask, output), compiled)
    with pytest.raises(ValueError, match=r"mask \[3, 3\] does not match x \[3, 2, 4\]"):
        _run(LSTM_OP, (x, h, c, w, u, b, np.ones((3, 3), bool), output), compiled)
