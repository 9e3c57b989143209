"""A dataflow plan: a signature compiled for TensorFlow's dataflow executor, as plain data.

Graphs with TensorFlow's v1 control flow (Switch, Merge, Enter, Exit, NextIteration, LoopCond) cannot
run as a straight line: which nodes run, and how many times, depends on values. The optimizer raises the
well-formed loops among them into While calls first (engine.passes.functionalize_loops); a signature with
control flow left after that compiles into a DataflowPlan instead of a flat instruction list: one entry per node with its bound
kernel, its kind, how many inputs it waits for, where each output goes, and the static frame (loop
context) it belongs to. engine.runtime.dataflow_executor runs it. Partial runs use this form for every graph, since a
dataflow plan can take its feeds in several steps.

    >>> print(compile_dataflow(...))
    dataflow plan: 23 nodes, 1 loop frame(s)
      [0] while/Enter           Enter       frame ''       -> frame 'while/while_context'
      [1] while/Merge           Merge       frame 'while/while_context'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from engine.compile.prune import all_outputs_fed
from engine.errors import GraphError
from engine.graph import Node, TensorRef
from kernels.array.identity import IDENTITY_OPS
from kernels.control_flow.dataflow import ENTER_OPS, EXIT_OPS, MERGE_OPS, NEXT_ITERATION_OPS, SWITCH_OPS

__all__ = ["ROOT_FRAME", "DataflowNode", "DataflowPlan", "FrameMismatchError", "Kind", "compile_dataflow", "loop_frames"]

ROOT_FRAME = ""


class Kind:
    """How the executor treats a node; everything but NORMAL routes values instead of computing."""

    NORMAL = 0
    SWITCH = 1
    MERGE = 2
    ENTER = 3
    EXIT = 4
    NEXT_ITERATION = 5
    CONTROL_TRIGGER = 6
    # Identity-like ops, IdentityN and NoOp: the outputs are the inputs, so no kernel runs. (Those
    # without control edges are bypassed at compile time; these are the ones that wait on one.)
    FORWARD = 7


# How an edge reaches its reader, decided at compile time so that the executor's hot path does one
# integer test instead of looking at the reader: DIRECT when the reader waits for this edge alone (it
# runs as soon as the value arrives), LIVE_ONLY when that reader is an Exit or NextIteration (a dead
# value there does nothing, so it is dropped instead of queued), COUNTED when the reader waits for
# several inputs and control edges, MERGE for a Merge (it fires on its first live input).
ROUTE_DIRECT = 0
ROUTE_LIVE_ONLY = 1
ROUTE_COUNTED = 2
ROUTE_MERGE = 3

FORWARD_OPS = (IDENTITY_OPS - {"PlaceholderWithDefault"}) | {"IdentityN", "NoOp"}


def _kind(op: str) -> int:
    if op in SWITCH_OPS:
        return Kind.SWITCH
    if op in MERGE_OPS:
        return Kind.MERGE
    if op in ENTER_OPS:
        return Kind.ENTER
    if op in EXIT_OPS:
        return Kind.EXIT
    if op in NEXT_ITERATION_OPS:
        return Kind.NEXT_ITERATION
    if op == "ControlTrigger":
        return Kind.CONTROL_TRIGGER
    if op in FORWARD_OPS:
        return Kind.FORWARD
    return Kind.NORMAL


class FrameMismatchError(GraphError):
    """A node reads tensors from two different loop frames without an Enter or Exit between them."""

    def __init__(self, node: str, frames: Sequence[str]):
        self.node = node
        shown = ", ".join(repr(f or "<root>") for f in frames)
        super().__init__(f"node '{node}' has inputs from different loop frames ({shown}); "
                         "values enter a loop only through Enter and leave it through Exit")


@dataclass(frozen=True)
class DataflowNode:
    """One node of a dataflow plan.

    `outputs[i]` lists the (node id, input index) pairs that read output i; `control_out` the node ids
    with a control edge from it. A Merge's `back_edges[j]` says whether data input j comes from a
    NextIteration (those inputs arrive only from iteration 1 on).
    """

    id: int
    name: str
    op: str
    kind: int
    fn: Callable[..., tuple] | None
    num_inputs: int
    num_control: int
    outputs: tuple[tuple[tuple[int, int], ...], ...]
    control_out: tuple[int, ...]
    frame: str
    # Enter only: the child frame its output goes to, and whether it is a loop invariant.
    child_frame: str = ""
    is_constant: bool = False
    back_edges: tuple[bool, ...] = ()
    # Inputs and control edges the node waits for before it runs (read on every delivery).
    pending: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pending", self.num_inputs + self.num_control)


@dataclass(frozen=True)
class DataflowPlan:
    """A compiled signature for the dataflow executor (engine.runtime.dataflow_executor).

    `feeds[i]` lists where the i-th fed tensor goes; `roots` are root-frame nodes with nothing to wait
    for; `fetches[i]` is the (node id, output) of the i-th fetched tensor, or the feed index (as
    `("feed", i)`) when a fed tensor is fetched back. `feed_ancestors[i]` is the set of feed indices
    fetch i depends on (used to refuse partial-run fetches that cannot be computed yet).
    """

    nodes: tuple[DataflowNode, ...]
    feed_names: tuple[str, ...]
    feeds: tuple[tuple[tuple[int, int], ...], ...]
    roots: tuple[int, ...]
    fetch_names: tuple[str, ...]
    fetches: tuple[tuple[Any, int], ...]
    targets: tuple[int, ...]
    feed_ancestors: tuple[frozenset[int], ...]
    frame_parent: dict[str, str]
    # Per frame: how many Enter nodes feed it (its instance is complete only once all have fired),
    # and the ids of its Exit nodes (a dead loop sends dead values out through them).
    frame_enters: dict[str, int]
    frame_exits: dict[str, tuple[int, ...]]
    max_iterations: int
    device: str = "cpu"
    # The nodes as plain tuples (kind, fn, edges, control edges, fetched outputs, pending, inputs): what
    # the executor's loop unpacks, cheaper than attribute lookups on every step. `edges` are (output,
    # reader, input index, route) and control edges (reader, route); see ROUTE_DIRECT. `fetched` lists
    # (output, fetch index) for outputs fetched from the root frame.
    program: tuple[tuple, ...] = field(init=False, repr=False)
    # Per node, the route of the edges it reads (see ROUTE_DIRECT).
    routes: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "program", _program(self.nodes, self.fetches))
        object.__setattr__(self, "routes", tuple(_route(node) for node in self.nodes))

    def __str__(self) -> str:
        frames = len(self.frame_parent)
        lines = [f"dataflow plan: {len(self.nodes)} nodes, {frames} loop frame(s)"]
        lines += [f"  feed {name}" for name in self.feed_names]
        for n in self.nodes:
            to = f"  -> frame '{n.child_frame}'" if n.kind == Kind.ENTER else ""
            lines.append(f"  [{n.id}] {n.name}  {n.op}  frame '{n.frame}'{to}")
        lines += [f"  fetch {name}" for name in self.fetch_names]
        return "\n".join(lines)


def _route(reader: DataflowNode) -> int:
    if reader.kind == Kind.MERGE:
        return ROUTE_MERGE
    if reader.pending != 1:
        return ROUTE_COUNTED
    if reader.kind in (Kind.EXIT, Kind.NEXT_ITERATION):
        return ROUTE_LIVE_ONLY
    return ROUTE_DIRECT


def _program(nodes: Sequence[DataflowNode], fetches: Sequence[tuple[Any, int]]) -> tuple[tuple, ...]:
    fetched: dict[int, list[tuple[int, int]]] = {}
    for i, (source, index) in enumerate(fetches):
        if source != "feed":
            fetched.setdefault(source, []).append((index, i))
    return tuple(
        (
            node.kind,
            node.fn,
            tuple((k, dst, slot, _route(nodes[dst])) for k, edges in enumerate(node.outputs) for dst, slot in edges),
            tuple((dst, _route(nodes[dst])) for dst in node.control_out),
            tuple(fetched.get(node.id, ())),
            node.pending,
            node.num_inputs,
        )
        for node in nodes
    )


def loop_frames(nodes: Sequence[Node], fed: frozenset[TensorRef]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Each node's frame, the frame its outputs live in (differs for Enter and Exit), and each frame's
    parent, by propagating from inputs in topological order (ignoring the NextIteration -> Merge back
    edges, whose source is in the same frame anyway)."""
    frame_of: dict[str, str] = {}
    out_frame_of: dict[str, str] = {}
    parent: dict[str, str] = {}
    ops = {n.name: n.op for n in nodes}

    def output_frame(source: str) -> str:
        frame = frame_of[source]
        if ops[source] in ENTER_OPS:
            return by_name[source].attrs["frame_name"]
        if ops[source] in EXIT_OPS:
            return parent.get(frame, ROOT_FRAME)
        return frame

    by_name = {n.name: n for n in nodes}
    for node in nodes:
        sources = [ref.node for ref in node.inputs if ref not in fed and ops.get(ref.node) not in NEXT_ITERATION_OPS]
        sources += [c for c in node.control_inputs if ops.get(c) not in NEXT_ITERATION_OPS]
        frames = sorted({output_frame(s) for s in sources})
        if len(frames) > 1:
            raise FrameMismatchError(node.name, frames)
        frame = frames[0] if frames else ROOT_FRAME
        frame_of[node.name] = frame
        if node.op in ENTER_OPS:
            child = node.attrs.get("frame_name")
            if not child:
                raise GraphError(f"node '{node.name}' (Enter) has no frame_name")
            known = parent.setdefault(child, frame)
            if known != frame:
                raise GraphError(f"loop frame '{child}' is entered from two frames ('{known}' and '{frame}')")
        if node.op in EXIT_OPS and frame == ROOT_FRAME:
            raise GraphError(f"node '{node.name}' (Exit) is not inside a loop frame")
        out_frame_of[node.name] = output_frame(node.name)
    return frame_of, out_frame_of, parent


