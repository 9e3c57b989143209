"""Kernels of the set ops (`tf.sets.*`): SetSize and the set operations DenseToDenseSetOperation,
DenseToSparseSetOperation and SparseToSparseSetOperation (`tensorflow/core/kernels/set_kernels.cc`).

A set is the values along the last dimension of a dense tensor, or the entries of a SparseTensor sharing
all but their last index; duplicates count once. The operations ("a-b", "b-a", "intersection", "union",
any case) apply group by group and return a SparseTensor whose row holds the result sorted ascending; its
last dimension is the largest result. Sparse inputs must be sorted when `validate_indices` (the default);
otherwise their groups are the runs of consecutive entries with equal leading indices, as TensorFlow reads
them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.sparse.tensor import check_indices_valid, group_starts, to_numpy

__all__ = ["set_size", "dense_to_dense_set_operation", "dense_to_sparse_set_operation",
           "sparse_to_sparse_set_operation"]

_OPERATIONS = {
    "a-b": lambda a, b: a - b,
    "b-a": lambda a, b: b - a,
    "intersection": lambda a, b: a & b,
    "union": lambda a, b: a | b,
}


def _operation(set_operation: str) -> Any:
    op = _OPERATIONS.get(set_operation.lower())
    if op is None:
        raise ValueError(f"Invalid set_operation {set_operation.lower()}.")
    return op


def _sparse_sets(indices: Any, values: Any, shape: Any, validate_indices: bool
                 ) -> tuple[list[int], list[tuple[tuple[int, ...], set]]]:
    """A sparse input's shape and its groups in order: (leading indices, set of values) per run."""
    if shape.ndim != 1:
        raise ValueError("Shape must be a 1D tensor.")
    dims = [int(d) for d in to_numpy(shape)]
    for d in dims:
        if d < 0:
            raise ValueError(f"Expected shape dimensions to be non-negative, got {d}")
    if len(dims) < 2:
        raise ValueError(f"Invalid rank {len(dims)}.")
    if indices.ndim != 2:
        raise ValueError(f"indices must be a matrix, but got: {format_dims(indices.shape)}")
    if values.ndim != 1:
        raise ValueError(f"vals must be a vec, but got: {format_dims(values.shape)}")
    if indices.shape[0] != values.shape[0]:
        raise ValueError("indices and values rows (indexing dimension) must match. "
                         f"(indices = {indices.shape[0]}, values = {values.shape[0]})")
    if indices.shape[1] != len(dims):
        raise ValueError("Order length must be SparseTensor rank.")
    ix = to_numpy(indices).astype(np.int64)
    if validate_indices:
        check_indices_valid(ix, np.array(dims, dtype=np.int64))
    leading = ix[:, :-1]
    starts = group_starts(leading)
    ends = np.r_[starts[1:], ix.shape[0]].astype(np.int64)
    vals = to_numpy(values).tolist()
    groups = [(tuple(leading[s].tolist()), set(vals[s:e])) for s, e in zip(starts.tolist(), ends.tolist())]
    return dims, groups


def _group_shape(shape1: list[int], shape2: list[int]) -> list[int]:
    for shape in (shape1, shape2):
        if len(shape) < 2:
            raise ValueError(f"Shape [{','.join(map(str, shape))}] has rank {len(shape)} < 2")
    if shape1[:-1] != shape2[:-1]:
        raise ValueError(f"Mismatched shapes [{','.join(map(str, shape1[:-1]))}] vs "
                         f"[{','.join(map(str, shape2[:-1]))}]")
    return shape1[:-1]


def _dense_sets(x: Any) -> list[set]:
    """The sets of a dense input, one per group in row-major order."""
    host = to_numpy(x)
    return [set(row) for row in host.reshape(-1, host.shape[-1]).tolist()] if host.size else \
        [set() for _ in range(int(np.prod(host.shape[:-1], dtype=np.int64)))]


def _result(xp: Any, group_shape: list[int], results: list[tuple[tuple[int, ...], set]], dtype: Any) -> tuple:
    """The output SparseTensor: each non-empty result sorted in its group's row."""
    rows, flat = [], []
    widest = 0
    for group, values in results:
        if not values:
            continue
        ordered = sorted(values)
        rows.extend(group + (k,) for k in range(len(ordered)))
        flat.extend(ordered)
        widest = max(widest, len(ordered))
    indices = np.array(rows, dtype=np.int64).reshape(-1, len(group_shape) + 1)
    if dtype == object:
        values = np.empty(len(flat), dtype=object)
        values[:] = flat
    else:
        values = np.array(flat, dtype=dtype)
    return xp.asarray(indices), values if dtype == object else xp.asarray(values), \
        xp.asarray(np.array(group_shape + [widest], dtype=np.int64))


