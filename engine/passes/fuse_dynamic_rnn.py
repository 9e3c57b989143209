"""The time loops of tf.compat.v1.nn.dynamic_rnn over an LSTMCell, BasicLSTMCell or GRUCell, recognised in a
While's body (a v1 loop that engine.passes.functionalize_loops raised) so that the whole loop runs as one
recurrent kernel (`_TensorgateLSTM`, `_TensorgateGRU`: kernels/nn/recurrent.py), as engine.passes.fuse_recurrence
does for Keras' loops.

The body is read by what it computes (engine.passes.loop_trace, with the spellings of the TF1 cells added): the
step's item x_t is `TensorArrayReadV3` of an array the loop does not change at `t`, a counter the body adds one to
and the condition bounds; the cell multiplies `concat([x_t, h])` (GRUCell's candidate: `concat([x_t, r * h])`) by
one kernel whose rows split between the two, adds its bias, splits the gates along the last axis (GRUCell: after
the sigmoid) and adds LSTMCell's forget bias to f, and updates the state exactly as

    LSTM:  c' = sigmoid(f) * c + sigmoid(i) * tanh(j);  h' = sigmoid(o) * tanh(c')
    GRU:   h' = u * h + (1 - u) * tanh(x_t @ Wx + (r * h) @ Wh + b)       (the kernel's reset_after=False)

With `sequence_length`, each state is `Select(t >= lengths, state, new state)` (v1 Select: whole rows) and the
output `Select(t >= lengths, zeros, h')`; the output, when the loop has one, is written by `TensorArrayWriteV3`
to an array the loop does not change at `t`. Every other loop variable is returned unchanged or counts
iterations. Anything else leaves the While as it is.

engine.passes.dynamic_rnn_loop runs a recognised loop as its kernel where the loop's inputs allow.

    >>> rnn = recognise(cond, body, while_node.attrs["T"])   # a DynamicRnn, or None when it is no such loop
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import kernels
from engine.graph import Node, TensorRef, parse_tensor_name
from engine.graph.functions import Function
from engine.passes.fuse_recurrence import read_cell
from engine.passes.loop_trace import (
    Affine,
    Bound,
    Env,
    Gate,
    Increment,
    Invariant,
    NoMatch,
    Op,
    Step,
    Tracer,
    Var,
    loop_bounds,
    resolve,
)

__all__ = ["ArrayWrite", "DynamicRnn", "recognise"]

_F32 = np.dtype(np.float32)


# --- the TF1 spellings, as symbolic values ---------------------------------------------------------------


@dataclass(frozen=True)
class _Concat:
    """ConcatV2([x_t, state]) along the last axis: `state` is ("h", var) or ("rh", reset gate, var)."""

    step: Step
    state: tuple


@dataclass(frozen=True)
class _Finished:
    """GreaterEqual(t, lengths): true for the rows whose sequence has ended (`lengths` an invariant)."""

    time: int
    lengths: Any


@dataclass(frozen=True)
class _Within:
    """The mask of a step: t < lengths (the negation of _Finished), as a Select's first operand."""

    time: int
    lengths: Any


@dataclass(frozen=True)
class ArrayWrite:
    """TensorArrayWriteV3 of `value` at loop var `time` into the array `handle` (an unchanged loop var),
    its flow the loop var `flow`."""

    flow: int
    handle: int
    time: int
    value: Any


def _state_source(value: Any) -> tuple | None:
    if isinstance(value, Var):
        return ("h", value.index)
    if isinstance(value, Op) and value.name == "mul":
        for gate, state in (value.args, value.args[::-1]):
            if isinstance(gate, Gate) and gate.kind == "sigmoid" and isinstance(state, Var):
                return ("rh", gate, state.index)
    return None


def _last_axis(value: Any) -> bool:
    c = value.const if isinstance(value, Invariant) else None
    return isinstance(c, np.ndarray) and c.ndim == 0 and c.dtype.kind in "iu" and int(c) in (1, -1)


def _concat(t: _Tracer, node: Node, ref: TensorRef, args: list) -> _Concat | None:
    if len(args) != 3 or not _last_axis(args[2]) or not isinstance(args[0], Step) or args[0].dtype != _F32:
        return None
    state = _state_source(args[1])
    return None if state is None else _Concat(args[0], state)


