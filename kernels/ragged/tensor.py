"""Ragged tensors as TensorFlow's ragged ops pass them: flat values plus one row-splits vector per ragged
dimension (row i of a level holds items splits[i]:splits[i+1] of the next), and the kernels of
RaggedRange (`tf.ragged.range`), RaggedGather (`tf.gather` on a ragged tensor) and RaggedTensorToSparse
(`RaggedTensor.to_sparse()`).

    splits [0, 2, 2, 5], values [a, b, c, d, e]  is  [[a, b], [], [c, d, e]]

Splits are small and handled on the host (numpy); values stay on their device. `verify_splits` is
TensorFlow's RaggedTensorVerifySplits, shared with the variant and cross kernels. Error messages are
TensorFlow's; where TensorFlow would read out of bounds instead, the kernels refuse.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.limits import check_bytes
from kernels.registry import kernel

__all__ = ["to_numpy", "verify_splits", "ragged_range", "ragged_gather", "ragged_tensor_to_sparse"]


def to_numpy(a: Any) -> np.ndarray:
    """A (small) array on the host, from numpy or cupy."""
    return np.asarray(a) if isinstance(a, np.ndarray) or not hasattr(a, "get") else a.get()


def verify_splits(splits: Any, num_values: int | None) -> None:
    """RaggedTensorVerifySplits: a vector starting at 0, never decreasing, ending at `num_values` (unless
    None); ValueError in TensorFlow's words otherwise."""
    if splits.ndim != 1:
        raise ValueError(f"Invalid ragged splits: ragged splits must be rank 1 but is rank {splits.ndim}")
    if splits.size < 1:
        raise ValueError("Invalid ragged splits: ragged splits must have at least one splits, but is empty")
    s = to_numpy(splits)
    if int(s[0]) != 0:
        # NOTE: two spaces before "must": TensorFlow's message has them.
        raise ValueError(f"Invalid ragged splits: first element of ragged splits  must be 0 but is {int(s[0])}")
    down = np.flatnonzero(s[1:] < s[:-1])
    if down.size:
        j = int(down[0]) + 1
        raise ValueError(f"Invalid ragged splits: ragged splits must be monotonically increasing, but "
                         f"ragged_splits[{j}]={int(s[j])} is smaller than row_splits[{j - 1}]={int(s[j - 1])}")
    if num_values is not None and int(s[-1]) != num_values:
        raise ValueError(f"Invalid ragged splits: last element of ragged splits must be the number of ragged "
                         f"values({num_values}) but is {int(s[-1])}")


