"""A SparseTensor as TensorFlow's sparse kernels read it: three tensors, `indices` (int64 [N, rank], one row
per stored value), `values` ([N]) and `dense_shape` (int64 [rank]), and the checks and orderings those
kernels share (`tensorflow/core/util/sparse/sparse_tensor.h`).

Index bookkeeping runs on the host with numpy (index tensors are small next to the data they place);
values stay in the kernel's array module. "Sorted" means row-major (lexicographic) order of the index
rows, which many sparse ops require and `SparseReorder` restores.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims

__all__ = [
    "to_numpy",
    "index_string",
    "check_indices_valid",
    "check_sparse_tensor",
    "lexicographic_order",
    "group_starts",
]


def to_numpy(a: Any) -> np.ndarray:
    """An array on the host: numpy as is, cupy copied back."""
    return np.asarray(a) if isinstance(a, np.ndarray) or not hasattr(a, "get") else a.get()


def index_string(row: Any) -> str:
    """One index row as TensorFlow's messages write it: [0,1] (for rank 0, TensorFlow writes a lone "[")."""
    values = [str(int(v)) for v in row]
    return "[" + ",".join(values) + ("]" if values else "")


def check_indices_valid(indices: np.ndarray, shape: np.ndarray) -> None:
    """TensorFlow's `SparseTensor::IndicesValid`: walking the rows in order, the first one out of bounds or
    not after its predecessor names the error (bounds first within a row)."""
    n = indices.shape[0]
    if n == 0:
        return
    out_of_bounds = ((indices < 0) | (indices >= shape)).any(axis=1)
    order = np.zeros(n, dtype=np.int8)  # 1: after its predecessor; 0: repeats it; -1: before it
    if n > 1:
        order[1:] = _compare_rows(indices[:-1], indices[1:])
    order[0] = 1
    bad = np.flatnonzero(out_of_bounds | (order < 1))
    if not bad.size:
        return
    i = int(bad[0])
    where = f"indices[{i}] = {index_string(indices[i])}"
    if out_of_bounds[i]:
        raise ValueError(f"{where} is out of bounds: need 0 <= index < {format_dims(shape.tolist())}")
    if order[i] == 0:
        raise ValueError(f"{where} is repeated")
    raise ValueError(f"{where} is out of order. Many sparse ops require sorted indices.")


def _compare_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row pair: 1 if b's row comes after a's lexicographically, 0 if equal, -1 if before."""
    if not a.shape[1]:
        return np.zeros(a.shape[0], dtype=np.int8)
    differs = a != b
    first = np.argmax(differs, axis=1)
    rows = np.arange(a.shape[0])
    after = b[rows, first] > a[rows, first]
    return np.where(differs.any(axis=1), np.where(after, 1, -1), 0).astype(np.int8)


def check_sparse_tensor(indices: Any, values: Any, shape: Any) -> None:
    """The checks of TensorFlow's `SparseTensor::Create` (shared by SparseReorder, SparseSlice, ...)."""
    if indices.ndim != 2:
        raise ValueError(f"Sparse indices must be rank 2 but is rank {indices.ndim}")
    if values.ndim != 1:
        raise ValueError(f"Sparse values must be rank 1 but is rank {values.ndim}")
    if shape.ndim != 1:
        raise ValueError(f"Sparse shape must be rank 1 but is rank {shape.ndim}")
    if indices.shape[0] != values.shape[0]:
        raise ValueError(f"Number of elements in indices ({indices.shape[0]}) and values ({values.shape[0]}) "
                         "do not match")
    if indices.shape[1] != shape.shape[0]:
        raise ValueError(f"Index rank ({indices.shape[1]}) and shape rank ({shape.shape[0]}) do not match")


def lexicographic_order(indices: np.ndarray, dims: list[int] | None = None) -> np.ndarray:
    """The stable permutation sorting the index rows by `dims` (all, in order, when None)."""
    dims = list(range(indices.shape[1])) if dims is None else dims
    if not dims or indices.shape[0] < 2:
        return np.arange(indices.shape[0])
    # np.lexsort sorts by its LAST key first, and is stable.
    return np.lexsort([indices[:, d] for d in reversed(dims)])


def group_starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal rows of the (sorted) 2-D `keys` starts."""
    if keys.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    changed = (keys[1:] != keys[:-1]).any(axis=1) if keys.shape[1] else np.zeros(keys.shape[0] - 1, dtype=bool)
    return np.flatnonzero(np.r_[True, changed])
