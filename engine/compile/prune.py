"""Pruning a graph to one signature: the nodes that fetches and targets need, cut at the fed tensors.

As in TensorFlow's DirectSession: reverse reachability from the fetched tensors' nodes and the target
nodes, through data and control inputs, never walking past a fed tensor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import replace

from engine.graph import Graph, Node, TensorRef
from kernels.control_flow.dataflow import NEXT_ITERATION_OPS as LOOP_BACK_EDGE_OPS

__all__ = ["all_outputs_fed", "prune_to_signature"]


def all_outputs_fed(name: str, output_count: int, fed: frozenset[TensorRef]) -> bool:
    """Whether the feeds stand in for node `name` entirely (it has outputs and every one is fed)."""
    return output_count > 0 and all(TensorRef(name, i) in fed for i in range(output_count))


def prune_to_signature(
    graph: Graph, feeds: Iterable[TensorRef], fetches: Iterable[TensorRef], targets: Iterable[str]
) -> list[Node]:
    """The needed nodes in a topological order (ties kept in GraphDef order; loop back edges aside)."""
    fed = frozenset(feeds)

    def replaced_by_feeds(node: Node) -> bool:
        return all_outputs_fed(node.name, graph.output_counts[node.name], fed)

    stack = [ref.node for ref in fetches if ref not in fed]
    stack.extend(targets)
    needed: set[str] = set()
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        node = graph.node(name)
        if replaced_by_feeds(node):
            # Reached only through a control edge (its values come from the feeds): like TensorFlow,
            # the fed node stands in for itself, with nothing above it to run.
            continue
        stack.extend(ref.node for ref in node.inputs if ref not in fed)
        stack.extend(node.control_inputs)

    order = {node.name: i for i, node in enumerate(graph.nodes) if node.name in needed}
    # A loop's NextIteration -> Merge edge is its one back edge: leaving it out of the ordering puts
    # each Merge after its Enter, and the loop body after the Merge.
    back = {name for name in order if graph.node(name).op in LOOP_BACK_EDGE_OPS}
    pending: dict[str, int] = {}
    consumers: dict[str, list[str]] = {name: [] for name in order}
    fed_nodes = {name for name in order if replaced_by_feeds(graph.node(name))}
    for name in order:
        node = graph.node(name)
        sources = set() if name in fed_nodes else {ref.node for ref in node.inputs if ref not in fed} | set(node.control_inputs)
        sources -= back
        pending[name] = len(sources)
        for source in sources:
            consumers[source].append(name)
    ready = deque(name for name in order if pending[name] == 0)
    result = []
    while ready:
        name = ready.popleft()
        node = graph.node(name)
        result.append(replace(node, inputs=(), control_inputs=()) if name in fed_nodes else node)
        for consumer in sorted(consumers[name], key=order.__getitem__):
            pending[consumer] -= 1
            if pending[consumer] == 0:
                ready.append(consumer)
    return result
