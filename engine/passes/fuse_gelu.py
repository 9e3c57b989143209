"""Fusing the elementwise chains TensorFlow freezes GELU to into one `_TensorgateGelu`.

    exact, Keras 3 (keras.activations.gelu):   Mul(Mul(0.5, x), Erfc(Mul(Neg(x), 1/sqrt(2))))
    exact, tf.nn.gelu:                          Mul(Mul(0.5, x), AddV2(1, Erf(RealDiv(x, sqrt(2)))))
                                                (or Erf(Mul(x, 1/sqrt(2))))
    approximate, tf.nn.gelu(approximate=True):  Mul(Mul(0.5, x), AddV2(1, Tanh(Mul(sqrt(2/pi),
                                                AddV2(x, Mul(0.044715, Pow(x, 3)))))))

become `_TensorgateGelu(x, approximate=...)`: one kernel instead of five to nine. Operands of Mul and
AddV2 may come in either order; the constants must be float scalars equal to the ones above (to
float32 precision). Every node inside the chain must be read only by the chain, have no control
consumer, and be neither fetched nor fed. fuse_dense and fuse_activation then take a GELU that
follows a dense layer into its epilogue.
"""

from __future__ import annotations

import math

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import (
    Consumers,
    commutative_operands,
    merged_controls,
    producer,
    rebuild,
    scalar_equals,
    sole_readers_within,
)

__all__ = ["FUSED_OP", "run"]

FUSED_OP = "_TensorgateGelu"
_ADDS = ("Add", "AddV2")


def _scaled_by(graph: Graph, ref: TensorRef, ctx: PassContext, value: float) -> tuple[TensorRef, Node] | None:
    """(y, node) when `ref` is y * value (either order), or y / (1 / value) as a RealDiv."""
    node = producer(graph, ref, ctx, ("Mul", "RealDiv"))
    if node is None or len(node.inputs) != 2:
        return None
    if node.op == "RealDiv":
        return (node.inputs[0], node) if scalar_equals(graph, node.inputs[1], ctx, 1 / value) else None
    for y, c in commutative_operands(node, ("Mul",)):
        if scalar_equals(graph, c, ctx, value):
            return y, node
    return None


def _erfc_form(graph: Graph, ref: TensorRef, x: TensorRef, ctx: PassContext) -> list[Node] | None:
    """Nodes of Erfc(Neg(x) * 1/sqrt(2)) (or Erfc(x * -1/sqrt(2))) producing `ref`."""
    erfc = producer(graph, ref, ctx, ("Erfc",))
    if erfc is None:
        return None
    scaled = _scaled_by(graph, erfc.inputs[0], ctx, 1 / math.sqrt(2))
    if scaled is not None:
        neg = producer(graph, scaled[0], ctx, ("Neg",))
        if neg is not None and neg.inputs[0] == x:
            return [erfc, scaled[1], neg]
    scaled = _scaled_by(graph, erfc.inputs[0], ctx, -1 / math.sqrt(2))
    if scaled is not None and scaled[0] == x:
        return [erfc, scaled[1]]
    return None


def _one_plus(graph: Graph, ref: TensorRef, x: TensorRef, ctx: PassContext) -> tuple[bool, list[Node]] | None:
    """(approximate, nodes) of 1 + Erf(x / sqrt(2)) or 1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))."""
    add = producer(graph, ref, ctx, _ADDS)
    for one, term in commutative_operands(add, _ADDS):
        if not scalar_equals(graph, one, ctx, 1.0):
            continue
        erf = producer(graph, term, ctx, ("Erf",))
        if erf is not None:
            scaled = _scaled_by(graph, erf.inputs[0], ctx, 1 / math.sqrt(2))
            if scaled is not None and scaled[0] == x:
                return False, [add, erf, scaled[1]]
        tanh = producer(graph, term, ctx, ("Tanh",))
        if tanh is not None:
            cubic = _cubic(graph, tanh.inputs[0], x, ctx)
            if cubic is not None:
                return True, [add, tanh, *cubic]
    return None


def _cubic(graph: Graph, ref: TensorRef, x: TensorRef, ctx: PassContext) -> list[Node] | None:
    """Nodes of sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)) producing `ref`."""
    outer = _scaled_by(graph, ref, ctx, math.sqrt(2 / math.pi))
    if outer is None:
        return None
    inner = producer(graph, outer[0], ctx, _ADDS)
    for x_ref, term in commutative_operands(inner, _ADDS):
        if x_ref != x:
            continue
        scaled = _scaled_by(graph, term, ctx, 0.044715)
        power = producer(graph, scaled[0], ctx, ("Pow",)) if scaled else None
        if power is not None and power.inputs[0] == x and scalar_equals(graph, power.inputs[1], ctx, 3.0):
            return [outer[1], inner, scaled[1], power]
    return None


def _match(graph: Graph, out: Node, ctx: PassContext) -> tuple[TensorRef, bool, list[Node]] | None:
    """(x, approximate, inner nodes) of a GELU chain ending at the Mul `out`, or None."""
    for half_ref, rest in commutative_operands(out, ("Mul",)):
        half = _scaled_by(graph, half_ref, ctx, 0.5)
        if half is None or half[1].op != "Mul":
            continue
        x, half_node = half
        erfc = _erfc_form(graph, rest, x, ctx)
        if erfc is not None:
            return x, False, [half_node, *erfc]
        found = _one_plus(graph, rest, x, ctx)
        if found is not None:
            return x, found[0], [half_node, *found[1]]
    return None


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(FUSED_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.op != "Mul" or node.name in removed:
            continue
        match = _match(graph, node, ctx)
        if match is None:
            continue
        x, approximate, inner = match
        inner = list({n.name: n for n in inner}.values())
        names = {n.name for n in inner}
        if x.node in names or names & (removed | set(replaced)) or not sole_readers_within(graph, consumers, inner, node, ctx):
            continue
        replaced[node.name] = Node(node.name, FUSED_OP, (x,), merged_controls([*inner, node]), node.device,
                                   {"T": node.attrs.get("T"), "approximate": approximate})
        removed.update(names)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
