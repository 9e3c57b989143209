"""Constant folding: a node whose inputs are all constants becomes a Const holding its value.

Evaluated with the CPU kernels, in topological order so chains fold completely (Keras' batch-norm
`Rsqrt(variance + epsilon) * gamma` becomes one per-channel constant). Skipped: stateful ops,
multi-output nodes, nodes with a fed output, and results larger than the size cap.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.errors import ExecutionError
from engine.graph import Graph, Node, TensorRef
from engine.passes.rewrite import const_node, rebuild

__all__ = ["run"]

_NEVER_FOLD = frozenset({"Placeholder", "PlaceholderV2", "PlaceholderWithDefault", "Const", "NoOp"})


def run(graph: Graph, ctx) -> Graph:
    values: dict[TensorRef, np.ndarray] = {}
    replaced: dict[str, Node] = {}
    for node in graph.nodes:  # pruned graphs arrive in topological order
        if node.op == "Const":
            if TensorRef(node.name, 0) not in ctx.fed:
                values[TensorRef(node.name, 0)] = node.attrs["value"]
            continue
        if node.op in _NEVER_FOLD or graph.output_counts[node.name] != 1 or TensorRef(node.name, 0) in ctx.fed:
            continue
        if not node.inputs or not all(ref in values for ref in node.inputs):
            continue
        if not kernels.has_op(node.op, "cpu"):
            continue
        kdef = kernels.lookup(node.op, "cpu")
        if kdef.stateful:
            continue
        try:
            with np.errstate(all="ignore"):
                (value,) = kdef.bind(np, node.attrs)(*[values[ref] for ref in node.inputs])
        except Exception as e:
            raise ExecutionError(node.name, node.op, "cpu (constant folding)", str(e) or type(e).__name__) from e
        value = np.asarray(value)
        if value.nbytes > ctx.constant_folding_max_bytes:
            continue
        values[TensorRef(node.name, 0)] = value
        # Control inputs stay: they may order a stateful op (an Assert) that must still run.
        replaced[node.name] = const_node(node.name, value, node.control_inputs)
    return rebuild(graph, replaced) if replaced else graph
