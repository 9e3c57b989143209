"""While loops whose iterations are independent of each other, as tf.map_fn writes them, recognised so that
their iterations run on the kernel pool at once (TensorFlow runs up to `parallel_iterations` of them at a time).

A loop qualifies when its condition bounds counters (`Less(counter, loop constant or Const)`, under
`LogicalAnd`: engine.passes.loop_trace.loop_bounds), and its body returns each loop var unchanged, plus one
(a counter), or written by `TensorListSetItem` at a counter's index into the list the loop var holds, that list
read by nothing else; the body is otherwise free of effects (stateless ops, Assert, whose one effect is to fail,
and calls of functions holding only those), and reads only loop constants and counters. Iteration k
then computes from the loop's inputs and `counter + k` alone, writing a distinct item of each list, so that
the iterations may run in any order and at once. tf.map_fn's loop (read item i of the input list, compute,
write item i of the output list) is one.

`ParallelIterations` runs such a loop: the first iteration on the calling thread, timed; where it took less
than a hand-off to the pool is worth, the rest follow it in order there, as the loop would run them, and
otherwise every other iteration runs as a task of the kernel pool (engine.kernels.pool), each from the loop's
inputs with its counters advanced. The lists come back with every iteration's item, in order, as the loop
leaves them; an iteration that fails fails the loop with the error of the first failing iteration, as running
them in order would (the ones after it have run, but nothing they did is seen). Loops the condition would run
for fewer than two iterations, or past the iteration limit, and inputs other than the body reads (a counter
that is not an integer scalar, a list var that holds no list) run as the loop does.

    >>> parallel = ParallelIterations.recognise(cond, body, library, max_iterations)   # or None
    >>> outputs = parallel(loop_vars, run_body, check)  # None: run the loop
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import kernels
from engine.graph import parse_tensor_name
from engine.graph.functions import FUNCTION_ATTRS, Function
from engine.passes.loop_trace import Bound, loop_bounds, resolve
from kernels import pool
from kernels.array.identity import IDENTITY_OPS

__all__ = ["IndependentLoop", "ParallelIterations", "recognise"]

# The first iteration must take this long for the others to go to the pool (a hand-off costs tens of
# microseconds; a small body's iterations run faster in order).
HEAVY_ITERATION_S = 250e-6
_COUNTER_OPS = frozenset({"Add", "AddV2"})
# Stateful ops whose one effect is to fail the iteration (TensorFlow's Assert): iterations may run them in
# any order, since the loop fails with the first failing iteration's error either way.
_FAILING_OPS = frozenset({"Assert"})


@dataclass(frozen=True)
class IndependentLoop:
    """A While with independent iterations, by loop var index: `counters` gain one per iteration, `writes`
    (list var, index var) set item `index var` of the list each iteration; every other var is unchanged."""

    bounds: tuple[Bound, ...]
    counters: tuple[int, ...]
    writes: tuple[tuple[int, int], ...]


def _is_one(node: Any, dtype: np.dtype) -> bool:
    value = node.attrs.get("value") if node is not None and node.op == "Const" else None
    return isinstance(value, np.ndarray) and value.shape == () and value.dtype == dtype and value == 1


def _effect_free(op: str, node: Any, library: Mapping[str, Function], seen: set[str]) -> bool:
    """Whether a node of `op` may run in any order with its siblings' iterations: a stateless kernel, an
    Assert, or a call whose functions hold only such nodes."""
    if op in FUNCTION_ATTRS:
        for attr in FUNCTION_ATTRS[op]:
            name = node.attrs[attr].name
            if name in seen:
                continue
            seen.add(name)
            if name not in library or not all(_effect_free(n.op, n, library, seen)
                                              for n in library[name].graph.nodes):
                return False
        return True
    if not kernels.has_op(op, "cpu"):
        return False
    return not kernels.lookup(op, "cpu").stateful or op in _FAILING_OPS


def recognise(cond: Function, body: Function, library: Mapping[str, Function]) -> IndependentLoop | None:
    """The independent-iterations loop a While calling `cond` and `body` is, or None (see the module
    docstring)."""
    bounds = loop_bounds(cond)
    nodes = {n.name: n for n in body.graph.nodes}
    if bounds is None or len(body.args) != len(body.rets) or any(name not in nodes for name in body.control_rets):
        return None
    args = {parse_tensor_name(a).node: i for i, a in enumerate(body.args)}
    counters, writes, unchanged = [], [], []
    setters: dict[str, int] = {}  # the SetItem node of each list var
    for i, ret in enumerate(body.rets):
        ref = resolve(nodes, parse_tensor_name(ret))
        node = nodes.get(ref.node)
        if args.get(ref.node) == i:
            unchanged.append(i)
        elif node is not None and node.op in _COUNTER_OPS:
            a, b = (resolve(nodes, r) for r in node.inputs)
            one = b if args.get(a.node) == i else a if args.get(b.node) == i else None
            if one is None or body.arg_dtypes[i].kind not in "iu" or not _is_one(nodes.get(one.node), body.arg_dtypes[i]):
                return None
            counters.append(i)
        elif (node is not None and node.op == "TensorListSetItem" and args.get(resolve(nodes, node.inputs[0]).node) == i
              and not node.attrs.get("resize_if_index_out_of_bounds", False)
              and resolve(nodes, node.inputs[1]).node in args):
            writes.append((i, args[resolve(nodes, node.inputs[1]).node]))
            setters[node.name] = i
        else:
            return None
    if (any(index not in counters for _, index in writes)
            or any(b.counter not in counters or (b.var is not None and b.var not in unchanged) for b in bounds)):
        return None
    lists = {i for i, _ in writes}
    # Everything the body computes: stateless, reading loop constants and counters (a list var only as the
    # list its own SetItem writes into).
    seen: set[str] = set()
    pending = [parse_tensor_name(r).node for r in body.rets] + list(body.control_rets)
    while pending:
        name = pending.pop()
        if name in seen or name in args:
            continue
        seen.add(name)
        node = nodes.get(name)
        if node is None:
            return None
        if node.op not in IDENTITY_OPS:
            if not _effect_free(node.op, node, library, set()):
                return None
            for position, ref in enumerate(node.inputs):
                source = args.get(resolve(nodes, ref).node)
                if source in lists and not (setters.get(name) == source and position == 0):
                    return None
        pending.extend(r.node for r in node.inputs)
        pending.extend(c.lstrip("^") for c in node.control_inputs)
    return IndependentLoop(tuple(bounds), tuple(counters), tuple(writes))


def _int_scalar(value: Any) -> int | None:
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        return int(value)
    return None


class ParallelIterations:
    """A While with independent iterations, run with its iterations on the kernel pool (see the module
    docstring): called with the loop's inputs, the body's runner and a check of what the body returns, the
    loop's outputs, or None where the loop must run as it is."""

    def __init__(self, loop: IndependentLoop, max_iterations: int):
        self.loop = loop
        self.max_iterations = max_iterations

    @classmethod
    def recognise(cls, cond: Function, body: Function, library: Mapping[str, Function],
                  max_iterations: int) -> ParallelIterations | None:
        loop = recognise(cond, body, library)
        return None if loop is None else cls(loop, max_iterations)

    def steps(self, values: Sequence[Any]) -> int | None:
        """How many iterations the condition allows (None: not two or more within the limit, or inputs the
        loop reads otherwise)."""
        steps = None
        for bound in self.loop.bounds:
            counter = values[bound.counter]
            limit = values[bound.var] if bound.var is not None else np.asarray(bound.value)
            if _int_scalar(counter) is None or _int_scalar(limit) is None or (
                    bound.var is not None and limit.dtype != counter.dtype):
                return None
            left = int(limit) - int(counter)
            steps = left if steps is None else min(steps, left)
        return steps if steps is not None and 2 <= steps <= self.max_iterations else None

    def __call__(self, values: Sequence[Any], run_body: Callable[[Sequence[Any]], list[Any]],
                 check: Callable[[list[Any]], Any]) -> tuple | None:
        from kernels.state.tensor_list import TensorList  # kernels import the engine: import late

        steps = self.steps(values)
        if steps is None or any(_int_scalar(values[i]) is None for i in self.loop.counters) or any(
                not isinstance(values[i], TensorList) for i, _ in self.loop.writes):
            return None
        start = time.perf_counter()
        first = run_body(values)
        check(first)
        if time.perf_counter() - start < HEAVY_ITERATION_S or pool.pool_size() < 2 or pool.in_pool_task():
            current = first
            for _ in range(1, steps):  # as the loop runs them
                current = run_body(current)
                check(current)
            return tuple(current)
        outputs: list[Any] = [first] + [None] * (steps - 1)
        failures: list[Exception | None] = [None] * steps

        def iteration(k: int) -> None:
            inputs = list(values)
            for i in self.loop.counters:
                inputs[i] = np.asarray(int(values[i]) + k, values[i].dtype)
            try:
                outputs[k] = run_body(inputs)
                check(outputs[k])
            except Exception as e:  # noqa: BLE001  (raised below: the first failing iteration's)
                failures[k] = e

        pool.run_tasks(iteration, range(1, steps))
        for failure in failures:
            if failure is not None:
                raise failure
        results = list(outputs[-1])
        for i, index in self.loop.writes:
            items = list(values[i].items)
            for k, output in enumerate(outputs):
                at = int(values[index]) + k
                items[at] = output[i].items[at]
            results[i] = values[i].replace_items(items)
        return tuple(results)
