"""Kernels of the ops that cut a region out of a tensor, flip it, rotate it, or pad around it.

Slice and StridedSlice turn their begin/end/strides inputs into one Python index tuple per call and
index the input with it, so their outputs are views; ReverseV2 and Reverse are negative-stride views
too. ReverseSequence flips a prefix of each row, Roll rotates along axes (Swin-style window shifts),
and Pad, PadV2 and MirrorPad build a new array.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

from kernels.host import format_dims, host, host_vector
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = [
    "slice_",
    "strided_slice",
    "strided_slice_index",
    "reverse_v2",
    "reverse",
    "reverse_sequence",
    "roll",
    "pad",
    "pad_v2",
    "mirror_pad",
]


# ---------------------------------------------------------------------------------------------------
# Slice


@kernel("Slice")
def slice_(xp: Any, input: Any, begin: Any, size: Any) -> tuple:
    """The box of `input` starting at `begin` with extent `size` (-1: to the end of that dim), a view."""
    starts, sizes = host_vector(begin), host_vector(size)
    if len(starts) != input.ndim or len(sizes) != input.ndim:
        raise ValueError(
            f"Expected begin and size arguments to be 1-D tensors of size {input.ndim}, "
            f"but got shapes {format_dims(begin.shape)} and {format_dims(size.shape)} instead."
        )
    index = []
    for i, (b, s, n) in enumerate(zip(starts, sizes, input.shape)):
        if not 0 <= b <= n:
            raise ValueError(f"Expected begin[{i}] in [0, {n}], but got {b}")
        if s == -1:
            s = n - b
        if not 0 <= s <= n - b:
            raise ValueError(f"Expected size[{i}] in [0, {n - b}], but got {s}")
        index.append(slice(b, b + s))
    return (input[tuple(index)],)


# ---------------------------------------------------------------------------------------------------
# StridedSlice


def _dense_range(n: int, b: int, e: int, s: int, begin_masked: bool, end_masked: bool) -> slice:
    """One dim's TensorFlow [b, e) stride s, canonicalized and clamped, as a Python slice on size n.

    TensorFlow clamps to [0, n] for a positive stride and to [-1, n-1] for a negative one, where -1
    means "before the first element"; Python reads a -1 stop as "the last element", so that case is
    spelled with None (stop) or as an empty slice (start).
    """
    lo, hi = (0, n) if s > 0 else (-1, n - 1)
    if begin_masked:
        b = lo if s > 0 else hi
    else:
        b = min(max(b + n if b < 0 else b, lo), hi)
    if end_masked:
        e = hi if s > 0 else lo
    else:
        e = min(max(e + n if e < 0 else e, lo), hi)
    if s > 0:
        return slice(b, e, s)
    if b < 0:
        return slice(0, 0)
    return slice(b, None if e < 0 else e, s)


# Graphs slice with constant specs, so the same few keys recur on every run; caching skips the
# per-dim Python work on the hot path.
@functools.lru_cache(maxsize=4096)
def strided_slice_index(
    shape: tuple[int, ...],
    begin: tuple[int, ...],
    end: tuple[int, ...],
    strides: tuple[int, ...],
    begin_mask: int = 0,
    end_mask: int = 0,
    ellipsis_mask: int = 0,
    new_axis_mask: int = 0,
    shrink_axis_mask: int = 0,
) -> tuple:
    """The numpy index (ints, slices, None) equal to TensorFlow's StridedSlice on a tensor of `shape`.

    The masks index the sparse spec, the entries as written before the ellipsis is expanded. Per
    entry: an ellipsis bit wins over a new-axis bit, which wins over a shrink bit; a shrinking entry
    reads begin[i] even when its begin_mask bit is set.

        >>> strided_slice_index((4, 5), (1, 0), (3, 0), (1, -1), begin_mask=2, end_mask=2)  # x[1:3, ::-1]
        (slice(1, 3, 1), slice(4, None, -1), Ellipsis)
    """
    sparse_dims = len(begin)
    if len(end) != sparse_dims or len(strides) != sparse_dims:
        raise ValueError(
            "Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
            f"[{sparse_dims}], [{len(end)}], and [{len(strides)}] instead."
        )
    ellipsis_mask &= (1 << sparse_dims) - 1  # bits past the spec name no entry
    if ellipsis_mask & (ellipsis_mask - 1):
        raise ValueError("Multiple ellipses in slice spec not allowed")
    if not ellipsis_mask:
        # No ellipsis in the spec: TensorFlow appends one, so unnamed trailing dims are kept whole.
        ellipsis_mask = 1 << sparse_dims
        sparse_dims += 1
    rank = len(shape)
    ellipsis_at = ellipsis_mask.bit_length() - 1
    new_axes_after_ellipsis = sum(
        1 for i in range(ellipsis_at + 1, sparse_dims) if new_axis_mask & (1 << i)
    )
    index: list[Any] = []
    full = 0  # the input dim the next sparse entry applies to
    for i in range(sparse_dims):
        bit = 1 << i
        if ellipsis_mask & bit:
            stop = min(rank - (sparse_dims - i) + 1 + new_axes_after_ellipsis, rank)
            index.extend([slice(None)] * max(stop - full, 0))
            full = max(stop, full)
            continue
        if new_axis_mask & bit:
            index.append(None)
            continue
        if full >= rank:
            raise ValueError(f"Index out of range using input dim {full}; input has only {rank} dims")
        n, b, s = shape[full], begin[i], strides[i]
        if s == 0:
            raise ValueError(f"strides[{i}] must be non-zero")
        if shrink_axis_mask & bit:
            if s < 0:
                raise ValueError("only stride 1 allowed on non-range indexing.")
            x = b + n if b < 0 else b
            if not 0 <= x < n:
                raise ValueError(f"slice index {x} of dimension {full} out of bounds.")
            index.append(x)
        else:
            index.append(_dense_range(n, b, end[i], s, bool(begin_mask & bit), bool(end_mask & bit)))
        full += 1
    # A trailing Ellipsis matches no dims but keeps numpy from returning a scalar instead of a 0-d array.
    index.append(Ellipsis)
    return tuple(index)


@kernel("StridedSlice")
def strided_slice(
    xp: Any,
    input: Any,
    begin: Any,
    end: Any,
    strides: Any,
    *,
    begin_mask: int = 0,
    end_mask: int = 0,
    ellipsis_mask: int = 0,
    new_axis_mask: int = 0,
    shrink_axis_mask: int = 0,
) -> tuple:
    """Python-style extended slicing with TensorFlow's masks; the result is a view of `input`."""
    index = strided_slice_index(
        input.shape,
        tuple(host_vector(begin)),
        tuple(host_vector(end)),
        tuple(host_vector(strides)),
        begin_mask,
        end_mask,
        ellipsis_mask,
        new_axis_mask,
        shrink_axis_mask,
    )
    return (input[index],)


