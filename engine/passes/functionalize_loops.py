"""Functionalizing loops: TensorFlow's v1 while loops (frames of Enter, Merge, Switch, NextIteration, Exit and
LoopCond) raised into functional While nodes, so that they run on the plan executor, iteration after iteration
of a compiled body, instead of one dataflow step per node per iteration (engine.runtime.dataflow_executor), and
so that the planner can run a recognised recurrence as one kernel (engine.runtime.calls).

A frame is raised when it is well-formed, as TensorFlow's own FunctionalizeControlFlow
(tensorflow/compiler/tf2xla/functionalize_while.cc) defines it, checked rather than assumed:

- one LoopCond, read only by the loop's Switches (as their predicate);
- per loop variable an Enter read only by a two-input Merge, whose other input is a NextIteration read only by
  that Merge; the Merge read by exactly one Switch on the LoopCond (and by the condition), never through its
  value_index; the Switch's false output read only by one Exit (or nothing), its true output by the body;
- loop invariants enter through Enter with `is_constant`;
- the condition is everything the LoopCond's input depends on back to the Merges and invariants, the body
  everything the NextIterations' inputs (and their control inputs: effects) depend on back to the Switches'
  true outputs and the invariants; both stay inside the frame, and together with the structure above they
  are the whole frame. Nested frames are raised first (innermost out), a raised inner loop being one While
  node of its parent's body.

The While takes the Enters' inputs and replaces the frame; each Exit becomes an Identity of its While output
under the Exit's name, so readers (and fetches) of the Exit are unchanged. An invariant that is a constant
(a Const, possibly behind Identity ops, without control inputs) is copied into the functions instead of
passed in, so that each body's own optimization (engine.compile.plan compiles it through the pipeline) sees
its weights. Anything else, and any frame holding a fed, fetched or targeted node other than an Exit, is left
to the dataflow executor as it is (frames around a frame left so stay too), as is every frame of a signature
compiled for partial runs, where parts of a loop may run before the feeds of others arrive. A v1 conditional
(Switch and Merge without a frame) inside a body goes into the body function, whose own pipeline raises it
into an If (engine.passes.functionalize_conds) or leaves it to a dataflow plan of the body's own.

    >>> graph = run(graph, ctx)   # 'rnn/while/LoopCond' is now a While calling 'rnn/while/while_context/body'
"""

from __future__ import annotations

from collections import ChainMap, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

import kernels
from engine.compile.dataflow import loop_frames
from engine.errors import GraphError
from engine.graph import Graph, Node, TensorRef
from engine.graph.functions import Function
from engine.passes.context import PassContext
from engine.passes.rewrite import topological_order
from engine.proto import attr_value_pb2
from kernels.array.identity import IDENTITY_OPS
from kernels.control_flow.dataflow import ENTER_OPS, EXIT_OPS, MERGE_OPS, NEXT_ITERATION_OPS, SWITCH_OPS

__all__ = ["fresh_function_name", "function_of", "run"]


class _NotWellFormed(Exception):
    """The frame is not one this pass raises; it stays on the dataflow executor."""


def _require(condition: bool) -> None:
    if not condition:
        raise _NotWellFormed


@dataclass(eq=False)
class _Arg:
    """One loop variable (an Enter and, unless it is invariant, its Merge, Switch, NextIteration and Exit)."""

    enter: Node
    merge: Node | None = None
    switch: Node | None = None
    next_iteration: Node | None = None
    exit: Node | None = None
    constant: Any = None  # an invariant's value, when it is a constant copied into the functions

    @property
    def invariant(self) -> bool:
        return self.merge is None

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.enter.attrs["T"])


class _Readers:
    """Who reads each tensor (node, input slot) and each node (control edges)."""

    def __init__(self, nodes: list[Node]):
        self.data: dict[TensorRef, list[tuple[str, int]]] = defaultdict(list)
        self.control: dict[str, list[str]] = defaultdict(list)
        for node in nodes:
            for slot, ref in enumerate(node.inputs):
                self.data[ref].append((node.name, slot))
            for ctrl in node.control_inputs:
                self.control[ctrl].append(node.name)


