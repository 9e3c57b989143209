"""Kernels of the ops that return a copy of a tensor with some positions rewritten: the TensorScatter
family (Update, Add, Sub, Max, Min) and ScatterNdNonAliasingAdd at index rows, the Inplace ops
(InplaceUpdate, InplaceAdd, InplaceSub) at rows of the first dim, and TensorStridedSliceUpdate over a
strided slice (tensor[begin:end:strides] = value in tf.function code).

Like TensorFlow on CPU, duplicate index rows accumulate for Add/Sub/Max/Min, and for Update the last
row wins (numpy's assignment order; on a GPU cupy leaves the winner unspecified, as CUDA TensorFlow
does). Never in place: inputs are shared between runs, so every kernel writes into a copy.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from kernels.array.slicing import strided_slice_index
from kernels.host import format_dims, host, host_vector
from kernels.registry import kernel

__all__ = [
    "inplace_add",
    "inplace_sub",
    "inplace_update",
    "scatter_nd_non_aliasing_add",
    "tensor_scatter_add",
    "tensor_scatter_max",
    "tensor_scatter_min",
    "tensor_scatter_sub",
    "tensor_scatter_update",
    "tensor_strided_slice_update",
]

# TensorFlow's bad_indices_policy attr: "" and "DEFAULT" mean ERROR on CPU; IGNORE skips bad rows.
BadIndicesPolicy = Literal["", "DEFAULT", "ERROR", "IGNORE"]


# ---------------------------------------------------------------------------------------------------
# TensorScatter*


def _scatter_rows(xp: Any, tensor: Any, indices: Any, updates: Any, policy: str) -> tuple[Any, Any, Any] | None:
    """The flat slab of a copy of `tensor` [prod(shape[:K]), rest], the linear row of each good index row,
    and the update slab of each; None when there is nothing to write. Raises TensorFlow's errors."""
    if indices.ndim < 1:
        raise ValueError(f"Indices shape must have rank at least one. Found:{format_dims(indices.shape)}")
    if updates.ndim < 1:
        raise ValueError(f"Updates shape must have rank at least one. Found:{format_dims(updates.shape)}")
    k = indices.shape[-1]
    shape = tensor.shape
    outer = indices.shape[:-1]
    if k > len(shape) or updates.shape[: len(outer)] != outer:
        raise ValueError(f"Outer dimensions of indices and update must match. Indices shape: "
                         f"{format_dims(indices.shape)}, updates shape:{format_dims(updates.shape)}")
    if updates.shape != outer + shape[k:]:
        raise ValueError(f"Inner dimensions of output shape must match inner dimensions of updates shape. "
                         f"Output: {format_dims(shape)} updates: {format_dims(updates.shape)}")
    n = math.prod(outer)
    if n and (k == 0 or tensor.size == 0):
        raise ValueError("Indices and updates specified for empty output shape")
    if n == 0:
        return None
    rows = indices.reshape(n, k).astype(np.int64, copy=False)
    bound = xp.asarray(shape[:k], dtype=np.int64)
    bad = ((rows < 0) | (rows >= bound)).any(axis=1)
    values = updates.reshape(n, -1)
    if bool(bad.any()):
        if policy != "IGNORE":
            i = int(xp.argmax(bad))
            raise IndexError(
                f"indices[{i}] = {format_dims(host(rows[i]))} does not index into shape {format_dims(shape)}"
            )
        keep = xp.logical_not(bad)
        rows, values = rows[keep], values[keep]
    strides = xp.asarray([math.prod(shape[d + 1 : k]) for d in range(k)], dtype=np.int64)
    linear = (rows * strides).sum(axis=1)
    flat = tensor.copy().reshape(math.prod(shape[:k]), -1)
    return flat, linear, values


def _scatter(xp: Any, tensor: Any, indices: Any, updates: Any, policy: str, combine: str) -> Any:
    found = _scatter_rows(xp, tensor, indices, updates, policy)
    if found is None:
        return tensor.copy()
    flat, linear, values = found
    if combine == "update":
        flat[linear] = values
    elif combine == "add":
        xp.add.at(flat, linear, values)
    elif combine == "sub":
        xp.subtract.at(flat, linear, values)
    else:
        _scatter_extreme(xp, flat, linear, values, combine)
    return flat.reshape(tensor.shape)


def _scatter_extreme(xp: Any, flat: Any, linear: Any, values: Any, combine: str) -> None:
    """Max/Min as TensorFlow applies them, one update at a time: out = (out < u) ? u : out for max. A NaN
    update never wins and a NaN already there stays, where numpy's maximum would spread every NaN."""
    ufunc = xp.maximum if combine == "max" else xp.minimum
    if flat.dtype.kind != "f":
        ufunc.at(flat, linear, values)
        return
    was_nan = xp.isnan(flat)
    losing = xp.asarray(-np.inf if combine == "max" else np.inf, dtype=flat.dtype)
    ufunc.at(flat, linear, xp.where(xp.isnan(values), losing, values))
    if bool(was_nan.any()):
        flat[was_nan] = np.nan


