"""Helpers shared by passes: who reads what, constants and the control edges they carry, fresh names,
and building a rewritten Graph in topological order.

Moving control edges is the one rule every rewrite shares. A Const's control inputs are part of its
meaning: inside a loop body they put it in the loop's frame, inside a conditional branch they make it
dead when the branch is not taken. So a node built to replace others carries the union of their
control inputs (`merged_controls`), and a Const built from other constants carries the union of
theirs (`const_controls`).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from engine.graph import Graph, Node, TensorRef, validate
from engine.passes.context import PassContext
from engine.passes.guards import LOOP_BACK_EDGE_OPS, is_opaque

__all__ = [
    "Consumers",
    "commutative_operands",
    "const_controls",
    "const_node",
    "constant_value",
    "fresh_name",
    "known_rank",
    "merged_controls",
    "pointwise_filter",
    "producer",
    "rebuild",
    "scalar_constant",
    "scalar_equals",
    "sole_readers_within",
    "topological_order",
]


class Consumers:
    """Who reads each tensor (data edges) and each node (control edges) in a graph."""

    def __init__(self, graph: Graph):
        self.data: dict[TensorRef, list[str]] = defaultdict(list)
        self.control: dict[str, list[str]] = defaultdict(list)
        for node in graph.nodes:
            for ref in node.inputs:
                self.data[ref].append(node.name)
            for ctrl in node.control_inputs:
                self.control[ctrl].append(node.name)

    def readers(self, graph: Graph, node: Node) -> set[str]:
        """Nodes reading any output of `node` through a data edge."""
        return {r for i in range(graph.output_counts[node.name]) for r in self.data.get(TensorRef(node.name, i), ())}

    def sole_consumer(self, graph: Graph, node: Node) -> Node | None:
        """The one node reading `node`'s outputs, when there is exactly one and no control edge."""
        if self.control.get(node.name):
            return None
        readers = self.readers(graph, node)
        if len(readers) != 1:
            return None
        (reader,) = readers
        consumer = graph.node(reader)
        # The reader must take exactly one of our outputs once (x * x is not a chain).
        if sum(1 for ref in consumer.inputs if ref.node == node.name) != 1:
            return None
        return consumer


def constant_value(graph: Graph, ref: TensorRef, fed: frozenset[TensorRef]) -> np.ndarray | None:
    """The value of `ref` when a Const node produces it (and it is not fed), else None."""
    if ref in fed or ref.node not in graph:
        return None
    node = graph.node(ref.node)
    return node.attrs.get("value") if node.op == "Const" else None


def pointwise_filter(graph: Graph, node: Node, fed: frozenset[TensorRef],
                     fused_sequences: Sequence[tuple[str, ...]]) -> np.ndarray | None:
    """The constant [1, 1, C, K] filter of `node` when it is an NHWC 1x1 Conv2D or _FusedConv2D, stride and
    dilation 1, unpadded, whose fused_ops are one of `fused_sequences` (a _FusedConv2D fuses something);
    else None. The convolutions the fusions of 1x1 convolutions (separable, pre-activation) take."""
    attrs = node.attrs
    if node.op not in ("Conv2D", "_FusedConv2D") or is_opaque(node) or attrs.get("data_format", "NHWC") != "NHWC":
        return None
    if tuple(attrs.get("strides", ())) != (1, 1, 1, 1) or tuple(attrs.get("dilations", (1, 1, 1, 1))) != (1, 1, 1, 1):
        return None
    if attrs.get("padding") == "EXPLICIT" and any(attrs.get("explicit_paddings", ())):
        return None
    fused_ops = tuple(attrs.get("fused_ops", ())) if node.op == "_FusedConv2D" else ()
    if fused_ops not in fused_sequences or (node.op == "_FusedConv2D" and not fused_ops) or len(node.inputs) < 2:
        return None
    filt = constant_value(graph, node.inputs[1], fed)
    if filt is None or filt.ndim != 4 or filt.shape[:2] != (1, 1):
        return None
    return filt


def producer(graph: Graph, ref: TensorRef, ctx: PassContext, ops: Iterable[str]) -> Node | None:
    """The node producing `ref` when it is output 0 of a node whose op is in `ops` and is not fed."""
    if ref.index != 0 or ref in ctx.fed or ref.node not in graph:
        return None
    node = graph.node(ref.node)
    return node if node.op in ops else None


def scalar_constant(graph: Graph, ref: TensorRef, ctx: PassContext) -> float | None:
    """The value of `ref` when a Const holds one float (a scalar, or one element that cannot
    broadcast anything larger than a vector), else None."""
    value = constant_value(graph, ref, ctx.fed)
    if value is None or value.dtype.kind != "f" or value.size != 1 or value.ndim > 1:
        return None
    return float(value.reshape(()))


