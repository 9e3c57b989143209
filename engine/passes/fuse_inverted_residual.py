"""Fusing MobileNetV2's inverted-residual blocks into one `_TensorgateInvertedResidual` (kernels.nn.inverted_residual).

    _FusedConv2D(x, 1x1 expand, BiasAdd[, Relu|Relu6])
      -> _FusedDepthwiseConv2dNative(BiasAdd[, Relu|Relu6])
      -> _FusedConv2D(1x1 project, BiasAdd[, Add residual])
        ->  _TensorgateInvertedResidual(x, expand, bias, depthwise, bias, project, bias[, residual])

fuse_activation has already turned each convolution, its folded batch norm and its activation into one
fused op; this pass then takes the three that make a block. The fused op computes the block in bands of
output rows, so the expanded activation (six times the block's width) stays in cache instead of making
several round trips through memory. It keeps the projection's name, so what read the block still does.

A block without expansion (MobileNetV2's first: depthwise then project) fuses the same way, with
`expand=False`. A chain qualifies when all three are NHWC with constant filters and biases, both 1x1 convolutions have
stride and dilation 1 and no padding, the depthwise convolution has a multiplier of 1, the expand and
depthwise steps end in no activation, Relu or Relu6 (Keras' MobileNetV2; other activations such as
swish are separate ops and leave the chain alone), the project step has none, and the inner two nodes are
read only by the next one and are neither fed nor fetched. CPU only: the GPU runs the fused ops it has.
"""

from __future__ import annotations

from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import Consumers, constant_value, merged_controls, producer, rebuild, sole_readers_within

__all__ = ["run"]

OP = "_TensorgateInvertedResidual"
_ACTIVATIONS = ("Relu", "Relu6")


def _pointwise(graph: Graph, node: Node, ctx: PassContext, heads: tuple[tuple[str, ...], ...]) -> str | None:
    """The activation ("" for none) of a _FusedConv2D that is a plain NHWC 1x1 convolution with a constant
    filter and bias and fused_ops one of `heads` plus at most an allowed activation; None otherwise."""
    attrs = node.attrs
    if node.op != "_FusedConv2D" or is_opaque(node) or attrs.get("data_format", "NHWC") != "NHWC":
        return None
    if tuple(attrs.get("strides", ())) != (1, 1, 1, 1) or tuple(attrs.get("dilations", (1, 1, 1, 1))) != (1, 1, 1, 1):
        return None
    if attrs.get("padding") == "EXPLICIT" and any(attrs.get("explicit_paddings", ())):
        return None
    if not _constants(graph, node, ctx, 1, 2):
        return None
    filt = constant_value(graph, node.inputs[1], ctx.fed)
    if filt.ndim != 4 or filt.shape[:2] != (1, 1):
        return None
    return _activation(tuple(attrs.get("fused_ops", ())), heads)


def _activation(fused_ops: tuple[str, ...], heads: tuple[tuple[str, ...], ...]) -> str | None:
    for head in heads:
        if fused_ops == head:
            return ""
        if fused_ops[:-1] == head and fused_ops[-1] in _ACTIVATIONS:
            return fused_ops[-1]
    return None


def _constants(graph: Graph, node: Node, ctx: PassContext, *positions: int) -> bool:
    return all(len(node.inputs) > i and constant_value(graph, node.inputs[i], ctx.fed) is not None for i in positions)


_Block = tuple[Node, Node | None, Node]


def _block(graph: Graph, consumers: Consumers, project: Node, ctx: PassContext) -> _Block | None:
    """(the fused node replacing the block that ends at `project`, its expand node or None, its depthwise
    node), or None when `project` does not end a block."""
    if _pointwise(graph, project, ctx, (("BiasAdd",), ("BiasAdd", "Add"))) != "":
        return None
    depthwise = producer(graph, project.inputs[0], ctx, ("_FusedDepthwiseConv2dNative",))
    if depthwise is None or is_opaque(depthwise) or depthwise.attrs.get("data_format", "NHWC") != "NHWC":
        return None
    depthwise_activation = _activation(tuple(depthwise.attrs.get("fused_ops", ())), (("BiasAdd",),))
    if depthwise_activation is None or not _constants(graph, depthwise, ctx, 1, 2):
        return None
    dw_filter = constant_value(graph, depthwise.inputs[1], ctx.fed)
    if dw_filter.ndim != 4 or dw_filter.shape[3] != 1:
        return None
    expand = producer(graph, depthwise.inputs[0], ctx, ("_FusedConv2D",))
    expand_activation = None if expand is None else _pointwise(graph, expand, ctx, (("BiasAdd",),))
    if expand_activation is None or not sole_readers_within(graph, consumers, (expand, depthwise), project, ctx):
        expand = None  # a block without expansion (MobileNetV2's first): depthwise and project alone
        if not sole_readers_within(graph, consumers, (depthwise,), project, ctx):
            return None
    chain = [n for n in (expand, depthwise, project) if n is not None]
    if len({n.device for n in chain}) != 1 or project.inputs[0] != TensorRef(depthwise.name, 0):
        return None
    if expand is not None and depthwise.inputs[0] != TensorRef(expand.name, 0):
        return None
    attrs = {
        "strides": tuple(depthwise.attrs["strides"]),
        "padding": depthwise.attrs["padding"],
        "explicit_paddings": tuple(depthwise.attrs.get("explicit_paddings", ())),
        "dilations": tuple(depthwise.attrs.get("dilations", (1, 1, 1, 1))),
        "expand": expand is not None,
        "expand_activation": expand_activation or "",
        "depthwise_activation": depthwise_activation,
        "T": project.attrs.get("T"),
    }
    head = expand.inputs[:3] if expand is not None else depthwise.inputs[:1]
    inputs = (*head, *depthwise.inputs[1:3], *project.inputs[1:])
    node = Node(project.name, OP, inputs, merged_controls(chain), project.device,
                {k: v for k, v in attrs.items() if v is not None})
    return node, expand, depthwise


def run(graph: Graph, ctx: PassContext) -> Graph:
    if ctx.device != "cpu":
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: list[str] = []
    for node in graph.nodes:
        if node.op != "_FusedConv2D" or node.name in removed:
            continue
        block = _block(graph, consumers, node, ctx)
        # A 1x1 convolution without activation could end one block and expand the next: fuse the first.
        if block is None or block[1] is not None and block[1].name in replaced:
            continue
        fused, expand, depthwise = block
        replaced[node.name] = fused
        removed += [depthwise.name] + ([expand.name] if expand is not None else [])
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
