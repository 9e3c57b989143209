"""Fusing RMS normalisation, however a graph spells it, into one `_TensorgateRmsNorm`.

RMSNorm (Llama, Mistral, Gemma, T5) scales x by the reciprocal root of the mean of its squares over the last
axis, then by a constant gamma:

    y = x * Rsqrt(Mean(x^2, -1, keep_dims) + eps) * gamma

Every spelling of that meaning fires: the square as Square(x), Pow(x, 2) or Mul(x, x); the reciprocal root
as Rsqrt(v), Reciprocal(Sqrt(v)), RealDiv(1, Sqrt(v)) or Pow(v, -0.5), or x divided by Sqrt(v); epsilon
added on either side; gamma (a float constant, e.g. Gemma's folded 1 + scale) multiplied on either side,
or absent. The Mean must reduce only the last axis and keep it; epsilon must be a float scalar constant.
Every node inside the chain must be read only by the chain, have no control consumer, and be neither
fetched nor fed; the fused node takes the chain's last name and the control inputs of what it replaces.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import (
    Consumers,
    commutative_operands,
    const_node,
    constant_value,
    fresh_name,
    known_rank,
    merged_controls,
    producer,
    rebuild,
    scalar_constant,
    scalar_equals,
    sole_readers_within,
)
from engine.passes.shape_facts import rank

__all__ = ["FUSED_OP", "run"]

FUSED_OP = "_TensorgateRmsNorm"
_ADDS = ("Add", "AddV2")


def _out(node: Node) -> TensorRef:
    return TensorRef(node.name, 0)


def _squares(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[TensorRef, Node] | None:
    """(x, node) when `ref` is Square(x), Pow(x, 2) or Mul(x, x)."""
    node = producer(graph, ref, ctx, ("Square", "Pow", "Mul"))
    if node is None:
        return None
    if node.op == "Square":
        return node.inputs[0], node
    if node.op == "Pow":
        return (node.inputs[0], node) if scalar_equals(graph, node.inputs[1], ctx, 2.0, rtol=0.0) else None
    return (node.inputs[0], node) if len(node.inputs) == 2 and node.inputs[0] == node.inputs[1] else None


def _last_axis_mean(graph: Graph, ref: TensorRef, ctx: PassContext) -> Node | None:
    mean = producer(graph, ref, ctx, ("Mean",))
    if mean is None or not mean.attrs.get("keep_dims", False):
        return None
    axes = constant_value(graph, mean.inputs[1], ctx.fed)
    if axes is None or axes.dtype.kind not in "iu" or axes.size != 1:
        return None
    axis = int(axes.reshape(()))
    r = known_rank(graph, mean.inputs[0], ctx) or rank(graph, mean.inputs[0], ctx)
    return mean if axis == -1 or (r is not None and axis == r - 1) else None


def _mean_square(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[TensorRef, float, list[Node]] | None:
    """(x, epsilon, nodes) when `ref` is Mean(x^2) + epsilon over the last axis."""
    for mean_ref, eps_ref in commutative_operands(producer(graph, ref, ctx, _ADDS), _ADDS):
        epsilon = scalar_constant(graph, eps_ref, ctx)
        mean = _last_axis_mean(graph, mean_ref, ctx)
        squared = None if mean is None or epsilon is None else _squares(graph, mean.inputs[0], ctx)
        if squared is not None:
            return squared[0], epsilon, [graph.node(ref.node), mean, squared[1]]
    return None


def _inverse_root(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[TensorRef, float, list[Node]] | None:
    """(x, epsilon, nodes) when `ref` is 1 / sqrt(Mean(x^2) + epsilon), spelled any of the module's ways."""
    node = producer(graph, ref, ctx, ("Rsqrt", "Reciprocal", "RealDiv", "Pow"))
    if node is None:
        return None
    if node.op == "Rsqrt":
        inner, nodes = node.inputs[0], [node]
    elif node.op == "Pow":
        if not scalar_equals(graph, node.inputs[1], ctx, -0.5, rtol=0.0):
            return None
        inner, nodes = node.inputs[0], [node]
    else:
        if node.op == "RealDiv" and not scalar_equals(graph, node.inputs[0], ctx, 1.0, rtol=0.0):
            return None
        root = producer(graph, node.inputs[-1], ctx, ("Sqrt",))
        if root is None:
            return None
        inner, nodes = root.inputs[0], [node, root]
    found = _mean_square(graph, inner, ctx)
    return None if found is None else (found[0], found[1], nodes + found[2])


def _normalised(graph: Graph, node: Node, ctx: PassContext) -> tuple[TensorRef, float, list[Node]] | None:
    """(x, epsilon, nodes of the chain, `node` last) when `node` is x * 1/sqrt(...) or x / sqrt(...)."""
    if node.op == "RealDiv" and len(node.inputs) == 2:
        root = producer(graph, node.inputs[1], ctx, ("Sqrt",))
        found = None if root is None else _mean_square(graph, root.inputs[0], ctx)
        if found is not None and found[0] == node.inputs[0]:
            return found[0], found[1], [*found[2], root, node]
        return None
    for x, inv_ref in commutative_operands(node, ("Mul",)):
        found = _inverse_root(graph, inv_ref, ctx)
        if found is not None and found[0] == x:
            return x, found[1], [*found[2], node]
    return None


def _match(graph: Graph, node: Node, consumers: Consumers, ctx: PassContext):
    """(x, gamma ref or None, epsilon, inner nodes, last node) of the chain ending at `node`, or None."""
    for norm_ref, gamma_ref in commutative_operands(node, ("Mul",)):
        gamma = constant_value(graph, gamma_ref, ctx.fed)
        inner = producer(graph, norm_ref, ctx, ("Mul", "RealDiv"))
        if gamma is None or gamma.dtype.kind != "f" or inner is None:
            continue
        found = _normalised(graph, inner, ctx)
        if found is not None:
            return found[0], gamma_ref, found[1], found[2], node
    found = _normalised(graph, node, ctx)
    if found is None:
        return None
    # A normalisation whose only reader multiplies it by a constant is that reader's chain, with gamma.
    reader = consumers.sole_consumer(graph, node)
    if reader is not None and reader.op == "Mul" and not ctx.is_pinned(node.name):
        other = [r for r in reader.inputs if r != _out(node)]
        value = constant_value(graph, other[0], ctx.fed) if len(other) == 1 else None
        if value is not None and value.dtype.kind == "f":
            return None
    return found[0], None, found[1], found[2][:-1], node


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(FUSED_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op not in ("Mul", "RealDiv") or node.name in removed or node.name in replaced:
            continue
        match = _match(graph, node, consumers, ctx)
        if match is None:
            continue
        x, gamma, epsilon, inner, last = match
        inner = list({n.name: n for n in inner if n.name != last.name}.values())
        names = {n.name for n in inner}
        if x.node in names or (gamma is not None and gamma.node in names) or names & (removed | set(replaced)):
            continue
        if not sole_readers_within(graph, consumers, inner, last, ctx):
            continue
        dtype = last.attrs.get("T", np.dtype(np.float32))
        if gamma is None:
            const = const_node(fresh_name(graph, taken, f"{last.name}/gamma"), np.asarray(1, dtype=dtype))
            added.append(const)
            gamma = _out(const)
        replaced[last.name] = Node(last.name, FUSED_OP, (x, gamma), merged_controls([*inner, last]), last.device,
                                   {"T": dtype, "epsilon": epsilon})
        removed.update(names)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)
