"""Folding inference batch normalization (FusedBatchNorm, V2, V3) into constants.

In inference a batch norm is a per-channel affine map, y = x * k + (offset - mean * k) with
k = scale / sqrt(variance + epsilon). After an NHWC Conv2D, DepthwiseConv2dNative or MatMul whose
weights are constant, k goes into the weights and the shift becomes a BiasAdd (which the fusion pass
then merges into the convolution):

    FusedBatchNormV3(Conv2D(x, W), scale, offset, mean, variance)  ->  BiasAdd(Conv2D(x, W * k), shift)

A batch norm with nothing to fold into becomes Mul(x, k) + shift, two constants computed once
instead of on every run. Only when `is_training` is false, the channel is the last axis, the four
statistics are constants, x is float32 or float64, and nobody reads outputs 1-5 (the batch
statistics and reserve spaces). The batch norm's name stays on the node that replaces it.
"""

from __future__ import annotations

import numpy as np

from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import (
    Consumers,
    const_controls,
    const_node,
    constant_value,
    fresh_name,
    rebuild,
)
from engine.passes.weights import (
    WEIGHTED_OPS,
    channels_last,
    out_channels,
    scale_outputs,
)

__all__ = ["run"]

BATCH_NORM_OPS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _affine(graph: Graph, node: Node, ctx: PassContext) -> tuple[np.ndarray, np.ndarray] | None:
    """(k, shift) of an inference batch norm with constant statistics, else None."""
    if node.attrs.get("is_training", True) or node.attrs.get("data_format", "NHWC") not in ("NHWC", "NDHWC"):
        return None
    dtype = node.attrs.get("T")
    stats = [constant_value(graph, ref, ctx.fed) for ref in node.inputs[1:5]]
    if dtype not in _FLOATS or any(s is None or s.ndim != 1 or s.dtype != dtype for s in stats):
        return None
    scale, offset, mean, variance = stats
    if len({s.shape for s in stats}) != 1:
        return None
    # As the FusedBatchNorm kernel computes it, in the statistics' precision.
    k = scale / np.sqrt(variance + dtype.type(node.attrs.get("epsilon", 0.0001)))
    return k.astype(dtype), (offset - mean * k).astype(dtype)


def _statistics_unused(graph: Graph, node: Node, consumers: Consumers) -> bool:
    return all(not consumers.data.get(TensorRef(node.name, i)) for i in range(1, graph.output_counts[node.name]))


def _foldable_producer(
    graph: Graph, node: Node, consumers: Consumers, ctx: PassContext, channels: int
) -> tuple[Node, np.ndarray] | None:
    """(producer, its weights): the convolution or matmul producing the batch norm's input, when its
    weights can take k."""
    x = node.inputs[0]
    if x in ctx.fed or x.node not in graph or x.index != 0:
        return None
    producer = graph.node(x.node)
    if producer.op not in WEIGHTED_OPS or ctx.is_pinned(producer.name) or not channels_last(producer):
        return None
    if consumers.sole_consumer(graph, producer) is not node:
        return None
    weights = constant_value(graph, producer.inputs[1], ctx.fed)
    if weights is None or weights.dtype != node.attrs.get("T") or out_channels(producer, weights) != channels:
        return None
    return producer, weights


def run(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op not in BATCH_NORM_OPS or ctx.is_pinned(node.name) or not _statistics_unused(graph, node, consumers):
            continue
        affine = _affine(graph, node, ctx)
        if affine is None:
            continue
        k, shift = affine
        dtype = node.attrs["T"]
        moved = const_controls(graph, node.inputs[1:5])
        foldable = _foldable_producer(graph, node, consumers, ctx, k.shape[0])
        if foldable is not None:
            producer, weights = foldable
            filt = const_node(fresh_name(graph, taken, f"{producer.name}/folded_weights"), scale_outputs(producer, weights, k),
                              const_controls(graph, [*node.inputs[1:5], producer.inputs[1]]))
            bias = const_node(fresh_name(graph, taken, f"{node.name}/folded_bias"), shift, moved)
            replaced[producer.name] = Node(producer.name, producer.op, (producer.inputs[0], TensorRef(filt.name, 0)),
                                           producer.control_inputs, producer.device, producer.attrs)
            replaced[node.name] = Node(node.name, "BiasAdd", (TensorRef(producer.name, 0), TensorRef(bias.name, 0)),
                                       node.control_inputs, node.device, {"T": dtype, "data_format": "NHWC"})
            added.extend([filt, bias])
            continue
        scale = const_node(fresh_name(graph, taken, f"{node.name}/k"), k, moved)
        offset = const_node(fresh_name(graph, taken, f"{node.name}/shift"), shift, moved)
        mul = Node(fresh_name(graph, taken, f"{node.name}/scaled"), "Mul", (node.inputs[0], TensorRef(scale.name, 0)),
                   node.control_inputs, node.device, {"T": dtype})
        replaced[node.name] = Node(node.name, "AddV2", (TensorRef(mul.name, 0), TensorRef(offset.name, 0)), (), node.device, {"T": dtype})
        added.extend([scale, offset, mul])
    if not replaced:
        return graph
    return rebuild(graph, replaced, added=added)