# ---------------------------------------------------------------------------------------------------
# ReverseV2


@kernel("ReverseV2")
def reverse_v2(xp: Any, tensor: Any, axis: Any) -> tuple:
    """`tensor` with the order of elements along each dim in `axis` reversed (a view)."""
    rank = tensor.ndim
    flipped = set()
    for i, a in enumerate(host_vector(axis)):
        if not -rank <= a < rank:
            raise ValueError(f"'axis'[{i}] = {a} is out of valid range [0, {rank - 1}]")
        a %= rank
        if a in flipped:
            raise ValueError(f"axis {a} specified more than once.")
        flipped.add(a)
    if not flipped:
        return (tensor,)
    return (tensor[tuple(slice(None, None, -1) if d in flipped else slice(None) for d in range(rank))],)


@kernel("Reverse")
def reverse(xp: Any, tensor: Any, dims: Any) -> tuple:
    """Reverse v1: `dims` is a bool per dim of `tensor`, true where that dim is flipped (a view)."""
    flags = host_vector(dims)
    if len(flags) != tensor.ndim or dims.ndim != 1:
        raise ValueError(
            "'dims' must have the same number of values as 'input' has dimensions. "
            f"'input' has {tensor.ndim}'dims' has {len(flags)} values"
        )
    if tensor.ndim > 8:
        raise ValueError("reverse is not implemented for tensors of rank > 8.")
    return (tensor[tuple(slice(None, None, -1) if f else slice(None) for f in flags)],)