def scalar_equals(graph: Graph, ref: TensorRef, ctx: PassContext, value: float, rtol: float = 1e-6) -> bool:
    """Whether `ref` is a scalar float Const (scalar_constant) equal to `value` within `rtol` (0: exactly)."""
    found = scalar_constant(graph, ref, ctx)
    return found is not None and bool(np.isclose(found, value, rtol=rtol, atol=0.0))


def commutative_operands(node: Node | None, ops: tuple[str, ...]) -> list[tuple[TensorRef, TensorRef]]:
    """Both (this, other) orders of a commutative binary node's inputs, or [] when it is not one of `ops`."""
    if node is None or node.op not in ops or len(node.inputs) != 2:
        return []
    a, b = node.inputs
    return [(a, b), (b, a)]


def sole_readers_within(graph: Graph, consumers: Consumers, nodes: Iterable[Node], end: Node, ctx: PassContext) -> bool:
    """True when each of `nodes` (the inside of a chain ending at `end`, about to become one node) is
    read only by nodes among them and `end`, has no control consumer, and is neither fetched nor fed."""
    nodes = list(nodes)
    names = {n.name for n in nodes} | {end.name}
    return all(
        not ctx.is_pinned(n.name) and not consumers.control.get(n.name) and consumers.readers(graph, n) <= names
        for n in nodes
    )


def const_controls(graph: Graph, refs: Iterable[TensorRef]) -> tuple[str, ...]:
    """The union of the control inputs of the Const nodes producing `refs` (others contribute none)."""
    nodes = [graph.node(ref.node) for ref in refs if ref.node in graph]
    return merged_controls(n for n in nodes if n.op == "Const")


def merged_controls(nodes: Iterable[Node], extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The union of the nodes' control inputs (and `extra`), first-seen order, no duplicates."""
    return tuple(dict.fromkeys([c for n in nodes for c in n.control_inputs] + list(extra)))


def known_rank(graph: Graph, ref: TensorRef, ctx: PassContext) -> int | None:
    """The rank of `ref` when the graph or the feeds state it (a Const's value, a placeholder's or a
    feed's declared shape, an `_output_shapes` attr), else None. Passes use it only to prove that a
    rewrite cannot change what broadcasting does."""
    if ref in ctx.fed:
        shape = ctx.fed_shapes.get(ref)
        return None if shape is None else len(shape)
    if ref.node not in graph:
        return None
    node = graph.node(ref.node)
    if node.op == "Const":
        return np.ndim(node.attrs["value"])
    if node.op in ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault") and node.attrs.get("shape") is not None:
        return len(node.attrs["shape"])
    shapes = node.attrs.get("_output_shapes")
    if isinstance(shapes, tuple) and ref.index < len(shapes) and isinstance(shapes[ref.index], tuple):
        return len(shapes[ref.index])
    return None


def const_node(name: str, value: Any, control_inputs: tuple[str, ...] = ()) -> Node:
    value = np.asarray(value)
    return Node(name, "Const", (), control_inputs, "", {"value": value, "dtype": value.dtype})


def fresh_name(graph: Graph, taken: set[str], base: str) -> str:
    name, i = base, 1
    while name in graph or name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def topological_order(nodes: Sequence[Node]) -> list[Node]:
    """`nodes` with every node after its inputs, ties in the given order. Inputs from outside `nodes`
    (fed tensors) and loop back edges (NextIteration -> Merge) do not count; nodes on any other cycle
    keep their relative order at the end rather than being dropped."""
    index = {n.name: i for i, n in enumerate(nodes)}
    back = {n.name for n in nodes if n.op in LOOP_BACK_EDGE_OPS}
    pending = [0] * len(nodes)
    readers: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        sources = {ref.node for ref in node.inputs} | set(node.control_inputs)
        for source in sources:
            j = index.get(source)
            if j is not None and source not in back:
                pending[i] += 1
                readers[j].append(i)
    ready = deque(i for i in range(len(nodes)) if pending[i] == 0)
    order: list[int] = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for j in sorted(readers[i]):
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    if len(order) < len(nodes):
        placed = set(order)
        order.extend(i for i in range(len(nodes)) if i not in placed)
    return [nodes[i] for i in order]


def rebuild(graph: Graph, replaced: dict[str, Node], removed: Iterable[str] = (), added: Iterable[Node] = ()) -> Graph:
    """A new Graph: nodes in `replaced` swapped in place, `removed` dropped, `added` included, all in
    topological order (passes walk graphs in order and rely on it)."""
    dropped = set(removed)
    added = list(added)
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    nodes.extend(added)
    counts = dict(graph.output_counts)
    # A node that keeps its op keeps its count (an op without a kernel has its count inferred from
    # the whole graph's consumers, which a partial recount would not see).
    changed = [n for n in [*replaced.values(), *added] if n.name not in graph or graph.node(n.name).op != n.op]
    counts.update(validate.output_counts(changed))
    for name in dropped:
        counts.pop(name, None)
    return Graph(nodes=tuple(topological_order(nodes)), output_counts=counts, library=graph.library)
