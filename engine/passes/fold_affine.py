"""Folding per-channel affine ops into the weights of the convolution or matmul before them.

    y = ((conv(x, W) + b) * s + t)   ->   y = conv(x, W * s) + (b * s + t)

Keras 3 freezes batch normalization as exactly such a Mul/AddV2 chain (constant folding has already
collapsed `Rsqrt(variance + epsilon) * gamma` into one per-channel constant), and TensorFlow's own
FoldMultiplyIntoConv does the same for a Mul. The chain may mix BiasAdd, Add/AddV2, Sub (constant
subtrahend) and Mul, each with a constant that is a scalar or varies only along the output channel.
Only NHWC convolutions and MatMul are folded; intermediate tensors must have no other reader, no
control consumer, and must not be fetched or fed. The chain's control inputs move to the folded
node, and the new constants carry those of the constants they were computed from.
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
    merged_controls,
    rebuild,
)
from engine.passes.weights import (
    WEIGHTED_OPS,
    channels_last,
    out_channels,
    per_channel,
    scale_outputs,
)

__all__ = ["run"]

_ADDS = frozenset({"BiasAdd", "Add", "AddV2"})


def _absorb(graph: Graph, step: Node, current: TensorRef, ctx: PassContext, channels: int, rank: int):
    """(scale, shift, constant ref) of one chain step `y = current * scale + shift`, or None."""
    if step.op not in _ADDS | {"Sub", "Mul"} or len(step.inputs) != 2:
        return None
    if step.op == "BiasAdd" and step.attrs.get("data_format", "NHWC") != "NHWC":
        return None
    if step.inputs[0] == current:
        other = step.inputs[1]
    elif step.inputs[1] == current and step.op in {"Add", "AddV2", "Mul"}:
        other = step.inputs[0]
    else:
        return None
    value = per_channel(constant_value(graph, other, ctx.fed), channels, rank)
    if value is None:
        return None
    if step.op == "Mul":
        return value, np.zeros_like(value), other
    return np.ones_like(value), -value if step.op == "Sub" else value, other


def run(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op not in WEIGHTED_OPS or node.name in removed or ctx.is_pinned(node.name) or not channels_last(node):
            continue
        weights = constant_value(graph, node.inputs[1], ctx.fed)
        if weights is None or weights.dtype.kind != "f":
            continue
        channels = out_channels(node, weights)
        if channels is None:
            continue
        rank = 2 if node.op == "MatMul" else 4

        chain: list[Node] = []
        constants: list[TensorRef] = [node.inputs[1]]
        scale = np.ones(channels, weights.dtype)
        shift = np.zeros(channels, weights.dtype)
        current, last = TensorRef(node.name, 0), node
        while not ctx.is_pinned(last.name):
            step = consumers.sole_consumer(graph, last)
            if step is None or step.name in removed or step.name in replaced:
                break
            affine = _absorb(graph, step, current, ctx, channels, rank)
            if affine is None:
                break
            scale, shift = scale * affine[0], shift * affine[0] + affine[1]
            constants.append(affine[2])
            chain.append(step)
            current, last = TensorRef(step.name, 0), step
        # A lone BiasAdd is left for the fusion pass; anything more is worth folding.
        if not chain or (len(chain) == 1 and chain[0].op == "BiasAdd"):
            continue

        moved = const_controls(graph, constants)
        filt = const_node(fresh_name(graph, taken, f"{node.name}/folded_weights"), scale_outputs(node, weights, scale), moved)
        folded = Node(fresh_name(graph, taken, f"{node.name}/folded"), node.op, (node.inputs[0], TensorRef(filt.name, 0)),
                      merged_controls([node, *chain]), node.device, node.attrs)
        bias = const_node(fresh_name(graph, taken, f"{last.name}/folded_bias"), shift.astype(weights.dtype), moved)
        # The chain's last node keeps its name, so every reader, control consumer and fetch of it still works.
        out = Node(last.name, "BiasAdd", (TensorRef(folded.name, 0), TensorRef(bias.name, 0)), (), node.device,
                   {"T": weights.dtype, "data_format": "NHWC"})
        replaced[last.name] = out
        removed.update([node.name] + [n.name for n in chain[:-1]])
        added.extend([filt, folded, bias])
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)