def _ancestors(nodes: Sequence[Node], fed_index: dict[TensorRef, int]) -> dict[str, frozenset[int]]:
    """For every node, the feeds it (transitively) depends on through data and control edges."""
    result: dict[str, frozenset[int]] = {}
    ops = {n.name: n.op for n in nodes}
    for node in nodes:  # topological order: sources first (back edges add nothing new)
        deps: set[int] = set()
        for ref in node.inputs:
            if ref in fed_index:
                deps.add(fed_index[ref])
            elif ops.get(ref.node) not in NEXT_ITERATION_OPS:
                deps |= result[ref.node]
        for ctrl in node.control_inputs:
            if ops.get(ctrl) not in NEXT_ITERATION_OPS:
                deps |= result[ctrl]
        result[node.name] = frozenset(deps)
    return result


def compile_dataflow(
    nodes: Sequence[Node],
    feeds: Sequence[TensorRef],
    fetches: Sequence[TensorRef],
    targets: Sequence[str],
    output_counts: Mapping[str, int],
    bind: Callable[[Node], Callable[..., tuple]],
    *,
    max_iterations: int,
    device: str = "cpu",
) -> DataflowPlan:
    """Compile pruned `nodes` (topological order, loop back edges aside) into a DataflowPlan.

    `bind(node)` returns the node's kernel bound to its attrs (control-flow nodes are not bound).
    """
    fed = frozenset(feeds)
    fed_index = {ref: i for i, ref in enumerate(feeds)}
    nodes, alias = _bypass_identities(nodes, fed, targets)
    fetch_names = tuple(str(ref) for ref in fetches)
    fetches = [alias.get(ref, ref) for ref in fetches]
    frame_of, out_frame_of, frame_parent = loop_frames(nodes, fed)
    ids = {n.name: i for i, n in enumerate(nodes)}

    outputs: list[dict[int, list[tuple[int, int]]]] = [{} for _ in nodes]
    control_out: list[list[int]] = [[] for _ in nodes]
    feed_edges: list[list[tuple[int, int]]] = [[] for _ in feeds]
    for node in nodes:
        dst = ids[node.name]
        for slot, ref in enumerate(node.inputs):
            if ref in fed:
                feed_edges[fed_index[ref]].append((dst, slot))
            else:
                outputs[ids[ref.node]].setdefault(ref.index, []).append((dst, slot))
        for ctrl in node.control_inputs:
            control_out[ids[ctrl]].append(dst)

    compiled = []
    enters: dict[str, int] = {}
    exits: dict[str, list[int]] = {}
    for node in nodes:
        i = ids[node.name]
        # A node whose every output is fed only passes control on (pruning left it without inputs).
        kind = Kind.FORWARD if all_outputs_fed(node.name, output_counts[node.name], fed) else _kind(node.op)
        fn = bind(node) if kind == Kind.NORMAL else None
        num_outputs = output_counts[node.name]
        if kind == Kind.ENTER:
            enters[node.attrs["frame_name"]] = enters.get(node.attrs["frame_name"], 0) + 1
        if kind == Kind.EXIT:
            exits.setdefault(frame_of[node.name], []).append(i)
        compiled.append(
            DataflowNode(
                id=i,
                name=node.name,
                op=node.op,
                kind=kind,
                fn=fn,
                num_inputs=len(node.inputs),
                num_control=len(node.control_inputs),
                outputs=tuple(tuple(outputs[i].get(k, ())) for k in range(num_outputs)),
                control_out=tuple(control_out[i]),
                frame=frame_of[node.name],
                child_frame=node.attrs.get("frame_name", "") if kind == Kind.ENTER else "",
                is_constant=bool(node.attrs.get("is_constant", False)) if kind == Kind.ENTER else False,
                back_edges=tuple(
                    ref not in fed and nodes[ids[ref.node]].op in NEXT_ITERATION_OPS for ref in node.inputs
                )
                if kind == Kind.MERGE
                else (),
            )
        )

    for name, ref in zip(fetch_names, fetches):
        if ref not in fed and out_frame_of[ref.node] != ROOT_FRAME:
            raise GraphError(f"tensor '{name}' is inside loop frame '{out_frame_of[ref.node]}' and cannot be fetched; "
                             "fetch a value after the loop's Exit")
    # Nodes with nothing to wait for (constants, mostly) start the run; everything else is activated
    # by a feed or by its inputs.
    roots = tuple(ids[n.name] for n in nodes if not n.inputs and not n.control_inputs)
    ancestors = _ancestors(nodes, fed_index)
    fetch_entries = tuple(("feed", fed_index[ref]) if ref in fed else (ids[ref.node], ref.index) for ref in fetches)
    fetch_ancestors = tuple(frozenset({fed_index[ref]}) if ref in fed else ancestors[ref.node] for ref in fetches)
    return DataflowPlan(
        nodes=tuple(compiled),
        feed_names=tuple(str(ref) for ref in feeds),
        feeds=tuple(tuple(edges) for edges in feed_edges),
        roots=roots,
        fetch_names=fetch_names,
        fetches=fetch_entries,
        targets=tuple(ids[t] for t in targets),
        feed_ancestors=fetch_ancestors,
        frame_parent=frame_parent,
        frame_enters=enters,
        frame_exits={f: tuple(v) for f, v in exits.items()},
        max_iterations=max_iterations,
        device=device,
    )


