"""Keras' LSTM and GRU time loops, recognised in a While's body so that the whole loop runs as one recurrent
kernel (`_TensorgateLSTM`, `_TensorgateGRU`: kernels/nn/recurrent.py) instead of one body run per step.

Not a pass of the pipeline, which leaves call ops alone: the planner applies it when it binds a While
(engine.runtime.calls), because the loop it replaces stays there, compiled, for every run the fused kernel
cannot take exactly (a list item unset, a shape or dtype other than the body expects, more steps than the
iteration limit): those run the loop as it is, with its own errors.

The body is read by what it computes, not by node names: each tensor it returns is traced back to the
loop variables as a symbolic value (engine.passes.loop_trace: `x_t @ W` for the step's item, `h @ U` for a
state, bias additions, Split/SplitV/StridedSlice of those products along their last axis, Sigmoid and Tanh
of them, products and sums), and the state updates must be exactly

    LSTM:  c' = sigmoid(f) * c + sigmoid(i) * tanh(g);  h' = sigmoid(o) * tanh(c')
    GRU:   h' = z * h + (1 - z) * tanh(xh + r * rh)      (reset_after: rh = (h @ U + b)[:, 2H:])
           h' = z * h + (1 - z) * tanh(xh + (r * h) @ Uh) (reset_after=False)

with z, r = sigmoid(...) of x_t and h parts, where the step's item x_t is item `t` of a list the loop
does not change, `t` a counter the body adds one to and the condition compares (`Less`, alone or under
`LogicalAnd`, with a loop constant); the output, h' (or with Keras' masking, `SelectV2(mask_t, h',
previous)` for the output and each state, or for the output `SelectV2(mask_t, h', zeros)` with Keras'
zero_output_for_mask) is written to a list at `t` or at a fixed index, and every other
loop variable is returned unchanged or counts iterations. Other activations, extra terms or extra state
leave the While as it is. Weights (the loop's unchanged inputs, and whatever the body computes from them
alone) are assembled into the kernel's layout when the loop starts, once per distinct weight arrays.

    >>> recurrence = recognise(cond, body, while_node.attrs["T"])   # None when it is no such recurrence
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.graph import parse_tensor_name
from engine.graph.functions import Function
from engine.passes.guards import is_opaque
from engine.passes.loop_trace import (
    Affine,
    Bound,
    Env,
    Gate,
    Increment,
    Invariant,
    NoMatch,
    Op,
    Tracer,
    Var,
    Write,
    is_one,
    loop_bounds,
    resolve,
)

__all__ = ["Cell", "Recurrence", "read_cell", "recognise"]

_F32 = np.dtype(np.float32)


# --- the cells ------------------------------------------------------------------------------------------


def _operands(value: Any, name: str) -> tuple[tuple[Any, Any], ...]:
    """Both orders of a commutative op's two operands, or none when `value` is not that op."""
    if isinstance(value, Op) and value.name == name:
        a, b = value.args
        return ((a, b), (b, a))
    return ()


def _gate(value: Any, kind: str) -> Gate | None:
    return value if isinstance(value, Gate) and value.kind == kind else None


def _lstm_cell(h_new: Any) -> tuple[list[Gate], int, Any] | None:
    """([i, f, g, o] gates, c's loop var, c') when h' = sigmoid(o) * tanh(c') with
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)."""
    for o, tanh_c in _operands(h_new, "mul"):
        if _gate(o, "sigmoid") is None or not (isinstance(tanh_c, Op) and tanh_c.name == "tanh"):
            continue
        c_new = tanh_c.args[0]
        for keep, write in _operands(c_new, "add"):
            for f, c in _operands(keep, "mul"):
                if _gate(f, "sigmoid") is None or not isinstance(c, Var):
                    continue
                for i, g in _operands(write, "mul"):
                    if _gate(i, "sigmoid") is not None and _gate(g, "tanh") is not None:
                        return [i, f, g, o], c.index, c_new
    return None


