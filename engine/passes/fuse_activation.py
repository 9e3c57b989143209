"""Fusing a convolution or matmul with the BiasAdd and activation after it into one kernel.

    Relu(BiasAdd(Conv2D(x, W), b))  ->  _FusedConv2D(x, W, b, fused_ops=["BiasAdd", "Relu"])

A MatMul's activation may also be the `_TensorgateGelu` fuse_gelu wrote (fused as GeluExact or
GeluApproximate, TensorFlow's names). On CPU, any of the three also takes Sigmoid and the
`_TensorgateSwish`/`_TensorgateHardSwish` fuse_swish wrote (fused as Swish and HardSwish, our names: the
GPU's fused kernels do not have them).
The fused kernels (TensorFlow's own op names: _FusedConv2D, _FusedDepthwiseConv2dNative,
_FusedMatMul) apply the bias and activation to each block of the output while it is still in cache,
instead of two more passes over the whole tensor. The fused node takes the chain's last name and
the control inputs of every node it replaces; a node with a control consumer, another reader, or a
fetch or feed on its output ends the chain. Identity nodes between the bias and a residual add (Keras 2's
inference-time Dropout) join the chain.
"""

from __future__ import annotations

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.fuse_gelu import FUSED_OP as GELU
from engine.passes.fuse_swish import HARD_SWISH, SWISH
from engine.passes.rewrite import Consumers, merged_controls, rebuild

__all__ = ["run"]

_FUSED = {"Conv2D": "_FusedConv2D", "DepthwiseConv2dNative": "_FusedDepthwiseConv2dNative", "MatMul": "_FusedMatMul"}
_ACTIVATIONS = {
    "_FusedConv2D": {"Relu", "Relu6", "Elu", "LeakyRelu"},
    "_FusedDepthwiseConv2dNative": {"Relu", "Relu6", "Elu", "LeakyRelu"},
    "_FusedMatMul": {"Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid", GELU},
}
# Activations only the CPU kernels (kernels/nn/fused.py) fuse.
_CPU_ACTIVATIONS = {"Sigmoid", SWISH, HARD_SWISH}
_STEPS = {SWISH: "Swish", HARD_SWISH: "HardSwish"}


def _step(node: Node) -> str:
    """The fused_ops entry for an activation node (fuse_gelu's op is GeluExact or GeluApproximate there,
    fuse_swish's Swish or HardSwish)."""
    if node.op == GELU:
        return "GeluApproximate" if node.attrs.get("approximate") else "GeluExact"
    return _STEPS.get(node.op, node.op)


def _activations(fused_op: str, device: str) -> set[str]:
    return _ACTIVATIONS[fused_op] | (_CPU_ACTIVATIONS if device == "cpu" else set())


def run(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    # Nodes already folded into a fused node: ResNet's two branches meet at one residual add, which
    # only one of them may absorb.
    claimed: set[str] = set()
    for node in graph.nodes:
        fused_op = _FUSED.get(node.op)
        if fused_op is None or not kernels.has_op(fused_op, ctx.device) or ctx.is_pinned(node.name) or node.name in removed:
            continue
        bias_add = consumers.sole_consumer(graph, node)
        if bias_add is None or bias_add.op != "BiasAdd" or bias_add.inputs[0] != TensorRef(node.name, 0) or bias_add.name in claimed:
            continue
        if bias_add.attrs.get("data_format", "NHWC") != node.attrs.get("data_format", "NHWC"):
            continue
        chain = [bias_add]
        fused_ops = ["BiasAdd"]
        args = [bias_add.inputs[1]]
        nxt = None if ctx.is_pinned(bias_add.name) else consumers.sole_consumer(graph, bias_add)
        # A residual add (ResNet's shortcut) joins a Conv2D's epilogue: conv + bias + other, then activation.
        if nxt is not None and nxt.name in claimed:
            nxt = None
        # Keras 2 freezes an inference-time Dropout before the residual add as an Identity: it joins too.
        passed = []
        while nxt is not None and nxt.op == "Identity" and nxt.name not in claimed and not ctx.is_pinned(nxt.name):
            passed.append(nxt)
            nxt = consumers.sole_consumer(graph, nxt)
        if passed and (nxt is None or nxt.op not in ("Add", "AddV2") or fused_op != "_FusedConv2D" or nxt.name in claimed):
            nxt = passed[0]  # no residual add after them: the chain ends at the bias
            passed = []
        if fused_op == "_FusedConv2D" and nxt is not None and nxt.op in ("Add", "AddV2") and len(nxt.inputs) == 2:
            other = [ref for ref in nxt.inputs if ref != TensorRef((passed or chain)[-1].name, 0)]
            if len(other) == 1:
                chain.extend(passed)
                chain.append(nxt)
                fused_ops.append("Add")
                args.append(other[0])
                nxt = None if ctx.is_pinned(nxt.name) else consumers.sole_consumer(graph, nxt)
        if nxt is not None and nxt.name not in claimed and nxt.op in _activations(fused_op, ctx.device) and nxt.inputs[0] == TensorRef(chain[-1].name, 0):
            chain.append(nxt)
            fused_ops.append(_step(nxt))
        last = chain[-1]
        attrs = dict(node.attrs)
        attrs.update(fused_ops=tuple(fused_ops), num_args=len(args), epsilon=0.0001)
        if last.op == "LeakyRelu":
            attrs["leakyrelu_alpha"] = last.attrs.get("alpha", 0.2)
        replaced[last.name] = Node(last.name, fused_op, (*node.inputs, *args), merged_controls([node, *chain]), node.device, attrs)
        removed.update([node.name] + [n.name for n in chain[:-1]])
        claimed.update([node.name] + [n.name for n in chain])
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed)
