"""Functionalizing conditionals: TensorFlow's v1 tf.cond (Switch and Merge outside any loop frame) raised into If
nodes calling a then and an else function, so that a graph without loops left runs on the plan executor rather
than the dataflow executor, and a loop body holding a cond (engine.passes.functionalize_loops) runs as a plain
plan each iteration.

Which branch a node is on is read from the graph, as TensorFlow's own FunctionalizeCond does it
(tensorflow/compiler/tf2xla/functionalize_cond.cc): a node's context is the list of (predicate, side) its
liveness depends on, outermost first: a Switch's output adds its (predicate, side), where a predicate is the
tensor behind any Identity ops, and a Merge of one value from each side of one predicate takes it off again. A
node takes the longest of its inputs' contexts (data and control edges; a control edge from a Switch is live on
both sides); where they are not prefixes of one another, or a Merge is not such a pair, or a ControlTrigger is
there, nothing is raised. The Switches and Merges of one (context, predicate), with the nodes on either side,
become one If, innermost first: its inputs the Switches' data, its branches the nodes of each side (a Switch's
output read there is an argument, a Const read directly a copy), its outputs the Merges' values (and, where a
Merge's value_index is read or the Merge is fetched, which side ran). Each Merge becomes an Identity (IdentityN)
of the If's outputs under its name. A cond whose branch nodes are fetched, fed or targeted, or read from
outside by anything but its Merges, or whose Switch is read through a control edge, stays as it is; so does
every cond of a graph that still has a loop frame, and of a signature compiled for partial runs.

    >>> graph = run(graph, ctx)   # 'cond/Merge' is now an Identity of 'cond/If', which calls 'cond/If/then'
"""

from __future__ import annotations

from collections import ChainMap, defaultdict
from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from engine.graph import Graph, Node, TensorRef
from engine.graph.functions import Function
from engine.passes.context import PassContext
from engine.passes.functionalize_loops import fresh_function_name, function_of
from engine.passes.rewrite import topological_order
from engine.proto import attr_value_pb2
from kernels.array.identity import IDENTITY_OPS
from kernels.control_flow.dataflow import ENTER_OPS, MERGE_OPS, SWITCH_OPS

__all__ = ["run"]

_I32 = np.dtype(np.int32)


class _NotRaised(Exception):
    """The cond is not one this pass raises; it stays as it is."""


def _require(condition: bool) -> None:
    if not condition:
        raise _NotRaised


def run(graph: Graph, ctx: PassContext) -> Graph:
    ops = {node.op for node in graph.nodes}
    if ctx.partial_run or not ops & SWITCH_OPS or ops & ENTER_OPS or "ControlTrigger" in ops:
        return graph
    functions: dict[str, Function] = {}
    library = MappingProxyType(ChainMap(functions, graph.library))
    nodes, counts = list(graph.nodes), dict(graph.output_counts)
    left: set[tuple] = set()  # conds this pass does not raise
    while True:
        by_name = {n.name: n for n in nodes}
        contexts = _contexts(nodes, by_name)
        if contexts is None:
            return graph
        groups = {(contexts[n.name], _predicate(n, by_name)) for n in nodes if n.op in SWITCH_OPS} - left
        if not groups:
            break
        # Innermost first: every cond of the deepest level at once (their nodes are disjoint).
        deepest = max(len(key[0]) for key in groups)
        for key in (key for key in groups if len(key[0]) == deepest):
            raised = _raise(key, nodes, by_name, contexts, ctx, counts, library, functions)
            if not raised:
                left.add(key)
            for removed, added in raised:
                nodes = [n for n in nodes if n.name not in removed] + added
                for name in removed:
                    counts.pop(name, None)
                counts.update({n.name: _output_count(n) for n in added})
        nodes = topological_order(nodes)
    if not functions:
        return graph
    return Graph(nodes=tuple(nodes), output_counts=counts, library=library)


def _predicate(switch: Node, by_name: Mapping[str, Node]) -> TensorRef:
    """The tensor a Switch's predicate is, behind any Identity ops (without control inputs)."""
    ref = switch.inputs[1]
    while ref.index == 0 and ref.node in by_name:
        node = by_name[ref.node]
        if node.op not in IDENTITY_OPS or node.op == "PlaceholderWithDefault" or node.control_inputs:
            break
        ref = node.inputs[0]
    return ref


