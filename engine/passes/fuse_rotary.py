"""Fusing rotary position embeddings in the rotate-half form into one `_TensorgateRotary`.

    y = x * cos + rotate_half(x) * sin,    rotate_half(x) = concat(-x2, x1) over the last axis
        ->  _TensorgateRotary(x, cos, sin)

with (x1, x2) = Split(x, 2, last axis) (or SplitV into two equal halves), and rotate_half spelled either as
ConcatV2(Neg(x2), x1, last axis) or as Keras Hub's Reshape(Pack(Neg(x2), x1, axis=-2), shape of x) (stacking
the halves on a new second-to-last axis and merging it back). That Reshape fires only where its target is
provably x's shape: each dim Shape(x)[i] or a constant equal to x's static dim i (engine.passes.shape_facts,
a declared or recorded shape). cos and sin are whatever tensors the graph multiplies by (the
positions and frequencies stay in the graph); Mul and AddV2 operands may come in either order. Every node
inside the chain must be read only by the chain, have no control consumer, and be neither fetched nor fed;
the fused node takes the AddV2's name.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import Consumers, constant_value, merged_controls, producer, rebuild, sole_readers_within
from engine.passes.shape_facts import Dim, rank, symbolic_dims

__all__ = ["FUSED_OP", "run"]

FUSED_OP = "_TensorgateRotary"
_ADDS = ("Add", "AddV2")


def _ints(graph: Graph, ref: TensorRef, ctx: PassContext) -> list[int] | None:
    value = constant_value(graph, ref, ctx.fed)
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
        return None
    return [int(v) for v in np.reshape(value, -1)]


def _static_dims(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[int | None, ...] | None:
    """x's dims as the graph states them (a feed's or placeholder's declared shape, the `_output_shapes`
    TensorFlow records, the constants of the Reshape target that made x), None for unknown ones; None where
    nothing is stated."""
    if ref in ctx.fed:
        shape = ctx.fed_shapes.get(ref)
    elif ref.node not in graph:
        return None
    else:
        node = graph.node(ref.node)
        shapes = node.attrs.get("_output_shapes")
        if isinstance(shapes, tuple) and ref.index < len(shapes):
            shape = shapes[ref.index]
        elif node.op == "Reshape" and ref.index == 0:
            dims = symbolic_dims(graph, node.inputs[1], ctx)
            shape = None if dims is None else tuple(d.coef if d.source is None else None for d in dims)
        else:
            shape = node.attrs.get("shape") if node.op in ("Placeholder", "PlaceholderWithDefault") else None
    if not isinstance(shape, tuple):
        return None
    return tuple(d if isinstance(d, int) and d >= 0 else None for d in shape)


def _halves(graph: Graph, first: TensorRef, second: TensorRef, ctx: PassContext) -> tuple[TensorRef, Node] | None:
    """(x, the split) when `first` and `second` are the two halves of x over its last axis."""
    if first.node != second.node or (first.index, second.index) != (0, 1) or first in ctx.fed or second in ctx.fed:
        return None
    split = graph.node(first.node) if first.node in graph else None
    if split is None or split.op not in ("Split", "SplitV") or split.attrs.get("num_split") != 2:
        return None
    if split.op == "Split":
        axis_ref, x = split.inputs
    else:
        x, sizes_ref, axis_ref = split.inputs
        sizes = _ints(graph, sizes_ref, ctx)
        if sizes is None or len(sizes) != 2 or sizes[0] != sizes[1] or sizes[0] < 0:
            return None
    axis, r = _ints(graph, axis_ref, ctx), rank(graph, x, ctx)
    if axis is None or len(axis) != 1 or not (axis[0] == -1 or (r is not None and axis[0] == r - 1)):
        return None
    return x, split


def _rotated(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[TensorRef, list[Node]] | None:
    """(x, nodes) when `ref` is rotate_half(x) in either spelling."""
    node = producer(graph, ref, ctx, ("ConcatV2", "Reshape"))
    if node is None:
        return None
    if node.op == "ConcatV2":
        if len(node.inputs) != 3:
            return None
        neg_ref, first, axis_ref = node.inputs
        pieces = [node]
    else:
        pack = producer(graph, node.inputs[0], ctx, ("Pack",))
        if pack is None or len(pack.inputs) != 2:
            return None
        neg_ref, first = pack.inputs
        axis_ref, pieces = None, [node, pack]
    neg = producer(graph, neg_ref, ctx, ("Neg",))
    found = None if neg is None else _halves(graph, first, neg.inputs[0], ctx)
    if found is None:
        return None
    x, split = found
    r = rank(graph, x, ctx)
    if r is None:
        return None
    if axis_ref is not None:
        axis = _ints(graph, axis_ref, ctx)
        if axis is None or len(axis) != 1 or axis[0] not in (-1, r - 1):
            return None
    else:
        axis = pieces[1].attrs.get("axis", 0)
        if axis % (r + 1) != r - 1 or not _restores_shape(graph, node.inputs[1], x, r, ctx):
            return None
    return x, [*pieces, neg, split]


def _restores_shape(graph: Graph, shape_ref: TensorRef, x: TensorRef, r: int, ctx: PassContext) -> bool:
    """Whether the Reshape target `shape_ref` is provably x's own shape."""
    dims = symbolic_dims(graph, shape_ref, ctx)
    static = _static_dims(graph, x, ctx)
    if dims is None or len(dims) != r:
        return False
    for i, dim in enumerate(dims):
        if dim == Dim(1, x, i):
            continue
        if dim.source is None and static is not None and len(static) == r and static[i] == dim.coef:
            continue
        return False
    return True


def _match(graph: Graph, add: Node, ctx: PassContext) -> tuple[TensorRef, TensorRef, TensorRef, list[Node]] | None:
    """(x, cos, sin, inner nodes) of the chain ending at `add`, or None."""
    if len(add.inputs) != 2:
        return None
    for left, right in (add.inputs, add.inputs[::-1]):
        plain = producer(graph, left, ctx, ("Mul",))
        turned = producer(graph, right, ctx, ("Mul",))
        if plain is None or turned is None or len(plain.inputs) != 2 or len(turned.inputs) != 2:
            continue
        for rot_ref, sin in (turned.inputs, turned.inputs[::-1]):
            found = _rotated(graph, rot_ref, ctx)
            if found is None:
                continue
            x, nodes = found
            if x not in plain.inputs or plain.inputs[0] == plain.inputs[1]:
                continue
            cos = plain.inputs[1] if plain.inputs[0] == x else plain.inputs[0]
            return x, cos, sin, [plain, turned, *nodes]
    return None


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(FUSED_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.op not in _ADDS or node.name in removed:
            continue
        match = _match(graph, node, ctx)
        if match is None:
            continue
        x, cos, sin, inner = match
        names = {n.name for n in inner}
        if len(names) != len(inner) or names & (removed | set(replaced)) or {x.node, cos.node, sin.node} & names:
            continue
        if not sole_readers_within(graph, consumers, inner, node, ctx):
            continue
        replaced[node.name] = Node(node.name, FUSED_OP, (x, cos, sin), merged_controls([*inner, node]), node.device,
                                   {"T": node.attrs.get("T", np.dtype(np.float32))})
        removed.update(names)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