@kernel("ReverseSequence")
def reverse_sequence(xp: Any, input: Any, seq_lengths: Any, *, seq_dim: int, batch_dim: int = 0) -> tuple:
    """For each position b along `batch_dim`, the first seq_lengths[b] entries along `seq_dim` reversed;
    the rest stay where they are."""
    rank = input.ndim
    if batch_dim == seq_dim:
        raise ValueError(f"batch_dim == seq_dim == {seq_dim}")
    if seq_dim < 0:
        raise ValueError(f"Invalid seq_dim {seq_dim}")
    if seq_dim >= rank:
        raise ValueError(f"seq_dim must be < input rank ( {seq_dim} vs. {rank})")
    if batch_dim < 0:
        raise ValueError(f"Invalid batch_dim {batch_dim}")
    if batch_dim >= rank:
        raise ValueError(f"batch_dim must be < input rank ( {batch_dim} vs. {rank})")
    if seq_lengths.ndim != 1:
        raise ValueError(f"seq_lengths must be 1-dim, not {seq_lengths.ndim}")
    lengths = host_vector(seq_lengths)
    n_batch, n_seq = input.shape[batch_dim], input.shape[seq_dim]
    if len(lengths) != n_batch:
        raise ValueError(f"Length of seq_lengths != input.dims({batch_dim}), ({len(lengths)} vs. {n_batch})")
    for b, length in enumerate(lengths):
        if length < 0:
            raise ValueError(f"seq_lens({b}) < 0")
        if length > n_seq:
            raise ValueError(f"seq_lens({b}) > input.dims({seq_dim})")
    if input.size == 0:
        return (input,)
    # Source position of output position i in row b: L-1-i inside the prefix, i after it.
    lens = xp.asarray(lengths, dtype=xp.int64).reshape(n_batch, 1)
    pos = xp.arange(n_seq, dtype=xp.int64).reshape(1, n_seq)
    source = xp.where(pos < lens, lens - 1 - pos, pos)
    shape = [1] * rank
    shape[batch_dim], shape[seq_dim] = n_batch, n_seq
    if batch_dim > seq_dim:
        source = source.T
    source = xp.broadcast_to(source.reshape(shape), input.shape)
    return (xp.take_along_axis(input, source, axis=seq_dim),)


# ---------------------------------------------------------------------------------------------------
# Roll


@kernel("Roll")
def roll(xp: Any, input: Any, shift: Any, axis: Any) -> tuple:
    """`input` rotated by shift[i] along axis[i]: element j moves to (j + shift) mod n. Shifts may be
    negative or larger than the dim; an axis named twice rotates by the sum of its shifts."""
    if input.ndim < 1:
        raise ValueError("input must be 1-D or higher")
    for name, t in (("shift", shift), ("axis", axis)):
        if t.ndim > 1:
            raise ValueError(f"{name} must be a scalar or a 1-D vector. Found: {format_dims(t.shape)}")
    shifts, axes = host_vector(shift), host_vector(axis)
    if len(shifts) != len(axes):
        raise ValueError("shift and axis must have the same size")
    total = [0] * input.ndim
    for s, a in zip(shifts, axes):
        d = a + input.ndim if a < 0 else a
        if not 0 <= d < input.ndim:
            raise ValueError(f"axis {d} is out of range")
        total[d] += s
    moved = [d for d in range(input.ndim) if input.shape[d] and total[d] % input.shape[d]]
    if not moved:
        return (input,)
    return (xp.roll(input, [total[d] % input.shape[d] for d in moved], axis=moved),)


