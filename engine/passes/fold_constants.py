"""Constant folding: a node whose inputs are all constants becomes a Const holding its value.

Evaluated with the CPU kernels, in topological order so chains fold completely (Keras' batch-norm
`Rsqrt(variance + epsilon) * gamma` becomes one per-channel constant). Skipped: opaque nodes
(engine.passes.guards: control flow, function calls, stateful ops), multi-output nodes, nodes with a
fed output, values that are not arrays (TensorLists and other variants), results larger than the
size cap, and nodes whose kernel fails: a failure is left for the run to report, since in an untaken
branch of a conditional the node never runs at all.

A folded Const keeps the control inputs of the node it replaces and of every Const it was folded
from, transitively: inside a loop body or a conditional branch those edges put the constant in the
right frame and make it dead on the untaken branch.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import const_node, rebuild

__all__ = ["run"]


def _is_array(value: object) -> bool:
    """A numpy array of numbers or strings (a variant is a Python object, even inside an array)."""
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    return value.dtype != object or all(isinstance(v, (bytes, str)) for v in np.ravel(value))


def run(graph: Graph, ctx: PassContext) -> Graph:
    values: dict[TensorRef, np.ndarray] = {}
    # The control inputs each constant (given or folded) carries, inherited ones included.
    controls: dict[str, tuple[str, ...]] = {}
    replaced: dict[str, Node] = {}
    for node in graph.nodes:  # in topological order: see rewrite.rebuild
        out = TensorRef(node.name, 0)
        if node.op == "Const":
            if out not in ctx.fed and _is_array(node.attrs.get("value")):
                values[out] = node.attrs["value"]
                controls[node.name] = node.control_inputs
            continue
        if not node.inputs or not all(ref in values for ref in node.inputs):
            continue
        if graph.output_counts[node.name] != 1 or out in ctx.fed or is_opaque(node):
            continue
        kdef = kernels.lookup(node.op, "cpu")
        try:
            with np.errstate(all="ignore"):
                # The size cap doubles as the kernels' memory limit: a constant Fill of gigabytes is
                # refused before it is computed, not computed and then dropped.
                bound = kdef.bind(np, node.attrs, {"memory_limit": ctx.constant_folding_max_bytes})
                (value,) = bound(*[values[ref] for ref in node.inputs])
        except Exception:  # noqa: BLE001 - see the module docstring: the run reports it, if it runs
            continue
        if not _is_array(value) or value.nbytes > ctx.constant_folding_max_bytes:
            continue
        value = np.asarray(value)
        inherited = [c for ref in node.inputs for c in controls[ref.node]]
        controls[node.name] = tuple(dict.fromkeys([*node.control_inputs, *inherited]))
        values[out] = value
        replaced[node.name] = const_node(node.name, value, controls[node.name])
    return rebuild(graph, replaced) if replaced else graph