def _gru_cell(h_new: Any, h: int) -> tuple[Gate, Gate, Any, bool] | None:
    """(z, r, candidate, reset_after) when h' = z * h + (1 - z) * candidate, the candidate being
    tanh(x part + r * recurrent part) (reset_after: an Op) or tanh(x part + (r * h) @ Uh) (a Gate)."""
    for keep, write in _operands(h_new, "add"):
        for z, state in _operands(keep, "mul"):
            if _gate(z, "sigmoid") is None or state != Var(h):
                continue
            for one_minus_z, candidate in _operands(write, "mul"):
                if not (isinstance(one_minus_z, Op) and one_minus_z.name == "sub"
                        and is_one(one_minus_z.args[0]) and one_minus_z.args[1] is z):
                    continue
                gate = _gate(candidate, "tanh")
                if gate is not None:
                    resets = [s[1] for s in gate.affine.matrices if s[0] == "rh"]
                    if len(resets) == 1 and _gate(resets[0], "sigmoid") is not None:
                        return z, resets[0], gate.affine, False
                if isinstance(candidate, Op) and candidate.name == "tanh":
                    for x_part, gated in _operands(candidate.args[0], "add"):
                        for r, recurrent in _operands(gated, "mul"):
                            if (_gate(r, "sigmoid") is not None and isinstance(x_part, Affine)
                                    and isinstance(recurrent, Affine)):
                                return z, r, (x_part, recurrent), True
    return None


def _unmasked(value: Any, var: int) -> tuple[Any, Any]:
    """(new value, mask step) for SelectV2(mask, new, var), else (value, None)."""
    if isinstance(value, Op) and value.name == "select" and value.args[2] == Var(var):
        return value.args[1], value.args[0]
    return value, None


def _check_sources(affine: Affine, sources: set) -> Affine:
    if set(affine.matrices) != sources or not set(affine.biases) <= sources | {None}:
        raise NoMatch
    return affine


# --- the recurrence -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recurrence:
    """A While recognised as an LSTM or GRU recurrence, by loop var index.

    Each iteration reads item `time` of the list `sequence` (and of `mask`, with Keras' masking), updates
    the states `h` (and `c`; `output_state` is the output masked steps repeat) and writes the output to
    the list `output_list` at `time` or at `output_index`; `counters` gain one, and the loop runs while
    every `bounds` holds. `weights(loop vars)` gives the kernel's weights (raising when they do not make
    a recurrence) and the loop vars they were computed from; every other loop var is returned
    unchanged."""

    kind: str  # "lstm" or "gru"
    reset_after: bool
    bounds: tuple[Bound, ...]
    counters: tuple[int, ...]
    time: int
    sequence: int
    mask: int | None
    output_list: int | None
    output_index: int | None
    h: int
    c: int | None
    output_state: int | None
    weights: Callable[[Sequence[Any]], tuple[tuple[np.ndarray, ...], frozenset[int]]]
    zero_masked: bool = False  # masked steps output zeros (else they repeat the previous output)

    @property
    def op(self) -> str:
        return "_TensorgateLSTM" if self.kind == "lstm" else "_TensorgateGRU"


def _bias(env: Env, affine: Affine, keys: tuple, units: int) -> np.ndarray:
    """The sum of `affine`'s biases under `keys` (zeros when it has none)."""
    total = None
    for key in keys:
        if key in affine.biases:
            b = affine.biases[key].get(env)
            total = b if total is None else total + b
    return np.zeros(units, np.float32) if total is None else total


def _layout(env: Env, parts: list[list[np.ndarray]]) -> tuple[tuple[np.ndarray, ...], frozenset[int]]:
    """(each list of gate blocks concatenated along its last axis: float32, C-contiguous; the loop vars
    they were computed from)."""
    out = tuple(np.ascontiguousarray(np.concatenate(blocks, axis=-1)) for blocks in parts)
    if any(a.dtype != _F32 for a in out):
        raise ValueError("weights that are not float32")
    return out, frozenset(env.used)


