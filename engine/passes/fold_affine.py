"""Folding per-channel affine ops into the weights of the convolution or matmul before them.

    y = ((conv(x, W) + b) * s + t)   ->   y = conv(x, W * s) + (b * s + t)

Keras 3 freezes batch normalization as exactly such a Mul/AddV2 chain (constant folding has already
collapsed `Rsqrt(variance + epsilon) * gamma` into one per-channel constant), and TensorFlow's own
FoldMultiplyIntoConv does the same for a Mul. The chain may mix BiasAdd, Add/AddV2, Sub (constant
subtrahend) and Mul, each with a constant that is a scalar or varies only along the output channel.
Only NHWC convolutions and MatMul are folded; intermediate tensors must have no other reader and
must not be fetched or fed.
"""

from __future__ import annotations

import numpy as np

from engine.graph import Graph, Node, TensorRef
from engine.passes.rewrite import Consumers, const_node, constant_value, fresh_name, rebuild

__all__ = ["run"]

_PRODUCERS = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul"})
_ADDS = frozenset({"BiasAdd", "Add", "AddV2"})


def _out_channels(node: Node, weights: np.ndarray) -> int | None:
    if node.op == "Conv2D" and weights.ndim == 4:
        return weights.shape[3]
    if node.op == "DepthwiseConv2dNative" and weights.ndim == 4:
        return weights.shape[2] * weights.shape[3]
    if node.op == "MatMul" and weights.ndim == 2:
        return weights.shape[0] if node.attrs.get("transpose_b") else weights.shape[1]
    return None


def _per_channel(value: np.ndarray | None, channels: int, rank: int) -> np.ndarray | None:
    """`value` as a [channels] vector when it is a scalar or varies only along the last axis."""
    if value is None or value.dtype.kind != "f" or value.ndim > rank:
        return None
    if value.ndim and (any(d != 1 for d in value.shape[:-1]) or value.shape[-1] not in (1, channels)):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(value.dtype)


def _scaled_weights(node: Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
    if node.op == "DepthwiseConv2dNative":
        return weights * scale.reshape(weights.shape[2], weights.shape[3])
    if node.op == "MatMul" and node.attrs.get("transpose_b"):
        return weights * scale[:, None]
    return weights * scale  # HWIO and [K, N]: the output channel is the last axis


def _absorb(graph: Graph, step: Node, current: TensorRef, ctx, channels: int, rank: int):
    """(scale, shift) of one chain step `y = current * scale + shift`, or None if it is not affine."""
    if step.op in _ADDS | {"Sub", "Mul"} and len(step.inputs) == 2:
        if step.op == "BiasAdd" and step.attrs.get("data_format", "NHWC") != "NHWC":
            return None
        if step.inputs[0] == current:
            other = step.inputs[1]
        elif step.inputs[1] == current and step.op in {"Add", "AddV2", "Mul"}:
            other = step.inputs[0]
        else:
            return None
        value = _per_channel(constant_value(graph, other, ctx.fed), channels, rank)
        if value is None:
            return None
        if step.op == "Mul":
            return value, np.zeros_like(value)
        return np.ones_like(value), -value if step.op == "Sub" else value
    return None


def run(graph: Graph, ctx) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op not in _PRODUCERS or node.name in removed or ctx.is_pinned(node.name):
            continue
        if node.op != "MatMul" and node.attrs.get("data_format", "NHWC") != "NHWC":
            continue
        weights = constant_value(graph, node.inputs[1], ctx.fed)
        if weights is None or weights.dtype.kind != "f":
            continue
        channels = _out_channels(node, weights)
        if channels is None:
            continue
        rank = 2 if node.op == "MatMul" else 4

        chain: list[Node] = []
        scale = np.ones(channels, weights.dtype)
        shift = np.zeros(channels, weights.dtype)
        current, last = TensorRef(node.name, 0), node
        while not ctx.is_pinned(last.name):
            step = consumers.sole_consumer(graph, last)
            if step is None or step.name in removed:
                break
            affine = _absorb(graph, step, current, ctx, channels, rank)
            if affine is None:
                break
            scale, shift = scale * affine[0], shift * affine[0] + affine[1]
            chain.append(step)
            current, last = TensorRef(step.name, 0), step
        # A lone BiasAdd is left for the fusion pass; anything more is worth folding.
        if not chain or (len(chain) == 1 and chain[0].op == "BiasAdd"):
            continue

        controls = tuple(dict.fromkeys(c for n in [node, *chain] for c in n.control_inputs))
        filt = const_node(fresh_name(graph, taken, f"{node.name}/folded_weights"), _scaled_weights(node, weights, scale).astype(weights.dtype))
        folded = Node(fresh_name(graph, taken, f"{node.name}/folded"), node.op, (node.inputs[0], TensorRef(filt.name, 0)), (), node.device, node.attrs)
        bias = const_node(fresh_name(graph, taken, f"{last.name}/folded_bias"), shift.astype(weights.dtype))
        # The chain's last node keeps its name, so every reader and fetch of it still works.
        out = Node(last.name, "BiasAdd", (TensorRef(folded.name, 0), TensorRef(bias.name, 0)), controls, node.device,
                   {"T": weights.dtype, "data_format": "NHWC"})
        replaced[last.name] = out
        removed.update([node.name] + [n.name for n in chain[:-1]])
        added.extend([filt, folded, bias])
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)
