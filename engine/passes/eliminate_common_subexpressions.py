"""Common-subexpression elimination: nodes that must compute the same values become one node.

Two nodes are the same computation when they agree on op, device, every attr (an attr left out
equals the kernel's default for it), data inputs (in order, or as a multiset for commutative ops) and
control inputs (as a set). Equal control inputs matter: inside a loop body or a conditional branch
they are what places a constant in its frame and makes it dead on the untaken branch, so a Const
guarded by one pivot never merges with an unguarded one.

Walking in topological order, each node's inputs are first renamed to the survivors of earlier
merges, so whole duplicated subgraphs (Keras' repeated shape arithmetic) collapse bottom-up. The
first node of each kind survives; readers and control consumers of the others are redirected to it.
Never merged: opaque nodes (control flow, function calls, stateful ops: two RandomUniform nodes are
two draws), nodes with a fed output, fetched or targeted nodes (they may survive, never be dropped),
and Consts larger than 64 KiB (comparing them costs more than it saves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import rebuild
from kernels.registry import AttrParam

__all__ = ["run"]

# Ops whose result does not depend on the order of their two inputs (exactly, in IEEE arithmetic).
_COMMUTATIVE = frozenset({
    "Add", "AddV2", "Mul", "Maximum", "Minimum", "Equal", "NotEqual", "LogicalAnd", "LogicalOr",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor", "SquaredDifference",
})
_MAX_CONST_BYTES = 64 * 1024


class _Unhashable(Exception):
    """An attr value with no faithful hashable form: the node is never merged."""


def _frozen(value: Any) -> Any:
    """A hashable stand-in for an attr value that is equal exactly when the values are."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("object array", value.shape, tuple(_frozen(v) for v in value.ravel().tolist()))
        if value.nbytes > _MAX_CONST_BYTES:
            raise _Unhashable
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.dtype):
        return ("dtype", value.str, value.name)
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    if isinstance(value, Mapping):
        return ("map", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    if hasattr(value, "SerializeToString"):  # a protobuf message: a function (NameAttrList), a placeholder
        return ("proto", type(value).__name__, value.SerializeToString(deterministic=True))
    try:
        hash(value)
    except TypeError:
        raise _Unhashable from None
    return value


def _attrs_with_defaults(node: Node) -> dict[str, Any]:
    """The node's attrs with the kernel's defaults filled in: `transpose_a` left out equals False."""
    defaults = {p.name: p.default for p in kernels.lookup(node.op, "cpu").attr_params if p.default is not AttrParam.REQUIRED}
    return {**defaults, **{k: v for k, v in node.attrs.items() if v is not None}}


def _key(node: Node, inputs: tuple[TensorRef, ...], controls: tuple[str, ...]) -> tuple | None:
    try:
        attrs = tuple(sorted((k, _frozen(v)) for k, v in _attrs_with_defaults(node).items()))
    except _Unhashable:
        return None
    data = tuple(sorted(inputs)) if node.op in _COMMUTATIVE and len(inputs) == 2 else inputs
    return (node.op, node.device, data, tuple(sorted(set(controls))), attrs)


def run(graph: Graph, ctx: PassContext) -> Graph:
    survivor: dict[str, str] = {}  # merged node -> the node that now stands for it
    seen: dict[tuple, str] = {}

    def renamed_inputs(node: Node) -> tuple[tuple[TensorRef, ...], tuple[str, ...]]:
        inputs = tuple(TensorRef(survivor.get(r.node, r.node), r.index) for r in node.inputs)
        controls = tuple(dict.fromkeys(survivor.get(c, c) for c in node.control_inputs))
        return inputs, controls

    for node in graph.nodes:  # in topological order: see rewrite.rebuild
        if is_opaque(node) or ctx.is_fed(node.name) or graph.output_counts[node.name] == 0:
            continue
        key = _key(node, *renamed_inputs(node))
        if key is None:
            continue
        first = seen.setdefault(key, node.name)
        if first != node.name and node.name not in ctx.preserve:
            survivor[node.name] = first
    if not survivor:
        return graph

    replaced = {}
    for node in graph.nodes:
        if node.name in survivor:
            continue
        inputs, controls = renamed_inputs(node)
        if inputs != node.inputs or controls != node.control_inputs:
            replaced[node.name] = Node(node.name, node.op, inputs, controls, node.device, node.attrs)
    return rebuild(graph, replaced, removed=survivor)
