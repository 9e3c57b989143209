"""Host values: small shape-like input tensors (axes, sizes, begin/end, paddings) read as Python ints,
and shapes written the way TensorFlow's messages write them. `tolist` works for numpy and cupy alike,
so kernels that need such values stay one body for both backends.
"""

from __future__ import annotations

from typing import Any

__all__ = ["host", "host_vector", "host_scalar", "format_dims"]


def host(a: Any) -> Any:
    """A small array as Python values: a list, or a plain number for a scalar."""
    return a.tolist()


def host_vector(a: Any) -> list[int]:
    """A shape-like input as a list of Python ints; a scalar counts as a one-element vector."""
    value = host(a)
    return value if isinstance(value, list) else [value]


def host_scalar(a: Any, requirement: str) -> int:
    """A scalar (or one-element) input as a Python int; otherwise ValueError "<requirement>, got shape [..]"."""
    value = host(a)
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"{requirement}, got shape {format_dims(a.shape)}")
        value = value[0]
    return value


def format_dims(dims: Any) -> str:
    """A shape as TensorFlow's messages write it: [2,3], with ? for an unknown dim."""
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"
