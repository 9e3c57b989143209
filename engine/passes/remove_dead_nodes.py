"""Dead-node removal: dropping nodes whose outputs nothing needed reads.

A node is needed when it is fetched, fed or run as a target (`PassContext.is_pinned`: a fed node stays
so that the feed still names a tensor of the graph), when a needed node reads it through a data or
control edge (a fed tensor cuts the walk: its producer computes nothing for that reader), or when it
is opaque (engine.passes.guards: control flow, function calls, stateful ops, placeholders), which no
pass removes. What is left over is what the other passes bypassed: the weights a fold replaced, a Mul
folded into a convolution, the duplicates common-subexpression elimination redirected away from.

With nothing preserved the pass does nothing: no signature says what is needed.
"""

from __future__ import annotations

from engine.graph import Graph
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import rebuild

__all__ = ["run"]


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not ctx.preserve:
        return graph
    stack = [n.name for n in graph.nodes if ctx.is_pinned(n.name) or is_opaque(n)]
    needed: set[str] = set()
    while stack:
        name = stack.pop()
        if name in needed or name not in graph:
            continue
        needed.add(name)
        node = graph.node(name)
        stack.extend(ref.node for ref in node.inputs if ref not in ctx.fed)
        stack.extend(node.control_inputs)
    dead = [n.name for n in graph.nodes if n.name not in needed]
    return rebuild(graph, {}, removed=dead) if dead else graph
