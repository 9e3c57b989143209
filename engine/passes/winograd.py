"""Winograd convolutions: a Conv2D or _FusedConv2D with a constant 3x3 float32 filter, stride 1 and
dilation 1 becomes `_TensorgateWinogradConv2D`, which also takes the filter's Winograd transform U as a
constant, computed here once per plan instead of on every call.

    _FusedConv2D(x, W, b, fused_ops=[...])  ->  _TensorgateWinogradConv2D(x, W, U, b, fused_ops=[...])
    Conv2D(x, W)                            ->  _TensorgateWinogradConv2D(x, W, U, fused_ops=[])

The node keeps its name, inputs and attrs (so a fetched convolution may be rewritten too). Filters with
too few channels for Winograd ever to pay (kernels.nn.winograd.enough_channels) are left alone; otherwise
the kernel (kernels/nn/winograd.py) still runs the direct convolution with W where its measured rule says
Winograd is slower (few tiles: the data's shape is only known per call), so W stays an input. It runs
after fuse_activation, whose fused nodes it rewrites, and only for the CPU: GPUs have their own Conv2D
kernels.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import const_controls, const_node, constant_value, fresh_name, rebuild
from kernels.nn.winograd import FUSED_OPS, enough_channels, qualifies, winograd_filter

__all__ = ["OP", "run"]

OP = "_TensorgateWinogradConv2D"
_CONVOLUTIONS = ("Conv2D", "_FusedConv2D")


def _rewritable(graph: Graph, node: Node, ctx: PassContext) -> np.ndarray | None:
    """The node's constant filter when the node is a convolution Winograd can compute, else None."""
    if node.op not in _CONVOLUTIONS or ctx.is_fed(node.name) or len(node.inputs) < 2:
        return None
    filt = constant_value(graph, node.inputs[1], ctx.fed)
    if filt is None or filt.dtype != np.float32:
        return None
    fused_ops = tuple(node.attrs.get("fused_ops", ()))
    if node.op == "_FusedConv2D" and (not fused_ops or fused_ops not in FUSED_OPS):
        return None
    data_format = node.attrs.get("data_format", "NHWC")
    strides, dilations = node.attrs.get("strides", ()), node.attrs.get("dilations", (1, 1, 1, 1))
    if len(strides) != 4 or len(dilations) != 4 or data_format not in ("NHWC", "NCHW"):
        return None
    if not qualifies(tuple(filt.shape), strides, dilations, data_format):
        return None
    return filt if enough_channels(filt.shape[2], filt.shape[3]) else None


def run(graph: Graph, ctx: PassContext) -> Graph:
    if ctx.device != "cpu" or not kernels.has_op(OP, ctx.device):
        return graph
    replaced: dict[str, Node] = {}
    added: list[Node] = []
    taken: set[str] = set()
    # One transform per filter, however many convolutions share it.
    transforms: dict[TensorRef, TensorRef] = {}
    for node in graph.nodes:
        filt = _rewritable(graph, node, ctx)
        if filt is None:
            continue
        filter_ref = node.inputs[1]
        if filter_ref not in transforms:
            u = const_node(fresh_name(graph, taken, f"{node.name}/winograd_filter"), winograd_filter(np, filt),
                           const_controls(graph, [filter_ref]))
            added.append(u)
            transforms[filter_ref] = TensorRef(u.name, 0)
        attrs = dict(node.attrs)
        attrs["fused_ops"] = tuple(attrs.get("fused_ops", ()))
        attrs["num_args"] = len(node.inputs) - 2
        inputs = (node.inputs[0], filter_ref, transforms[filter_ref], *node.inputs[2:])
        replaced[node.name] = Node(node.name, OP, inputs, node.control_inputs, node.device, attrs)
    if not replaced:
        return graph
    return rebuild(graph, replaced, (), added)
