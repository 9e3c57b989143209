"""Memory limits of kernels: a kernel whose output size depends on the values (or shapes) a request
sent checks that size against its plan's budget before it allocates anything.

The budget is the kernel context parameter `memory_limit` (kernels.registry; PlanOptions.
max_request_memory_bytes; None means unlimited). Sizes are computed with Python ints, so an absurd
shape such as [2**62, 2**62] is refused rather than wrapping around to something small.

    @kernel("Fill")
    def fill(xp, dims, value, *, memory_limit):
        shape = check_shape(dims, value.dtype, memory_limit, "Fill output")
        return (xp.full(shape, value),)

The executor turns AllocationTooLarge into engine.errors.ResourceLimitError naming the node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "AllocationTooLarge",
    "check_bytes",
    "check_elements",
    "check_shape",
    "check_broadcast",
    "STRING_ELEMENT_BYTES",
]

# What one element of a string (object) tensor costs at least: a pointer in the array and a small
# bytes object (CPython's empty bytes is 33 bytes).
STRING_ELEMENT_BYTES = 8 + 33


class AllocationTooLarge(ValueError):
    """A kernel would allocate more than its memory limit; raised before allocating.

    `requested` and `limit` are bytes; `what` says what would have been allocated ("Fill output of
    shape [30000,30000]")."""

    def __init__(self, requested: int, limit: int, what: str, shape: Iterable[int] | None = None):
        if shape is not None:
            what = f"{what} of shape [{','.join(str(d) for d in shape)}]"
        self.requested, self.limit, self.what = int(requested), int(limit), what
        super().__init__(f"{what} would take {self.requested} bytes, more than the limit of {self.limit} bytes "
                         "per request")


def check_bytes(nbytes: int, limit: int | None, what: str, shape: Iterable[int] | None = None) -> None:
    """AllocationTooLarge when `nbytes` exceeds `limit` (None: no limit). `what` is a fixed string
    ("Fill output") and `shape` is only formatted into the message on failure: the check costs a
    comparison on the normal path."""
    if limit is not None and nbytes > limit:
        raise AllocationTooLarge(nbytes, limit, what, shape)


def _itemsize(dtype: Any) -> int:
    dtype = np.dtype(dtype)
    return STRING_ELEMENT_BYTES if dtype == np.dtype(object) else max(dtype.itemsize, 1)


def check_elements(count: int, dtype: Any, limit: int | None, what: str, shape: Iterable[int] | None = None) -> None:
    """AllocationTooLarge when `count` elements of `dtype` exceed `limit`."""
    if limit is not None:
        check_bytes(int(count) * _itemsize(dtype), limit, what, shape)


def check_shape(dims: Iterable[Any], dtype: Any, limit: int | None, what: str) -> tuple[int, ...]:
    """`dims` (a shape tensor or sequence) as a tuple of Python ints, after checking that an array of
    that shape and `dtype` fits in `limit`. Negative dims are left for the kernel to refuse."""
    shape = tuple(int(d) for d in np.asarray(dims).reshape(-1).tolist())
    if limit is not None and all(d >= 0 for d in shape):
        check_bytes(math.prod(shape) * _itemsize(dtype), limit, what, shape)
    return shape


def check_broadcast(arrays: Sequence[Any], limit: int | None, what: str) -> None:
    """AllocationTooLarge when broadcasting `arrays` together gives a result over `limit`.

    Cheap on ordinary sizes: the broadcast shape is only worked out when the product of their sizes
    (what an outer product could reach) times the largest itemsize would exceed the limit."""
    if limit is None:
        return
    itemsize = max(getattr(getattr(a, "dtype", None), "itemsize", 8) for a in arrays)
    if math.prod(getattr(a, "size", 1) for a in arrays) * itemsize <= limit:
        return
    shapes = [tuple(getattr(a, "shape", ())) for a in arrays]
    ndim = max(len(shape) for shape in shapes)
    padded = [(1,) * (ndim - len(shape)) + shape for shape in shapes]
    # Each dim is the one that is not 1; incompatible shapes are left for numpy to refuse with its message.
    out = [next((d for d in dims if d != 1), 1) for dims in zip(*padded)]
    check_bytes(math.prod(out) * itemsize, limit, what, out)