def _lstm_weights(gates: list[Gate], x: tuple, h: tuple) -> Callable[[Sequence[Any]], tuple]:
    def weights(values: Sequence[Any]) -> tuple:
        env = Env(values)
        units = gates[0].affine.matrices[h].get(env).shape[-1]
        return _layout(env, [[g.affine.matrices[x].get(env) for g in gates],
                        [g.affine.matrices[h].get(env) for g in gates],
                        [_bias(env, g.affine, (x, h, None), units) for g in gates]])

    return weights


def _gru_weights(z: Affine, r: Affine, candidate: Any, x: tuple, h: tuple, reset_after: bool) -> Callable:
    def weights(values: Sequence[Any]) -> tuple:
        env = Env(values)
        units = z.matrices[h].get(env).shape[-1]
        if reset_after:
            x_part, recurrent = candidate
            return _layout(env, [[a.matrices[x].get(env) for a in (z, r, x_part)],
                            [_bias(env, a, (x, None), units) for a in (z, r, x_part)],
                            [a.matrices[h].get(env) for a in (z, r, recurrent)],
                            [_bias(env, z, (h,), units), _bias(env, r, (h,), units),
                             _bias(env, recurrent, (h, None), units)]])
        (rh,) = [s for s in candidate.matrices if s[0] == "rh"]
        everything = (x, h, rh, None)
        return _layout(env, [[a.matrices[x].get(env) for a in (z, r, candidate)],
                        [_bias(env, a, everything, units) for a in (z, r, candidate)],
                        [z.matrices[h].get(env), r.matrices[h].get(env), candidate.matrices[rh].get(env)],
                        [np.zeros(3 * units, np.float32)]])

    return weights


def recognise(cond: Function, body: Function, types: Sequence[np.dtype]) -> Recurrence | None:
    """The recurrence a While with loop var `types` computes, or None when it is not one the kernels
    compute (see the module docstring)."""
    try:
        return _recognise(cond, body, types)
    except NoMatch:
        return None


def _recognise(cond: Function, body: Function, types: Sequence[np.dtype]) -> Recurrence:
    bounds = loop_bounds(cond)
    nodes = {n.name: n for n in body.graph.nodes}
    if (bounds is None or not len(body.args) == len(body.rets) == len(types)
            or any(name not in nodes or is_opaque(nodes[name]) for name in body.control_rets)):
        raise NoMatch
    rets = [resolve(nodes, parse_tensor_name(r)) for r in body.rets]
    unchanged = frozenset(i for i, r in enumerate(rets) if r == parse_tensor_name(body.args[i]))
    trace = Tracer(body, unchanged)
    values = {i: trace(r) for i, r in enumerate(rets) if i not in unchanged}
    counters = tuple(i for i, v in values.items() if v == Increment(i))
    writes = {i: v for i, v in values.items() if isinstance(v, Write) and v.var == i}
    states = {i: v for i, v in values.items() if i not in counters and i not in writes}
    if (len(writes) > 1 or any(types[i] != _F32 for i in states)
            or any(b.counter not in counters or (b.var is not None and b.var not in unchanged) for b in bounds)):
        raise NoMatch
    for h, value in states.items():
        new, mask = _unmasked(value, h)
        cell = read_cell(new, h, states, mask, _unmasked)
        if cell is not None:
            return _finish(states, writes, unchanged, bounds, counters, types, cell.x, h, cell.c, new, mask,
                           cell.kind, cell.reset_after, cell.weights)
    raise NoMatch


@dataclass(frozen=True)
class Cell:
    """An LSTM or GRU cell read from a state's update: its step's item source `x`, the LSTM's cell state var
    `c`, and the weights in the kernel's layout."""

    kind: str  # "lstm" or "gru"
    reset_after: bool
    x: tuple
    c: int | None
    weights: Callable[[Sequence[Any]], tuple[tuple[np.ndarray, ...], frozenset[int]]]


