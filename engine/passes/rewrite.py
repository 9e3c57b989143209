"""Helpers shared by passes: consumer maps, fresh names, and building a rewritten Graph."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np

from engine import validate
from engine.graph import Graph, Node, TensorRef

__all__ = ["Consumers", "const_node", "rebuild", "fresh_name", "constant_value"]


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

    def sole_consumer(self, graph: Graph, node: Node) -> Node | None:
        """The one node reading `node`'s outputs, when there is exactly one and no control edge."""
        if self.control.get(node.name):
            return None
        readers = {r for i in range(graph.output_counts[node.name]) for r in self.data.get(TensorRef(node.name, i), ())}
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


def const_node(name: str, value: Any, control_inputs: tuple[str, ...] = ()) -> Node:
    value = np.asarray(value)
    return Node(name, "Const", (), control_inputs, "", {"value": value, "dtype": value.dtype})


def fresh_name(graph: Graph, taken: set[str], base: str) -> str:
    name, i = base, 1
    while name in graph or name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def rebuild(graph: Graph, replaced: dict[str, Node], removed: Iterable[str] = (), added: Iterable[Node] = ()) -> Graph:
    """A new Graph: nodes in `replaced` swapped in place, `removed` dropped, `added` appended."""
    dropped = set(removed)
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    nodes.extend(added)
    counts = dict(graph.output_counts)
    counts.update(validate.output_counts([replaced[k] for k in replaced] + list(added)))
    for name in dropped:
        counts.pop(name, None)
    return Graph(nodes=tuple(nodes), output_counts=counts, library=graph.library)
