"""Kernels of the bincount ops: how often each value 0..size-1 occurs (or the sum of its weights), the
counting behind Keras `CategoryEncoding` and the lookups' one_hot/multi_hot/count outputs,
`tf.math.bincount`, and the row lengths of ragged tensors.

Bincount counts a whole tensor into one [size] vector; DenseBincount does the same for a vector and
counts each row of a matrix into a [rows, size] matrix; RaggedBincount counts each row of a ragged
tensor given as row_splits and flat values. Values >= size are dropped silently; negative values are
an error (TensorFlow's words differ per op and path, and are kept). Empty `weights` means "count";
otherwise each value adds its weight, and the output has the weights' dtype. With `binary_output` a bin
is 1 when its value occurs at all (weights are then ignored, but still checked).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.host import format_dims, host
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["bincount", "dense_bincount", "ragged_bincount"]


def _size(size: Any) -> int:
    """The size input as a Python int; ValueError unless it is a non-negative scalar."""
    if size.ndim != 0:
        raise ValueError(f"Shape must be rank 0 but is rank {size.ndim}")
    n = int(size)
    if n < 0:
        raise ValueError(f"size ({n}) must be non-negative")
    return n


def _check_output(rows: int | None, n: int, memory_limit: int | None, op: str) -> None:
    """The [rows, size] output (and numpy's int64 counts) must fit in the memory limit: `size` is a value
    a client may send."""
    if memory_limit is not None:
        shape = (n,) if rows is None else (rows, n)
        check_elements(math.prod(shape), np.int64, memory_limit, f"{op} output", shape)


def _scatter_add(xp: Any, out: Any, bins: Any, weights: Any) -> None:
    """out[bins] += weights, adding repeated bins up, in the output's dtype (as TensorFlow accumulates)."""
    if hasattr(xp.add, "at"):
        xp.add.at(out, bins, weights)
    else:  # cupy before ufunc.at
        import cupyx

        cupyx.scatter_add(out, bins, weights)


def _count(xp: Any, bins: Any, weights: Any | None, length: int, dtype: Any, binary_output: bool) -> Any:
    """A [length] vector of the counts (weight sums, or 1 for present) of `bins`, each in [0, length)."""
    if binary_output:
        out = xp.zeros(length, dtype=dtype)
        out[bins] = 1
        return out
    if weights is None:
        return xp.bincount(bins, minlength=length).astype(dtype)
    out = xp.zeros(length, dtype=dtype)
    _scatter_add(xp, out, bins, weights)
    return out


def _flat_bins(xp: Any, values: Any, rows: Any | None, size: int) -> tuple[Any, Any]:
    """The positions of `values` < size in a flat [rows, size] output, and the mask of those kept."""
    keep = values < size
    bins = values.astype(xp.int64)
    if rows is not None:
        bins = rows * size + bins
    return bins[keep], keep


@kernel("Bincount")
def bincount(xp: Any, arr: Any, size: Any, weights: Any, *, memory_limit: int | None = None) -> tuple:
    """Counts of the values of `arr` (any shape) in [0, size), or sums of their `weights`."""
    n = _size(size)
    _check_output(None, n, memory_limit, "Bincount")
    flat = arr.reshape(-1)
    if flat.size and int(flat.min()) < 0:
        raise ValueError("Input arr must be non-negative!")
    if weights.size and weights.size != flat.size:
        raise ValueError("Input indices and weights must have the same size.")
    bins, keep = _flat_bins(xp, flat, None, n)
    w = weights.reshape(-1)[keep] if weights.size else None
    return (_count(xp, bins, w, n, weights.dtype, False),)


@kernel("DenseBincount")
def dense_bincount(xp: Any, input: Any, size: Any, weights: Any, *, binary_output: bool = False,
                   memory_limit: int | None = None) -> tuple:
    """Bincount of a vector into [size], or of each row of a matrix into [rows, size]."""
    if input.ndim > 2:
        raise ValueError(f"Shape must be at most rank 2 but is rank {input.ndim}")
    n = _size(size)
    _check_output(input.shape[0] if input.ndim == 2 else None, n, memory_limit, "DenseBincount")
    if weights.size and weights.shape != input.shape:
        raise ValueError(
            "`weights` must be the same shape as `arr` or a length-0 `Tensor`, in which case it acts as all "
            f"weights equal to 1. Received {format_dims(weights.shape)}"
        )
    flat = input.reshape(-1)
    if flat.size and int(flat.min()) < 0:
        if input.ndim < 2:
            raise ValueError("Input arr must be non-negative!")
        # NOTE: TensorFlow names the last negative value in row-major order.
        last = int(flat[xp.nonzero(flat < 0)[0][-1]])
        raise ValueError(f"Input 'in' must be non-negative! Negative input value found: {last}")
    w = weights.reshape(-1) if weights.size and not binary_output else None
    if input.ndim < 2:
        bins, keep = _flat_bins(xp, flat, None, n)
        return (_count(xp, bins, None if w is None else w[keep], n, weights.dtype, binary_output),)
    num_rows, num_cols = input.shape
    rows = xp.repeat(xp.arange(num_rows, dtype=xp.int64), num_cols)
    bins, keep = _flat_bins(xp, flat, rows, n)
    out = _count(xp, bins, None if w is None else w[keep], num_rows * n, weights.dtype, binary_output)
    return (out.reshape(num_rows, n),)


@kernel("RaggedBincount")
def ragged_bincount(xp: Any, splits: Any, values: Any, size: Any, weights: Any, *,
                    binary_output: bool = False, memory_limit: int | None = None) -> tuple:
    """Bincount of each row of the ragged tensor (splits, values) into [rows, size]."""
    n = _size(size)
    splits = splits.reshape(-1)
    _check_output(max(splits.size - 1, 0), n, memory_limit, "RaggedBincount")
    flat = values.reshape(-1)
    if splits.size == 0:
        raise ValueError("Splits must be non-empty")
    first, last = int(splits[0]), int(splits[-1])
    if first != 0:
        raise ValueError(f"Splits must start with 0, not with {first}")
    if last != flat.size:
        raise ValueError(f"Splits must end with the number of values, got {last} instead of {flat.size}")
    if flat.size and int(flat.min()) < 0:
        raise ValueError("Input must be non-negative")
    # NOTE: TensorFlow reads weights past their end when they are shorter than the values; refuse instead.
    if weights.size and weights.size != flat.size:
        raise ValueError("Input indices and weights must have the same size.")
    num_rows = splits.size - 1
    # TensorFlow walks the splits forward from value to value: the row of value i is one before the first
    # split greater than i, which for unsorted splits is the first running maximum greater than i.
    # Splits hold one number per row: their running maximum is cheap on the host (cupy has no accumulate).
    running_max = xp.asarray(np.maximum.accumulate(np.asarray(host(splits), dtype=np.int64)))
    positions = xp.arange(flat.size, dtype=xp.int64)
    rows = xp.searchsorted(running_max, positions, side="right") - 1
    bins, keep = _flat_bins(xp, flat, rows, n)
    w = weights.reshape(-1)[keep] if weights.size and not binary_output else None
    out = _count(xp, bins, w, num_rows * n, weights.dtype, binary_output)
    return (out.reshape(num_rows, n),)