def _ranges(starts: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start, limit) for each pair (each limit >= its start)."""
    lengths = limits - starts
    total = int(lengths.sum())
    return np.arange(total) - np.repeat(np.cumsum(lengths) - lengths - starts, lengths)


# --- RaggedRange ---------------------------------------------------------------------------------------------


def _range_sizes(starts: np.ndarray, limits: np.ndarray, deltas: np.ndarray, split_dtype: np.dtype) -> np.ndarray:
    """How many values each row's range has, computed in the values' dtype as TensorFlow does; ValueError
    for the first row (in order) with a zero delta or a size the splits' dtype cannot hold."""
    largest = np.iinfo(split_dtype).max
    empty = ((deltas > 0) & (limits < starts)) | ((deltas < 0) & (limits > starts))
    safe = np.where(deltas == 0, np.ones_like(deltas), deltas)
    with np.errstate(all="ignore"):
        if np.issubdtype(starts.dtype, np.integer):
            span, step = np.abs(limits - starts), np.abs(safe)
            sizes = np.where(empty, 0, (span + step - 1) // step).astype(np.int64)
            too_big = sizes > largest
        else:
            raw = np.ceil(np.abs((limits - starts) / safe))
            too_big = ~(raw <= np.float64(largest)) & ~empty
            sizes = np.where(too_big | empty, 0, raw).astype(np.int64)
    for row in np.flatnonzero((deltas == 0) | too_big)[:1]:
        if deltas[row] == 0:
            raise ValueError("Requires delta != 0")
        raise ValueError(f"Requires ((limit - start) / delta) <= {largest}")
    return np.where(empty, 0, sizes)


@kernel("RaggedRange", outputs=2)
def ragged_range(xp: Any, starts: Any, limits: Any, deltas: Any, *, Tsplits: np.dtype = np.dtype(np.int64),
                 memory_limit: int | None = None) -> tuple:
    """(splits, values): row i is range(starts[i], limits[i], deltas[i]); scalars broadcast to every row."""
    for name, t in (("starts", starts), ("limits", limits), ("deltas", deltas)):
        if t.ndim > 1:
            raise ValueError(f"{name} must be a scalar or vector")
    sizes = [t.shape[0] for t in (starts, limits, deltas) if t.ndim == 1]
    if any(n != sizes[0] for n in sizes):
        raise ValueError("starts, limits, and deltas must have the same shape")
    rows = sizes[0] if sizes else 1
    s, lim, d = (np.broadcast_to(to_numpy(t).reshape(-1), (rows,)) for t in (starts, limits, deltas))
    counts = _range_sizes(s, lim, d, np.dtype(Tsplits)) if rows else np.zeros(0, np.int64)
    # The values and the int64 row and step indices built on the way.
    total = int(counts.sum(dtype=object)) if rows else 0
    check_bytes(total * (starts.dtype.itemsize + 24), memory_limit, "RaggedRange values", (total,))
    splits = np.concatenate(([0], np.cumsum(counts))).astype(Tsplits)
    dtype = starts.dtype
    if np.issubdtype(dtype, np.integer):
        row = np.repeat(np.arange(rows), counts)
        step = np.arange(int(counts.sum())) - np.repeat(splits[:-1].astype(np.int64), counts)
        with np.errstate(over="ignore"):
            values = (s[row] + step.astype(dtype) * d[row]).astype(dtype)
    else:
        # NOTE: TensorFlow adds delta to the previous value, in the values' dtype, rather than computing
        # start + i * delta: the rounding differs, so each row is accumulated the same way.
        pieces = [np.add.accumulate(np.concatenate(([s[i]], np.full(n - 1, d[i], dtype))), dtype=dtype)
                  for i, n in enumerate(counts.tolist()) if n]
        values = np.concatenate(pieces) if pieces else np.zeros(0, dtype)
    return xp.asarray(splits), xp.asarray(values)


# --- RaggedGather --------------------------------------------------------------------------------------------


def _slice_name(shape: tuple[int, ...], flat: int) -> str:
    """SliceDebugString: the multi-index of a flat position, as [i,j]; '' for a scalar."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def _check_gather_splits(splits: list[np.ndarray], num_values: int) -> None:
    for level, s in enumerate(splits):
        bound = num_values if level == len(splits) - 1 else splits[level + 1].size
        if s.size == 0:
            raise ValueError("Ragged splits may not be empty")
        if s[0] < 0:
            raise ValueError("Ragged splits must be non-negative")
        # NOTE: TensorFlow lets an inner level point one past the next level's rows, then reads past them.
        if s[-1] > bound or (level < len(splits) - 1 and s[-1] > bound - 1):
            raise ValueError("Ragged splits must not point past values")
        if (s[1:] < s[:-1]).any():
            raise ValueError("Ragged splits must be sorted")


@kernel("RaggedGather", outputs=lambda attrs: attrs["OUTPUT_RAGGED_RANK"] + 1)
def ragged_gather(xp: Any, *inputs: Any, OUTPUT_RAGGED_RANK: int) -> tuple:
    """(*output splits, values): the rows `indices` of the ragged params (*splits, values). Each dim of
    `indices` but the last becomes a uniform ragged dim of the output; scalar indices drop one."""
    *params_splits, params_values, indices = inputs
    splits = [to_numpy(s).reshape(-1) for s in params_splits]
    split_dtype = params_splits[0].dtype
    flat = to_numpy(indices).reshape(-1).astype(np.int64)
    num_params = params_splits[0].shape[0] - 1
    bad = np.flatnonzero((flat < 0) | (flat >= num_params))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"indices{_slice_name(tuple(indices.shape), k)} = {int(flat[k])} is not in "
                         f"[0, {num_params})")
    if params_values.ndim == 0:
        raise ValueError("params.rank must be nonzero")
    _check_gather_splits(splits, params_values.shape[0])

    out_splits = []
    rows = 1
    for dim in range(indices.ndim - 1):
        rows *= indices.shape[dim]
        out_splits.append(np.arange(rows + 1, dtype=np.int64) * indices.shape[dim + 1])
    starts, limits = flat, flat + 1
    for level, s in enumerate(splits):
        if level + indices.ndim - 1 >= 0:
            chosen = _ranges(starts, limits)
            out_splits.append(np.concatenate(([0], np.cumsum(s[chosen + 1] - s[chosen]))))
        starts, limits = s[starts], s[limits]
    if len(out_splits) != OUTPUT_RAGGED_RANK:
        raise ValueError(f"OUTPUT_RAGGED_RANK is {OUTPUT_RAGGED_RANK}, but gathering {indices.ndim}-D indices from "
                         f"params of ragged rank {len(splits)} gives ragged rank {len(out_splits)}")
    taken = _ranges(starts, limits)
    values = params_values[xp.asarray(taken)] if taken.size else params_values[:0]
    return (*(xp.asarray(o.astype(split_dtype)) for o in out_splits), values)


# --- RaggedTensorToSparse ---------------------------------------------------------------------------------


def _check_sparse_inputs(splits: list[np.ndarray], values: Any) -> None:
    mismatch = "Final value of ragged splits must match the length the corresponding ragged values."
    for level, s in enumerate(splits):
        if s.size == 0:
            raise ValueError("ragged splits may not be empty.")
        if s[0] != 0:
            raise ValueError("First value of ragged splits must be 0.")
        down = np.flatnonzero(s[1:] < s[:-1])
        if down.size:
            j = int(down[0])
            raise ValueError(f"Ragged splits should be non decreasing, but we got {int(s[j])} followed by "
                             f"{int(s[j + 1])}")
        if level > 0 and s.size != splits[level - 1][-1] + 1:
            raise ValueError(mismatch)
    if values.ndim == 0 or values.shape[0] != splits[-1][-1]:
        raise ValueError(mismatch)


@kernel("RaggedTensorToSparse", outputs=3)
def ragged_tensor_to_sparse(xp: Any, *inputs: Any) -> tuple:
    """(indices, values, dense_shape) of the SparseTensor holding the ragged tensor (*splits, values)."""
    *rt_nested_splits, rt_dense_values = inputs
    if not rt_nested_splits:
        raise ValueError("rt_nested_splits must be non empty")
    splits = [to_numpy(s).reshape(-1).astype(np.int64) for s in rt_nested_splits]
    _check_sparse_inputs(splits, rt_dense_values)
    # Walk up from each value: its column in its row, then that row's column in its parent row, ...
    position = np.arange(int(splits[-1][-1]))
    columns = []
    for s in reversed(splits):
        row = np.searchsorted(s, position, side="right") - 1
        columns.append(position - s[row])
        position = row
    columns.append(position)
    prefix = np.stack(columns[::-1], axis=1) if position.size else np.zeros((0, len(columns)), np.int64)
    inner = tuple(rt_dense_values.shape[1:])
    cell = int(np.prod(inner))
    suffix = np.indices(inner).reshape(len(inner), -1).T if inner else np.zeros((1, 0), np.int64)
    indices = np.concatenate([np.repeat(prefix, cell, axis=0), np.tile(suffix, (prefix.shape[0], 1))], axis=1)
    widths = [max(int(np.diff(s).max(initial=0)), 0) for s in splits]
    dense_shape = [rt_nested_splits[0].shape[0] - 1, *widths, *inner]
    return (xp.asarray(indices.astype(np.int64)), rt_dense_values.reshape(-1),
            xp.asarray(np.array(dense_shape, np.int64)))
