"""Fusing a depthwise convolution and the 1x1 convolution that reads it (a separable convolution) into one
`_TensorgateSeparableConv2D` (kernels.nn.separable).

    [Relu | Relu6 ->]
      DepthwiseConv2dNative(x, D) | _FusedDepthwiseConv2dNative(x, D, b, fused_ops=[BiasAdd(, act)])
      -> Conv2D(., P) | _FusedConv2D(., P, *args, fused_ops=[...])      (P a 1x1 filter)
        ->  _TensorgateSeparableConv2D(x, D(, b), P, *args, depthwise_ops, fused_ops, input_activation)

Keras' SeparableConv2D freezes to exactly this pair (tf.nn.separable_conv2d: a depthwise convolution, then a
VALID 1x1 convolution), its bias and any batch norm after it folded into the 1x1 step by then; MobileNet's
hand-written depthwise + pointwise blocks (a batch norm and activation between the two) fuse_activation has
made into the fused ops. The fused op computes the pair in bands of output rows, so the depthwise result
stays in cache instead of making a round trip through memory. It keeps the 1x1 convolution's name.

A pair qualifies when both are NHWC with constant filters (and a constant depthwise bias), the 1x1
convolution has stride and dilation 1 and no padding, the depthwise step's activation is one its compiled loop
applies (kernels.nn.depthwise.ACTIVATION_CODES), the 1x1 step's fused_ops are _FusedConv2D's with an
activation of the ReLU family (or none), and the depthwise node is read only by the 1x1 one, with no control
consumer, neither fed nor fetched. A Relu or Relu6 before the depthwise step (NASNet and Xception activate the
input of each separable convolution) joins as the fused op's input_activation when every reader of it is a
depthwise step fused here (NASNet's ReLU feeds several), saving its pass over the tensor. It runs after
fuse_inverted_residual, which takes MobileNetV2's blocks (whose depthwise step may have no expansion before it)
first. CPU only: the GPU runs the convolutions it has.
"""

from __future__ import annotations

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.guards import is_opaque
from engine.passes.rewrite import (
    Consumers,
    constant_value,
    merged_controls,
    pointwise_filter,
    producer,
    rebuild,
    sole_readers_within,
)
from kernels.nn.separable import DEPTHWISE_OPS, POINTWISE_OPS

__all__ = ["OP", "run"]

OP = "_TensorgateSeparableConv2D"
_DEPTHWISE = ("DepthwiseConv2dNative", "_FusedDepthwiseConv2dNative")
# The pointwise activations whose epilogue is numpy's (the compiled row epilogues of swish and the sigmoids
# belong to the ops that declare them).
_POINTWISE_ACTIVATIONS = ("Relu", "Relu6", "Elu", "LeakyRelu")
_POINTWISE_HEADS = ("BiasAdd", "Add", "FusedBatchNorm")


def _is_constant(graph: Graph, node: Node, ctx: PassContext, position: int) -> bool:
    return len(node.inputs) > position and constant_value(graph, node.inputs[position], ctx.fed) is not None