def read_cell(new: Any, h: int, states: dict, mask: Any, unmasked: Callable[[Any, int], tuple[Any, Any]]) -> Cell | None:
    """The cell computing `new`, loop var h's next value (unmasked), or None when it computes no LSTM or GRU
    step; NoMatch when it does but its parts do not fit (the cell state masked otherwise than h, products of
    anything but the step's item and h). `unmasked(value, var)` reads a state's masking as the loop writes it."""
    lstm = _lstm_cell(new)
    if lstm is not None and lstm[1] in states and lstm[1] != h and all(
            ("h", h) in g.affine.matrices for g in lstm[0]):  # (not the output state, on masked steps)
        gates, c, c_new = lstm
        if unmasked(states[c], c) != (c_new, mask):
            raise NoMatch
        x = _x_source([g.affine for g in gates])
        for g in gates:
            _check_sources(g.affine, {x, ("h", h)})
        return Cell("lstm", False, x, c, _lstm_weights(gates, x, ("h", h)))
    gru = _gru_cell(new, h)
    if gru is None:
        return None
    z, r, candidate, reset_after = gru
    x = _x_source([z.affine, r.affine])
    for g in (z, r):
        _check_sources(g.affine, {x, ("h", h)})
    if reset_after:
        _check_sources(candidate[0], {x})
        _check_sources(candidate[1], {("h", h)})
    else:
        _check_sources(candidate, {x, ("rh", r, h)})
    if r is z:
        raise NoMatch
    return Cell("gru", reset_after, x, None, _gru_weights(z.affine, r.affine, candidate, x, ("h", h), reset_after))


def _x_source(affines: list[Affine]) -> tuple:
    sources = {s for a in affines for s in a.matrices if s[0] == "x"}
    if len(sources) != 1:
        raise NoMatch
    return sources.pop()


def _finish(states: dict, writes: dict, unchanged: frozenset[int], bounds: tuple[Bound, ...],
            counters: tuple[int, ...], types: Sequence[np.dtype], x: tuple, h: int, c: int | None, h_new: Any,
            mask: Any, kind: str, reset_after: bool, weights: Callable) -> Recurrence:
    """The Recurrence, once the cell is known: the output, the lists and the counters must fit it."""
    step = x[1]
    output_state = None
    output = h_new
    zeros = None
    if mask is not None:
        others = [o for o in states if o not in (h, c)]
        if len(others) != 1 or mask.time != step.time or mask.var not in unchanged:
            raise NoMatch
        output_state = others[0]
        output = states[output_state]
        # Masked steps repeat the previous output, or (Keras' zero_output_for_mask, which Bidirectional and
        # return_sequences set) output zeros: a loop constant, checked to be zeros when the loop starts.
        if not (isinstance(output, Op) and output.name == "select" and output.args[:2] == (mask, h_new)):
            raise NoMatch
        if isinstance(output.args[2], Invariant):
            zeros = output.args[2]
        elif output.args[2] != Var(output_state):
            raise NoMatch
    if set(states) != {h, c, output_state} - {None} or step.time not in counters or step.var not in unchanged:
        raise NoMatch
    (write,) = writes.values() if writes else (None,)
    if write is not None and (write.value != output or (write.time is not None and write.time != step.time)):
        raise NoMatch
    return Recurrence(kind, reset_after, bounds, counters, step.time, step.var, None if mask is None else mask.var,
                      None if write is None else write.var, None if write is None else write.fixed,
                      h, c, output_state, weights if zeros is None else _checking_zeros(weights, zeros),
                      zeros is not None)


def _checking_zeros(weights: Callable, zeros: Invariant) -> Callable:
    """`weights`, raising (the loop then runs as it is) unless the masked steps' output is all zeros."""

    def checked(values: Sequence[Any]) -> tuple:
        result, used = weights(values)
        env = Env(values)
        if np.any(np.asarray(zeros.get(env)) != 0):
            raise ValueError("masked steps output something other than zeros")
        return result, used | frozenset(env.used)

    return checked