def run(graph: Graph, ctx: PassContext) -> Graph:
    if ctx.partial_run or not any(node.op in ENTER_OPS for node in graph.nodes):
        return graph
    functions: dict[str, Function] = {}
    library = MappingProxyType(ChainMap(functions, graph.library))
    nodes, counts = list(graph.nodes), dict(graph.output_counts)
    kept: set[str] = set()  # frames left to the dataflow executor (with every frame around them)
    while True:
        try:
            frame_of, _, parent = loop_frames(nodes, ctx.fed)
        except GraphError:
            return graph  # the dataflow planner reports it
        around = set(parent.values())  # frames with a frame inside
        leaves = [f for f in parent if f not in around and f not in kept]
        if not leaves:
            break
        for frame in leaves:
            by_name = {n.name: n for n in nodes}
            try:
                removed, added = _raise(frame, nodes, by_name, frame_of, ctx, counts, library, functions)
            except _NotWellFormed:
                while frame:
                    kept.add(frame)
                    frame = parent.get(frame, "")
                continue
            nodes = [n for n in nodes if n.name not in removed] + added
            for name in removed:
                counts.pop(name, None)
            counts.update({n.name: len(n.attrs["T"]) if n.op == "While" else 1 for n in added})
        nodes = topological_order(nodes)
    if not functions:
        return graph
    return Graph(nodes=tuple(nodes), output_counts=counts, library=library)


def _loop_args(frame: str, nodes: list[Node], by_name: dict[str, Node], members: set[str], readers: _Readers,
               ctx: PassContext) -> tuple[Node, list[_Arg]]:
    """The frame's LoopCond and loop variables, checked to have the structure the module docstring lists."""
    loop_conds = [by_name[m] for m in members if by_name[m].op == "LoopCond"]
    _require(len(loop_conds) == 1)
    (loop_cond,) = loop_conds
    _require(len(loop_cond.inputs) == 1 and not loop_cond.control_inputs and not readers.control[loop_cond.name])
    switches = set()
    for name, slot in readers.data[TensorRef(loop_cond.name, 0)]:
        _require(slot == 1 and by_name[name].op in SWITCH_OPS)
        switches.add(name)
    args = []
    for enter in (n for n in nodes if n.op in ENTER_OPS and n.attrs.get("frame_name") == frame):
        _require(len(enter.inputs) == 1 and not ctx.is_pinned(enter.name))
        if enter.attrs.get("is_constant", False):
            args.append(_Arg(enter, constant=_constant(enter.inputs[0], by_name, ctx)))
            continue
        _require(not readers.control[enter.name])
        (merge_name, slot), *others = readers.data[TensorRef(enter.name, 0)] or [("", 0)]
        merge = by_name.get(merge_name)
        _require(not others and merge is not None and merge.op in MERGE_OPS and len(merge.inputs) == 2)
        _require(not merge.control_inputs and not readers.data[TensorRef(merge.name, 1)])
        back = merge.inputs[1 - slot]
        next_iteration = by_name.get(back.node)
        _require(next_iteration is not None and next_iteration.op in NEXT_ITERATION_OPS and back.index == 0)
        _require(readers.data[back] == [(merge.name, 1 - slot)] and not readers.control[next_iteration.name])
        switch_names = [n for n, s in readers.data[TensorRef(merge.name, 0)] if n in switches and s == 0]
        _require(len(switch_names) == 1)
        switch = by_name[switch_names[0]]
        # NOTE: a control edge from a Switch is live on both branches, so it would run its reader once more as
        # the loop ends; lowered TF2 loops gather such edges on NoOps only (the body's input_control_node).
        _require(not switch.control_inputs and all(by_name[r].op == "NoOp" for r in readers.control[switch.name]))
        exits = [by_name[n] for n, _ in readers.data[TensorRef(switch.name, 0)]]
        _require(len(exits) <= 1 and all(e.op in EXIT_OPS and not e.control_inputs for e in exits))
        _require(not any(ctx.is_fed(e.name) for e in exits))
        args.append(_Arg(enter, merge, switch, next_iteration, exits[0] if exits else None))
    varying = [a for a in args if not a.invariant]
    _require(bool(varying) and switches == {a.switch.name for a in varying})
    return loop_cond, args


