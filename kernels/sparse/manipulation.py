"""Kernels of the ops that build, reorder and cut SparseTensors (see kernels.sparse.tensor): SparseToDense,
SparseReorder, SparseReshape, SparseFillEmptyRows, SparseConcat and SparseSlice, the plumbing of
`tf.sparse.*`, feature columns and `tf.nn.safe_embedding_lookup_sparse`.

TensorFlow validates these loosely and differently per op, and these kernels keep its choices: SparseToDense
checks bounds and order (unless `validate_indices` is off, when duplicates write last-wins); SparseReshape
and SparseSlice take indices as they come, out-of-range ones included; SparseFillEmptyRows checks only the
row of each index and groups entries by row, keeping their order within a row; SparseConcat and SparseReorder
sort stably into row-major order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.jit import use_compiled
from kernels.limits import check_bytes, check_elements
from kernels.registry import kernel
from kernels.sparse.index_loops import fill_empty_rows, locate_indices
from kernels.sparse.tensor import (
    check_indices_valid,
    check_sparse_tensor,
    lexicographic_order,
    to_numpy,
)

__all__ = [
    "sparse_to_dense",
    "sparse_reorder",
    "sparse_reshape",
    "sparse_fill_empty_rows",
    "sparse_concat",
    "sparse_slice",
]


def _strides(shape: list[int]) -> np.ndarray:
    """Row-major strides of `shape`, in elements."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return np.array(strides, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------
# SparseToDense


@kernel("SparseToDense")
def sparse_to_dense(xp: Any, sparse_indices: Any, output_shape: Any, sparse_values: Any, default_value: Any, *,
                    validate_indices: bool = True, memory_limit: int | None = None, compiled: bool = False) -> tuple:
    """A dense tensor of `output_shape` holding `default_value` except at `sparse_indices` (a matrix, a vector
    of indices into a vector, or one scalar index), which hold `sparse_values` (a vector, or one scalar for
    all)."""
    if sparse_indices.ndim > 2:
        raise ValueError("sparse_indices should be a scalar, vector, or matrix, got shape "
                         f"{format_dims(sparse_indices.shape)}")
    num_elems = sparse_indices.shape[0] if sparse_indices.ndim > 0 else 1
    num_dims = sparse_indices.shape[1] if sparse_indices.ndim > 1 else 1
    if output_shape.ndim != 1:
        raise ValueError(f"output_shape must be rank 1, got shape {format_dims(output_shape.shape)}")
    if output_shape.size != num_dims:
        raise ValueError(f"output_shape has incorrect number of elements: {output_shape.size} should be: {num_dims}")
    if not (sparse_values.ndim == 0 or (sparse_values.ndim == 1 and sparse_values.size == num_elems)):
        raise ValueError(f"sparse_values has incorrect shape {format_dims(sparse_values.shape)}, should be [] or "
                         f"[{num_elems}]")
    if default_value.ndim != 0:
        raise ValueError("default_value should be a scalar.")
    shape = to_numpy(output_shape).astype(np.int64)
    dims = tuple(shape.tolist())
    for d in dims:
        if d < 0:
            raise ValueError(f"Dimension {d} must be >= 0")
    check_elements(math.prod(dims), sparse_values.dtype, memory_limit, "SparseToDense output", dims)
    indices = to_numpy(sparse_indices).astype(np.int64).reshape(num_elems, num_dims)
    linear = None
    if use_compiled(np, compiled):
        linear, _, _ = locate_indices(indices, shape, validate_indices)  # None: the twin below words the error
    if linear is None:
        if validate_indices:
            check_indices_valid(indices, shape)
        elif ((indices < 0) | (indices >= shape)).any():
            raise ValueError(f"Indices are not valid (out of bounds).  Shape: {format_dims(shape.tolist())}")
    out = xp.empty(dims, dtype=sparse_values.dtype)
    out[...] = default_value
    if num_elems and out.size:
        # NOTE: a repeated index keeps the last value, as TensorFlow's loop does (numpy writes in order).
        if linear is None:
            linear = indices @ _strides(list(dims))
        if xp is not np and sparse_values.ndim == 1 and num_elems > 1:
            # A GPU scatter writes repeated indices in no set order: keep only each index's last entry.
            first_from_end = np.unique(linear[::-1], return_index=True)[1]
            if first_from_end.size < num_elems:
                keep = np.sort(num_elems - 1 - first_from_end)
                linear, sparse_values = linear[keep], xp.asarray(sparse_values)[xp.asarray(keep)]
        out.reshape(-1)[xp.asarray(linear)] = sparse_values
    return (out,)


