"""Kernels of the arithmetic on SparseTensors (see kernels.sparse.tensor): SparseAdd, SparseTensorDenseMatMul
and the reductions SparseReduceSum/Max with their SparseTensor-valued variants.

SparseAdd merges two index lists the way TensorFlow's two-pointer walk does (it assumes both sorted; for
unsorted input the result follows the same walk), summing entries whose indices meet and keeping a sum only
when |sum| >= thresh; unmatched entries are always kept. SparseTensorDenseMatMul adds each entry's row of
`b` into its output row, in entry order. The reductions group entries by the kept dims (sorted by kept, then
reduced dims) and fold each group; the dense outputs hold 0 where no entry falls.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from kernels.host import format_dims
from kernels.math.segments import fold_segments
from kernels.registry import kernel
from kernels.sparse.tensor import group_starts, lexicographic_order, to_numpy

__all__ = [
    "sparse_add",
    "sparse_tensor_dense_mat_mul",
    "sparse_reduce_sum",
    "sparse_reduce_max",
    "sparse_reduce_sum_sparse",
    "sparse_reduce_max_sparse",
]


def _summarize(a: Any) -> str:
    """TensorFlow's Tensor::SummarizeValue of a small vector: its values joined by spaces."""
    return " ".join(str(v) for v in to_numpy(a).tolist())


# ---------------------------------------------------------------------------------------------------
# SparseAdd


def _check_sparse_add(a_indices: Any, a_values: Any, a_shape: Any, b_indices: Any, b_values: Any, b_shape: Any,
                      thresh: Any) -> None:
    if a_indices.ndim != 2 or b_indices.ndim != 2:
        raise ValueError("Input indices should be matrices but received shapes: "
                         f"{format_dims(a_indices.shape)} and {format_dims(b_indices.shape)}")
    num_dims = a_indices.shape[1]
    if b_indices.shape[1] != num_dims:
        raise ValueError(f"Input indices must have the same dimension, got {num_dims} and {b_indices.shape[1]}")
    if a_values.ndim != 1 or b_values.ndim != 1:
        raise ValueError("Input values should be vectors but received shapes: "
                         f"{format_dims(a_values.shape)} and {format_dims(b_values.shape)}")
    if a_values.shape[0] != a_indices.shape[0] or b_values.shape[0] != b_indices.shape[0]:
        raise ValueError(f"Expected {a_indices.shape[0]} and {b_indices.shape[0]} non-empty input values, got "
                         f"{a_values.shape[0]} and {b_values.shape[0]}")
    if a_shape.ndim != 1 or b_shape.ndim != 1:
        raise ValueError("Input shapes should be a vector but received shapes "
                         f"{format_dims(a_shape.shape)} and {format_dims(b_shape.shape)}")
    if a_shape.shape[0] != num_dims:
        raise ValueError(f"Second dimension of a_indices and length of a_shape must match, got {num_dims} and "
                         f"{a_shape.shape[0]}")
    if a_shape.shape != b_shape.shape:
        raise ValueError(f"Operands do not have the same ranks; got shapes: {_summarize(a_shape)} and "
                         f"{_summarize(b_shape)}")
    a_dims, b_dims = to_numpy(a_shape).tolist(), to_numpy(b_shape).tolist()
    for i, (x, y) in enumerate(zip(a_dims, b_dims)):
        if x != y:
            raise ValueError(f"Operands' shapes do not match: got {x} and {y} for dimension {i}")
    if thresh.ndim != 0:
        raise ValueError(f"The magnitude threshold must be a scalar: got shape {format_dims(thresh.shape)}")


def _is_sorted(indices: np.ndarray) -> bool:
    order = lexicographic_order(indices)
    return bool(np.array_equal(order, np.arange(order.size)))


