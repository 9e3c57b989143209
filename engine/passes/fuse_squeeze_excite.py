"""Fusing squeeze-and-excitation blocks (EfficientNet's, MobileNetV3's) into one `_TensorgateSqueezeExcite`
(kernels.nn.squeeze_excite), with the 1x1 projection after them when there is one.

    squeeze:  Mean(x, [1, 2], keep_dims=True)                            (MobileNetV3, tf.reduce_mean)
              Reshape(Mean(x, [1, 2]), [N, 1, 1, C])                     (EfficientNet: Keras' Reshape, frozen
                                                                          as Pack(StridedSlice(Shape), 1, 1, C))
    reduce:   _FusedConv2D(squeezed, 1x1, BiasAdd[, act])
    expand:   _FusedConv2D(reduced, 1x1, BiasAdd, Sigmoid | Relu6)
    gate:     the expand step [* m | / d]                               (a hard sigmoid: Relu6(z + 3) / 6,
                                                                          its + 3 folded into the bias)
    excite:   Mul(x, gate), either order
    [project: _FusedConv2D(excited, 1x1, BiasAdd[, Add residual])]     (MBConv's linear bottleneck)
        ->  _TensorgateSqueezeExcite(x, reduce filter, bias, expand filter, bias[, project filter, bias[,
            residual]])

fuse_activation has already made each convolution, its folded batch norm and its activation one fused
op (fuse_swish having made the swish an activation), so this pass matches what those wrote. x may reach
the squeeze through Identity nodes. The convolutions must be NHWC with constant filters and biases, 1x1,
stride and dilation 1, no padding; the gate's factor a float scalar constant. Every node inside the block
must be read only by the block, have no control consumer, and be neither fetched nor fed; the fused node
takes the last one's name (the projection's, or the excitation's). CPU only: the GPU runs the ops it has.

The block's dozen small instructions become one, and with a projection the excited tensor (as large as
the block's widest) is never written: each chunk of pixels is excited right before its GEMM.

When the block's input is a depthwise step's output that nothing else reads (MBConv: 1x1 expansion,
depthwise, squeeze-and-excitation, projection), that step and the 1x1 expansion before it (if it is read
only by the depthwise step; NHWC, constant weights, an activation from _BANDED_ACTIVATIONS) become one
`_TensorgateExpandDepthwise` (kernels.nn.expand_depthwise), which computes them in bands of rows, so that
the expanded tensor never reaches memory, and gives the block the squeeze (the spatial mean) as its second
output; the fused block takes it (`squeezed`) instead of reading its input once more. It keeps the depthwise
step's name.
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
    constant_value,
    merged_controls,
    producer,
    rebuild,
    scalar_constant,
    sole_readers_within,
)

__all__ = ["EXPAND_DEPTHWISE", "OP", "run"]

OP = "_TensorgateSqueezeExcite"
EXPAND_DEPTHWISE = "_TensorgateExpandDepthwise"
_GATES = ("Sigmoid", "Relu6")
_REDUCE_ACTIVATIONS = ("", "Relu", "Relu6", "Elu", "Sigmoid", "Swish", "HardSwish")
# The activations the expansion and the depthwise step may end in to run banded (kernels.nn.expand_depthwise).
_BANDED_ACTIVATIONS = ("", "Relu", "Relu6", "Sigmoid", "Swish", "HardSwish")


def _source(graph: Graph, ref: TensorRef, ctx: PassContext) -> TensorRef:
    """The tensor `ref` passes on unchanged through Identity nodes."""
    while (node := producer(graph, ref, ctx, ("Identity",))) is not None:
        ref = node.inputs[0]
    return ref


def _pointwise(graph: Graph, node: Node | None, ctx: PassContext) -> tuple[tuple[str, ...], str, np.ndarray] | None:
    """(head, activation or "", filter) when `node` is an NHWC 1x1 _FusedConv2D with stride and dilation 1,
    no padding, a constant filter and bias, and fused_ops a head (BiasAdd, or BiasAdd and a residual Add)
    plus at most an activation."""
    if node is None or node.op != "_FusedConv2D" or is_opaque(node):
        return None
    attrs = node.attrs
    if attrs.get("data_format", "NHWC") != "NHWC" or tuple(attrs.get("strides", ())) != (1, 1, 1, 1):
        return None
    if tuple(attrs.get("dilations", (1, 1, 1, 1))) != (1, 1, 1, 1) or any(attrs.get("explicit_paddings", ())):
        return None
    fused_ops = tuple(attrs.get("fused_ops", ()))
    head = fused_ops[:2] if fused_ops[:2] == ("BiasAdd", "Add") else fused_ops[:1]
    if head[:1] != ("BiasAdd",) or len(fused_ops) > len(head) + 1 or len(node.inputs) != 2 + len(head):
        return None
    filt = constant_value(graph, node.inputs[1], ctx.fed)
    bias = constant_value(graph, node.inputs[2], ctx.fed)
    if filt is None or bias is None or filt.ndim != 4 or filt.shape[:2] != (1, 1) or bias.shape != filt.shape[3:]:
        return None
    return head, fused_ops[len(head)] if len(fused_ops) > len(head) else "", filt


def _is_spatial_mean(graph: Graph, node: Node, ctx: PassContext, keep_dims: bool) -> bool:
    if node.op != "Mean" or bool(node.attrs.get("keep_dims", False)) != keep_dims:
        return False
    axes = constant_value(graph, node.inputs[1], ctx.fed)
    return axes is not None and axes.dtype.kind in "iu" and sorted(np.asarray(axes).reshape(-1).tolist()) == [1, 2]


def _squeeze(graph: Graph, ref: TensorRef, channels: int, ctx: PassContext) -> tuple[TensorRef, list[Node]] | None:
    """(x, nodes) when `ref` is the spatial mean of NHWC x as [N, 1, 1, channels], in either spelling."""
    node = producer(graph, ref, ctx, ("Mean", "Reshape"))
    if node is None:
        return None
    if node.op == "Mean":
        return (node.inputs[0], [node]) if _is_spatial_mean(graph, node, ctx, keep_dims=True) else None
    mean = producer(graph, node.inputs[0], ctx, ("Mean",))
    if mean is None or not _is_spatial_mean(graph, mean, ctx, keep_dims=False):
        return None
    # The target shape ends in (1, 1, channels): with the [N, C] mean's N * C values its first size is N.
    shape = constant_value(graph, node.inputs[1], ctx.fed)
    if shape is not None:
        ok = shape.shape == (4,) and shape.tolist()[1:] == [1, 1, channels]
        return (mean.inputs[0], [node, mean]) if ok else None
    pack = producer(graph, node.inputs[1], ctx, ("Pack",))
    if pack is None or len(pack.inputs) != 4 or pack.attrs.get("axis", 0) != 0:
        return None
    tail = [constant_value(graph, r, ctx.fed) for r in pack.inputs[1:]]
    if any(t is None or t.size != 1 for t in tail) or [int(t.reshape(())) for t in tail] != [1, 1, channels]:
        return None
    # The batch size Keras packs in front: a slice of the mean's own Shape, which goes with the block.
    extra = [pack]
    sliced = producer(graph, pack.inputs[0], ctx, ("StridedSlice",))
    shape_node = producer(graph, sliced.inputs[0], ctx, ("Shape",)) if sliced is not None else None
    if shape_node is not None and shape_node.inputs[0] == TensorRef(mean.name, 0):
        extra += [sliced, shape_node]
    return mean.inputs[0], [node, mean, *extra]


def _gate(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[Node, dict, list[Node]] | None:
    """(expand node, gate attrs, factor nodes) when `ref` is an expand step's gate, scaled or not."""
    attrs = {"gate_multiplier": 1.0, "gate_divisor": 1.0}
    factors: list[Node] = []
    scale = producer(graph, ref, ctx, ("Mul", "RealDiv"))
    if scale is not None and len(scale.inputs) == 2:
        if scale.op == "RealDiv":
            divisor = scalar_constant(graph, scale.inputs[1], ctx)
            if divisor is None:
                return None
            ref, attrs["gate_divisor"], factors = scale.inputs[0], divisor, [scale]
        else:
            for a, b in commutative_operands(scale, ("Mul",)):
                multiplier = scalar_constant(graph, b, ctx)
                if multiplier is not None:
                    ref, attrs["gate_multiplier"], factors = a, multiplier, [scale]
                    break
            else:
                return None
    expand = producer(graph, ref, ctx, ("_FusedConv2D",))
    found = _pointwise(graph, expand, ctx)
    if found is None or found[0] != ("BiasAdd",) or found[1] not in _GATES:
        return None
    attrs["gate_activation"] = found[1]
    return expand, attrs, factors


