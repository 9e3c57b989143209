"""Compiled loops over a SparseTensor's index rows, where the numpy twins in kernels.sparse.manipulation and
kernels.sparse.tensor pay numpy's per-call cost a dozen times for a batch's few entries: the regrouping of
SparseFillEmptyRows (`fill_empty_rows`) and SparseToDense's positions with SparseTensor::IndicesValid's walk
(`locate_indices`).

Each loop only computes where entries go; values of any dtype are moved by the kernel with numpy. Where an
index is bad a loop says which, and the kernel words TensorFlow's error as its twin does.
"""

from __future__ import annotations

import numpy as np

from kernels.jit import compiled

__all__ = ["fill_empty_rows", "locate_indices"]

_INDICES = "Array(int64, 2, 'C', readonly=True)"
_SHAPE = "Array(int64, 1, 'C', readonly=True)"


@compiled(f"int64({_INDICES}, int64, int64[:, ::1], boolean[::1], int64[::1])", ops=("SparseFillEmptyRows",))
def _fill_rows(indices, dense_rows, out_indices, empty, reverse):  # pragma: no cover - compiled
    """Returns the output's entry count, or -1 - i where entry i's row is out of [0, dense_rows); entries go
    to their row's start plus their rank within the row (rows take max(count, 1) slots, in row order).
    The count is written as -(count + 1) - n when every entry stays where it was (rows in order, none empty)."""
    n, rank = indices.shape
    cursor = np.zeros(dense_rows, np.int64)
    in_order = True
    for i in range(n):
        row = indices[i, 0]
        if row < 0 or row >= dense_rows:
            return -1 - i
        if i and row < indices[i - 1, 0]:
            in_order = False
        cursor[row] += 1
    total = 0
    for r in range(dense_rows):
        count = cursor[r]
        empty[r] = count == 0
        cursor[r] = total
        if count == 0:
            out_indices[total, 0] = r
            for d in range(1, rank):
                out_indices[total, d] = 0
            total += 1
        else:
            total += count
    for i in range(n):
        row = indices[i, 0]
        at = cursor[row]
        cursor[row] = at + 1
        reverse[i] = at
        for d in range(rank):
            out_indices[at, d] = indices[i, d]
    return -(total + 1) - n if in_order and total == n else total


def fill_empty_rows(indices: np.ndarray, dense_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | int:
    """SparseFillEmptyRows' bookkeeping for int64 `indices` [n, rank] and dense_shape[0] = `dense_rows` > 0:
    (output indices, which rows were empty, where each input entry went, whether every entry stayed where it
    was), or the position of the first entry whose row is out of range."""
    n, rank = indices.shape
    out_indices = np.empty((n + dense_rows, rank), np.int64)
    empty = np.empty(dense_rows, np.bool_)
    reverse = np.empty(n, np.int64)
    total = _fill_rows(np.ascontiguousarray(indices), dense_rows, out_indices, empty, reverse)
    if total < -n:
        return out_indices[:n], empty, reverse, True
    if total < 0:
        return -1 - total
    return out_indices[:total], empty, reverse, False


@compiled(f"int64({_INDICES}, {_SHAPE}, boolean, int64[::1], int64[::1])", ops=("SparseToDense",))
def _locate(indices, shape, in_order, linear, why):  # pragma: no cover - compiled
    """Each index row's row-major position in `shape`; returns -1, or the first row out of bounds (why[0] = 0),
    or, when `in_order` is asked for, repeating its predecessor (1) or before it (2). Bounds are checked
    first within a row, as TensorFlow does."""
    n, rank = indices.shape
    for i in range(n):
        position = 0
        for d in range(rank):
            if indices[i, d] < 0 or indices[i, d] >= shape[d]:
                why[0] = 0
                return i
            position = position * shape[d] + indices[i, d]
        linear[i] = position
        if i == 0 or not in_order:
            continue
        order = 0  # the first differing dim decides
        for d in range(rank):
            if indices[i, d] != indices[i - 1, d]:
                order = 1 if indices[i, d] > indices[i - 1, d] else -1
                break
        if order < 1:
            why[0] = 1 if order == 0 else 2
            return i
    return -1


def locate_indices(indices: np.ndarray, shape: np.ndarray, in_order: bool) -> tuple[np.ndarray | None, int, int]:
    """The row-major positions in `shape` of the int64 index rows, checked as SparseToDense checks them:
    (positions, -1, -1), or (None, i, why) for the first row that is out of bounds (why 0) or, where
    `in_order`, repeats its predecessor (1) or comes before it (2)."""
    linear = np.empty(indices.shape[0], np.int64)
    why = np.full(1, -1, np.int64)
    i = _locate(np.ascontiguousarray(indices), np.ascontiguousarray(shape, dtype=np.int64), in_order, linear, why)
    return (linear, -1, -1) if i < 0 else (None, int(i), int(why[0]))