def _merge_walk(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TensorFlow's two-pointer merge of the index lists a and b: for each output entry in order, the position
    of its a-entry and of its b-entry (-1 for none; both for a sum of a meeting index)."""
    out_a, out_b = [], []
    i = j = 0
    a_rows, b_rows = [tuple(r) for r in a.tolist()], [tuple(r) for r in b.tolist()]
    while i < len(a_rows) and j < len(b_rows):
        if a_rows[i] < b_rows[j]:
            out_a.append(i)
            out_b.append(-1)
            i += 1
        elif a_rows[i] == b_rows[j]:
            out_a.append(i)
            out_b.append(j)
            i, j = i + 1, j + 1
        else:
            out_a.append(-1)
            out_b.append(j)
            j += 1
    out_a += list(range(i, len(a_rows))) + [-1] * (len(b_rows) - j)
    out_b += [-1] * (len(a_rows) - i) + list(range(j, len(b_rows)))
    return np.array(out_a, dtype=np.int64), np.array(out_b, dtype=np.int64)


def _merge_sorted(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_merge_walk` for sorted inputs without a Python loop: within a run of one index, the k-th entry of a
    meets the k-th entry of b; the run's sums come first, then its unmatched entries."""
    n_a = a.shape[0]
    both = np.concatenate([a, b], axis=0)
    order = lexicographic_order(both)  # stable: within a run, a's entries come before b's
    from_b_side = order >= n_a
    original = np.where(from_b_side, order - n_a, order)
    starts = group_starts(both[order])
    lengths = np.diff(np.r_[starts, order.size])
    run = np.repeat(np.arange(starts.size), lengths)
    count_b = np.bincount(run, weights=from_b_side.astype(np.int64), minlength=starts.size).astype(np.int64)
    count_a = lengths - count_b
    position = np.arange(order.size) - starts[run] if order.size else np.zeros(0, dtype=np.int64)
    rank = np.where(from_b_side, position - count_a[run], position)
    matched = rank < np.minimum(count_a, count_b)[run]
    # A matched a-entry's partner sits after the run's a-entries, at the same rank.
    partner = np.minimum(starts[run] + count_a[run] + rank, max(order.size - 1, 0))
    from_a = np.where(from_b_side, -1, original)
    from_b = np.where(from_b_side, original, np.where(matched, original[partner], -1))
    out = np.lexsort((rank, ~matched, run))
    out = out[~(from_b_side & matched)[out]]
    return from_a[out], from_b[out]


@kernel("SparseAdd", outputs=3)
def sparse_add(xp: Any, a_indices: Any, a_values: Any, a_shape: Any, b_indices: Any, b_values: Any, b_shape: Any,
               thresh: Any) -> tuple:
    """The sum of two sparse tensors of one shape; a sum of meeting entries is kept when |sum| >= thresh."""
    _check_sparse_add(a_indices, a_values, a_shape, b_indices, b_values, b_shape, thresh)
    a, b = to_numpy(a_indices).astype(np.int64), to_numpy(b_indices).astype(np.int64)
    from_a, from_b = _merge_sorted(a, b) if _is_sorted(a) and _is_sorted(b) else _merge_walk(a, b)
    has_a, has_b = from_a >= 0, from_b >= 0
    summed = has_a & has_b
    indices = np.empty((from_a.size, a.shape[1]), dtype=np.int64)
    indices[has_a] = a[from_a[has_a]]
    indices[~has_a] = b[from_b[~has_a]]
    values = xp.zeros(from_a.size, dtype=a_values.dtype)
    values[xp.asarray(np.flatnonzero(has_a))] = a_values[xp.asarray(from_a[has_a])]
    at_b = xp.asarray(np.flatnonzero(has_b))
    b_part = b_values[xp.asarray(from_b[has_b])]
    values[at_b] = xp.where(xp.asarray(summed[has_b]), values[at_b] + b_part, b_part)
    keep = np.ones(from_a.size, dtype=bool)
    if summed.any():
        # NOTE: only sums are thresholded, as `thresh <= |sum|`: a NaN sum is dropped, an unmatched NaN kept.
        at_sums = np.flatnonzero(summed)
        keep[at_sums] = to_numpy(thresh).item() <= to_numpy(xp.abs(values[xp.asarray(at_sums)]))
    kept = np.flatnonzero(keep)
    return xp.asarray(indices[kept]), values[xp.asarray(kept)], a_shape


# ---------------------------------------------------------------------------------------------------
# SparseTensorDenseMatMul


@kernel("SparseTensorDenseMatMul")
def sparse_tensor_dense_mat_mul(xp: Any, a_indices: Any, a_values: Any, a_shape: Any, b: Any, *,
                                adjoint_a: bool = False, adjoint_b: bool = False) -> tuple:
    """The matrix product of sparse A (2-D) and dense B, either side conjugate-transposed on request."""
    if b.ndim != 2:
        raise ValueError("Tensor 'b' is not a matrix")
    if a_shape.ndim != 1:
        raise ValueError("Tensor 'a_shape' is not a vector")
    if a_shape.size != 2:
        raise ValueError("Tensor 'a_shape' must have 2 elements")
    if a_values.ndim != 1:
        raise ValueError("Tensor 'a_values' is not a vector")
    if a_indices.ndim != 2:
        raise ValueError("Tensor 'a_indices' is not a matrix")
    nnz = a_indices.shape[0]
    if nnz != a_values.size:
        raise ValueError("Number of rows of a_indices does not match number of entries in a_values")
    if a_indices.shape[1] != a_shape.size:
        raise ValueError("Number of columns of a_indices does not match number of entries in a_shape")
    rows, cols = (int(d) for d in to_numpy(a_shape))
    outer_left, inner_left = (cols, rows) if adjoint_a else (rows, cols)
    outer_right, inner_right = (b.shape[0], b.shape[1]) if adjoint_b else (b.shape[1], b.shape[0])
    if inner_left != inner_right:
        raise ValueError(f"Cannot multiply A and B because inner dimension does not match: {inner_left} vs. "
                         f"{inner_right}.  Did you forget a transpose?  Dimensions of A: [{rows}, {cols}).  "
                         f"Dimensions of B: {format_dims(b.shape)}")
    out = xp.zeros((outer_left, outer_right), dtype=b.dtype)
    if out.size == 0 or nnz == 0 or b.size == 0:
        return (out,)
    ix = to_numpy(a_indices).astype(np.int64)
    lhs, rhs = (1, 0) if adjoint_a else (0, 1)
    m, k = ix[:, lhs], ix[:, rhs]
    bad = np.flatnonzero((k < 0) | (k >= inner_right) | (m < 0) | (m >= outer_left))
    if bad.size:
        i = int(bad[0])
        if not 0 <= k[i] < inner_right:
            raise ValueError(f"k ({k[i]}) from index[{i},{rhs}] out of bounds (>={inner_right})")
        raise ValueError(f"m ({m[i]}) from index[{i},{lhs}] out of bounds (>={outer_left})")
    values = xp.conj(a_values) if adjoint_a and a_values.dtype.kind == "c" else a_values
    right = xp.conj(b.T) if adjoint_b else b
    contributions = right[xp.asarray(k)] * values[:, None]
    return (fold_segments(xp, "sum", contributions, xp.asarray(m), outer_left, 0),)


# ---------------------------------------------------------------------------------------------------
# SparseReduceSum / SparseReduceMax


class _Groups(NamedTuple):
    """A sparse tensor's entries grouped for a reduction, as TensorFlow's Reorder + group() leave them."""

    order: np.ndarray  # the entries sorted by kept dims, then reduced dims
    kept: list[int]  # the dims kept
    out_shape: list[int]
    coords: np.ndarray  # each group's indices in the kept dims, in row-major order
    group_of: np.ndarray  # each sorted entry's group


def _groups(input_indices: Any, input_values: Any, input_shape: Any, reduction_axes: Any, keep_dims: bool) -> _Groups:
    """TensorFlow's checks, then the entries grouped by the dims `reduction_axes` leaves."""
    if input_shape.ndim != 1:
        raise ValueError(f"Expected input_shape to be a vector; got shape: {format_dims(input_shape.shape)}")
    if reduction_axes.ndim > 1:
        raise ValueError("Expected reduction_axes to be a scalar or a vector; got shape: "
                         f"{format_dims(reduction_axes.shape)}")
    ndims = input_shape.shape[0]
    axes = [int(a) for a in to_numpy(reduction_axes).reshape(-1)]
    for axis in axes:
        if not -ndims <= axis < ndims:
            raise ValueError(f"Invalid reduction dimension {axis}, for input with {ndims} dimensions.")
    shape = [int(d) for d in to_numpy(input_shape)]
    for d in shape:
        if d < 0:
            raise ValueError(f"Expected shape dimensions to be non-negative, got {d}")
    if input_indices.ndim != 2:
        raise ValueError(f"indices must be a matrix, but got: {format_dims(input_indices.shape)}")
    if input_values.ndim != 1:
        raise ValueError(f"vals must be a vec, but got: {format_dims(input_values.shape)}")
    if input_indices.shape[0] != input_values.shape[0]:
        raise ValueError("indices and values rows (indexing dimension) must match. "
                         f"(indices = {input_indices.shape[0]}, values = {input_values.shape[0]})")
    if input_indices.shape[1] != ndims:
        raise ValueError("Order length must be SparseTensor rank.")
    reduced = sorted({a % ndims for a in axes}) if ndims else []
    kept = [d for d in range(ndims) if d not in reduced]
    out_shape = [1 if d in reduced else shape[d] for d in range(ndims)] if keep_dims else [shape[d] for d in kept]
    ix = to_numpy(input_indices).astype(np.int64)
    order = lexicographic_order(ix, kept + reduced)
    keys = ix[order][:, kept]
    starts = group_starts(keys)
    group_of = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, order.size]))
    return _Groups(order, kept, out_shape, keys[starts], group_of)


