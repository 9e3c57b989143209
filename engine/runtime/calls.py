"""Call ops at run time: If, While and function calls bound to their compiled function bodies.

The planner (engine.compile.plan) compiles each function a call op names into a plan of its own,
once; `bind_call` turns the call node into a callable over those plans that checks what each body
returns against the call's declared types. An If runs one branch by its predicate, read as TensorFlow
reads it (`to_bool`); a While runs its body while its condition holds and fails with LoopLimitError
past the plan's iteration limit. A function that (indirectly) calls itself is refused while compiling.

A While costs little beyond its body's kernels: a condition that only compares loop counters with
bounds (`Less`, under `LogicalAnd`) is evaluated in place rather than as a plan, and what the body
returns is checked against the declared types on the first iterations only (kernels' output dtypes
follow their input dtypes, numpy having no value-based casting, so once the loop vars have the declared
types they keep them). A While whose body is a Keras LSTM or GRU step (engine.passes.fuse_recurrence)
runs, on CPU, as one recurrent kernel whenever its inputs are what that kernel takes, and as the loop
otherwise; so does a tf.compat.v1.nn.dynamic_rnn loop (engine.passes.fuse_dynamic_rnn), and a padded,
tiled NMS loop (engine.passes.padded_nms_loop: Model Garden's and tf.image's). A While whose iterations are
independent (tf.map_fn's: engine.passes.independent_iterations) runs them on the kernel pool at once when
one iteration is long enough to be worth a hand-off, as TensorFlow runs `parallel_iterations` of them.

    >>> call = bind_call(node, graph.library, compile_function, max_iterations=100_000)
    >>> outputs = call(*inputs)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, NoReturn

import numpy as np

from engine import devices
from engine.errors import ExecutionError, GraphError, LoopLimitError
from engine.graph import Node, dtypes
from engine.graph.functions import FUNCTION_ATTRS, Function, call_types_attr, called_function, check_call_signature
from engine.passes.dynamic_rnn_loop import DynamicRnnLoop
from engine.passes.fuse_recurrence import Recurrence, recognise
from engine.passes.independent_iterations import ParallelIterations
from engine.passes.loop_trace import Bound, LoopWeights, allowed_steps, loop_bounds, scalar_int
from engine.passes.padded_nms_loop import PaddedNmsLoop
from kernels.control_flow.functional import IF_OPS, WHILE_OPS

__all__ = ["BodyRun", "bind_call", "body_runner", "to_bool"]

# A compiled function body: arg values in, ret values out (both in signature order).
BodyRun = Callable[[Sequence[Any]], list[Any]]

# The functions whose bodies are being compiled, outermost first (per thread and task).
_COMPILING: ContextVar[tuple[str, ...]] = ContextVar("tensorgate_compiling_functions", default=())

# A While checks what its body returns on this many first iterations (see the module docstring): the first
# sees the While's inputs, the second the declared types, and every later one the same dtypes again.
_CHECKED_ITERATIONS = 2


def _compile(runner: Callable[[Function], BodyRun], function: Function, node: Node) -> BodyRun:
    stack = _COMPILING.get()
    if function.name in stack:
        chain = " -> ".join(stack[stack.index(function.name):] + (function.name,))
        raise GraphError(f"node '{node.name}' ({node.op}): function '{function.name}' calls itself ({chain}); "
                         "recursive functions are not supported")
    token = _COMPILING.set(stack + (function.name,))
    try:
        return runner(function)
    finally:
        _COMPILING.reset(token)


def to_bool(value: Any) -> bool:
    """A predicate as TensorFlow reads it: a scalar is true when nonzero (a string: non-empty); any
    other tensor is true when it has elements."""
    if getattr(value, "ndim", 0) != 0:
        return value.size > 0
    item = value.item() if hasattr(value, "item") else value
    if isinstance(item, (bytes, str)):
        return len(item) > 0
    return bool(item != 0)


class _Returns:
    """Checks what a function returned against the call's declared output types."""

    def __init__(self, node: Node, device: str):
        self.node, self.device = node, device
        self.count_attr = call_types_attr(node.op)
        self.types = tuple(node.attrs[self.count_attr])
        self.checked = tuple((i, t) for i, t in enumerate(self.types) if t != np.dtype(object))

    def __call__(self, function: Function, values: list[Any]) -> tuple:
        if len(values) != len(self.types):
            self.fail(f"function '{function.name}' returned {len(values)} value(s); {self.count_attr} lists "
                      f"{len(self.types)}")
        for i, want in self.checked:
            got = getattr(values[i], "dtype", None)
            if got != want:
                shown = dtypes.tf_name_of_numpy(got) if got is not None else type(values[i]).__name__
                self.fail(f"output {i} of function '{function.name}' is {shown}; {self.count_attr} says "
                          f"{dtypes.tf_name_of_numpy(want)}")
        return tuple(values)

    def fail(self, message: str) -> NoReturn:
        raise ExecutionError(self.node.name, self.node.op, self.device, message)