def _state_rows(weights: Invariant, state: tuple, first: bool) -> Invariant:
    """The kernel's rows that multiply x_t (`first`) or the state: the state's width is the state's."""

    def compute(env: Env) -> np.ndarray:
        w = weights.get(env)
        units = np.shape(env.values[state[-1]])[-1]  # NOTE: checked against the kernel when the loop runs
        if np.ndim(w) != 2 or not 0 < units < w.shape[0]:
            raise ValueError("a kernel that does not split between the step and the state")
        return np.ascontiguousarray(w[:-units] if first else w[-units:])

    return Invariant(compute)


def _mat_mul(t: _Tracer, node: Node, ref: TensorRef, args: list) -> Affine | None:
    a, w = args
    if not isinstance(a, _Concat) or node.attrs.get("transpose_a") or not isinstance(w, Invariant):
        return None
    if node.attrs.get("transpose_b"):
        w = Invariant(lambda env, m=w: np.ascontiguousarray(m.get(env).T))
    return Affine({("x", a.step): _state_rows(w, a.state, True), a.state: _state_rows(w, a.state, False)}, {})


def _add_bias(t: _Tracer, node: Node, ref: TensorRef, args: list) -> Affine | None:
    """A bias added to an affine value that has one already (LSTMCell's forget bias): the two summed."""
    if node.op == "BiasAdd" and node.attrs.get("data_format", "NHWC") != "NHWC":
        return None
    pairs = [args] if node.op == "BiasAdd" else [args, args[::-1]]
    for a, b in pairs:
        if isinstance(a, Affine) and isinstance(b, Invariant):
            key = next(iter(a.matrices)) if len(a.matrices) == 1 else None
            if key in a.biases:
                return Affine(dict(a.matrices), {**a.biases, key: _sum(a.biases[key], b)})
    return None


def _sum(first: Invariant, second: Invariant) -> Invariant:
    return Invariant(lambda env: first.get(env) + second.get(env))


def _split_gate(t: _Tracer, node: Node, ref: TensorRef, args: list) -> Gate | None:
    """Split of sigmoid(affine) along the last axis (GRUCell's gates): sigmoid of each part of the affine."""
    dim, value = args
    if not isinstance(value, Gate) or not _last_axis(dim):
        return None
    split = kernels.lookup("Split", "cpu").bind(np, node.attrs)
    return Gate(value.kind, t.columns(node, ref, value.affine, lambda m: split(dim.const, m)))


def _finished(t: _Tracer, node: Node, ref: TensorRef, args: list) -> _Finished | None:
    time, lengths = args
    if isinstance(time, Var) and isinstance(lengths, Invariant):
        return _Finished(time.index, lengths)
    return None


def _select(t: _Tracer, node: Node, ref: TensorRef, args: list) -> Op | None:
    finished, old, new = args
    if not isinstance(finished, _Finished):
        return None
    return Op("select", (_Within(finished.time, finished.lengths), new, old))


def _read(t: _Tracer, node: Node, ref: TensorRef, args: list) -> Step | None:
    handle, index, flow = args
    if (isinstance(handle, Invariant) and handle.var is not None and isinstance(index, Var)
            and isinstance(flow, Invariant)):
        return Step(handle.var, index.index, np.dtype(node.attrs["dtype"]))
    return None


def _write(t: _Tracer, node: Node, ref: TensorRef, args: list) -> ArrayWrite | None:
    handle, index, value, flow = args
    if isinstance(handle, Invariant) and handle.var is not None and isinstance(index, Var) and isinstance(flow, Var):
        return ArrayWrite(flow.index, handle.var, index.index, value)
    return None


_RULES: dict[str, Callable[[Any, Node, TensorRef, list], Any]] = {
    "ConcatV2": _concat, "MatMul": _mat_mul, "BiasAdd": _add_bias, "Add": _add_bias, "AddV2": _add_bias,
    "Split": _split_gate, "GreaterEqual": _finished, "Select": _select,
    "TensorArrayReadV3": _read, "TensorArrayWriteV3": _write,
}


class _Tracer(Tracer):
    """loop_trace's Tracer, reading the TF1 spellings above first."""

    def _trace(self, ref: TensorRef) -> Any:
        node = self.nodes.get(ref.node)
        rule = _RULES.get(node.op) if node is not None and ref not in self.args else None
        if rule is not None:
            args = [self(r) for r in node.inputs]
            if not all(isinstance(a, Invariant) for a in args):
                value = rule(self, node, ref, args)
                if value is not None:
                    return value
        return super()._trace(ref)


