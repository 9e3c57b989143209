"""Fusing the elementwise chain Keras freezes LayerNormalization to into one `_TensorgateLayerNorm`.

Keras 3 (TensorFlow backend) computes, over the last axis:

    mean = Mean(x, -1, keep_dims)               variance = Mean(SquaredDifference(x, StopGradient(mean)), -1, keep_dims)
    inv  = Rsqrt(variance + epsilon) * gamma    y = x * inv + (-mean * inv + beta)

which is ten kernels and as many passes over x; `_TensorgateLayerNorm(x, gamma, beta, epsilon)` makes
two. gamma is absent with `scale=False` (inv is then the Rsqrt) and beta with `center=False`;
gamma and beta may be any tensors, broadcast as the chain broadcasts them. Only exactly this shape
fires: epsilon a float constant added to the variance before Rsqrt, both Means over the last axis
(-1, or rank - 1 where the rank is known) keeping dims. Every node inside the chain must be read
only by the chain, have no control consumer, and be neither fetched nor fed; the fused node takes
the chain's last name and the control inputs of every node it replaces.
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
    sole_readers_within,
)

__all__ = ["run"]

FUSED_OP = "_TensorgateLayerNorm"
_ADDS = ("Add", "AddV2")


def _out(node: Node) -> TensorRef:
    return TensorRef(node.name, 0)


def _last_axis_mean(graph: Graph, ref: TensorRef, ctx: PassContext) -> Node | None:
    """The Mean producing `ref` when it reduces only the last axis of its input and keeps dims."""
    mean = producer(graph, ref, ctx, ("Mean",))
    if mean is None or not mean.attrs.get("keep_dims", False):
        return None
    axes = constant_value(graph, mean.inputs[1], ctx.fed)
    if axes is None or axes.dtype.kind not in "iu" or axes.size != 1:
        return None
    axis = int(axes.reshape(()))
    rank = known_rank(graph, mean.inputs[0], ctx)
    return mean if axis == -1 or (rank is not None and axis == rank - 1) else None


class _Match:
    """What one matched chain is made of."""

    def __init__(self, x: TensorRef, gamma: TensorRef | None, beta: TensorRef | None, epsilon: float, inner: list[Node]):
        self.x, self.gamma, self.beta, self.epsilon, self.inner = x, gamma, beta, epsilon, inner


def _match_variance(graph: Graph, inv_source: TensorRef, ctx: PassContext):
    """(x, mean node, epsilon, nodes) for `Rsqrt(Mean(SquaredDifference(x, [StopGradient](mean))) + eps)`."""
    rsqrt = producer(graph, inv_source, ctx, ("Rsqrt",))
    if rsqrt is None:
        return None
    for var_ref, eps_ref in commutative_operands(producer(graph, rsqrt.inputs[0], ctx, _ADDS), _ADDS):
        epsilon = scalar_constant(graph, eps_ref, ctx)
        variance = _last_axis_mean(graph, var_ref, ctx)
        if epsilon is None or variance is None:
            continue
        sqdiff = producer(graph, variance.inputs[0], ctx, ("SquaredDifference",))
        for x, centre in commutative_operands(sqdiff, ("SquaredDifference",)):
            stop = producer(graph, centre, ctx, ("StopGradient", "Identity"))
            mean = _last_axis_mean(graph, stop.inputs[0] if stop else centre, ctx)
            if mean is None or mean.inputs[0] != x:
                continue
            if variance.inputs[1] != mean.inputs[1] and not np.array_equal(
                constant_value(graph, variance.inputs[1], ctx.fed), constant_value(graph, mean.inputs[1], ctx.fed)
            ):
                continue
            nodes = [rsqrt, graph.node(rsqrt.inputs[0].node), variance, sqdiff, *([stop] if stop else []), mean]
            return x, mean, epsilon, nodes
    return None


def _match(graph: Graph, out: Node, ctx: PassContext) -> _Match | None:
    """The chain ending at `out` (y = x * inv + res), or None."""
    for scaled_ref, res_ref in commutative_operands(out, _ADDS):
        scaled = producer(graph, scaled_ref, ctx, ("Mul",))
        for x, inv_ref in commutative_operands(scaled, ("Mul",)):
            # inv is Rsqrt(...) * gamma, or the Rsqrt itself without gamma.
            candidates = [(r, g, [producer(graph, inv_ref, ctx, ("Mul",))]) for r, g in commutative_operands(producer(graph, inv_ref, ctx, ("Mul",)), ("Mul",))]
            candidates.append((inv_ref, None, []))
            for rsqrt_ref, gamma, inv_nodes in candidates:
                variance = _match_variance(graph, rsqrt_ref, ctx)
                if variance is None or variance[0] != x:
                    continue
                _, mean, epsilon, var_nodes = variance
                found = _match_shift(graph, res_ref, inv_ref, mean, ctx)
                if found is None:
                    continue
                beta, shift_nodes = found
                inner = [scaled, *inv_nodes, *var_nodes, *shift_nodes]
                return _Match(x, gamma, beta, epsilon, inner)
    return None


def _match_shift(graph: Graph, res_ref: TensorRef, inv_ref: TensorRef, mean: Node, ctx: PassContext):
    """(beta or None, nodes) for `Neg(mean) * inv + beta` (or without `+ beta`)."""
    options = [(r, b, [producer(graph, res_ref, ctx, _ADDS)]) for r, b in commutative_operands(producer(graph, res_ref, ctx, _ADDS), _ADDS)]
    options.append((res_ref, None, []))
    for prod_ref, beta, add_nodes in options:
        prod = producer(graph, prod_ref, ctx, ("Mul",))
        for neg_ref, other in commutative_operands(prod, ("Mul",)):
            neg = producer(graph, neg_ref, ctx, ("Neg",))
            if other == inv_ref and neg is not None and neg.inputs[0] == _out(mean):
                return beta, [*add_nodes, prod, neg]
    return None


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(FUSED_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op not in _ADDS or node.name in removed or node.name in replaced:
            continue
        match = _match(graph, node, ctx)
        if match is None:
            continue
        inner = list({n.name: n for n in match.inner}.values())
        if any(n.name in removed or n.name in replaced for n in inner) or not sole_readers_within(graph, consumers, inner, node, ctx):
            continue
        if match.x.node in {n.name for n in inner} or any(
            ref is not None and ref.node in {n.name for n in inner} for ref in (match.gamma, match.beta)
        ):
            continue
        dtype = node.attrs.get("T", np.dtype(np.float32))
        refs = []
        for ref, neutral, label in ((match.gamma, 1, "gamma"), (match.beta, 0, "beta")):
            if ref is None:
                const = const_node(fresh_name(graph, taken, f"{node.name}/{label}"), np.asarray(neutral, dtype=dtype))
                added.append(const)
                ref = _out(const)
            refs.append(ref)
        replaced[node.name] = Node(node.name, FUSED_OP, (match.x, *refs), merged_controls([*inner, node]), node.device,
                                   {"T": dtype, "epsilon": match.epsilon})
        removed.update(n.name for n in inner)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)