def bind_call(
    node: Node,
    library: Mapping[str, Function],
    runner: Callable[[Function], BodyRun],
    max_iterations: int,
    device: str = "cpu",
    bind_kernel: Callable[[Node], Callable[..., tuple]] | None = None,
) -> Callable[..., tuple]:
    """The callable a plan runs for call op `node`: its functions compiled once through `runner`
    (function -> run(arg values) -> ret values). A While past `max_iterations` raises LoopLimitError.
    GraphError when a function (indirectly) calls itself. With `bind_kernel` (the planner's, node ->
    bound kernel), a While recognised as a recurrence runs as one recurrent kernel where it can."""
    functions = {attr: called_function(node, attr, library, node.name) for attr in FUNCTION_ATTRS[node.op]}
    for attr, function in functions.items():
        check_call_signature(node, attr, function, node.name)
    runs = {attr: _compile(runner, function, node) for attr, function in functions.items()}
    returns = _Returns(node, device)

    if node.op in IF_OPS:
        then_f, else_f = functions["then_branch"], functions["else_branch"]
        run_then, run_else = runs["then_branch"], runs["else_branch"]

        def call_if(cond: Any, *inputs: Any) -> tuple:
            if to_bool(cond):
                return returns(then_f, run_then(inputs))
            return returns(else_f, run_else(inputs))

        return call_if

    if node.op in WHILE_OPS:
        body_f = functions["body"]
        run_cond, run_body = runs["cond"], runs["body"]
        bounds = loop_bounds(functions["cond"])
        recurrence = None
        if bind_kernel is not None and devices.device_kind(device) == "cpu":
            recurrence = recognise(functions["cond"], body_f, node.attrs["T"])
        fused = None if recurrence is None else _FusedRecurrence(node, recurrence, bind_kernel, max_iterations)
        if fused is None and bind_kernel is not None and devices.device_kind(device) == "cpu":
            fused = DynamicRnnLoop.recognise(node, functions["cond"], body_f, bind_kernel, max_iterations)
        if fused is None and bind_kernel is not None and devices.device_kind(device) == "cpu":
            fused = PaddedNmsLoop.recognise(node, functions["cond"], body_f, library, bind_kernel, max_iterations)
        parallel = None
        if fused is None and devices.device_kind(device) == "cpu":
            parallel = ParallelIterations.recognise(functions["cond"], body_f, library, max_iterations)

        def check_returns(values: list[Any]) -> None:
            returns(body_f, values)

        def call_while(*loop_vars: Any) -> tuple:
            if fused is not None:
                result = fused(loop_vars)
                if result is not None:
                    return result
            if parallel is not None:
                result = parallel(loop_vars, run_body, check_returns)
                if result is not None:
                    return result
            values = loop_vars
            iterations = 0
            while True:
                pred = None if bounds is None else _bounds_hold(bounds, values)
                if pred is None:
                    (pred,) = run_cond(values)
                    pred = to_bool(pred)
                if not pred:
                    return tuple(values)
                if iterations == max_iterations:
                    raise LoopLimitError(node.name, body_f.name, max_iterations)
                values = run_body(values)
                if iterations < _CHECKED_ITERATIONS:
                    returns(body_f, values)
                iterations += 1

        return call_while

    f, run_f = functions["f"], runs["f"]

    def call(*args: Any) -> tuple:
        return returns(f, run_f(args))

    return call


def body_runner(plan: Any, function: Function, execute: Callable[[Any, Sequence[Any]], list[Any]]) -> BodyRun:
    """Run a plan compiled from `function` (feeds `function.args`, fetches `function.rets`, which the
    plan may have reordered and de-duplicated) with `execute`: arg values in, ret values out."""
    feed_positions = [plan.feed_index[arg] for arg in function.args]
    fetch_positions = [plan.fetch_index[ret] for ret in function.rets]
    in_order = feed_positions == list(range(len(plan.feeds)))
    n_feeds = len(plan.feeds)

    def run(args: Sequence[Any]) -> list[Any]:
        if in_order:
            values = list(args)
        else:
            values = [None] * n_feeds
            for position, value in zip(feed_positions, args):
                values[position] = value
        outputs = execute(plan, values)
        return [outputs[i] for i in fetch_positions]

    return run


def _bounds_hold(bounds: tuple[Bound, ...], values: Sequence[Any]) -> bool | None:
    """The condition `loop_bounds` read, evaluated on the loop vars as its Less ops would, or None where
    an operand is not a scalar integer array of the dtype of the other (the condition's plan decides)."""
    holds = True
    for bound in bounds:
        counter = values[bound.counter]
        if type(counter) is not np.ndarray or counter.ndim or counter.dtype.kind != "i":
            return None
        if bound.var is None:
            limit = bound.value
        else:
            limit = values[bound.var]
            if type(limit) is not np.ndarray or limit.ndim or limit.dtype != counter.dtype:
                return None
        holds = holds and bool(counter < limit)
    return holds



