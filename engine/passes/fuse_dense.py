"""Fusing dense layers over the last axis, with their bias and activation, into one fused matmul.

Keras freezes a Dense layer on 3-D data as Tensordot (Reshape to 2-D, MatMul, Reshape back, BiasAdd),
and the query/key/value projections of MultiHeadAttention as BatchMatMulV2 (or Einsum `abc,cde->abde`)
against a weight matrix, a Reshape into heads and an AddV2 of a [heads, size] bias:

    BiasAdd(Reshape(MatMul(x2d, W), s), b)         ->  Reshape(_FusedMatMul(x2d, W, b), s)
    AddV2(Reshape(BatchMatMulV2(x, W), s), b)      ->  Reshape(_TensorgateDense(x, W, b'), s)
    BiasAdd(Einsum("abc,cd->abd", x, W), b)        ->  _TensorgateDense(x, W, b)

and an activation after the bias (Relu, Relu6, Elu, LeakyRelu, Tanh, Sigmoid, or the `_TensorgateGelu`
fuse_gelu wrote) joins as the fused op's last step. The bias is added, and the activation applied, to
each row of the matmul while it is in cache; `_TensorgateDense` (kernels/nn/fused.py) runs all rows as one
2-D matmul, about twice as fast as a batched matmul or Einsum of the same shapes.

Moving the bias before a Reshape is exact when the reshape keeps each row of the product together:
the bias (constant, float) then spans the trailing dims of the Reshape's constant shape whose product
is the row length. With a computed shape (Tensordot's) only a BiasAdd of a full-row bias qualifies,
since BiasAdd itself requires the last dim to be the bias length. The weights must be a constant (its
shape fixes the row length); Einsum must contract the last label of x with the first of W and keep
every other label in order (`P c, c Q -> P Q`). Intermediates must have no other reader, no control
consumer, and be neither fetched nor fed; the chain's last node keeps its name.
"""

from __future__ import annotations

import math

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.fuse_gelu import FUSED_OP as GELU
from engine.passes.rewrite import (
    Consumers,
    const_controls,
    const_node,
    constant_value,
    fresh_name,
    merged_controls,
    rebuild,
)

__all__ = ["ACTIVATIONS", "activation_step", "run"]

_BATCH_MATMULS = ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_BIAS_OPS = ("BiasAdd", "Add", "AddV2")
# Activation ops a fused matmul can apply, by the fused_ops name it takes.
ACTIVATIONS = {"Relu": "Relu", "Relu6": "Relu6", "Elu": "Elu", "LeakyRelu": "LeakyRelu", "Tanh": "Tanh", "Sigmoid": "Sigmoid"}


def activation_step(node: Node) -> str | None:
    """The fused_ops entry that applies `node`'s activation, or None when a fused matmul cannot."""
    if node.op == GELU:
        return "GeluApproximate" if node.attrs.get("approximate") else "GeluExact"
    return ACTIVATIONS.get(node.op)


def _weights(graph: Graph, node: Node, ctx: PassContext) -> tuple[np.ndarray, bool] | None:
    """(weights as [K, *units], whether they differ from the node's constant), or None when `node` is
    not a dense layer over the last axis of its first input."""
    w = constant_value(graph, node.inputs[1], ctx.fed) if len(node.inputs) == 2 else None
    if w is None or w.dtype.kind != "f":
        return None
    if node.op == "MatMul":
        ok = w.ndim == 2 and not node.attrs.get("transpose_a")
        return (w, False) if ok else None
    if node.op in _BATCH_MATMULS:
        if w.ndim != 2 or node.attrs.get("adj_x"):
            return None
        return (np.ascontiguousarray(w.T), True) if node.attrs.get("adj_y") else (w, False)
    if node.op == "Einsum":
        equation = str(node.attrs.get("equation", "")).replace(" ", "")
        lhs, _, out = equation.partition("->")
        terms = lhs.split(",")
        if "." in equation or len(terms) != 2 or not terms[0] or len(terms[1]) != w.ndim or w.ndim < 2:
            return None
        x_labels, w_labels = terms
        prefix, contracted = x_labels[:-1], x_labels[-1]
        units = w_labels[1:]
        labels = prefix + contracted + units
        if w_labels[0] != contracted or out != prefix + units or len(set(labels)) != len(labels):
            return None
        return w, False
    return None


def _trailing_block(shape: np.ndarray, row: int) -> tuple[int, ...] | None:
    """The trailing dims of a Reshape's constant `shape` whose product is `row`, all known, or None."""
    block: list[int] = []
    for d in reversed([int(v) for v in shape.reshape(-1)]):
        if d <= 0:
            return None
        block.insert(0, d)
        size = math.prod(block)
        if size == row:
            return tuple(block)
        if size > row:
            return None
    return None