def _pointwise(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Whether `node` is a 1x1 convolution (rewrite.pointwise_filter) whose fused_ops the fused op takes."""
    if pointwise_filter(graph, node, ctx.fed, POINTWISE_OPS) is None:
        return False
    fused_ops = tuple(node.attrs.get("fused_ops", ())) if node.op == "_FusedConv2D" else ()
    return not fused_ops or fused_ops[-1] in _POINTWISE_HEADS + _POINTWISE_ACTIVATIONS


def _depthwise(graph: Graph, node: Node | None, ctx: PassContext) -> tuple[str, ...] | None:
    """The depthwise step's fused_ops (() for a plain DepthwiseConv2dNative) when `node` is a depthwise
    convolution the fused op can take, else None."""
    if node is None or is_opaque(node) or node.attrs.get("data_format", "NHWC") != "NHWC":
        return None
    ops = tuple(node.attrs.get("fused_ops", ())) if node.op == "_FusedDepthwiseConv2dNative" else ()
    if ops not in DEPTHWISE_OPS or (node.op == "_FusedDepthwiseConv2dNative" and not ops):
        return None
    if not _is_constant(graph, node, ctx, 1) or (ops and not _is_constant(graph, node, ctx, 2)):
        return None
    filt = constant_value(graph, node.inputs[1], ctx.fed)
    return ops if filt.ndim == 4 else None


def _fused(graph: Graph, consumers: Consumers, pointwise: Node, ctx: PassContext) -> tuple[Node, Node] | None:
    """(the fused node, the depthwise node it absorbs) for a pair ending at `pointwise`, else None."""
    if not _pointwise(graph, pointwise, ctx):
        return None
    depthwise = producer(graph, pointwise.inputs[0], ctx, _DEPTHWISE)
    depthwise_ops = _depthwise(graph, depthwise, ctx)
    if depthwise_ops is None or depthwise.device != pointwise.device:
        return None
    if pointwise.inputs[0] != TensorRef(depthwise.name, 0) or TensorRef(depthwise.name, 0) in pointwise.inputs[1:]:
        return None
    if not sole_readers_within(graph, consumers, (depthwise,), pointwise, ctx):
        return None
    alphas = {n.attrs.get("leakyrelu_alpha", 0.2) for n in (depthwise, pointwise)
              if "LeakyRelu" in tuple(n.attrs.get("fused_ops", ()))}
    if len(alphas) > 1:  # one alpha for both steps
        return None
    fused_ops = tuple(pointwise.attrs.get("fused_ops", ())) if pointwise.op == "_FusedConv2D" else ()
    attrs = {
        "strides": tuple(depthwise.attrs["strides"]),
        "padding": depthwise.attrs["padding"],
        "explicit_paddings": tuple(depthwise.attrs.get("explicit_paddings", ())),
        "dilations": tuple(depthwise.attrs.get("dilations", (1, 1, 1, 1))),
        "depthwise_ops": depthwise_ops,
        "fused_ops": fused_ops,
        "T": pointwise.attrs.get("T"),
    }
    if alphas:
        attrs["leakyrelu_alpha"] = alphas.pop()
    if "epsilon" in pointwise.attrs:
        attrs["epsilon"] = pointwise.attrs["epsilon"]
    inputs = (*depthwise.inputs[: 3 if depthwise_ops else 2], *pointwise.inputs[1:])
    node = Node(pointwise.name, OP, inputs, merged_controls([depthwise, pointwise]), pointwise.device,
                {k: v for k, v in attrs.items() if v is not None})
    return node, depthwise


def _absorb_input_activations(graph: Graph, consumers: Consumers, ctx: PassContext, replaced: dict[str, Node],
                              absorbed: dict[str, str], removed: list[str]) -> None:
    """A Relu or Relu6 whose every reader is a depthwise step fused here (reading it as its input) becomes the
    fused ops' input_activation; `absorbed` maps each fused depthwise node to its fused op."""
    for act in graph.nodes:
        if act.op not in ("Relu", "Relu6") or is_opaque(act) or ctx.is_pinned(act.name) or consumers.control.get(act.name):
            continue
        out = TensorRef(act.name, 0)
        readers = list(dict.fromkeys(consumers.data.get(out, ())))
        fused = [replaced[absorbed[r]] for r in readers if r in absorbed]
        if not readers or len(fused) != len(readers) or any(f.inputs[0] != out or out in f.inputs[1:] for f in fused):
            continue
        if any(f.device != act.device for f in fused):
            continue
        for f in fused:
            attrs = {**f.attrs, "input_activation": act.op}
            replaced[f.name] = Node(f.name, OP, (act.inputs[0], *f.inputs[1:]), merged_controls([f, act]), f.device,
                                    attrs)
        removed.append(act.name)


def run(graph: Graph, ctx: PassContext) -> Graph:
    if ctx.device != "cpu" or not kernels.has_op(OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: list[str] = []
    absorbed: dict[str, str] = {}  # depthwise node -> the fused op it went into
    for node in graph.nodes:
        if node.op not in ("Conv2D", "_FusedConv2D"):
            continue
        found = _fused(graph, consumers, node, ctx)
        if found is None:
            continue
        replaced[node.name], depthwise = found
        removed.append(depthwise.name)
        absorbed[depthwise.name] = node.name
    if not replaced:
        return graph
    _absorb_input_activations(graph, consumers, ctx, replaced, absorbed, removed)
    return rebuild(graph, replaced, removed)