def _stacked(items: Any, start: int, count: int, dtype: np.dtype, rank: int) -> np.ndarray | None:
    """Items [start, start + count) of a TensorList of `dtype` stacked, when all are set arrays of one
    shape of `rank`; else None."""
    from kernels.state.tensor_list import TensorList  # kernels import the engine: import late

    if not isinstance(items, TensorList) or items.element_dtype != dtype or not 0 <= start <= items.length - count:
        return None
    chosen = items.items[start:start + count]
    first = chosen[0]
    if not isinstance(first, np.ndarray) or first.ndim != rank:
        return None
    for item in chosen:
        if not isinstance(item, np.ndarray) or item.shape != first.shape or item.dtype != dtype:
            return None
    return np.stack(chosen)


def _float_matrix(value: Any, shape: tuple[int, int]) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == np.float32 and value.shape == shape


class _FusedRecurrence:
    """A While recognised as a recurrence (engine.passes.fuse_recurrence), run as its recurrent kernel.

    Calling it with the loop's inputs returns the loop's outputs, or None where the inputs are not what the
    kernel takes exactly (the loop then runs as it is and raises its own errors): the condition must allow
    between 1 and the iteration limit steps, every step's item must be set and float32 [B, D], the states
    float32 [B, H], the weights fit, and the output list take every write."""

    def __init__(self, node: Node, recurrence: Recurrence, bind_kernel: Callable[[Node], Callable[..., tuple]],
                 max_iterations: int):
        attrs = {"reset_after": recurrence.reset_after} if recurrence.kind == "gru" else {}
        if recurrence.zero_masked:
            attrs["zero_masked"] = True
        self.kernel = bind_kernel(Node(node.name, recurrence.op, (), (), node.device, attrs))
        self.recurrence = recurrence
        self.max_iterations = max_iterations
        self.weights = LoopWeights(recurrence.weights)

    def steps(self, values: Sequence[Any]) -> int | None:
        """How many iterations the condition allows, or None."""
        return allowed_steps(self.recurrence.bounds, values, self.max_iterations)

    def __call__(self, values: Sequence[Any]) -> tuple | None:
        r = self.recurrence
        steps = self.steps(values)
        start = scalar_int(values[r.time])
        if steps is None or start is None:
            return None
        if any(scalar_int(values[i]) is None for i in r.counters):
            return None
        x = _stacked(values[r.sequence], start, steps, np.dtype(np.float32), 2)
        h = values[r.h]
        if x is None or not isinstance(h, np.ndarray) or h.ndim != 2:
            return None
        batch, units = h.shape
        gates = 4 if r.kind == "lstm" else 3
        states = [values[i] for i in (r.h, r.c, r.output_state) if i is not None]
        mask = np.empty(0, np.float32)
        if r.mask is not None:
            mask = _stacked(values[r.mask], start, steps, np.dtype(np.bool_), 2)
            if mask is None or mask.shape[1:] != (batch, 1):
                return None
            mask = mask[:, :, 0]
        weights = self.weights(values)
        if (weights is None or x.shape[1] != batch or any(not _float_matrix(s, (batch, units)) for s in states)
                or not _float_matrix(weights[0], (x.shape[2], gates * units))
                or not _float_matrix(weights[1 if r.kind == "lstm" else 2], (units, gates * units))
                or any(w.shape != (gates * units,) for w in weights if w.ndim == 1)):
            return None
        items = None
        if r.output_list is not None:
            from kernels.partial_shape import compatible  # kernels import the engine: import late
            from kernels.state.tensor_list import TensorList

            items = values[r.output_list]
            last = start + steps - 1 if r.output_index is None else r.output_index
            if (not isinstance(items, TensorList) or items.element_dtype != np.float32 or not 0 <= last < items.length
                    or not compatible(items.element_shape, (batch, units))):
                return None
        output = values[r.output_state] if r.output_state is not None else h
        if r.kind == "lstm":
            kernel, recurrent_kernel, bias = weights
            outputs, *final = self.kernel(x, h, values[r.c], kernel, recurrent_kernel, bias, mask, output)
        else:
            kernel, input_bias, recurrent_kernel, recurrent_bias = weights
            outputs, *final = self.kernel(x, h, kernel, input_bias, recurrent_kernel, recurrent_bias, mask, output)
        results = list(values)
        for i in r.counters:
            results[i] = np.asarray(int(values[i]) + steps, values[i].dtype)
        for i, value in zip((r.h, r.c), final):
            results[i] = value
        if r.output_state is not None:
            results[r.output_state] = outputs[-1]
        if items is not None:
            written = list(items.items)
            if r.output_index is None:
                written[start:start + steps] = list(outputs)
            else:
                written[r.output_index] = outputs[-1]
            results[r.output_list] = items.replace_items(written)
        return tuple(results)
