"""Kernels of the ops that compute positions from values: LowerBound and UpperBound (tf.searchsorted),
ListDiff (tf.compat.v1.setdiff1d), InvertPermutation and UnravelIndex.

LowerBound and UpperBound run the same binary search as the C++ standard library, vectorized over all
values of a row at once. They therefore agree with TensorFlow even on rows that are not sorted or hold
NaN, where "the position among sorted values" has no single answer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.host import format_dims, host_vector
from kernels.registry import kernel

__all__ = ["invert_permutation", "list_diff", "lower_bound", "unravel_index", "upper_bound"]


# ---------------------------------------------------------------------------------------------------
# Binary search


def _search(xp: Any, sorted_inputs: Any, values: Any, out_type: Any, upper: bool) -> Any:
    """For each row b and value v: std::lower_bound (or upper_bound) of v in sorted_inputs[b]."""
    for name, t in (("sorted_inputs", sorted_inputs), ("values", values)):
        if t.ndim != 2:
            raise ValueError(f"Shape must be rank 2 but is rank {t.ndim} for `{name}` argument")
    if sorted_inputs.shape[0] != values.shape[0]:
        raise ValueError("Leading dim_size of both tensors must match.")
    n = sorted_inputs.shape[1]
    first = xp.zeros(values.shape, dtype=np.int64)
    length = xp.full(values.shape, n, dtype=np.int64)
    if n == 0 or values.size == 0:
        return first.astype(out_type)
    # Every search takes the same ceil(log2(n + 1)) halvings; finished ones (length 0) stand still.
    for _ in range(max(n, 1).bit_length()):
        half = length >> 1
        middle = xp.minimum(first + half, n - 1)
        probe = xp.take_along_axis(sorted_inputs, middle, axis=1)
        # lower_bound goes right while probe < v, upper_bound while not v < probe.
        right = (probe < values) if not upper else xp.logical_not(values < probe)
        right &= length > 0
        first = xp.where(right, middle + 1, first)
        length = xp.where(right, length - half - 1, half)
    return first.astype(out_type)


@kernel("LowerBound")
def lower_bound(xp: Any, sorted_inputs: Any, values: Any, *, out_type: Any = np.int32) -> tuple:
    """For each row, the first position in sorted_inputs[b] whose value is not less than values[b, i]."""
    return (_search(xp, sorted_inputs, values, out_type, upper=False),)


@kernel("UpperBound")
def upper_bound(xp: Any, sorted_inputs: Any, values: Any, *, out_type: Any = np.int32) -> tuple:
    """For each row, the first position in sorted_inputs[b] whose value is greater than values[b, i]."""
    return (_search(xp, sorted_inputs, values, out_type, upper=True),)


# ---------------------------------------------------------------------------------------------------
# ListDiff


@kernel("ListDiff", outputs=2)
def list_diff(xp: Any, x: Any, y: Any, *, out_idx: Any = np.int32) -> tuple:
    """The values of 1-D `x` that are not in `y`, in their order in x, and their positions in x. NaN
    equals nothing, so a NaN of x is always kept."""
    if x.ndim != 1:
        raise ValueError("x should be a 1D vector.")
    if y.ndim != 1:
        raise ValueError("y should be a 1D vector.")
    if x.dtype == object:
        present = set(y.tolist())
        keep = np.fromiter((v not in present for v in x.tolist()), dtype=bool, count=x.shape[0])
    else:
        keep = xp.logical_not(xp.isin(x, y))
    positions = xp.nonzero(keep)[0]
    return (x[positions], positions.astype(out_idx))


# ---------------------------------------------------------------------------------------------------
# Permutations and multi-indices


@kernel("InvertPermutation")
def invert_permutation(xp: Any, x: Any) -> tuple:
    """y with y[x[i]] = i, for `x` a permutation of 0..n-1."""
    if x.ndim != 1:
        raise ValueError("invert_permutation expects a 1D vector.")
    n = x.shape[0]
    values = host_vector(x)
    seen = [False] * n
    for v in values:
        if not 0 <= v < n:
            raise ValueError(f"{v} is not between 0 and {n}")
        if seen[v]:
            raise ValueError(f"{v} is duplicated in the input.")
        seen[v] = True
    y = xp.empty(n, dtype=x.dtype)
    y[x] = xp.arange(n, dtype=x.dtype)
    return (y,)


@kernel("UnravelIndex")
def unravel_index(xp: Any, indices: Any, dims: Any) -> tuple:
    """The coordinates in an array of shape `dims` of each flat row-major index: [len(dims)] for a scalar
    index, [len(dims), N] for a vector of N."""
    if indices.ndim > 1:
        raise ValueError(f'The indices can only be scalar or vector, got "{format_dims(indices.shape)}"')
    if dims.ndim != 1:
        raise ValueError(f'The indices can only be 1-D, got "{format_dims(dims.shape)}"')
    if indices.size == 0:
        raise ValueError(f"received empty tensor indices of shape {format_dims(indices.shape)}")
    sizes = host_vector(dims)
    for i, d in enumerate(sizes):
        if d == 0:
            raise ValueError(f"Input dims cannot contain a dim of zero, but dims contains zero at index {i}")
        if d < 0:
            raise ValueError(f"Input dims cannot be negative. Got dim = {d} at index {i}")
    total = math.prod(sizes)
    if indices.size and int(indices.max()) >= total:
        raise ValueError("index is out of bound as with dims")
    strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
    flat = indices.reshape(1, -1).astype(np.int64, copy=False)
    stride = xp.asarray(strides, dtype=np.int64).reshape(-1, 1)
    size = xp.asarray(sizes, dtype=np.int64).reshape(-1, 1)
    # NOTE: C++ division and remainder (toward zero): TensorFlow does not refuse negative indices and
    # gives, for -1 in [3, 3], the coordinates [0, -1].
    coords = xp.fmod(_trunc_div(xp, flat, stride), size)
    out = coords.astype(indices.dtype)
    return (out[:, 0] if indices.ndim == 0 else out,)


def _trunc_div(xp: Any, a: Any, b: Any) -> Any:
    """a / b rounded toward zero, for integers and b > 0."""
    q = a // b
    return xp.where((q < 0) & (q * b != a), q + 1, q)
