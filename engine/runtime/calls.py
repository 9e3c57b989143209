"""Call ops at run time: If, While and function calls bound to their compiled function bodies.

The planner (engine.compile.plan) compiles each function a call op names into a plan of its own,
once; `bind_call` turns the call node into a callable over those plans that checks what each body
returns against the call's declared types. An If runs one branch by its predicate, read as TensorFlow
reads it (`to_bool`); a While runs its body while its condition holds and fails with LoopLimitError
past the plan's iteration limit. A function that (indirectly) calls itself is refused while compiling.

    >>> call = bind_call(node, graph.library, compile_function, max_iterations=100_000)
    >>> outputs = call(*inputs)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, NoReturn

import numpy as np

from engine.errors import ExecutionError, GraphError, LoopLimitError
from engine.graph import Node, dtypes
from engine.graph.functions import FUNCTION_ATTRS, Function, call_types_attr, called_function, check_call_signature
from kernels.control_flow.functional import IF_OPS, WHILE_OPS

__all__ = ["BodyRun", "bind_call", "body_runner", "to_bool"]

# A compiled function body: arg values in, ret values out (both in signature order).
BodyRun = Callable[[Sequence[Any]], list[Any]]

# The functions whose bodies are being compiled, outermost first (per thread and task).
_COMPILING: ContextVar[tuple[str, ...]] = ContextVar("tensorgate_compiling_functions", default=())


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
) -> Callable[..., tuple]:
    """The callable a plan runs for call op `node`: its functions compiled once through `runner`
    (function -> run(arg values) -> ret values). A While past `max_iterations` raises LoopLimitError.
    GraphError when a function (indirectly) calls itself."""
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

        def call_while(*loop_vars: Any) -> tuple:
            values = loop_vars
            iterations = 0
            while True:
                (pred,) = run_cond(values)
                if not to_bool(pred):
                    return tuple(values)
                if iterations == max_iterations:
                    raise LoopLimitError(node.name, body_f.name, max_iterations)
                values = returns(body_f, run_body(values))
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
