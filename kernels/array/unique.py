"""Kernels of UniqueV2 and UniqueWithCountsV2: the distinct slices of a tensor along one axis, in order of
first appearance, with each slice's position among them (and how often each occurs).

`axis` is a vector of at most one element: empty means "the input is a vector" (as Unique, whose kernel is
in kernels.array.indexing), `[a]` compares the slices x[..., i, ...] along axis a (negative counts from the end).
Slices compare element by element, as TensorFlow's do: NaN differs from everything, so a slice holding a
NaN is distinct from every other, and -0.0 equals 0.0 (the first one seen is kept).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.array.indexing_compiled import unique_integers
from kernels.jit import use_compiled
from kernels.registry import kernel
from kernels.sparse.tensor import to_numpy

__all__ = ["unique_v2", "unique_with_counts_v2"]

_INT32 = np.dtype(np.int32)


def _axis(x: Any, axis: Any) -> int | None:
    """The axis to compare slices along, or None for a vector input; TensorFlow's checks and words."""
    if axis.ndim != 1:
        raise ValueError("axis expects a 1D vector.")
    if axis.size > 1:
        raise ValueError("axis does not support input tensors larger than 1 elements")
    if axis.size == 0:
        if x.ndim != 1:
            raise ValueError("unique expects a 1D vector.")
        return 0
    a = int(to_numpy(axis)[0])
    a = a + x.ndim if a < 0 else a
    if not 0 <= a < x.ndim:
        raise ValueError(f"axis has to be between [0, {x.ndim})")
    return a


def _element_codes(flat: np.ndarray) -> np.ndarray:
    """An integer per element such that equal elements (== in C++) share one: NaNs each get their own."""
    if flat.dtype.kind in "fc":
        flat = flat + flat.dtype.type(0)  # -0.0 + 0.0 is 0.0: the two zeros become one
        _, codes = np.unique(flat, return_inverse=True, equal_nan=False)
        return codes.reshape(-1)
    _, codes = np.unique(flat, return_inverse=True)
    return codes.reshape(-1)


def _unique_slices(xp: Any, x: Any, axis: Any, out_idx: Any, counts: bool, compiled: bool) -> tuple:
    a = _axis(x, axis)
    if x.ndim == 1 and x.dtype.kind in "iu" and use_compiled(xp, compiled):
        values, inverse, count = unique_integers(x)
        out = (values, inverse.astype(out_idx, copy=False))
        return out + ((count.astype(out_idx, copy=False),) if counts else ())
    shape = x.shape
    n = shape[a]
    host = to_numpy(x)
    width = int(np.prod(shape[:a] + shape[a + 1:], dtype=np.int64))
    slices = np.moveaxis(host, a, 0).reshape(n, width)
    if slices.shape[1] == 0:  # every slice is empty, so all are equal
        first = np.zeros(min(n, 1), dtype=np.int64)
        inverse = np.zeros(n, dtype=np.int64)
    else:
        codes = _element_codes(slices.reshape(-1)).reshape(slices.shape)
        _, first, inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    # numpy orders the distinct slices by value; TensorFlow by first appearance.
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    idx = rank[inverse].astype(out_idx)
    y = xp.take(x, xp.asarray(first[order]), axis=a) if x.dtype != object else np.take(host, first[order], axis=a)
    out = (y, xp.asarray(idx))
    if counts:
        out += (xp.asarray(np.bincount(idx.astype(np.int64), minlength=order.size).astype(out_idx)),)
    return out


@kernel("UniqueV2", outputs=2)
def unique_v2(xp: Any, x: Any, axis: Any, *, out_idx: Any = _INT32, compiled: bool = False) -> tuple:
    """The distinct slices of `x` along `axis`, in order of first appearance, and each slice's position."""
    return _unique_slices(xp, x, axis, out_idx, counts=False, compiled=compiled)


@kernel("UniqueWithCountsV2", outputs=3)
def unique_with_counts_v2(xp: Any, x: Any, axis: Any, *, out_idx: Any = _INT32, compiled: bool = False) -> tuple:
    """UniqueV2, plus how many times each distinct slice occurs."""
    return _unique_slices(xp, x, axis, out_idx, counts=True, compiled=compiled)