def _fold_groups(xp: Any, kind: str, input_values: Any, groups: _Groups) -> Any:
    """Each group's values folded in TensorFlow's order (every group has at least one value)."""
    values = input_values[xp.asarray(groups.order)]
    return fold_segments(xp, kind, values, xp.asarray(groups.group_of), groups.coords.shape[0], 0)


def _sparse_reduce_dense(xp: Any, kind: str, input_indices: Any, input_values: Any, input_shape: Any,
                         reduction_axes: Any, keep_dims: bool) -> Any:
    groups = _groups(input_indices, input_values, input_shape, reduction_axes, keep_dims)
    size = int(np.prod(groups.out_shape, dtype=np.int64)) if groups.out_shape else 1
    # TensorFlow writes a group at its row-major position among the kept dims, checking only that position.
    shape = [int(d) for d in to_numpy(input_shape)]
    strides = np.ones(len(groups.kept), dtype=np.int64)
    for d in range(len(groups.kept) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[groups.kept[d + 1]]
    flat = groups.coords @ strides if groups.kept else np.zeros(groups.coords.shape[0], dtype=np.int64)
    bad = np.flatnonzero((flat < 0) | (flat >= size))
    if bad.size:
        raise ValueError(f"Obtained a write index of {flat[bad[0]]} which is outside of bounds of [0, {size})")
    out = xp.zeros(size, dtype=input_values.dtype)
    if flat.size:
        out[xp.asarray(flat)] = _fold_groups(xp, kind, input_values, groups)
    return out.reshape(tuple(groups.out_shape))


def _sparse_reduce_sparse(xp: Any, kind: str, input_indices: Any, input_values: Any, input_shape: Any,
                          reduction_axes: Any, keep_dims: bool) -> tuple:
    groups = _groups(input_indices, input_values, input_shape, reduction_axes, keep_dims)
    out_indices = np.zeros((groups.coords.shape[0], len(groups.out_shape)), dtype=np.int64)
    if keep_dims:
        out_indices[:, groups.kept] = groups.coords
    else:
        out_indices[:, :] = groups.coords
    return (xp.asarray(out_indices), _fold_groups(xp, kind, input_values, groups),
            xp.asarray(np.array(groups.out_shape, dtype=np.int64)))


@kernel("SparseReduceSum")
def sparse_reduce_sum(xp: Any, input_indices: Any, input_values: Any, input_shape: Any, reduction_axes: Any, *,
                      keep_dims: bool = False) -> tuple:
    """The dense sum of a sparse tensor over `reduction_axes` (negative allowed)."""
    return (_sparse_reduce_dense(xp, "sum", input_indices, input_values, input_shape, reduction_axes, keep_dims),)


@kernel("SparseReduceMax")
def sparse_reduce_max(xp: Any, input_indices: Any, input_values: Any, input_shape: Any, reduction_axes: Any, *,
                      keep_dims: bool = False) -> tuple:
    """The dense max of a sparse tensor's entries over `reduction_axes`; 0 where no entry falls."""
    return (_sparse_reduce_dense(xp, "max", input_indices, input_values, input_shape, reduction_axes, keep_dims),)


@kernel("SparseReduceSumSparse", outputs=3)
def sparse_reduce_sum_sparse(xp: Any, input_indices: Any, input_values: Any, input_shape: Any, reduction_axes: Any,
                             *, keep_dims: bool = False) -> tuple:
    """SparseReduceSum as a sparse tensor: one entry per group of entries, in row-major order."""
    return _sparse_reduce_sparse(xp, "sum", input_indices, input_values, input_shape, reduction_axes, keep_dims)


@kernel("SparseReduceMaxSparse", outputs=3)
def sparse_reduce_max_sparse(xp: Any, input_indices: Any, input_values: Any, input_shape: Any, reduction_axes: Any,
                             *, keep_dims: bool = False) -> tuple:
    """SparseReduceMax as a sparse tensor: one entry per group of entries, in row-major order."""
    return _sparse_reduce_sparse(xp, "max", input_indices, input_values, input_shape, reduction_axes, keep_dims)