# ---------------------------------------------------------------------------------------------------
# Padding


def _paddings(paddings: Any, x: Any) -> list[tuple[int, int]]:
    """The [rank, 2] paddings input as (before, after) pairs, checked against `x`."""
    if paddings.ndim != 2 or paddings.shape[1] != 2 or paddings.shape[0] != x.ndim:
        raise ValueError(
            "The first dimension of paddings must be the rank of inputs, and paddings must be a "
            f"matrix with 2 columns: paddings {format_dims(paddings.shape)}, input {format_dims(x.shape)}"
        )
    pairs = [(int(b), int(a)) for b, a in host(paddings)]
    for b, a in pairs:
        if b < 0 or a < 0:
            raise ValueError(f"Paddings must be non-negative: {b} {a}")
    return pairs


def _padded_shape(x: Any, pairs: list[tuple[int, int]], memory_limit: int | None, op: str) -> tuple[int, ...]:
    out_shape = tuple(n + b + a for n, (b, a) in zip(x.shape, pairs))
    check_elements(math.prod(out_shape), x.dtype, memory_limit, f"{op} output", out_shape)
    return out_shape


def _constant_pad(xp: Any, x: Any, pairs: list[tuple[int, int]], value: Any, memory_limit: int | None, op: str) -> Any:
    if not any(b or a for b, a in pairs):
        return x
    out_shape = _padded_shape(x, pairs, memory_limit, op)
    out = xp.empty(out_shape, dtype=x.dtype)
    out[...] = value
    out[tuple(slice(b, b + n) for n, (b, _) in zip(x.shape, pairs))] = x
    return out


@kernel("Pad")
def pad(xp: Any, input: Any, paddings: Any, *, memory_limit: int | None = None) -> tuple:
    """`input` with paddings[i] = (before, after) zeros added around dim i."""
    return (_constant_pad(xp, input, _paddings(paddings, input), 0, memory_limit, "Pad"),)


@kernel("PadV2")
def pad_v2(xp: Any, input: Any, paddings: Any, constant_values: Any, *, memory_limit: int | None = None) -> tuple:
    """Pad with the scalar `constant_values` instead of zeros."""
    return (_constant_pad(xp, input, _paddings(paddings, input), constant_values, memory_limit, "PadV2"),)


@kernel("MirrorPad")
def mirror_pad(xp: Any, input: Any, paddings: Any, *, mode: Literal["REFLECT", "SYMMETRIC"],
               memory_limit: int | None = None) -> tuple:
    """`input` padded with its own mirror image: REFLECT leaves the edge out, SYMMETRIC repeats it."""
    pairs = _paddings(paddings, input)
    # REFLECT may mirror at most n-1 cells per side, SYMMETRIC at most n; TensorFlow refuses more.
    edge = 1 if mode == "REFLECT" else 0
    for n, (b, a) in zip(input.shape, pairs):
        if mode == "REFLECT" and (b >= n or a >= n):
            raise ValueError(f"paddings must be less than the dimension size: {b}, {a} not less than {n}")
        if mode == "SYMMETRIC" and (b > n or a > n):
            raise ValueError(f"paddings must be no greater than the dimension size: {b}, {a} greater than {n}")
    _padded_shape(input, pairs, memory_limit, "MirrorPad")
    out = input
    for d, (b, a) in enumerate(pairs):
        if not b and not a:
            continue
        n = out.shape[d]
        lead = (slice(None),) * d
        parts = []
        if b:
            parts.append(out[lead + (slice(edge + b - 1, edge - 1 if edge else None, -1),)])
        parts.append(out)
        if a:
            stop = n - 1 - edge - a  # -1 would mean "the last element" to Python: spell it None
            parts.append(out[lead + (slice(n - 1 - edge, stop if stop >= 0 else None, -1),)])
        out = xp.concatenate(parts, axis=d)
    return (out,)