@kernel("TensorScatterUpdate")
def tensor_scatter_update(xp: Any, tensor: Any, indices: Any, updates: Any, *,
                          bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """A copy of `tensor` with the slices at the index rows of `indices` [..., K] replaced by `updates`."""
    return (_scatter(xp, tensor, indices, updates, bad_indices_policy, "update"),)


@kernel("TensorScatterAdd")
def tensor_scatter_add(xp: Any, tensor: Any, indices: Any, updates: Any, *,
                       bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """A copy of `tensor` with `updates` added at the index rows (duplicates add up)."""
    return (_scatter(xp, tensor, indices, updates, bad_indices_policy, "add"),)


@kernel("TensorScatterSub")
def tensor_scatter_sub(xp: Any, tensor: Any, indices: Any, updates: Any, *,
                       bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """A copy of `tensor` with `updates` subtracted at the index rows."""
    return (_scatter(xp, tensor, indices, updates, bad_indices_policy, "sub"),)


@kernel("TensorScatterMax")
def tensor_scatter_max(xp: Any, tensor: Any, indices: Any, updates: Any, *,
                       bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """A copy of `tensor` holding the larger of itself and each update at the index rows."""
    return (_scatter(xp, tensor, indices, updates, bad_indices_policy, "max"),)


@kernel("TensorScatterMin")
def tensor_scatter_min(xp: Any, tensor: Any, indices: Any, updates: Any, *,
                       bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """A copy of `tensor` holding the smaller of itself and each update at the index rows."""
    return (_scatter(xp, tensor, indices, updates, bad_indices_policy, "min"),)


@kernel("ScatterNdNonAliasingAdd")
def scatter_nd_non_aliasing_add(xp: Any, input: Any, indices: Any, updates: Any, *,
                                bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """TensorScatterAdd under its older name."""
    return (_scatter(xp, input, indices, updates, bad_indices_policy, "add"),)


# ---------------------------------------------------------------------------------------------------
# Inplace*


def _inplace(xp: Any, x: Any, i: Any, v: Any, combine: str) -> Any:
    if i.ndim != 1:
        raise ValueError(f"i must be a vector. {format_dims(i.shape)}")
    if x.ndim != v.ndim:
        raise ValueError(
            f"x and v shape doesn't match (ranks differ): {format_dims(x.shape)} vs. {format_dims(v.shape)}"
        )
    for d in range(1, x.ndim):
        if x.shape[d] != v.shape[d]:
            raise ValueError(f"x and v shape doesn't match at index {d} : {format_dims(x.shape)} vs. "
                             f"{format_dims(v.shape)}")
    if x.ndim == 0 or i.shape[0] != v.shape[0]:
        raise ValueError(f"i and x shape doesn't match at index 0 : {format_dims(i.shape)} vs. {format_dims(v.shape)}")
    out = x.copy()
    if i.shape[0] == 0:
        return out
    if x.shape[0] == 0:
        raise ValueError(f"i has {i.shape[0]} rows to write into x of shape {format_dims(x.shape)}, which has none")
    # NOTE: TensorFlow's kernel wraps each row index into range ((i % n + n) % n) rather than refusing it.
    rows = i.astype(np.int64, copy=False) % x.shape[0]
    if combine == "update":
        out[rows] = v
    elif combine == "add":
        xp.add.at(out, rows, v)
    else:
        xp.subtract.at(out, rows, v)
    return out


@kernel("InplaceUpdate")
def inplace_update(xp: Any, x: Any, i: Any, v: Any) -> tuple:
    """A copy of `x` with rows i[j] of its first dim set to v[j] (despite the name, x is not changed)."""
    return (_inplace(xp, x, i, v, "update"),)


@kernel("InplaceAdd")
def inplace_add(xp: Any, x: Any, i: Any, v: Any) -> tuple:
    """A copy of `x` with v[j] added to row i[j]."""
    return (_inplace(xp, x, i, v, "add"),)


@kernel("InplaceSub")
def inplace_sub(xp: Any, x: Any, i: Any, v: Any) -> tuple:
    """A copy of `x` with v[j] subtracted from row i[j]."""
    return (_inplace(xp, x, i, v, "sub"),)


# ---------------------------------------------------------------------------------------------------
# TensorStridedSliceUpdate


@kernel("TensorStridedSliceUpdate")
def tensor_strided_slice_update(xp: Any, input: Any, begin: Any, end: Any, strides: Any, value: Any, *,
                                begin_mask: int = 0, end_mask: int = 0, ellipsis_mask: int = 0,
                                new_axis_mask: int = 0, shrink_axis_mask: int = 0) -> tuple:
    """A copy of `input` with the StridedSlice region (same masks) set to `value`, broadcast to its shape."""
    index = strided_slice_index(input.shape, tuple(host_vector(begin)), tuple(host_vector(end)),
                                tuple(host_vector(strides)), begin_mask, end_mask, ellipsis_mask,
                                new_axis_mask, shrink_axis_mask)
    out = input.copy()
    target = out[index]
    final = target.shape
    # numpy's assignment rule, which TensorFlow shares here: right-aligned dims equal or 1, and any
    # extra leading dims of `value` of size 1.
    extra = value.shape[: max(value.ndim - len(final), 0)]
    if any(e != 1 for e in extra) or any(v not in (1, f) for v, f in zip(value.shape[::-1], final[::-1])):
        raise ValueError(
            f"Cannot broadcast input shape {format_dims(value.shape)} into final shape {format_dims(final)}"
        )
    out[index] = value
    return (out,)