# ---------------------------------------------------------------------------------------------------
# SparseReorder


@kernel("SparseReorder", outputs=2)
def sparse_reorder(xp: Any, input_indices: Any, input_values: Any, input_shape: Any) -> tuple:
    """The entries sorted into row-major order of their indices (stable: equal indices keep their order)."""
    check_sparse_tensor(input_indices, input_values, input_shape)
    indices = to_numpy(input_indices)
    order = lexicographic_order(indices)
    if np.array_equal(order, np.arange(order.size)):
        return input_indices, input_values
    return xp.asarray(indices[order]), input_values[xp.asarray(order)]


# ---------------------------------------------------------------------------------------------------
# SparseReshape


def _reshaped(input_shape: list[int], new_shape: list[int]) -> tuple[list[int], int]:
    """The target shape with its -1 resolved, and the product of its given sizes (TensorFlow's checks)."""
    dense_size = math.prod(input_shape)
    output, product, unknown = [], 1, -1
    for d, size in enumerate(new_shape):
        if size == -1:
            if unknown != -1:
                raise ValueError(f"only one output dimension may be -1, not both {unknown} and {d}")
            unknown = d
            output.append(1)
        else:
            if size < 0:
                raise ValueError(f"size {d} must be non-negative, not {size}")
            product *= size
            output.append(size)
    if unknown != -1:
        if product <= 0:
            raise ValueError("reshape cannot infer the missing input size for an empty tensor unless all specified "
                             "input sizes are non-zero")
        missing = dense_size // product
        if product * missing != dense_size:
            raise ValueError(f"Input to reshape is a SparseTensor with {dense_size} dense values, but the requested "
                             f"shape requires a multiple of {product}. input_shape={format_dims(input_shape)} "
                             f"output_shape={format_dims(output)}")
        output[unknown] = missing
    total = math.prod(output)
    if total != dense_size:
        raise ValueError(f"Input to reshape is a tensor with {dense_size} dense values, but the requested shape has "
                         f"{total}. input_shape={format_dims(input_shape)} output_shape={format_dims(output)}")
    return output, product


@kernel("SparseReshape", outputs=2)
def sparse_reshape(xp: Any, input_indices: Any, input_shape: Any, new_shape: Any) -> tuple:
    """The indices of the same entries in a tensor of `new_shape` (one -1 allowed), row-major as Reshape."""
    if input_indices.ndim != 2:
        raise ValueError("Input must be a matrix.")
    if input_shape.ndim != 1:
        raise ValueError("Input shape must be a vector.")
    if input_indices.shape[1] != input_shape.shape[0]:
        raise ValueError("Input tensor rank must match input shape length.")
    if new_shape.ndim != 1:
        raise ValueError(f"Target shape should be a vector but received shape {format_dims(new_shape.shape)}")
    in_shape = to_numpy(input_shape).tolist()
    for d in in_shape:
        if d < 0:
            raise ValueError(f"Expected shape dimensions to be non-negative, got {d}")
    out_shape, product = _reshaped(in_shape, to_numpy(new_shape).tolist())
    if out_shape == in_shape:
        return input_indices, input_shape
    nnz = input_indices.shape[0]
    dense_size = math.prod(in_shape)
    if nnz and not (dense_size > 0 and product > 0):
        raise ValueError(f"Input tensor has {nnz} non zero elements but input shape ({format_dims(in_shape)}) or "
                         f"output shape ({format_dims(out_shape)}) is empty")
    linear = to_numpy(input_indices).astype(np.int64) @ _strides(in_shape)
    out = np.empty((nnz, len(out_shape)), dtype=np.int64)
    for j, stride in enumerate(_strides(out_shape)):
        # C++ division and remainder, which truncate toward zero (indices out of range may be negative).
        out[:, j] = np.abs(linear) // max(int(stride), 1) * np.sign(linear)
        linear = linear - out[:, j] * stride
    return xp.asarray(out), xp.asarray(np.array(out_shape, dtype=np.int64))


# ---------------------------------------------------------------------------------------------------
# SparseFillEmptyRows


