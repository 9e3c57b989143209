"""A tf.compat.v1.nn.dynamic_rnn loop (engine.passes.fuse_dynamic_rnn recognised its While) run as one recurrent
kernel (`_TensorgateLSTM`, `_TensorgateGRU`: kernels/nn/recurrent.py) when engine.runtime.calls binds the While, as
it does Keras' loops.

Called with the loop's inputs, a `DynamicRnnLoop` returns its outputs, or None where they are not what the kernel
takes exactly (a step unwritten or already read, shapes or dtypes other than the body expects, lengths that are not
one int per row of t's dtype, an output array that cannot take every write, an output for ended rows that is not
zeros): the loop then runs as it is, with its own errors. The arrays see what the loop would have done to them:
every step read (and cleared, if the array clears after reads), every output written.

Rows are independent recurrences, which the run uses twice: with sequence lengths, it runs over the rows still
going only (rows longest first, the steps cut where a quarter of the rows left have ended), and a batch of
enough rows is split into blocks run at once on the kernel pool.

    >>> fused = DynamicRnnLoop.recognise(while_node, cond, body, bind_kernel, max_iterations)  # or None
    >>> outputs = fused(loop_vars)   # None: run the loop
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.graph import Node
from engine.graph.functions import Function
from engine.passes.fuse_dynamic_rnn import DynamicRnn, recognise
from engine.passes.loop_trace import Env, LoopWeights, allowed_steps, scalar_int
from kernels import pool

__all__ = ["DynamicRnnLoop"]

_F32 = np.dtype(np.float32)
# Batch rows per block when a loop's rows are split over the kernel pool (fewer do not pay for the hand-off).
_MIN_BLOCK_ROWS = 8




def _float_matrix(value: Any, shape: tuple[int, ...]) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == _F32 and value.shape == shape


def _unread_steps(array: Any, start: int, steps: int) -> np.ndarray | None:
    """Items [start, start + steps) of a TensorArray stacked, when each is written, readable and float32
    [B, D] of one shape; else None."""
    from kernels.state.tensor_array import TensorArray  # kernels import the engine: import late

    if (not isinstance(array, TensorArray) or array.element_dtype != _F32 or array.closed
            or not 0 <= start <= array.size - steps):
        return None
    chosen = array.elements[start:start + steps]
    first = chosen[0].value
    for element in chosen:
        if (not element.written or element.cleared or not isinstance(element.value, np.ndarray)
                or element.value.ndim != 2 or element.value.shape != first.shape or element.value.dtype != _F32):
            return None
    return np.stack([element.value for element in chosen])


def _writable(array: Any, start: int, steps: int, shape: tuple[int, int]) -> bool:
    """Whether a TensorArray takes float32 `shape` items at [start, start + steps), none of them written."""
    from kernels.partial_shape import compatible
    from kernels.state.tensor_array import TensorArray

    if (not isinstance(array, TensorArray) or array.element_dtype != _F32 or array.closed or start < 0
            or (not array.dynamic_size and start + steps > array.size) or not compatible(array.element_shape, shape)):
        return False
    return not any(e.written or e.read for e in array.elements[start:start + steps])


class DynamicRnnLoop:
    """A While recognised as dynamic_rnn's loop, run as its recurrent kernel (see the module docstring)."""

    def __init__(self, node: Node, rnn: DynamicRnn, bind_kernel: Callable[[Node], Callable[..., tuple]],
                 max_iterations: int):
        attrs = {"reset_after": rnn.reset_after} if rnn.kind == "gru" else {}
        if rnn.zeros is not None:
            attrs["zero_masked"] = True  # finished rows output zeros
        self.kernel = bind_kernel(Node(node.name, rnn.op, (), (), node.device, attrs))
        self.rnn = rnn
        self.max_iterations = max_iterations
        self.weights = LoopWeights(rnn.weights)

    @classmethod
    def recognise(cls, node: Node, cond: Function, body: Function, bind_kernel: Callable[[Node], Callable[..., tuple]],
                  max_iterations: int) -> DynamicRnnLoop | None:
        """The fused loop for While `node` calling `cond` and `body`, or None when it is no dynamic_rnn loop."""
        rnn = recognise(cond, body, node.attrs["T"])
        return None if rnn is None else cls(node, rnn, bind_kernel, max_iterations)

    def steps(self, values: Sequence[Any]) -> int | None:
        """How many iterations the condition allows, or None."""
        return allowed_steps(self.rnn.bounds, values, self.max_iterations)

    def _valid(self, values: Sequence[Any], start: int, steps: int, batch: int) -> np.ndarray | None | bool:
        """[steps, B]: which rows each step updates (None: all of them); False when the lengths do not fit."""
        if self.rnn.lengths is None:
            return None
        lengths = self.rnn.lengths.get(Env(values))
        time = values[self.rnn.time]
        if not isinstance(lengths, np.ndarray) or lengths.dtype != time.dtype or lengths.shape != (batch,):
            return False
        valid = np.arange(start, start + steps, dtype=np.int64)[:, None] < lengths[None, :]
        return None if valid.all() else valid

    def run(self, x: np.ndarray, states: list[np.ndarray], weights: tuple[np.ndarray, ...], mask: np.ndarray) -> tuple:
        """The kernel over the whole batch, or over blocks of its rows at once on the kernel pool: each row's
        recurrence is its own, so the blocks need not meet until the end."""
        h = states[0]
        blocks = min(pool.pool_size(), h.shape[0] // _MIN_BLOCK_ROWS)
        if blocks < 2 or pool.in_pool_task():
            return self.kernel(x, *states, *weights, mask, h)
        bounds = np.linspace(0, h.shape[0], blocks + 1).astype(int)
        parts: list[tuple] = [()] * blocks

        def work(i: int) -> None:
            rows = slice(bounds[i], bounds[i + 1])
            parts[i] = self.kernel(x[:, rows], *[s[rows] for s in states], *weights,
                                   mask[:, rows] if mask.size else mask, h[rows])

        pool.run_tasks(work, range(blocks))
        return (np.concatenate([p[0] for p in parts], axis=1),
                *(np.concatenate([p[k] for p in parts]) for k in range(1, len(parts[0]))))

    def packed(self, x: np.ndarray, states: list[np.ndarray], weights: tuple[np.ndarray, ...],
               valid: np.ndarray) -> tuple:
        """The kernel over the rows still going only: rows longest first, the steps cut where a quarter of the
        rows left have ended, each piece run over the rows that have not (an ended row keeps its states and
        outputs zeros, as the mask would have it)."""
        lengths = np.count_nonzero(valid, axis=0)  # each row's steps (valid is a prefix of them)
        order = np.argsort(-lengths, kind="stable")
        steps, batch = valid.shape
        outputs = np.zeros((steps, batch, states[0].shape[1]), np.float32)
        states = [np.array(s, order="C") for s in states]
        start = 0
        while start < steps and (active := int(np.count_nonzero(lengths > start))):
            rows = order[:active]
            stop = int(np.sort(lengths[rows])[max(1, active // 4) - 1])
            piece = slice(start, stop)
            outputs[piece, rows], *final = self.run(x[piece][:, rows], [s[rows] for s in states], weights,
                                                    np.ascontiguousarray(valid[piece][:, rows]))
            for state, value in zip(states, final):
                state[rows] = value
            start = stop
        return outputs, *states

    def __call__(self, values: Sequence[Any]) -> tuple | None:
        r = self.rnn
        steps, start = self.steps(values), scalar_int(values[r.time])
        if steps is None or start is None or any(scalar_int(values[i]) is None for i in r.counters):
            return None
        x, h = _unread_steps(values[r.sequence], start, steps), values[r.h]
        if x is None or not isinstance(h, np.ndarray) or h.ndim != 2:
            return None
        batch, units = h.shape
        gates = 4 if r.kind == "lstm" else 3
        valid = self._valid(values, start, steps, batch)
        weights = self.weights(values)
        if (valid is False or weights is None or x.shape[1] != batch
                or any(not _float_matrix(values[i], (batch, units)) for i in (r.h, r.c) if i is not None)
                or not _float_matrix(weights[0], (x.shape[2], gates * units))
                or not _float_matrix(weights[1 if r.kind == "lstm" else 2], (units, gates * units))
                or any(w.shape != (gates * units,) for w in weights if w.ndim == 1)):
            return None
        if r.output is not None:
            if not _writable(values[r.output.handle], start, steps, (batch, units)):
                return None
            if r.zeros is not None:
                zeros = r.zeros.get(Env(values))
                if not _float_matrix(zeros, (batch, units)) or np.any(zeros):
                    return None
        states = [values[i] for i in (r.h, r.c) if i is not None]
        if valid is None:
            outputs, *final = self.run(x, states, weights, np.empty(0, np.float32))
        else:
            outputs, *final = self.packed(x, states, weights, valid)
        for i in range(start, start + steps):  # what the loop's reads do to the array
            values[r.sequence].read(np, i)
        if r.output is not None:
            array = values[r.output.handle]
            for t in range(steps):
                array.write(start + t, outputs[t])
        results = list(values)
        for i in r.counters:
            results[i] = np.asarray(int(values[i]) + steps, values[i].dtype)
        for i, value in zip((r.h, r.c), final):
            results[i] = value
        return tuple(results)