def _block(graph: Graph, consumers: Consumers, excite: Node, ctx: PassContext) -> tuple[Node, list[Node]] | None:
    """(the fused node, the nodes it replaces besides its last) for the block whose excitation is `excite`."""
    for x_ref, gate_ref in commutative_operands(excite, ("Mul",)):
        gate = _gate(graph, gate_ref, ctx)
        if gate is None:
            continue
        expand, attrs, factors = gate
        reduce_node = producer(graph, expand.inputs[0], ctx, ("_FusedConv2D",))
        reduce = _pointwise(graph, reduce_node, ctx)
        if reduce is None or reduce[0] != ("BiasAdd",) or reduce[1] not in _REDUCE_ACTIVATIONS:
            continue
        _, reduce_activation, reduce_filter = reduce
        expand_filter = constant_value(graph, expand.inputs[1], ctx.fed)
        channels = reduce_filter.shape[2]
        if expand_filter.shape[2:] != (reduce_filter.shape[3], channels):
            continue
        squeeze = _squeeze(graph, reduce_node.inputs[0], channels, ctx)
        if squeeze is None or _source(graph, squeeze[0], ctx) != _source(graph, x_ref, ctx):
            continue
        inner = [*factors, expand, reduce_node, *squeeze[1]]
        if not sole_readers_within(graph, consumers, inner, excite, ctx):
            continue
        attrs.update(reduce_activation=reduce_activation, T=excite.attrs.get("T"))
        inputs = (x_ref, *reduce_node.inputs[1:3], *expand.inputs[1:3])
        last, replaced = excite, inner
        project = _projection(graph, consumers, excite, channels, ctx)
        if project is not None:
            attrs["project_fused_ops"] = tuple(project.attrs["fused_ops"])
            inputs += tuple(project.inputs[1:])
            last, replaced = project, [*inner, excite]
        node = Node(last.name, OP, inputs, merged_controls([*replaced, last]), excite.device, attrs)
        return node, replaced
    return None


