"""Swish (SiLU) and hard swish, the activations of EfficientNet and MobileNetV3: `_TensorgateSwish` and
`_TensorgateHardSwish`, the ops the optimizer (engine/passes/fuse_swish.py) writes in place of the chains
TensorFlow freezes them to.

    swish:       x * sigmoid(x)                  (tf.nn.silu, Keras' "swish"/"silu")
    hard swish:  x * (relu6(x + 3) * (1 / 6))    (Keras' "hard_swish"/"hard_silu", MobileNetV3)

Sigmoid is the Sigmoid kernel's formula (with e = exp(-|x|): 1 / (1 + e) for x >= 0, e / (1 + e) below),
so swish(x) is x times exactly what the unfused graph's Sigmoid gives. Keras 3 spells hard swish's 1/6 as
a division by 6, which rounds differently from the multiplication by at most an ulp of the result.

The `*_into` forms are the numpy twins of the compiled epilogues in kernels/nn/compiled_rows.py (and of
kernels/nn/depthwise.py's loop), which compute the same formulas in one pass, exp through their own
float32 polynomial (within float32 rounding of numpy's). The underscore marks ops of ours, not
TensorFlow's; graphs never contain them until the optimizer writes them.
"""

from __future__ import annotations

from typing import Any

from kernels.jit import use_compiled
from kernels.math.elementwise import sigmoid
from kernels.nn import compiled_rows
from kernels.registry import kernel

__all__ = ["hard_swish", "hard_swish_into", "sigmoid_into", "swish", "swish_into"]


def sigmoid_into(xp: Any, y: Any) -> None:
    """y <- sigmoid(y), in place, by the Sigmoid kernel's overflow-free formula."""
    y[...] = sigmoid(xp, y)[0]


def swish_into(xp: Any, y: Any) -> None:
    """y <- y * sigmoid(y), in place."""
    xp.multiply(y, sigmoid(xp, y)[0], out=y)


def hard_swish_into(xp: Any, y: Any) -> None:
    """y <- y * (relu6(y + 3) * (1 / 6)), in place (NaN stays NaN)."""
    f = y.dtype.type
    t = y + f(3)
    xp.clip(t, f(0), f(6), out=t)
    xp.multiply(t, f(1 / 6), out=t)
    xp.multiply(y, t, out=y)


def _activation(xp: Any, features: Any, name: str, into: Any, compiled: bool) -> tuple[Any]:
    if use_compiled(xp, compiled, features.dtype) and features.size:
        return (compiled_rows.activation(features, name),)
    y = features.astype(features.dtype, copy=True)
    # On a 1-D view: arithmetic on a 0-d array gives scalars, which the in-place steps cannot write to.
    into(xp, y.reshape(-1))
    return (y,)


@kernel("_TensorgateSwish")
def swish(xp, features, *, compiled: bool = False):
    """x * sigmoid(x), elementwise."""
    return _activation(xp, features, "Swish", swish_into, compiled)


@kernel("_TensorgateHardSwish")
def hard_swish(xp, features, *, compiled: bool = False):
    """x * (relu6(x + 3) * (1 / 6)), elementwise."""
    return _activation(xp, features, "HardSwish", hard_swish_into, compiled)
