"""Fusing a per-channel scale, shift and activation before 1x1 convolutions (a batch norm and ReLU before the
convolution) into them, as `_TensorgatePreactivatedConv2D` (kernels.nn.preactivation).

    Mul(x, scale) -> AddV2(., shift) [-> Relu | Relu6] -> Conv2D 1x1 | _FusedConv2D 1x1(fused_ops)
        ->  _TensorgatePreactivatedConv2D(x, scale, shift, W, *args, prologue_activation, fused_ops)
    Relu | Relu6 -> Conv2D 1x1 | _FusedConv2D 1x1(fused_ops)
        ->  _TensorgatePreactivatedConv2D(x, ones, zeros, W, *args, prologue_activation, fused_ops)

Keras 3 freezes a BatchNormalization to a Mul and an AddV2 by per-channel constants (fold_constants has
computed them by now). Where the batch norm follows a convolution, fold_batch_norm and fold_affine fold it into
the convolution's weights; where it comes before one, with a ReLU between (DenseNet's dense layers and
transitions, pre-activation ResNets), nothing can fold it, and it runs as three passes over the whole tensor.
The fused op applies it to each chunk of pixels just before the chunk's GEMM, while the chunk is in cache. A
ReLU alone before 1x1 convolutions (NASNet's cells activate their inputs so) joins the same way, with a scale of
one and a shift of zero.

A chain qualifies when the scale and shift are constants of one value per channel (shape [c], or [1, ..., c]
on a tensor known to be 4-D), the Mul and AddV2 take them in either order, each inner node is read only by the
next one (no control consumer, neither fed nor fetched), and every reader of the chain's last node is an NHWC
1x1 convolution with stride and dilation 1, no padding and a constant filter; each reader then becomes one fused
op of its own (a pre-activation ResNet's shortcut and first convolution both read one batch norm + ReLU). It
runs after fuse_activation, whose fused convolutions it takes. CPU only: the GPU runs the ops it has.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import (
    Consumers,
    commutative_operands,
    const_controls,
    const_node,
    constant_value,
    fresh_name,
    known_rank,
    merged_controls,
    pointwise_filter,
    rebuild,
)
from kernels.nn.preactivation import POINTWISE_OPS

__all__ = ["OP", "run"]

OP = "_TensorgatePreactivatedConv2D"
_ADDS = ("Add", "AddV2")


def _pointwise(graph: Graph, node: Node, ctx: PassContext) -> int | None:
    """The input depth of `node` when it is a 1x1 convolution the fused op takes (rewrite.pointwise_filter)."""
    filt = pointwise_filter(graph, node, ctx.fed, POINTWISE_OPS)
    return None if filt is None else int(filt.shape[2])


def _inner(graph: Graph, ref: TensorRef, ops: tuple[str, ...], consumers: Consumers, ctx: PassContext) -> Node | None:
    """The node producing output 0 `ref` when its op is one of `ops`, it may be fused away (not opaque, pinned,
    fed, or a control input) and `ref` is its only output read."""
    if ref.index != 0 or ref in ctx.fed or ref.node not in graph:
        return None
    node = graph.node(ref.node)
    if node.op not in ops or is_opaque(node) or ctx.is_pinned(node.name) or consumers.control.get(node.name):
        return None
    return node


def _per_channel(value: np.ndarray | None, depth: int, rank_known: bool) -> np.ndarray | None:
    """`value` as one float per channel ([depth]) when it broadcasts along the channel axis only, else None."""
    if value is None or value.dtype.kind != "f" or value.ndim > (4 if rank_known else 1):
        return None
    if value.size not in (1, depth) or any(d != 1 for d in value.shape[:-1]):
        return None
    return np.ascontiguousarray(np.broadcast_to(value.reshape(-1), (depth,)))


def _prologue(graph: Graph, end: Node, consumers: Consumers, ctx: PassContext, depth: int):
    """(x, scale, shift, activation, inner nodes) of the prologue ending at `end`, or None."""
    activation = ""
    add = end
    if end.op in ("Relu", "Relu6"):
        activation = end.op
        add = _inner(graph, end.inputs[0], _ADDS, consumers, ctx)
        if add is None or consumers.readers(graph, add) != {end.name}:
            return _bare(end, depth)
    elif end.op not in _ADDS:
        return None
    for mul_ref, shift_ref in commutative_operands(add, _ADDS):
        mul = _inner(graph, mul_ref, ("Mul",), consumers, ctx)
        if mul is None or consumers.readers(graph, mul) != {add.name}:
            continue
        for x_ref, scale_ref in commutative_operands(mul, ("Mul",)):
            rank_known = known_rank(graph, x_ref, ctx) == 4
            scale = _per_channel(constant_value(graph, scale_ref, ctx.fed), depth, rank_known)
            shift = _per_channel(constant_value(graph, shift_ref, ctx.fed), depth, rank_known)
            if scale is None or shift is None or scale.dtype != shift.dtype or constant_value(graph, x_ref, ctx.fed) is not None:
                continue
            inner = [mul, add] + ([end] if activation else [])
            return x_ref, (scale, scale_ref), (shift, shift_ref), activation, inner
    return _bare(end, depth) if activation else None


def _bare(end: Node, depth: int):
    """The prologue of a Relu or Relu6 alone (NASNet's ReLU before each cell's 1x1 convolutions): a scale of one
    and a shift of zero, which change no value (x * 1 + 0 is x, but for the sign of a zero)."""
    dtype = end.attrs.get("T")
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    return end.inputs[0], (np.ones(depth, dtype), None), (np.zeros(depth, dtype), None), end.op, [end]


def run(graph: Graph, ctx: PassContext) -> Graph:
    if ctx.device != "cpu" or not kernels.has_op(OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: list[str] = []
    added: list[Node] = []
    taken: set[str] = set()
    for end in graph.nodes:
        if end.op not in ("Relu", "Relu6", *_ADDS) or is_opaque(end) or ctx.is_pinned(end.name):
            continue
        if consumers.control.get(end.name) or end.name in removed:
            continue
        readers = [graph.node(name) for name in dict.fromkeys(consumers.data.get(TensorRef(end.name, 0), ()))]
        depths = {_pointwise(graph, r, ctx) for r in readers}
        if not readers or len(depths) != 1 or None in depths or consumers.readers(graph, end) != {r.name for r in readers}:
            continue
        if any(r.inputs[0] != TensorRef(end.name, 0) or TensorRef(end.name, 0) in r.inputs[1:] for r in readers):
            continue
        found = _prologue(graph, end, consumers, ctx, depths.pop())
        if found is None:
            continue
        x_ref, (scale, scale_ref), (shift, shift_ref), activation, inner = found
        refs = []
        for value, ref, role in ((scale, scale_ref, "scale"), (shift, shift_ref, "shift")):
            # A [1, 1, 1, c] constant reshaped, or the ones and zeros of a bare activation.
            if ref is None or constant_value(graph, ref, ctx.fed).shape != value.shape:
                controls = () if ref is None else const_controls(graph, [ref])
                node = const_node(fresh_name(graph, taken, f"{end.name}/{role}"), value, controls)
                added.append(node)
                ref = TensorRef(node.name, 0)
            refs.append(ref)
        controls = merged_controls(inner)
        for reader in readers:
            attrs = {k: v for k, v in reader.attrs.items()
                     if k in ("fused_ops", "epsilon", "leakyrelu_alpha", "T")}
            attrs["fused_ops"] = tuple(attrs.get("fused_ops", ())) if reader.op == "_FusedConv2D" else ()
            attrs["prologue_activation"] = activation
            inputs = (x_ref, *refs, *reader.inputs[1:])
            replaced[reader.name] = Node(reader.name, OP, inputs, merged_controls([reader], controls), reader.device,
                                         attrs)
        removed.extend(n.name for n in inner)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)