def _projection(graph: Graph, consumers: Consumers, excite: Node, channels: int, ctx: PassContext) -> Node | None:
    """The 1x1 _FusedConv2D (BiasAdd, optionally + a residual, no activation) that alone reads the excitation."""
    if ctx.is_pinned(excite.name):
        return None
    reader = consumers.sole_consumer(graph, excite)
    if reader is None or reader.inputs[0] != TensorRef(excite.name, 0) or reader.device != excite.device:
        return None
    found = _pointwise(graph, reader, ctx)
    if found is None or found[1] or found[2].shape[2] != channels:
        return None
    return reader


def _depthwise(graph: Graph, ref: TensorRef, ctx: PassContext) -> tuple[Node, str] | None:
    """(node, activation or "") when `ref` is output 0 of an NHWC _FusedDepthwiseConv2dNative with a constant
    [kh, kw, C, 1] filter and [C] bias and fused_ops BiasAdd plus at most an activation the banded op has."""
    node = producer(graph, ref, ctx, ("_FusedDepthwiseConv2dNative",))
    if node is None or is_opaque(node) or len(node.inputs) != 3 or node.attrs.get("data_format", "NHWC") != "NHWC":
        return None
    fused_ops = tuple(node.attrs.get("fused_ops", ()))
    filt = constant_value(graph, node.inputs[1], ctx.fed)
    bias = constant_value(graph, node.inputs[2], ctx.fed)
    if fused_ops[:1] != ("BiasAdd",) or len(fused_ops) > 2 or filt is None or bias is None:
        return None
    activation = fused_ops[1] if len(fused_ops) == 2 else ""
    if activation not in _BANDED_ACTIVATIONS or filt.ndim != 4 or filt.shape[3] != 1 or bias.shape != filt.shape[2:3]:
        return None
    return node, activation


