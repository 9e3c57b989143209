"""Kernels of the neural-network activation ops: the ReLU family, soft curves and softmax.

Each follows TensorFlow's own formula, including where that formula is not the most accurate one
(Elu and Selu use exp(x) - 1, not expm1; Softplus switches to x and to exp(x) at log(eps) + 2), so
results match TensorFlow's to the last bits wherever the underlying exp/log do.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from kernels.jit import use_compiled
from kernels.nn import compiled_rows
from kernels.registry import kernel

__all__ = [
    "relu_into",
    "relu6_into",
    "elu_into",
    "leaky_relu_into",
    "relu",
    "relu6",
    "elu",
    "selu",
    "leaky_relu",
    "softplus",
    "softsign",
    "softmax",
    "log_softmax",
]

# The SELU constants (Klambauer et al. 2017), with TensorFlow's product for the negative side.
_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_SCALE_ALPHA = 1.7580993408473768599402175208123


def _const(x: Any, value: float) -> Any:
    """`value` as a scalar of x's dtype: a bare Python float would widen bfloat16 arrays to float32."""
    return x.dtype.type(value)


# The *_into forms write their result into `out` (which may be x itself, for an in-place epilogue on a
# fused kernel's output block); the kernels below call them on a fresh buffer. One formula, two uses.


def relu_into(xp: Any, x: Any, out: Any) -> Any:
    """out = max(x, 0)."""
    return xp.maximum(x, _const(x, 0), out=out)


def relu6_into(xp: Any, x: Any, out: Any) -> Any:
    """out = min(max(x, 0), 6), as one clip: about 3x faster than maximum then minimum on big tensors."""
    return xp.clip(x, _const(x, 0), _const(x, 6), out=out)


def elu_into(xp: Any, x: Any, out: Any) -> Any:
    """out = x for x >= 0, exp(x) - 1 below."""
    # exp of min(x, 0): the branch that is thrown away cannot overflow.
    negative_side = xp.minimum(x, _const(x, 0))
    xp.exp(negative_side, out=negative_side)
    xp.subtract(negative_side, _const(x, 1), out=negative_side)
    negative = x < 0
    if out is not x:
        xp.copyto(out, x)
    xp.copyto(out, negative_side, where=negative)
    return out


def leaky_relu_into(xp: Any, x: Any, out: Any, alpha: float) -> Any:
    """out = x for x > 0, alpha * x otherwise (alpha rounded to x's dtype first, as TensorFlow does)."""
    # alpha is a float attr: TensorFlow holds it as float32 and casts that to the features' dtype.
    scaled = x * _const(x, np.float32(alpha))
    # For 0 < alpha <= 1 the answer is max(x, alpha*x), one pass cheaper than a select (and alike
    # on NaN and -0.0); alpha > 1 flips it to a min. alpha <= 0 needs the select (inf * 0 is NaN).
    if 0 < alpha <= 1:
        return xp.maximum(x, scaled, out=out)
    if alpha > 1:
        return xp.minimum(x, scaled, out=out)
    positive = x > 0
    if out is not x:
        xp.copyto(out, scaled)
        xp.copyto(out, x, where=positive)
        return out
    xp.copyto(out, scaled, where=~positive)
    return out


@kernel("Relu")
def relu(xp: Any, features: Any) -> tuple[Any]:
    """max(x, 0); NaN stays NaN and -0.0 stays -0.0, as in TensorFlow."""
    return (relu_into(xp, features, xp.empty_like(features)),)


@kernel("Relu6")
def relu6(xp: Any, features: Any) -> tuple[Any]:
    """min(max(x, 0), 6)."""
    return (relu6_into(xp, features, xp.empty_like(features)),)


@kernel("Elu")
def elu(xp: Any, features: Any) -> tuple[Any]:
    """x for x >= 0, exp(x) - 1 below."""
    return (elu_into(xp, features, xp.empty_like(features)),)


@kernel("Selu")
def selu(xp: Any, features: Any) -> tuple[Any]:
    """scale * x for x >= 0, scale * alpha * (exp(x) - 1) below."""
    one = _const(features, 1)
    negative_side = (xp.exp(xp.minimum(features, _const(features, 0))) - one) * _const(features, _SELU_SCALE_ALPHA)
    return (xp.asarray(xp.where(features < 0, negative_side, features * _const(features, _SELU_SCALE))),)


@kernel("LeakyRelu")
def leaky_relu(xp: Any, features: Any, *, alpha: float = 0.2) -> tuple[Any]:
    """x for x > 0, alpha * x otherwise (alpha rounded to x's dtype first, as TensorFlow does)."""
    return (leaky_relu_into(xp, features, xp.empty_like(features), alpha),)


def _softplus_threshold(dtype: np.dtype) -> float:
    """log(eps) + 2 for the dtype: below it softplus(x) == exp(x), above its negative softplus(x) == x."""
    return math.log(float(ml_dtypes.finfo(dtype).eps)) + 2


@kernel("Softplus")
def softplus(xp: Any, features: Any) -> tuple[Any]:
    """log(1 + exp(x)), computed as TensorFlow does: x for large x, exp(x) for very negative x,
    log1p(exp(x)) between; no step overflows."""
    threshold = _const(features, _softplus_threshold(features.dtype))
    e = xp.exp(xp.minimum(features, -threshold))
    between = xp.where(features < threshold, e, xp.log1p(e))
    return (xp.asarray(xp.where(features > -threshold, features, between)),)


@kernel("Softsign")
def softsign(xp: Any, features: Any) -> tuple[Any]:
    """x / (1 + |x|)."""
    return (xp.asarray(features / (xp.abs(features) + _const(features, 1))),)


@kernel("Softmax")
def softmax(xp: Any, logits: Any, *, compiled: bool = False) -> tuple[Any]:
    """exp(x) / sum(exp(x)) over the last axis, shifted by the row maximum so exp cannot overflow.
    The numpy code is the twin of kernels/nn/compiled_rows.py's one pass per row."""
    if use_compiled(xp, compiled, logits.dtype) and logits.ndim and logits.size:
        return (compiled_rows.softmax(logits),)
    e = xp.exp(logits - logits.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return (xp.asarray(e),)


@kernel("LogSoftmax")
def log_softmax(xp: Any, logits: Any) -> tuple[Any]:
    """x - log(sum(exp(x))) over the last axis, shifted by the row maximum."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    shifted -= xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
    return (xp.asarray(shifted),)
