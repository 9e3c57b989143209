"""Folding Keras' Tensordot scaffolding around a fused dense layer into one `_TensorgateDense`.

A Keras Dense layer on 3-D data (a transformer's feed-forward layers) freezes to Tensordot over the last
axis, which fuse_dense leaves as

    Reshape(_FusedMatMul(Reshape(Transpose(x, identity), Pack(Prod(Gather(Shape(x), free)),
                                                              Prod(Gather(Shape(x), [last])))), W, b),
            ConcatV2(Gather(Shape(x), free), [units]))
        ->  _TensorgateDense(x, W, b)

That is ten small ops around every matmul (about 5 us each: BERT-mini at batch 1 spent ~0.6 ms of 12 on
them), all to compute x.reshape(-1, K) @ W reshaped to x.shape[:-1] + [units], which `_TensorgateDense`
does by itself. The pattern is checked op by op, indices and all, so that only a contraction of x's last
axis with W's first qualifies; the fused node keeps the outer Reshape's name, and what only the
scaffolding read becomes dead (remove_dead_nodes drops it).
"""

from __future__ import annotations

import numpy as np

from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import Consumers, constant_value, merged_controls, rebuild

__all__ = ["is_tensordot_shape", "run", "tensordot_rows"]


def _node(graph: Graph, ref: TensorRef, op: str, ctx: PassContext) -> Node | None:
    """The node producing `ref` (output 0, not fed) when its op is `op`."""
    if ref.index != 0 or ref in ctx.fed or ref.node not in graph:
        return None
    node = graph.node(ref.node)
    return node if node.op == op and not is_opaque(node) else None


def _const(graph: Graph, ref: TensorRef, ctx: PassContext) -> list[int] | None:
    value = constant_value(graph, ref, ctx.fed)
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
        return None
    return [int(v) for v in np.reshape(value, -1)]


def _gather_of_shape(graph: Graph, ref: TensorRef, x: TensorRef, ctx: PassContext) -> list[int] | None:
    """The indices of GatherV2(Shape(x), indices, axis 0) producing `ref`, or None."""
    gather = _node(graph, ref, "GatherV2", ctx)
    if gather is None or len(gather.inputs) != 3 or gather.attrs.get("batch_dims", 0) != 0:
        return None
    shape = _node(graph, gather.inputs[0], "Shape", ctx)
    if shape is None or shape.inputs[0] != x or _const(graph, gather.inputs[2], ctx) != [0]:
        return None
    return _const(graph, gather.inputs[1], ctx)


def _prod_of(graph: Graph, ref: TensorRef, ctx: PassContext) -> TensorRef | None:
    """The input of Prod(input, 0) producing `ref` (no keep_dims), or None."""
    prod = _node(graph, ref, "Prod", ctx)
    if prod is None or prod.attrs.get("keep_dims") or _const(graph, prod.inputs[1], ctx) not in ([0], [-1]):
        return None
    return prod.inputs[0]


def tensordot_rows(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[TensorRef, TensorRef, Node, Node | None] | None:
    """(x, the rows' count ref, the Reshape, the Transpose or None) when `ref` is Tensordot's
    Reshape(Transpose(x, identity), Pack(Prod(Gather(Shape(x), free)), Prod(Gather(Shape(x), [last])))), that
    is x.reshape(-1, K) contracting x's last axis; else None."""
    inner = _node(graph, ref, "Reshape", ctx)
    if inner is None:
        return None
    x, rank = inner.inputs[0], None
    transpose = _node(graph, x, "Transpose", ctx)
    if transpose is not None:
        perm = _const(graph, transpose.inputs[1], ctx)
        if perm is None or perm != list(range(len(perm))):
            return None
        x, rank = transpose.inputs[0], len(perm)
    pack = _node(graph, inner.inputs[1], "Pack", ctx)
    if pack is None or len(pack.inputs) != 2 or pack.attrs.get("axis", 0) != 0:
        return None
    rows, depth = (_prod_of(graph, r, ctx) for r in pack.inputs)
    free = None if rows is None else _gather_of_shape(graph, rows, x, ctx)
    contracted = None if depth is None else _gather_of_shape(graph, depth, x, ctx)
    if free is None or contracted is None:
        return None
    rank = rank if rank is not None else len(free) + 1
    if free != list(range(rank - 1)) or contracted not in ([rank - 1], [-1]):
        return None
    return x, rows, inner, transpose


def is_tensordot_shape(graph: Graph, ref: TensorRef, rows: TensorRef, units: int, ctx: PassContext) -> bool:
    """Whether `ref` is Tensordot's output shape ConcatV2(Gather(Shape(x), free), [units], 0), whose free
    dims are `rows` (the Gather tensordot_rows found): the product's shape restored, as the matmul had it."""
    concat = _node(graph, ref, "ConcatV2", ctx)
    if concat is None or len(concat.inputs) != 3 or _const(graph, concat.inputs[2], ctx) not in ([0], [-1]):
        return False
    return concat.inputs[0] == rows and _const(graph, concat.inputs[1], ctx) == [units]


def _dense(graph: Graph, outer: Node, ctx: PassContext) -> Node | None:
    """The `_TensorgateDense` replacing `outer` (the Tensordot's final Reshape), or None."""
    matmul = _node(graph, outer.inputs[0], "_FusedMatMul", ctx)
    if matmul is None or matmul.attrs.get("transpose_a") or matmul.attrs.get("transpose_b") or len(matmul.inputs) != 3:
        return None
    weights = constant_value(graph, matmul.inputs[1], ctx.fed)
    if weights is None or weights.ndim != 2:
        return None
    found = tensordot_rows(graph, matmul.inputs[0], ctx)
    if found is None:
        return None
    x, rows, inner, transpose = found
    if not is_tensordot_shape(graph, outer.inputs[1], rows, weights.shape[1], ctx):
        return None
    attrs = {k: v for k, v in matmul.attrs.items() if k not in ("transpose_a", "transpose_b")}
    controls = merged_controls([n for n in (transpose, inner, matmul, outer) if n is not None])
    return Node(outer.name, "_TensorgateDense", (x, *matmul.inputs[1:]), controls, matmul.device, attrs)


def run(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: list[str] = []
    for node in graph.nodes:
        if node.op != "Reshape" or len(node.inputs) != 2 or is_opaque(node):
            continue
        dense = _dense(graph, node, ctx)
        if dense is None:
            continue
        matmul = graph.node(node.inputs[0].node)
        # The matmul's product must be the Reshape's alone (and not fetched): it disappears.
        if ctx.is_pinned(matmul.name) or consumers.control.get(matmul.name) or consumers.readers(graph, matmul) != {node.name}:
            continue
        replaced[node.name] = dense
        removed.append(matmul.name)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