@kernel("SparseFillEmptyRows", outputs=4)
def sparse_fill_empty_rows(xp: Any, indices: Any, values: Any, dense_shape: Any, default_value: Any, *,
                           memory_limit: int | None = None, compiled: bool = False) -> tuple:
    """Every empty row of the sparse tensor gets one entry `default_value` at [row, 0, ...]; entries are grouped
    by row (in order within a row). Also returns which rows were empty and where each input entry went."""
    if dense_shape.ndim != 1:
        raise ValueError(f"dense_shape must be a vector, saw: {format_dims(dense_shape.shape)}")
    if indices.ndim != 2:
        raise ValueError(f"indices must be a matrix, saw: {format_dims(indices.shape)}")
    if values.ndim != 1:
        raise ValueError(f"values must be a vector, saw: {format_dims(values.shape)}")
    if indices.shape[0] != values.shape[0]:
        raise ValueError(f"The length of `values` ({values.shape[0]}) must match the first dimension of `indices` "
                         f"({indices.shape[0]}).")
    if default_value.ndim != 0:
        raise ValueError(f"default_value must be a scalar, saw: {format_dims(default_value.shape)}")
    if dense_shape.shape[0] != indices.shape[1]:
        raise ValueError(f"The length of `dense_shape` ({dense_shape.shape[0]}) must match the second dimension of "
                         f"`indices` ({indices.shape[1]}).")
    if dense_shape.shape[0] == 0:
        raise ValueError("Dense shape cannot be empty.")
    n, rank = indices.shape
    dense_rows = int(to_numpy(dense_shape)[0])
    # Per row of the dense shape (a value a client may send): a count, a start, a flag, and at most
    # one new entry (its indices and value).
    check_bytes(max(dense_rows, 0) * (8 * rank + 8 * 3 + 1 + values.dtype.itemsize), memory_limit,
                "SparseFillEmptyRows rows", (dense_rows,))
    if dense_rows == 0:
        if n:
            raise ValueError(f"Received SparseTensor with dense_shape[0] = 0 but indices.shape[0] = {n}")
        return (xp.zeros((0, rank), dtype=np.int64), values[:0], xp.zeros(0, dtype=bool),
                xp.zeros(0, dtype=np.int64))
    ix = to_numpy(indices).astype(np.int64)
    if use_compiled(xp, compiled):
        return _fill_empty_rows_compiled(xp, ix, values, dense_rows, default_value)
    rows = ix[:, 0]
    bad = np.flatnonzero((rows < 0) | (rows >= dense_rows))
    if bad.size:
        _bad_row(ix, int(bad[0]), dense_rows)
    counts = np.bincount(rows, minlength=dense_rows)
    empty = counts == 0
    # Each row takes max(count, 1) slots; an entry goes to its row's start plus its rank within the row.
    starts = np.r_[0, np.cumsum(np.maximum(counts, 1))[:-1]]
    by_row = np.argsort(rows, kind="stable")
    rank_in_row = np.empty(n, dtype=np.int64)
    rank_in_row[by_row] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    reverse_index_map = starts[rows] + rank_in_row
    total = int(starts[-1] + max(counts[-1], 1))
    out_indices = np.zeros((total, rank), dtype=np.int64)
    out_indices[reverse_index_map] = ix
    empty_rows = np.flatnonzero(empty)
    out_indices[starts[empty_rows], 0] = empty_rows
    out_values = xp.empty(total, dtype=values.dtype)
    out_values[...] = default_value
    out_values[xp.asarray(reverse_index_map)] = values
    return (xp.asarray(out_indices), out_values, xp.asarray(empty), xp.asarray(reverse_index_map))


def _bad_row(ix: np.ndarray, i: int, dense_rows: int) -> None:
    raise ValueError(f"indices({i}, 0) is invalid: {ix[i, 0]} >= {dense_rows}")


def _fill_empty_rows_compiled(xp: Any, ix: np.ndarray, values: Any, dense_rows: int, default_value: Any) -> tuple:
    """SparseFillEmptyRows with the compiled regrouping (kernels.sparse.index_loops); the twin above."""
    filled = fill_empty_rows(ix, dense_rows)
    if isinstance(filled, int):
        _bad_row(ix, filled, dense_rows)
    out_indices, empty, reverse_index_map, unmoved = filled
    if unmoved:
        out_values = values  # no row was empty and the entries were grouped by row already
    else:
        out_values = np.empty(out_indices.shape[0], dtype=values.dtype)
        out_values[...] = default_value
        out_values[reverse_index_map] = values
    return out_indices, out_values, empty, reverse_index_map