def _bypass_identities(
    nodes: Sequence[Node], fed: frozenset[TensorRef], targets: Sequence[str]
) -> tuple[list[Node], dict[TensorRef, TensorRef]]:
    """Drop Identity-like nodes that only forward a value: their readers read the source instead.

    Lowered loops are full of them (a third of the nodes a Keras LSTM runs per step), and each would
    cost a trip through the scheduler. One with control inputs (it waits, and may turn dead) or with
    control readers (a conditional's pivot) stays, as does a target.
    """
    control_read = {c for node in nodes for c in node.control_inputs}
    keep_targets = set(targets)
    alias: dict[TensorRef, TensorRef] = {}
    kept = []
    for node in nodes:  # topological: an Identity's source is resolved before its readers
        if node.inputs and any(ref in alias for ref in node.inputs):
            node = replace(node, inputs=tuple(alias.get(ref, ref) for ref in node.inputs))
        if (
            node.op in IDENTITY_OPS
            and node.op != "PlaceholderWithDefault"
            and len(node.inputs) == 1
            and not node.control_inputs
            and node.name not in control_read
            and node.name not in keep_targets
            and TensorRef(node.name, 0) not in fed
        ):
            alias[TensorRef(node.name, 0)] = node.inputs[0]
            continue
        kept.append(node)
    # Back edges (NextIteration -> Merge) were visited before their source: resolve them now.
    return [
        replace(n, inputs=tuple(_resolve(alias, ref) for ref in n.inputs)) if any(r in alias for r in n.inputs) else n
        for n in kept
    ], alias


def _resolve(alias: dict[TensorRef, TensorRef], ref: TensorRef) -> TensorRef:
    while ref in alias:
        ref = alias[ref]
    return ref