def _contexts(nodes: list[Node], by_name: Mapping[str, Node]) -> dict[str, tuple] | None:
    """Each node's context (see the module docstring), or None when the graph's conds do not nest as conds."""
    contexts: dict[str, tuple] = {}

    def of(ref: TensorRef) -> tuple:
        node = by_name.get(ref.node)
        if node is None:
            return ()  # fed
        if node.op in SWITCH_OPS:
            return contexts[node.name] + ((_predicate(node, by_name), ref.index),)
        return contexts[node.name]

    for node in nodes:  # topological
        parts = [of(ref) for ref in node.inputs]
        if node.op in MERGE_OPS:
            if node.control_inputs or len(parts) != 2 or not parts[0] or not parts[1]:
                return None
            (a, side_a), (b, side_b) = parts[0][-1], parts[1][-1]
            if parts[0][:-1] != parts[1][:-1] or a != b or {side_a, side_b} != {0, 1}:
                return None
            contexts[node.name] = parts[0][:-1]
            continue
        parts += [contexts[c] for c in node.control_inputs if c in contexts]
        longest = max(parts, key=len, default=())
        if any(p != longest[:len(p)] for p in parts):
            return None
        contexts[node.name] = longest
    return contexts


class _Readers:
    """Who reads each tensor and each node (control edges)."""

    def __init__(self, nodes: list[Node]):
        self.data: dict[TensorRef, list[str]] = defaultdict(list)
        self.control: dict[str, list[str]] = defaultdict(list)
        self.names = {node.name for node in nodes}  # (and of the Ifs raised since: fresh names)
        self.order = {node.name: i for i, node in enumerate(nodes)}
        for node in nodes:
            for ref in node.inputs:
                self.data[ref].append(node.name)
            for c in node.control_inputs:
                self.control[c].append(node.name)

    def downstream(self, names: set[str], counts: Mapping[str, int]) -> set[str]:
        """Every node that (transitively) reads one of `names`, through data or control edges."""
        seen: set[str] = set()
        stack = list(names)
        while stack:
            name = stack.pop()
            for reader in [r for i in range(counts.get(name, 1)) for r in self.data[TensorRef(name, i)]] + \
                    self.control[name]:
                if reader not in seen:
                    seen.add(reader)
                    stack.append(reader)
        return seen


def _raise(key: tuple, nodes: list[Node], by_name: dict[str, Node], contexts: dict[str, tuple], ctx: PassContext,
           counts: Mapping[str, int], library: Mapping[str, Function],
           functions: dict[str, Function]) -> list[tuple[set[str], list[Node]]]:
    """(names removed, nodes added) for each cond of `key` (context, predicate) raised into an If: the conds on
    one predicate are told apart by what connects their Switches, branch nodes and Merges."""
    outer, predicate = key
    depth = len(outer)
    # `nodes` as they are now, `by_name` and `contexts` as they were when this level started (the conds of this
    # level raised before this one left no Switch and their Merges' names, now on Identities of their Ifs).
    current = [n for n in nodes if n.name in contexts]
    switches = [n for n in current if n.op in SWITCH_OPS and contexts[n.name] == outer
                and _predicate(n, by_name) == predicate]
    merges = [n for n in current if n.op in MERGE_OPS and contexts[n.name] == outer
              and _context_of(n.inputs[0], by_name, contexts)[depth][0] == predicate]
    sides = {side: [n for n in current if contexts[n.name][:depth + 1] == outer + ((predicate, side),)]
             for side in (0, 1)}
    component = _components([*switches, *sides[0], *sides[1], *merges])
    readers = _Readers(nodes)
    raised = []
    for root in dict.fromkeys(component[m.name] for m in merges):
        def of(members: list[Node], root: str = root) -> list[Node]:
            return [n for n in members if component[n.name] == root]

        try:
            raised.append(_raise_cond(of(switches), {side: of(sides[side]) for side in (0, 1)}, of(merges),
                                      predicate, depth, by_name, contexts, readers, ctx, counts, library, functions))
        except _NotRaised:
            continue
    return raised


def _components(members: list[Node]) -> dict[str, str]:
    """Each node's component (a representative's name), nodes joined by the edges between them."""
    parent = {n.name: n.name for n in members}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for node in members:
        for source in [ref.node for ref in node.inputs] + list(node.control_inputs):
            if source in parent:
                parent[find(source)] = find(node.name)
    return {name: find(name) for name in parent}