def _expand_depthwise(graph: Graph, consumers: Consumers, squeeze_excite: Node, block: set[str],
                      ctx: PassContext) -> tuple[Node, list[Node]] | None:
    """(the `_TensorgateExpandDepthwise` node, the expansion it replaces, if any) for the depthwise step (and the
    1x1 expansion before it) whose output the fused block `squeeze_excite` alone reads; `block` names the nodes
    the block replaces."""
    found = _depthwise(graph, squeeze_excite.inputs[0], ctx)
    if found is None:
        return None
    depthwise, depthwise_activation = found
    if ctx.is_pinned(depthwise.name) or consumers.control.get(depthwise.name):
        return None
    if not consumers.readers(graph, depthwise) <= block | {squeeze_excite.name}:
        return None
    expand = producer(graph, depthwise.inputs[0], ctx, ("_FusedConv2D",))
    shape = _pointwise(graph, expand, ctx)
    expand_ok = (shape is not None and shape[0] == ("BiasAdd",) and shape[1] in _BANDED_ACTIVATIONS
                 and expand.device == depthwise.device
                 and sole_readers_within(graph, consumers, [expand], depthwise, ctx))
    attrs = {key: depthwise.attrs[key] for key in ("strides", "padding", "explicit_paddings", "dilations", "T")
             if key in depthwise.attrs}
    attrs.update(expand=expand_ok, expand_activation=shape[1] if expand_ok else "",
                 depthwise_activation=depthwise_activation)
    inputs = (*expand.inputs, *depthwise.inputs[1:]) if expand_ok else depthwise.inputs
    node = Node(depthwise.name, EXPAND_DEPTHWISE, inputs, merged_controls([expand, depthwise] if expand_ok else
                                                                           [depthwise]), depthwise.device, attrs)
    return node, [expand] if expand_ok else []


def run(graph: Graph, ctx: PassContext) -> Graph:
    if ctx.device != "cpu" or not kernels.has_op(OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    for node in graph.nodes:
        if node.op != "Mul" or node.name in removed or node.name in replaced:
            continue
        block = _block(graph, consumers, node, ctx)
        if block is None:
            continue
        fused, inner = block
        names = {n.name for n in inner}
        if names & (removed | set(replaced)) or fused.name in replaced:
            continue
        # The block's input, when a depthwise step alone makes it, comes from the banded op with its mean.
        head = _expand_depthwise(graph, consumers, fused, names | {fused.name}, ctx) \
            if kernels.has_op(EXPAND_DEPTHWISE, ctx.device) else None
        if head is not None and head[0].name not in replaced and not {n.name for n in head[1]} & removed:
            banded, expand = head
            replaced[banded.name] = banded
            removed.update(n.name for n in expand)
            fused = Node(fused.name, fused.op, (fused.inputs[0], TensorRef(banded.name, 1), *fused.inputs[1:]),
                         fused.control_inputs, fused.device, {**fused.attrs, "squeezed": True})
        replaced[fused.name] = fused
        removed.update(names)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