# ---------------------------------------------------------------------------------------------------
# SparseConcat


def _check_concat_inputs(indices: tuple, values: tuple, shapes: tuple) -> None:
    for kind, tensors, rank, label in (("indices", indices, 2, "a matrix"), ("values", values, 1, "a vector"),
                                       ("shapes", shapes, 1, "a vector")):
        for i, t in enumerate(tensors):
            if t.ndim != rank:
                raise ValueError(f"Input {kind} should be {label} but received shape {format_dims(t.shape)} "
                                 f"at position {i}")


@kernel("SparseConcat", outputs=3)
def sparse_concat(xp: Any, *inputs: Any, concat_dim: int, N: int | None = None) -> tuple:
    """N sparse tensors (their N indices, then N values, then N shapes) joined along `concat_dim`, the result
    sorted into row-major order."""
    n = len(inputs) // 3
    indices, values, shapes = inputs[:n], inputs[n:2 * n], inputs[2 * n:]
    _check_concat_inputs(indices, values, shapes)
    dims = [[int(d) for d in to_numpy(s)] for s in shapes]
    rank = len(dims[0])
    dim = concat_dim + rank if concat_dim < 0 else concat_dim
    if not 0 <= dim < rank:
        raise ValueError(f"Concat dimension must be in range [{-rank}, {rank}), got {concat_dim}")
    for i in range(1, n):
        if len(dims[i]) != rank:
            raise ValueError(f"Ranks of all input tensors must match: expected {rank} but got {len(dims[i])} at "
                             f"position {i}")
        for j in range(rank):
            if j != dim and dims[i][j] != dims[0][j]:
                raise ValueError(f"Input shapes must match: expected {dims[0][j]} for dimension {j} but got "
                                 f"{dims[i][j]} at position {i}")
    parts, offset = [], 0
    for ix, v, shape in zip(indices, values, dims):
        if ix.shape[0] != v.shape[0]:
            raise ValueError("indices and values rows (indexing dimension) must match. "
                             f"(indices = {ix.shape[0]}, values = {v.shape[0]})")
        if ix.shape[1] != rank:
            raise ValueError("Order length must be SparseTensor rank.")
        moved = to_numpy(ix).astype(np.int64, copy=True)
        moved[:, dim] += offset
        parts.append(moved)
        offset += shape[dim]
    joined = np.concatenate(parts, axis=0)
    order = lexicographic_order(joined)
    out_shape = list(dims[0])
    out_shape[dim] = offset
    out_values = xp.concatenate(list(values))[xp.asarray(order)]
    return xp.asarray(joined[order]), out_values, xp.asarray(np.array(out_shape, dtype=np.int64))


# ---------------------------------------------------------------------------------------------------
# SparseSlice


@kernel("SparseSlice", outputs=3)
def sparse_slice(xp: Any, indices: Any, values: Any, shape: Any, start: Any, size: Any) -> tuple:
    """The entries with start <= index < start + size in every dim, shifted by -start, in input order; the
    slice's shape is `size` cut at the tensor's end."""
    check_sparse_tensor(indices, values, shape)
    if start.ndim != 1:
        raise ValueError(f"Input start should be a vector but received shape {format_dims(start.shape)}")
    if size.ndim != 1:
        raise ValueError(f"Input size should be a vector but received shape {format_dims(size.shape)}")
    rank = shape.shape[0]
    if start.size != rank:
        raise ValueError(f"Expected start to be a vector of length {rank} but got length {start.size}")
    if size.size != rank:
        raise ValueError(f"Expected size to be a vector of length {rank} but got length {size.size}")
    dims = to_numpy(shape).astype(np.int64)
    for d in dims:
        if d < 0:
            raise ValueError(f"Expected shape dimensions to be non-negative, got {d}")
    begin = to_numpy(start).astype(np.int64)
    extent = to_numpy(size).astype(np.int64)
    for d in extent:
        if d < 0:
            raise ValueError(f"Expected a non-negative size, got {d}")
    out_shape = np.where(begin + extent < dims, extent, np.maximum(dims - begin, 0))
    ix = to_numpy(indices).astype(np.int64)
    hit = np.flatnonzero(((ix >= begin) & (ix < begin + extent)).all(axis=1))
    return (xp.asarray(ix[hit] - begin), values[xp.asarray(hit)], xp.asarray(out_shape.astype(np.int64)))