def _constant(ref: TensorRef, by_name: dict[str, Node], ctx: PassContext) -> Any:
    """The value of `ref` when it is a Const's (through Identity ops), none of them with control inputs or fed."""
    while ref not in ctx.fed and ref.index == 0 and ref.node in by_name:
        node = by_name[ref.node]
        if node.control_inputs:
            return None
        if node.op == "Const":
            return node.attrs.get("value")
        if node.op not in IDENTITY_OPS or node.op == "PlaceholderWithDefault":
            return None
        ref = node.inputs[0]
    return None


def _closure(roots: list[TensorRef], effects: list[str], cuts: dict[str, int], members: set[str],
             structural: set[str], by_name: dict[str, Node], ctx: PassContext) -> list[str]:
    """The nodes `roots` and `effects` depend on back to the `cuts` (node -> the one output that may be
    read there: a loop variable or invariant), all inside the frame and none of its structure."""
    seen: set[str] = set()
    stack: list[str] = []

    def visit(ref: TensorRef) -> None:
        _require(ref not in ctx.fed)
        if ref.node in cuts:
            _require(ref.index == cuts[ref.node])
        else:
            stack.append(ref.node)

    for ref in roots:
        visit(ref)
    stack.extend(name for name in effects if name not in cuts)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        _require(name in members and name not in structural and not ctx.is_pinned(name))
        seen.add(name)
        node = by_name[name]
        for ref in node.inputs:
            visit(ref)
        stack.extend(c for c in node.control_inputs if c not in cuts)
    return sorted(seen)


def _stateful(node: Node) -> bool:
    return not kernels.has_op(node.op, "cpu") or kernels.lookup(node.op, "cpu").stateful


