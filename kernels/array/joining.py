"""Kernels of the ops that join tensors into one or split one into several along an axis.

ConcatV2 and Concat join along an existing axis (V2 takes the axis as its LAST input, v1 as its
FIRST); Pack stacks along a new axis and Unpack undoes it; ParallelConcat stacks rows of one along the
first axis; Split cuts into equal parts and SplitV into parts of given sizes. Split outputs are views of
their input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims, host, host_scalar
from kernels.registry import kernel

__all__ = ["concat_v2", "concat", "pack", "unpack", "split", "split_v", "parallel_concat"]


def _concat(xp: Any, values: tuple, axis: Any) -> tuple:
    rank = values[0].ndim
    if rank == 0:
        raise ValueError("ConcatOp : Can't concatenate scalars (use tf.stack instead)")
    a = host_scalar(axis, "concat_dim tensor should be a scalar integer")
    if not -rank <= a < rank:
        raise ValueError(
            f"ConcatOp : Expected concatenating dimensions in the range [{-rank}, {rank}), but got {a}"
        )
    a %= rank
    first = values[0].shape
    for i, v in enumerate(values[1:], start=1):
        if v.ndim != rank:
            raise ValueError(
                f"ConcatOp : Ranks of all input tensors should match: shape[0] = {format_dims(first)} "
                f"vs. shape[{i}] = {format_dims(v.shape)}"
            )
        for d in range(rank):
            if d != a and v.shape[d] != first[d]:
                raise ValueError(
                    f"ConcatOp : Dimension {d} in both shapes must be equal: shape[0] = {format_dims(first)} "
                    f"vs. shape[{i}] = {format_dims(v.shape)}"
                )
    if len(values) == 1:
        return (values[0],)  # TensorFlow forwards a lone input unchanged
    return (xp.concatenate(values, axis=a),)


@kernel("ConcatV2")
def concat_v2(xp: Any, *values_and_axis: Any) -> tuple:
    """The N `values` joined along `axis`, which is the LAST input."""
    *values, axis = values_and_axis
    return _concat(xp, tuple(values), axis)


@kernel("Concat")
def concat(xp: Any, concat_dim: Any, *values: Any) -> tuple:
    """ConcatV1: the axis is the FIRST input."""
    return _concat(xp, values, concat_dim)


@kernel("Pack")
def pack(xp: Any, *values: Any, axis: int = 0) -> tuple:
    """The N same-shaped `values` stacked along a new dim at `axis` (in [-(rank+1), rank+1))."""
    first = values[0].shape
    out_rank = len(first) + 1
    if not -out_rank <= axis < out_rank:
        raise ValueError(f"axis = {axis} not in [{-out_rank}, {out_rank})")
    if not first and xp is np:
        # Scalars of one dtype (the usual shape vector): np.stack's generic path, an expand_dims per input and
        # then a concatenate, costs several microseconds for what is a list made an array.
        dtype = values[0].dtype
        for v in values:
            if v.shape or v.dtype is not dtype:
                break
        else:
            return (np.array([v[()] for v in values], dtype=dtype),)
    for i, v in enumerate(values[1:], start=1):
        if v.shape != first:
            raise ValueError(
                f"Shapes of all inputs must match: values[0].shape = {format_dims(first)} "
                f"!= values[{i}].shape = {format_dims(v.shape)}"
            )
    return (xp.stack(values, axis=axis),)


@kernel("Unpack", outputs=lambda attrs: attrs["num"])
def unpack(xp: Any, value: Any, *, num: int, axis: int = 0) -> tuple:
    """`value` cut along `axis` into `num` tensors with that dim removed (views)."""
    rank = value.ndim
    if not -rank <= axis < rank:
        raise ValueError(f"axis = {axis} not in [{-rank}, {rank})")
    axis %= rank
    if value.shape[axis] != num:
        raise ValueError(f"Input shape axis {axis} must equal {num}, got shape {format_dims(value.shape)}")
    lead = (slice(None),) * axis
    # The trailing Ellipsis keeps numpy from turning a 0-d result into a scalar.
    return tuple(value[lead + (i, Ellipsis)] for i in range(num))


def _split_axis(axis: Any, rank: int) -> int:
    a = host_scalar(axis, "split_dim tensor should be a scalar integer")
    if not -rank <= a < rank:
        raise ValueError(f"-input rank(-{rank}) <= split_dim < input rank ({rank}), but got {a}")
    return a % rank


def _cut(value: Any, axis: int, sizes: list[int]) -> tuple:
    """Views of `value` along `axis`, one per size, in order."""
    lead = (slice(None),) * axis
    out, start = [], 0
    for s in sizes:
        out.append(value[lead + (slice(start, start + s),)])
        start += s
    return tuple(out)


@kernel("Split", outputs=lambda attrs: attrs["num_split"])
def split(xp: Any, split_dim: Any, value: Any, *, num_split: int) -> tuple:
    """`value` cut along `split_dim` (the FIRST input) into `num_split` equal parts."""
    axis = _split_axis(split_dim, value.ndim)
    n = value.shape[axis]
    if num_split <= 0 or n % num_split:
        raise ValueError(
            "Number of ways to split should evenly divide the split dimension, but got "
            f"split_dim {axis} (size = {n}) and num_split {num_split}"
        )
    return _cut(value, axis, [n // num_split] * num_split)


@kernel("SplitV", outputs=lambda attrs: attrs["num_split"])
def split_v(xp: Any, value: Any, size_splits: Any, split_dim: Any, *, num_split: int) -> tuple:
    """`value` cut along `split_dim` into parts of `size_splits` (one -1 takes what is left)."""
    axis = _split_axis(split_dim, value.ndim)
    n = value.shape[axis]
    sizes = host(size_splits)
    sizes = sizes if isinstance(sizes, list) else [sizes]
    if len(sizes) != num_split:
        raise ValueError(f"Number of split sizes ({len(sizes)}) must equal num_split ({num_split})")
    if num_split == 1 and sizes[0] != n:
        # TensorFlow forwards the input for one output, and does not resolve a -1 there.
        raise ValueError(
            f"If there is only one output, it must have the same size as the input. "
            f"Input size: {n} output size: {sizes[0]}"
        )
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise ValueError("There can only be one -1 in the input.")
    known = sum(s for s in sizes if s != -1)
    if any(s < -1 for s in sizes) or (known != n if not unknown else known > n):
        raise ValueError(
            "Determined shape must either match input shape along split_dim exactly if fully "
            f"specified, or be less than the size of the input along split_dim if not fully specified. "
            f"Got: {known}"
        )
    if unknown:
        sizes[unknown[0]] = n - known
    return _cut(value, axis, sizes)


@kernel("ParallelConcat")
def parallel_concat(xp: Any, *values: Any, shape: tuple[int | None, ...] | None, N: int | None = None) -> tuple:
    """The N `values`, each with a first dim of 1, stacked along that dim into a tensor of `shape`."""
    first = values[0].shape
    for i, v in enumerate(values):
        if v.ndim == 0 or v.shape[0] != 1:
            raise ValueError(f"Input {i} should have size 1 in the first dimension, got shape {format_dims(v.shape)}")
        if v.shape != first:
            raise ValueError(f"All inputs must have the same shape: input 0 has {format_dims(first)}, input {i} "
                             f"has {format_dims(v.shape)}")
    out_shape = (len(values),) + first[1:]
    if shape is None or tuple(shape) != out_shape:
        raise ValueError(f"shape attr {format_dims(shape or ())} does not match the stacked inputs' shape "
                         f"{format_dims(out_shape)}")
    return (xp.concatenate(values, axis=0),)