# --- the recurrence -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DynamicRnn:
    """A While recognised as dynamic_rnn's loop, by loop var index: each iteration reads item `time` of the
    TensorArray `sequence`, updates `h` (and `c`), and with `output` writes the output into its array; rows
    whose `lengths` (an invariant, or None) have ended keep their states and output `zeros`. `counters` gain
    one, and the loop runs while every `bounds` holds. `weights(loop vars)` gives the kernel's weights (raising
    when they do not make a recurrence) and the loop vars they were computed from."""

    kind: str  # "lstm" or "gru"
    reset_after: bool
    bounds: tuple[Bound, ...]
    counters: tuple[int, ...]
    time: int
    sequence: int
    lengths: Invariant | None
    h: int
    c: int | None
    output: ArrayWrite | None
    zeros: Invariant | None
    weights: Callable[[Sequence[Any]], tuple[tuple[np.ndarray, ...], frozenset[int]]]

    @property
    def op(self) -> str:
        return "_TensorgateLSTM" if self.kind == "lstm" else "_TensorgateGRU"


def recognise(cond: Function, body: Function, types: Sequence[np.dtype]) -> DynamicRnn | None:
    """The dynamic_rnn recurrence a While with loop var `types` computes, or None (see the module docstring)."""
    try:
        return _recognise(cond, body, types)
    except NoMatch:
        return None


def _unmasked(value: Any, var: int) -> tuple[Any, _Within | None]:
    """(new value, mask) for a state kept on finished rows, else (value, None)."""
    if (isinstance(value, Op) and value.name == "select" and isinstance(value.args[0], _Within)
            and value.args[2] == Var(var)):
        return value.args[1], value.args[0]
    return value, None


def _recognise(cond: Function, body: Function, types: Sequence[np.dtype]) -> DynamicRnn:
    bounds = loop_bounds(cond)
    nodes = {n.name: n for n in body.graph.nodes}
    if bounds is None or body.control_rets or not len(body.args) == len(body.rets) == len(types):
        raise NoMatch
    rets = [resolve(nodes, parse_tensor_name(r)) for r in body.rets]
    unchanged = frozenset(i for i, r in enumerate(rets) if r == parse_tensor_name(body.args[i]))
    trace = _Tracer(body, unchanged)
    values = {i: trace(r) for i, r in enumerate(rets) if i not in unchanged}
    counters = tuple(i for i, v in values.items() if v == Increment(i))
    writes = [v for i, v in values.items() if isinstance(v, ArrayWrite) and v.flow == i]
    states = {i: v for i, v in values.items() if i not in counters and not isinstance(v, ArrayWrite)}
    if (len(writes) + len(states) + len(counters) != len(values) or len(writes) > 1
            or any(types[i] != _F32 for i in states)
            or any(b.counter not in counters or (b.var is not None and b.var not in unchanged) for b in bounds)):
        raise NoMatch
    for h, value in states.items():
        new, mask = _unmasked(value, h)
        cell = read_cell(new, h, states, mask, _unmasked)
        if cell is not None:
            return _finish(states, writes, unchanged, bounds, counters, cell.x, h, cell.c, new, mask, cell.kind,
                           cell.reset_after, cell.weights)
    raise NoMatch


def _finish(states: dict, writes: list, unchanged: frozenset[int], bounds: tuple[Bound, ...], counters: tuple[int, ...],
            x: tuple, h: int, c: int | None, h_new: Any, mask: _Within | None, kind: str, reset_after: bool,
            weights: Callable) -> DynamicRnn:
    """The DynamicRnn, once the cell is known: the states, the output and the counters must fit it."""
    step = x[1]
    if (set(states) != {h, c} - {None} or step.time not in counters or step.var not in unchanged
            or (mask is not None and mask.time != step.time)):
        raise NoMatch
    write, zeros = (writes[0] if writes else None), None
    if write is not None:
        output = write.value
        if mask is not None:
            if not (isinstance(output, Op) and output.name == "select" and output.args[:2] == (mask, h_new)
                    and isinstance(output.args[2], Invariant)):
                raise NoMatch
            output, zeros = h_new, output.args[2]
        if output != h_new or write.time != step.time or write.handle not in unchanged or write.handle == step.var:
            raise NoMatch
    return DynamicRnn(kind, reset_after, bounds, counters, step.time, step.var, None if mask is None else mask.lengths,
                      h, c, write, zeros, weights)