def _raise(frame: str, nodes: list[Node], by_name: dict[str, Node], frame_of: Mapping[str, str], ctx: PassContext,
           counts: Mapping[str, int], library: Mapping[str, Function],
           functions: dict[str, Function]) -> tuple[set[str], list[Node]]:
    """(names removed, nodes added) raising `frame` into a While; _NotWellFormed when it is not well-formed."""
    members = {n.name for n in nodes if frame_of.get(n.name) == frame}
    readers = _Readers(nodes)
    loop_cond, args = _loop_args(frame, nodes, by_name, members, readers, ctx)
    varying = [a for a in args if not a.invariant]
    invariants = {a.enter.name: 0 for a in args if a.invariant}
    structural = {loop_cond.name} | {n.name for a in args
                                     for n in (a.enter, a.merge, a.switch, a.next_iteration, a.exit) if n is not None}
    _require(not any(ctx.is_pinned(n) for n in structural - {a.exit.name for a in varying if a.exit is not None}))
    cond_nodes = _closure([loop_cond.inputs[0]], [], {**invariants, **{a.merge.name: 0 for a in varying}},
                          members, structural, by_name, ctx)
    effects = [c for a in varying for c in a.next_iteration.control_inputs]
    body_nodes = _closure([a.next_iteration.inputs[0] for a in varying], effects,
                          {**invariants, **{a.switch.name: 1 for a in varying}}, members, structural, by_name, ctx)
    shared = set(cond_nodes) & set(body_nodes)
    _require(not any(_stateful(by_name[n]) for n in shared))
    entered = {a.enter.name for a in args}
    _require(members | entered <= structural | set(cond_nodes) | set(body_nodes))

    passed = [a for a in args if a.constant is None]
    cond_name, body_name = fresh_function_name(f"{frame}/cond", library), fresh_function_name(f"{frame}/body", library)
    cond_args = [a.merge.name if not a.invariant else a.enter.name for a in passed]
    body_args = [a.switch.name if not a.invariant else a.enter.name for a in passed]
    constants = [Node(a.enter.name, "Const", (), (), a.enter.device, {"value": a.constant, "dtype": a.dtype})
                 for a in args if a.constant is not None]
    arg_dtypes = [a.dtype for a in passed]
    functions[cond_name] = function_of(
        cond_name, cond_args, arg_dtypes, [by_name[n] for n in cond_nodes] + constants, {},
        [loop_cond.inputs[0]], [], [np.dtype(np.bool_)], counts, library)
    body_rets = [a.next_iteration.inputs[0] if not a.invariant else TensorRef(a.enter.name, 0) for a in passed]
    functions[body_name] = function_of(
        body_name, body_args, arg_dtypes, [by_name[n] for n in body_nodes] + constants,
        {TensorRef(a.switch.name, 1): TensorRef(a.switch.name, 0) for a in varying},
        body_rets, [c for c in effects if c not in invariants], [a.dtype for a in passed], counts, library)

    while_node = Node(loop_cond.name, "While", tuple(a.enter.inputs[0] for a in passed),
                      tuple(dict.fromkeys(c for a in args for c in a.enter.control_inputs)), loop_cond.device,
                      {"T": tuple(a.dtype for a in passed), "cond": attr_value_pb2.NameAttrList(name=cond_name),
                       "body": attr_value_pb2.NameAttrList(name=body_name), "output_shapes": (),
                       "parallel_iterations": int(varying[0].enter.attrs.get("parallel_iterations", 10))})
    outputs = [Node(a.exit.name, "Identity", (TensorRef(while_node.name, passed.index(a)),), (), a.exit.device,
                    {"T": a.dtype}) for a in varying if a.exit is not None]
    return members | entered, [while_node, *outputs]


def fresh_function_name(name: str, library: Mapping[str, Function]) -> str:
    """`name`, or `name_1`, `name_2`, ...: the first the library does not hold."""
    fresh, i = name, 1
    while fresh in library:
        fresh, i = f"{name}_{i}", i + 1
    return fresh


def function_of(name: str, arg_names: list[str], arg_dtypes: list[np.dtype], nodes: list[Node],
                renamed: dict[TensorRef, TensorRef], rets: list[TensorRef], control_rets: list[str],
                ret_dtypes: list[np.dtype], counts: Mapping[str, int], library: Mapping[str, Function]) -> Function:
    """A Function (shared with engine.passes.functionalize_conds) whose args are Placeholders named `arg_names`
    (the nodes they replace: readers of those read the arg, through `renamed` where they read another output
    than 0) and whose body is `nodes`, keeping the control edges between them (an arg is always there)."""
    args = set(arg_names)
    present = {n.name for n in nodes} - args
    placeholders = [Node(arg, "Placeholder", (), (), "", {"dtype": dtype, "shape": None})
                    for arg, dtype in zip(arg_names, arg_dtypes)]
    copied = [Node(n.name, n.op, tuple(renamed.get(ref, ref) for ref in n.inputs),
                   tuple(c for c in n.control_inputs if c in present), n.device, n.attrs) for n in nodes]
    body = placeholders + copied
    output_counts = {n.name: 1 if n.name in args or n.op == "Const" else counts[n.name] for n in body}
    return Function(
        name=name,
        graph=Graph(nodes=tuple(topological_order(body)), output_counts=output_counts, library=library),
        args=tuple(f"{arg}:0" for arg in arg_names),
        rets=tuple(str(renamed.get(ref, ref)) for ref in rets),
        control_rets=tuple(control_rets),
        stateful=any(_stateful(n) for n in nodes),
        arg_dtypes=tuple(arg_dtypes),
        ret_dtypes=tuple(ret_dtypes),
    )