def _bias(graph: Graph, step: Node, current: TensorRef, reshape: Node | None, units: tuple[int, ...], ctx: PassContext):
    """(bias as [*units], constant ref) for the bias step after the product, or None."""
    if step.op not in _BIAS_OPS or len(step.inputs) != 2:
        return None
    if step.op == "BiasAdd" and step.attrs.get("data_format", "NHWC") != "NHWC":
        return None
    if step.inputs[0] == current:
        ref = step.inputs[1]
    elif step.inputs[1] == current and step.op != "BiasAdd":
        ref = step.inputs[0]
    else:
        return None
    bias = constant_value(graph, ref, ctx.fed)
    row = math.prod(units)
    if bias is None or bias.dtype.kind != "f" or (step.op == "BiasAdd" and bias.ndim != 1):
        return None
    if reshape is None:
        target = units
    else:
        shape = constant_value(graph, reshape.inputs[1], ctx.fed)
        if shape is None:
            # A computed shape: BiasAdd guarantees the last dim is the bias length, so a full row.
            ok = step.op == "BiasAdd" and bias.shape == (row,)
            return (bias.reshape(units), ref) if ok else None
        target = _trailing_block(shape, row)
        if target is None:
            return None
    if bias.ndim > len(target) or np.broadcast_shapes(bias.shape, target) != target:
        return None
    if step.op == "BiasAdd" and bias.shape[0] != target[-1]:
        return None
    return np.broadcast_to(bias, target).reshape(units), ref


def run(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.name in removed or ctx.is_pinned(node.name):
            continue
        found = _weights(graph, node, ctx)
        fused_op = "_FusedMatMul" if node.op == "MatMul" else "_TensorgateDense"
        if found is None or not kernels.has_op(fused_op, ctx.device):
            continue
        weights, new_weights = found
        if node.op == "MatMul":
            units = (weights.shape[0] if node.attrs.get("transpose_b") else weights.shape[1],)
        else:
            units = tuple(weights.shape[1:])
        step = consumers.sole_consumer(graph, node)
        reshape = None
        if step is not None and step.op == "Reshape" and step.inputs[0] == TensorRef(node.name, 0) and not ctx.is_pinned(step.name):
            reshape, step = step, consumers.sole_consumer(graph, step)
        current = TensorRef((reshape or node).name, 0)
        if step is None or step.name in removed or step.name in replaced:
            continue
        bias = _bias(graph, step, current, reshape, units, ctx)
        if bias is None or bias[0].dtype != weights.dtype:
            continue
        chain = [step]
        fused_ops = ["BiasAdd"]
        nxt = None if ctx.is_pinned(step.name) else consumers.sole_consumer(graph, step)
        if nxt is not None and nxt.name not in replaced and nxt.inputs[:1] == (TensorRef(step.name, 0),) and activation_step(nxt):
            chain.append(nxt)
            fused_ops.append(activation_step(nxt))
        last = chain[-1]
        # Constants the fused node reads: the original ones where the rewrite leaves them as they are.
        bias_value, bias_ref = bias
        if fused_op == "_FusedMatMul":
            bias_value = bias_value.reshape(-1)
        if constant_value(graph, bias_ref, ctx.fed).shape != bias_value.shape:
            const = const_node(fresh_name(graph, taken, f"{last.name}/fused_bias"), np.ascontiguousarray(bias_value),
                               const_controls(graph, [bias_ref]))
            added.append(const)
            bias_ref = TensorRef(const.name, 0)
        weights_ref = node.inputs[1]
        if new_weights:
            const = const_node(fresh_name(graph, taken, f"{node.name}/fused_weights"), weights, const_controls(graph, [weights_ref]))
            added.append(const)
            weights_ref = TensorRef(const.name, 0)
        attrs = {"T": weights.dtype, "fused_ops": tuple(fused_ops), "num_args": 1, "epsilon": 0.0001}
        if fused_op == "_FusedMatMul":
            attrs.update(transpose_a=False, transpose_b=bool(node.attrs.get("transpose_b", False)))
        if last.op == "LeakyRelu":
            attrs["leakyrelu_alpha"] = last.attrs.get("alpha", 0.2)
        controls = merged_controls([node, *([reshape] if reshape else []), *chain])
        fused_name = fresh_name(graph, taken, f"{last.name}/fused") if reshape else last.name
        fused = Node(fused_name, fused_op, (node.inputs[0], weights_ref, bias_ref), controls, node.device, attrs)
        if reshape is None:
            replaced[last.name] = fused
        else:
            added.append(fused)
            replaced[last.name] = Node(last.name, "Reshape", (TensorRef(fused_name, 0), reshape.inputs[1]), (), node.device, dict(reshape.attrs))
            removed.add(reshape.name)
        removed.update([node.name] + [n.name for n in chain[:-1]])
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)
