"""Fusing the elementwise chains TensorFlow freezes swish (SiLU) and hard swish to into one op each.

    swish, tf.nn.silu (Keras 2 and 3's "swish"/"silu"):  IdentityN(Mul(x, Sigmoid(Mul(beta, x))), x, beta)
                                                          (a custom gradient; beta = 1, often an Identity
                                                          already: simplify_arithmetic drops the Mul by 1)
    swish, raw ops:                                       Mul(x, Sigmoid(x)), either order
        ->  _TensorgateSwish(x)

    hard swish, Keras 3 (hard_silu):     Mul(x, RealDiv(Relu6(AddV2(x, 3)), 6))
    hard swish, Keras 2 (MobileNetV3):   Mul(x, Mul(Relu6(AddV2(x, 3)), 1/6))
    hard swish, raw ops:                 Mul(Mul(x, Relu6(AddV2(x, 3))), 1/6), or RealDiv(..., 6)
        ->  _TensorgateHardSwish(x)

Operands of Mul and AddV2 come in either order, and x may reach the chain's branches through Identity
nodes; the constants must be float scalars equal to the ones above (to float32 precision). A swish whose
IdentityN (TensorFlow's custom-gradient wrapper) is read only through its first output is absorbed with
it; the fused node takes the chain's last name, so its readers still read it. Every node inside a chain
must be read only by the chain, have no control consumer, and be neither fetched nor fed.

The kernels (kernels/nn/swish.py) compute what the chains compute; fuse_activation then takes a swish or
hard swish that follows a convolution's or matmul's BiasAdd into the fused op's epilogue, where the CPU
kernels apply it while the output block is in cache (EfficientNet's 65 swish chains were over half its
time as separate passes).
"""

from __future__ import annotations

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

__all__ = ["HARD_SWISH", "SWISH", "run"]

SWISH = "_TensorgateSwish"
HARD_SWISH = "_TensorgateHardSwish"
_ADDS = ("Add", "AddV2")


def _source(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[TensorRef, list[Node]]:
    """The tensor `ref` passes on unchanged, through Identity nodes and multiplications by 1, and the nodes
    passed through."""
    passed: list[Node] = []
    while True:
        node = producer(graph, ref, ctx, ("Identity", "Mul"))
        if node is None:
            return ref, passed
        if node.op == "Identity":
            nxt = node.inputs[0]
        else:
            nxt = next((a for a, one in commutative_operands(node, ("Mul",)) if scalar_equals(graph, one, ctx, 1.0)), None)
            if nxt is None:
                return ref, passed
        passed.append(node)
        ref = nxt


def _swish(graph: Graph, out: Node, ctx: PassContext) -> tuple[TensorRef, list[Node]] | None:
    """(x, inner nodes) of Mul(x, Sigmoid(x)) ending at `out`, or None."""
    for x_ref, s_ref in commutative_operands(out, ("Mul",)):
        sigmoid = producer(graph, s_ref, ctx, ("Sigmoid",))
        if sigmoid is None:
            continue
        x, _ = _source(graph, x_ref, ctx)
        inner, passed = _source(graph, sigmoid.inputs[0], ctx)
        if inner == x:
            return x, [sigmoid, *passed]
    return None


def _relu6_of_x_plus_3(graph: Graph, ref: TensorRef, x: TensorRef | None, ctx: PassContext) -> tuple[TensorRef, list[Node]] | None:
    """(x, nodes) when `ref` is Relu6(x + 3) (x: the given one, when given), else None."""
    relu6 = producer(graph, ref, ctx, ("Relu6",))
    add = producer(graph, relu6.inputs[0], ctx, _ADDS) if relu6 is not None else None
    for a, three in commutative_operands(add, _ADDS):
        if not scalar_equals(graph, three, ctx, 3.0):
            continue
        source, passed = _source(graph, a, ctx)
        if x is None or source == x:
            return source, [relu6, add, *passed]
    return None


def _scaled_by_sixth(graph: Graph, ref: TensorRef, ctx: PassContext) -> list[tuple[TensorRef, Node]]:
    """[(y, node)] for each way `ref` is y * (1/6) (either order) or y / 6."""
    node = producer(graph, ref, ctx, ("Mul", "RealDiv"))
    if node is None or len(node.inputs) != 2:
        return []
    if node.op == "RealDiv":
        return [(node.inputs[0], node)] if scalar_equals(graph, node.inputs[1], ctx, 6.0) else []
    return [(y, node) for y, c in commutative_operands(node, ("Mul",)) if scalar_equals(graph, c, ctx, 1 / 6)]


def _hard_swish(graph: Graph, out: Node, ctx: PassContext) -> tuple[TensorRef, list[Node]] | None:
    """(x, inner nodes) of a hard swish ending at `out`, in either grouping, or None."""
    # x * (Relu6(x + 3) / 6)
    for x_ref, gate in commutative_operands(out, ("Mul",)):
        x, _ = _source(graph, x_ref, ctx)
        for relu6_ref, scale in _scaled_by_sixth(graph, gate, ctx):
            found = _relu6_of_x_plus_3(graph, relu6_ref, x, ctx)
            if found is not None:
                return x, [scale, *found[1]]
    # (x * Relu6(x + 3)) / 6
    out_ref = TensorRef(out.name, 0)
    for product_ref, scale in _scaled_by_sixth(graph, out_ref, ctx) if out.op in ("Mul", "RealDiv") else []:
        product = producer(graph, product_ref, ctx, ("Mul",))
        for x_ref, relu6_ref in commutative_operands(product, ("Mul",)):
            x, _ = _source(graph, x_ref, ctx)
            found = _relu6_of_x_plus_3(graph, relu6_ref, x, ctx)
            if found is not None:
                return x, [product, *found[1]]
    return None


def _custom_gradient_wrapper(graph: Graph, consumers: Consumers, node: Node, ctx: PassContext) -> Node | None:
    """The IdentityN that passes `node` on as its first output (tf.custom_gradient's wrapper) when it is
    `node`'s only reader, no one reads its other outputs, and it is not fetched; else None."""
    reader = consumers.sole_consumer(graph, node)
    if reader is None or reader.op != "IdentityN" or reader.inputs[:1] != (TensorRef(node.name, 0),):
        return None
    if ctx.is_pinned(reader.name) or consumers.control.get(reader.name):
        return None
    if any(consumers.data.get(TensorRef(reader.name, i)) for i in range(1, len(reader.inputs))):
        return None
    return reader


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not (kernels.has_op(SWISH, ctx.device) and kernels.has_op(HARD_SWISH, ctx.device)):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.op not in ("Mul", "RealDiv") or node.name in removed or node.name in replaced:
            continue
        found, op = _swish(graph, node, ctx), SWISH
        if found is None:
            found, op = _hard_swish(graph, node, ctx), HARD_SWISH
        if found is None:
            continue
        x, inner = found
        end = node
        wrapper = _custom_gradient_wrapper(graph, consumers, node, ctx) if op == SWISH else None
        if wrapper is not None:
            inner, end = [*inner, node], wrapper
        inner = list({n.name: n for n in inner}.values())
        names = {n.name for n in inner}
        if x.node in names or names & (removed | set(replaced)) or not sole_readers_within(graph, consumers, inner, end, ctx):
            continue
        replaced[end.name] = Node(end.name, op, (x,), merged_controls([*inner, end]), node.device, {"T": node.attrs.get("T")})
        removed.update(names)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