def _raise_cond(switches: list[Node], sides: dict[int, list[Node]], merges: list[Node], predicate: TensorRef,
                depth: int, by_name: dict[str, Node], contexts: dict[str, tuple], readers: _Readers,
                ctx: PassContext, counts: Mapping[str, int], library: Mapping[str, Function],
                functions: dict[str, Function]) -> tuple[set[str], list[Node]]:
    """(names removed, nodes added) raising one cond (its Switches, each side's nodes, its Merges) into an If."""
    branch = {n.name for side in sides.values() for n in side}
    inside = branch | {n.name for n in switches}
    merge_names = {m.name for m in merges}
    _require(not any(ctx.is_pinned(name) for name in inside))
    for name in inside:
        _require(all(r in inside or r in merge_names for i in range(counts[name])
                     for r in readers.data[TensorRef(name, i)]))
        control = readers.control[name]
        _require(all(r in branch for r in control) if name in branch else not control)
    args = [s.name for s in switches]
    renamed = {TensorRef(s.name, side): TensorRef(s.name, 0) for s in switches for side in (0, 1)}
    constants: dict[int, list[Node]] = {0: [], 1: []}  # Consts a branch reads directly, copied into it
    for side, members in sides.items():
        for ref in (ref for n in members for ref in n.inputs if ref.node not in inside):
            source = by_name.get(ref.node)
            _require(source is not None and source.op == "Const" and not source.control_inputs
                     and ref not in ctx.fed)
            if source not in constants[side]:
                constants[side].append(source)
    indexed = [m for m in merges if ctx.is_pinned(m.name) or readers.data[TensorRef(m.name, 1)]]
    moved_controls = tuple(dict.fromkeys(c for n in (*switches, *(n for s in sides.values() for n in s))
                                         for c in n.control_inputs if c not in inside))
    # The If waits for all its inputs: none may come after one of its own Merges (conds in a row on one
    # predicate, one reading what the other gives, are two Ifs).
    sources = {predicate.node, *(s.inputs[0].node for s in switches), *moved_controls}
    first_merge = min(readers.order[m] for m in merge_names)
    if any(readers.order.get(n, -1) > first_merge for n in sources):  # (else none can come after a Merge)
        _require(not sources & readers.downstream(merge_names, counts))

    base = fresh_function_name(f"{merges[0].name}/If", library)
    names = {}
    for side, label in ((1, "then"), (0, "else")):
        rets = [m.inputs[[_context_of(r, by_name, contexts)[depth][1] for r in m.inputs].index(side)]
                for m in merges]
        slot = {m.name: [_context_of(r, by_name, contexts)[depth][1] for r in m.inputs].index(side)
                for m in indexed}
        value_indices = [Node(_fresh_node_name(f"{m.name}/value_index", readers.names), "Const", (), (), "",
                              {"value": np.asarray(slot[m.name], _I32), "dtype": _I32}) for m in indexed]
        names[label] = fresh_function_name(f"{base}/{label}", library)
        functions[names[label]] = function_of(
            names[label], args, [np.dtype(s.attrs["T"]) for s in switches],
            [*sides[side], *constants[side], *value_indices], renamed,
            [*rets, *(TensorRef(v.name, 0) for v in value_indices)], [],
            [np.dtype(m.attrs["T"]) for m in merges] + [_I32] * len(indexed), counts, library)
    if_name = _fresh_node_name(base, readers.names)
    tout = tuple(np.dtype(m.attrs["T"]) for m in merges) + (_I32,) * len(indexed)
    if_node = Node(if_name, "If", (predicate, *(s.inputs[0] for s in switches)), moved_controls, merges[0].device,
                   {"Tout": tout, "Tin": tuple(np.dtype(s.attrs["T"]) for s in switches),
                    "then_branch": attr_value_pb2.NameAttrList(name=names["then"]),
                    "else_branch": attr_value_pb2.NameAttrList(name=names["else"]), "output_shapes": ()})
    outputs = []
    for i, m in enumerate(merges):
        if m in indexed:
            j = len(merges) + indexed.index(m)
            outputs.append(Node(m.name, "IdentityN", (TensorRef(if_name, i), TensorRef(if_name, j)), (), m.device,
                                {"T": (np.dtype(m.attrs["T"]), _I32)}))
        else:
            outputs.append(Node(m.name, "Identity", (TensorRef(if_name, i),), (), m.device,
                                {"T": np.dtype(m.attrs["T"])}))
    return inside | merge_names, [if_node, *outputs]


def _context_of(ref: TensorRef, by_name: Mapping[str, Node], contexts: Mapping[str, tuple]) -> tuple:
    """The context of the tensor `ref` (a Switch's output adds its predicate and side)."""
    node = by_name[ref.node]
    context = contexts[node.name]
    return context + ((_predicate(node, by_name), ref.index),) if node.op in SWITCH_OPS else context


def _output_count(node: Node) -> int:
    if node.op == "If":
        return len(node.attrs["Tout"])
    return len(node.attrs["T"]) if node.op == "IdentityN" else 1


def _fresh_node_name(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name