def _group_indices(group_shape: list[int]) -> list[tuple[int, ...]]:
    return [tuple(int(i) for i in ix) for ix in np.ndindex(*group_shape)]


@kernel("SetSize", devices=("cpu",))
def set_size(xp: Any, set_indices: Any, set_values: Any, set_shape: Any, *, validate_indices: bool = True) -> tuple:
    """How many distinct values each set of a sparse tensor holds (int32, shaped as its leading dims)."""
    dims, groups = _sparse_sets(set_indices, set_values, set_shape, validate_indices)
    out = np.zeros(dims[:-1], dtype=np.int32)
    flat = out.reshape(-1)
    strides = [int(np.prod(dims[k + 1:-1], dtype=np.int64)) for k in range(len(dims) - 1)]
    for group, values in groups:
        index = sum(i * s for i, s in zip(group, strides))
        if not 0 <= index < flat.size:
            raise ValueError(f"Index out of range, {list(group)} vs {format_dims(dims[:-1])}")
        flat[index] = len(values)
    return (xp.asarray(out),)


@kernel("DenseToDenseSetOperation", devices=("cpu",), outputs=3)
def dense_to_dense_set_operation(xp: Any, set1: Any, set2: Any, *, set_operation: str,
                                 validate_indices: bool = True) -> tuple:
    """`set_operation` between the last-dimension sets of two dense tensors, group by group."""
    op = _operation(set_operation)
    group_shape = _group_shape(list(set1.shape), list(set2.shape))
    results = zip(_group_indices(group_shape), (op(a, b) for a, b in zip(_dense_sets(set1), _dense_sets(set2))))
    return _result(xp, group_shape, list(results), set1.dtype)


@kernel("DenseToSparseSetOperation", devices=("cpu",), outputs=3)
def dense_to_sparse_set_operation(xp: Any, set1: Any, set2_indices: Any, set2_values: Any, set2_shape: Any, *,
                                  set_operation: str, validate_indices: bool = True) -> tuple:
    """`set_operation` between the sets of a dense tensor and those of a sparse one, group by group."""
    op = _operation(set_operation)
    dims2, groups2 = _sparse_sets(set2_indices, set2_values, set2_shape, validate_indices)
    group_shape = _group_shape(list(set1.shape), dims2)
    results, k = [], 0
    for group, a in zip(_group_indices(group_shape), _dense_sets(set1)):
        # TensorFlow steps through the sparse groups only when the next one is this group.
        b = set()
        if k < len(groups2) and groups2[k][0] == group:
            b = groups2[k][1]
            k += 1
        results.append((group, op(a, b)))
    return _result(xp, group_shape, results, set1.dtype)


@kernel("SparseToSparseSetOperation", devices=("cpu",), outputs=3)
def sparse_to_sparse_set_operation(xp: Any, set1_indices: Any, set1_values: Any, set1_shape: Any, set2_indices: Any,
                                   set2_values: Any, set2_shape: Any, *, set_operation: str,
                                   validate_indices: bool = True) -> tuple:
    """`set_operation` between the sets of two sparse tensors, walking both groups' lists in step."""
    op = _operation(set_operation)
    dims1, groups1 = _sparse_sets(set1_indices, set1_values, set1_shape, validate_indices)
    dims2, groups2 = _sparse_sets(set2_indices, set2_values, set2_shape, validate_indices)
    group_shape = _group_shape(dims1, dims2)
    results, i, j = [], 0, 0
    while i < len(groups1) or j < len(groups2):
        g1 = groups1[i][0] if i < len(groups1) else None
        g2 = groups2[j][0] if j < len(groups2) else None
        if g1 is not None and (g2 is None or g1 <= g2):
            a, group = groups1[i][1], g1
            i += 1
        else:
            a = set()
        if g2 is not None and (g1 is None or g2 <= g1):
            b, group = groups2[j][1], g2
            j += 1
        else:
            b = set()
        results.append((group, op(a, b)))
    return _result(xp, group_shape, results, set1_values.dtype)
