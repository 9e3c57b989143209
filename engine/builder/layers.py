"""Layers: the few-op patterns a frozen model is made of, with their weights given as arrays.

A layer opens a name scope (`dense`, `dense_1`, ...) and writes its weights as Const nodes inside it
(`dense/kernel`, `dense/bias`), so a model reads like a frozen Keras graph:

    h = layers.dense(x, w1, b1, activation="relu", name="hidden")  # hidden/MatMul, hidden/BiasAdd, hidden/Relu

Weights are added to the graph's `WEIGHTS` and `BIASES` collections.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.builder.errors import BuildError
from engine.builder.ops import array_ops, math_ops, nn_ops
from engine.builder.ops.constants import convert_to_tensor
from engine.builder.ops.scope import graph_of
from engine.builder.tensor import Tensor

__all__ = ["WEIGHTS", "BIASES", "ACTIVATIONS", "dense", "conv2d", "flatten"]

# Collection names (TensorFlow's GraphKeys.WEIGHTS and BIASES).
WEIGHTS = "weights"
BIASES = "biases"

ACTIVATIONS: dict[str, Callable[..., Tensor]] = {
    "relu": nn_ops.relu,
    "relu6": nn_ops.relu6,
    "elu": nn_ops.elu,
    "leaky_relu": nn_ops.leaky_relu,
    "sigmoid": math_ops.sigmoid,
    "tanh": math_ops.tanh,
    "softmax": nn_ops.softmax,
}


def _activation(activation: str | Callable[..., Tensor] | None) -> Callable[..., Tensor] | None:
    if activation is None or callable(activation):
        return activation
    try:
        return ACTIVATIONS[activation]
    except KeyError:
        raise ValueError(f"unknown activation {activation!r}; expected one of {sorted(ACTIVATIONS)} or a function") from None


def _weights(value: Any, name: str, like: Tensor, collection: str) -> Tensor:
    tensor = convert_to_tensor(value, name=name, dtype_hint=like.dtype)
    tensor.graph.add_to_collection(collection, tensor)
    return tensor


def dense(inputs: Any, kernel: Any, bias: Any = None, *, activation: str | Callable[..., Tensor] | None = None,
          name: str | None = None) -> Tensor:
    """activation(inputs @ kernel + bias): `kernel` is [in, units], `bias` [units] (or None).

    Ops: `<name>/kernel`, `<name>/MatMul`, `<name>/bias`, `<name>/BiasAdd`, then the activation
    (`<name>/Relu`). Inputs of rank > 2 are multiplied along their last dimension.
    """
    act = _activation(activation)
    graph = graph_of([inputs, kernel, bias])
    with graph.as_default(), graph.name_scope(name or "dense"):
        x = convert_to_tensor(inputs, name="inputs")
        w = _weights(kernel, "kernel", x, WEIGHTS)
        if w.ndim not in (None, 2):
            raise BuildError("MatMul", graph.get_name_scope() + "/MatMul", f"a dense kernel is [in, units], got shape {w.shape}")
        y = math_ops.matmul(x, w, name="MatMul")
        if bias is not None:
            y = nn_ops.bias_add(y, _weights(bias, "bias", x, BIASES), name="BiasAdd")
        return act(y) if act is not None else y


def conv2d(inputs: Any, filters: Any, bias: Any = None, *, strides: int | Sequence[int] = 1, padding: Any = "VALID",
           dilations: int | Sequence[int] = 1, activation: str | Callable[..., Tensor] | None = None,
           name: str | None = None) -> Tensor:
    """activation(conv2d(inputs, filters) + bias) on NHWC images: `filters` is HWIO, `bias` [out].

    Ops: `<name>/kernel`, `<name>/Conv2D`, `<name>/bias`, `<name>/BiasAdd`, then the activation.
    """
    act = _activation(activation)
    graph = graph_of([inputs, filters, bias])
    with graph.as_default(), graph.name_scope(name or "conv2d"):
        x = convert_to_tensor(inputs, name="inputs")
        w = _weights(filters, "kernel", x, WEIGHTS)
        y = nn_ops.conv2d(x, w, strides=strides, padding=padding, dilations=dilations, name="Conv2D")
        if bias is not None:
            y = nn_ops.bias_add(y, _weights(bias, "bias", x, BIASES), name="BiasAdd")
        return act(y) if act is not None else y


def flatten(inputs: Any, name: str | None = None) -> Tensor:
    """[batch, d1, d2, ...] -> [batch, d1 * d2 * ...]; every dimension but the batch must be known."""
    graph = graph_of([inputs])
    with graph.as_default(), graph.name_scope(name or "flatten"):
        x = convert_to_tensor(inputs, name="inputs")
        if x.shape is None or None in x.shape[1:]:
            raise BuildError("Reshape", graph.get_name_scope() + "/Reshape",
                             f"flatten needs every dimension but the first known, got {x.shape}")
        size = 1
        for d in x.shape[1:]:
            size *= d
        return array_ops.reshape(x, [-1, size], name="Reshape")
