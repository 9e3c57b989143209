"""Kernels of the ops that read, change or build a tensor's shape without touching its values' meaning.

Shape queries (Shape, ShapeN, Size, Rank), re-layouts (Reshape, Squeeze, ExpandDims, Transpose,
BroadcastTo, Tile, Bitcast), shape checks and arithmetic (EnsureShape, BroadcastArgs, and the gradient
helpers BroadcastGradientArgs and ConcatOffset) and shape-driven constructors (Fill, Empty, ZerosLike,
OnesLike, Range). Shape-valued inputs are small integer arrays; they are read to
host Python ints once per call, which on a GPU is one small device-to-host copy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.host import format_dims, host_scalar, host_vector
from kernels.limits import check_elements
from kernels.partial_shape import compatible
from kernels.registry import kernel

__all__ = [
    "shape",
    "shape_n",
    "size",
    "rank",
    "reshape",
    "squeeze",
    "expand_dims",
    "transpose",
    "conjugate_transpose",
    "fill",
    "zeros_like",
    "ones_like",
    "range_",
    "broadcast_to",
    "broadcast_args",
    "broadcast_gradient_args",
    "concat_offset",
    "empty",
    "tile",
    "ensure_shape",
    "bitcast",
]


def _broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of two shapes under numpy/TF rules; ValueError naming both when incompatible."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and da != 1 and db != 1:
            raise ValueError(f"Incompatible shapes: {format_dims(a)} vs. {format_dims(b)}")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


# ---------------------------------------------------------------------------------------------------
# Shape queries


@kernel("Shape")
def shape(xp: Any, x: Any, *, out_type: Any = np.int32) -> tuple:
    """The shape of `x` as a vector of `out_type` (int32 unless the graph asks for int64)."""
    return (xp.asarray(x.shape, dtype=out_type),)


@kernel("ShapeN", outputs=lambda attrs: attrs["N"])
def shape_n(xp: Any, *xs: Any, out_type: Any = np.int32) -> tuple:
    """The shapes of each of the N inputs."""
    return tuple(xp.asarray(x.shape, dtype=out_type) for x in xs)


@kernel("Size")
def size(xp: Any, x: Any, *, out_type: Any = np.int32) -> tuple:
    """The number of elements of `x` as a scalar of `out_type`."""
    return (xp.asarray(x.size, dtype=out_type),)


@kernel("Rank")
def rank(xp: Any, x: Any) -> tuple:
    """The number of dimensions of `x`; TensorFlow's Rank is always int32."""
    return (xp.asarray(x.ndim, dtype=np.int32),)


# ---------------------------------------------------------------------------------------------------
# Re-layouts


def _reshape_target(sizes: list[int], in_shape: tuple[int, ...], in_count: int) -> tuple[int, ...]:
    """The concrete shape for Reshape, following TensorFlow's rules for -1 and zero-sized dims.

    Unlike numpy, a -1 next to a 0 is allowed: zero-sized dims are left out of both products, so
    reshaping a [0, 3] tensor to [-1, 0] gives [3, 0], as TensorFlow does.
    """
    unknown = -1
    product = 1  # product of the known non-zero sizes
    sizes_have_zero = False
    for d, s in enumerate(sizes):
        if s == -1:
            if unknown != -1:
                raise ValueError(f"Only one input size may be -1, not both {unknown} and {d}")
            unknown = d
        elif s < 0:
            raise ValueError(f"Size {d} must be non-negative, not {s}")
        elif s == 0:
            sizes_have_zero = True
        else:
            product *= s
    target = list(sizes)
    if unknown != -1:
        # NOTE: when the requested shape has a zero, TensorFlow leaves the input's zero dims out too,
        # so that the -1 can still be inferred from the non-zero dims.
        count, input_has_zero = 1, False
        for d in in_shape:
            if d > 0 or not sizes_have_zero:
                count *= d
            else:
                input_has_zero = True
        missing = count // product
        if not input_has_zero and missing * product != count:
            raise ValueError(
                f"Input to reshape is a tensor with {count} values, but the requested shape "
                f"requires a multiple of {product}"
            )
        target[unknown] = missing
    requested = math.prod(target)
    if requested != in_count:
        raise ValueError(
            f"Input to reshape is a tensor with {in_count} values, but the requested shape has {requested}"
        )
    return tuple(target)


@kernel("Reshape")
def reshape(xp: Any, tensor: Any, shape: Any) -> tuple:
    """`tensor` with the shape `shape`; one -1 is inferred, and 0 is a real (empty) size."""
    if shape.ndim > 1:
        raise ValueError(f"sizes input must be 1-D, not {format_dims(shape.shape)}")
    target = _reshape_target(host_vector(shape), tensor.shape, tensor.size)
    return (tensor.reshape(target),)


@kernel("Squeeze")
def squeeze(xp: Any, x: Any, *, squeeze_dims: tuple[int, ...] = (), axis: tuple[int, ...] = ()) -> tuple:
    """`x` without the size-1 dims listed (all size-1 dims when none are listed).

    The GraphDef attr is `squeeze_dims`; `axis` is accepted too because tf.raw_ops spells it so.
    """
    dims = squeeze_dims or axis
    if not dims:
        return (x.reshape(tuple(d for d in x.shape if d != 1)),)
    drop = set()
    for d in dims:
        if not -x.ndim <= d < x.ndim:
            raise ValueError(f"Tried to squeeze dim index {d} for tensor with {x.ndim} dimensions.")
        d %= x.ndim
        if x.shape[d] != 1:
            raise ValueError(f"Can not squeeze dim[{d}], expected a dimension of 1, got {x.shape[d]}")
        drop.add(d)
    return (x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in drop)),)


@kernel("ExpandDims")
def expand_dims(xp: Any, x: Any, dim: Any) -> tuple:
    """`x` with a size-1 dim inserted at `dim` (in [-rank-1, rank])."""
    values = host_vector(dim)
    if len(values) != 1:
        raise ValueError(f"'dim' must be a tensor with a single value, got {len(values)} values")
    d = values[0]
    if not -x.ndim - 1 <= d <= x.ndim:
        raise ValueError(f"Tried to expand dim index {d} for tensor with {x.ndim} dimensions.")
    if d < 0:
        d += x.ndim + 1
    return (x.reshape(x.shape[:d] + (1,) + x.shape[d:]),)


def _permutation(perm: Any, ndim: int) -> tuple[int, ...]:
    axes = host_vector(perm)
    if len(axes) != ndim:
        raise ValueError(
            f"transpose expects a vector of size {ndim}. But input(1) is a vector of size {len(axes)}"
        )
    # TensorFlow accepts negative entries in perm and counts them from the end.
    axes = [a + ndim if a < 0 else a for a in axes]
    for i in range(ndim):
        if i not in axes:
            raise ValueError(f"{i} is missing from {{{','.join(map(str, host_vector(perm)))}}}.")
    return tuple(axes)


@kernel("Transpose")
def transpose(xp: Any, x: Any, perm: Any) -> tuple:
    """`x` with its dims permuted by `perm` (a view)."""
    return (xp.transpose(x, _permutation(perm, x.ndim)),)


@kernel("ConjugateTranspose")
def conjugate_transpose(xp: Any, x: Any, perm: Any) -> tuple:
    """Transpose, then complex conjugate (a plain transpose for real dtypes)."""
    y = xp.transpose(x, _permutation(perm, x.ndim))
    return (xp.conj(y) if xp.iscomplexobj(y) else y,)


@kernel("BroadcastTo")
def broadcast_to(xp: Any, input: Any, shape: Any, *, memory_limit: int | None = None) -> tuple:
    """`input` broadcast to `shape`; returned as a read-only view, never written by later kernels."""
    target = tuple(host_vector(shape))
    if len(target) < input.ndim or _broadcast_shapes(input.shape, target) != target:
        raise ValueError(f"Incompatible shapes: {format_dims(input.shape)} vs. {format_dims(target)}")
    # NOTE: a view costs nothing here, but whatever reads it next allocates its full size.
    check_elements(math.prod(target), input.dtype, memory_limit, "BroadcastTo output", target)
    return (xp.broadcast_to(input, target),)


@kernel("Tile")
def tile(xp: Any, input: Any, multiples: Any, *, memory_limit: int | None = None) -> tuple:
    """`input` repeated `multiples[i]` times along each dim i."""
    reps = host_vector(multiples)
    if len(reps) != input.ndim:
        raise ValueError(
            f"Expected multiples argument to be a vector of length {input.ndim} but got length {len(reps)}"
        )
    for i, r in enumerate(reps):
        if r < 0:
            raise ValueError(f"Expected multiples[{i}] >= 0, but got {r}")
    if memory_limit is not None:
        out = [d * r for d, r in zip(input.shape, reps)]
        check_elements(math.prod(out), input.dtype, memory_limit, "Tile output", out)
    if all(r == 1 for r in reps):
        return (input,)  # nothing to repeat (kernels never write their inputs, so sharing it is safe)
    return (xp.tile(input, tuple(reps)),)


@kernel("Bitcast")
def bitcast(xp: Any, input: Any, *, type: Any) -> tuple:
    """The bytes of `input` reinterpreted as `type`; a size change adds or removes the last dim."""
    out_dtype = np.dtype(type)
    in_size, out_size = input.dtype.itemsize, out_dtype.itemsize
    x = xp.ascontiguousarray(input)
    if in_size == out_size:
        return (x.view(out_dtype),)
    if in_size > out_size:
        if in_size % out_size:
            raise ValueError(f"Cannot bitcast from {input.dtype} to {out_dtype}")
        # Each input element becomes a new trailing dim of in_size // out_size elements.
        return (x.reshape(x.shape + (1,)).view(out_dtype),)
    ratio = out_size // in_size
    if out_size % in_size or x.ndim == 0 or x.shape[-1] != ratio:
        raise ValueError(
            f"Cannot bitcast from {input.dtype} to {out_dtype}: the last dimension must be {ratio}, "
            f"got shape {format_dims(x.shape)}"
        )
    return (x.view(out_dtype).reshape(x.shape[:-1]),)


# ---------------------------------------------------------------------------------------------------
# Shape checks


@kernel("EnsureShape")
def ensure_shape(xp: Any, input: Any, *, shape: tuple[int | None, ...] | None = None) -> tuple:
    """`input` unchanged, after checking it is compatible with `shape` (None dims match anything)."""
    if not compatible(shape, tuple(input.shape)):
        raise ValueError(
            f"Shape of tensor input {format_dims(input.shape)} is not compatible with expected shape {format_dims(shape)}."
        )
    return (input,)


# Host only: shape arithmetic on two small vectors, read to Python ints and written back.
@kernel("BroadcastArgs", devices=("cpu",))
def broadcast_args(xp: Any, s0: Any, s1: Any) -> tuple:
    """The shape that shapes `s0` and `s1` broadcast to, in their dtype."""
    out = _broadcast_shapes(tuple(host_vector(s0)), tuple(host_vector(s1)))
    return (xp.asarray(out, dtype=s0.dtype),)


# Host only: like BroadcastArgs, shape arithmetic that gradient code puts into graphs.
@kernel("BroadcastGradientArgs", devices=("cpu",), outputs=2)
def broadcast_gradient_args(xp: Any, s0: Any, s1: Any) -> tuple:
    """(r0, r1): the dims (of the broadcast shape) that the gradient of each operand must be summed over,
    those where that operand's shape, padded with leading 1s, is 1; none at all when the shapes are equal."""
    a, b = tuple(host_vector(s0)), tuple(host_vector(s1))
    _broadcast_shapes(a, b)
    if a == b:
        empty = xp.zeros((0,), dtype=s0.dtype)
        return (empty, empty.copy())
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    r0 = [i for i in range(n) if pa[i] == 1]
    r1 = [i for i in range(n) if pb[i] == 1]
    return (xp.asarray(r0, dtype=s0.dtype), xp.asarray(r1, dtype=s0.dtype))


# Host only: shape arithmetic again (the offsets ConcatV2's gradient slices at).
@kernel("ConcatOffset", devices=("cpu",), outputs=lambda attrs: attrs["N"])
def concat_offset(xp: Any, concat_dim: Any, *shape: Any, N: int) -> tuple:
    """Where each of the N inputs of a concatenation along `concat_dim` starts in its output."""
    shapes = [host_vector(s) for s in shape]
    rank = len(shapes[0])
    given = host_scalar(concat_dim, "concat_dim must be a scalar")
    axis = given + rank if given < 0 else given
    if not 0 <= axis < rank:
        raise ValueError(f"Concat dim is out of range: {given} vs. {rank}")
    offsets, at = [], 0
    for i, dims in enumerate(shapes):
        if len(dims) != rank:
            raise ValueError(f"input {i} should contain {rank} elements, but got {len(dims)}")
        for d in range(rank):
            if d != axis and dims[d] != shapes[0][d]:
                raise ValueError(f"All dimensions except {axis} must match. Input {i} has shape "
                                 f"[{' '.join(map(str, dims))}] and doesn't match input 0 with shape "
                                 f"[{' '.join(map(str, shapes[0]))}].")
        offsets.append(xp.asarray([at if d == axis else 0 for d in range(rank)], dtype=shape[i].dtype))
        at += dims[axis]
    return tuple(offsets)


# ---------------------------------------------------------------------------------------------------
# Constructors


@kernel("Fill")
def fill(xp: Any, dims: Any, value: Any, *, memory_limit: int | None = None) -> tuple:
    """A tensor of shape `dims` filled with the scalar `value`, in value's dtype."""
    target = tuple(host_vector(dims))
    for d in target:
        if d < 0:
            raise ValueError(f"Dimension {d} must be >= 0")
    if value.ndim != 0:
        raise ValueError(f"value must be a scalar, got shape {format_dims(value.shape)}")
    check_elements(math.prod(target), value.dtype, memory_limit, "Fill output", target)
    out = xp.empty(target, dtype=value.dtype)
    out[...] = value
    return (out,)


@kernel("Empty")
def empty(xp: Any, shape: Any, *, dtype: Any, init: bool = False, memory_limit: int | None = None) -> tuple:
    """A tensor of `shape` and `dtype`. TensorFlow leaves it uninitialized unless `init`; here it is always
    zeros (empty bytes for strings), one of the values an uninitialized tensor may hold."""
    if shape.ndim != 1:
        raise ValueError(f"shape must be a vector of int32, got shape {format_dims(shape.shape)}")
    target = tuple(host_vector(shape))
    for d in target:
        if d < 0:
            raise ValueError(f"Dimension {d} must be >= 0")
    check_elements(math.prod(target), dtype, memory_limit, "Empty output", target)
    if np.dtype(dtype) == object:
        out = np.empty(target, dtype=object)
        out[...] = b""
        return (out,)
    return (xp.zeros(target, dtype=dtype),)


@kernel("ZerosLike")
def zeros_like(xp: Any, x: Any) -> tuple:
    return (xp.zeros_like(x),)


@kernel("OnesLike")
def ones_like(xp: Any, x: Any) -> tuple:
    return (xp.ones_like(x),)


@kernel("Range")
def range_(xp: Any, start: Any, limit: Any, delta: Any, *, memory_limit: int | None = None) -> tuple:
    """[start, start+delta, ...) up to `limit`, in the inputs' dtype.

    TensorFlow computes element i as start + i*delta (checked: not by accumulation), so float ranges
    match it bit for bit when computed the same way in the same dtype.
    """
    dtype = start.dtype
    lo, hi, step = start.item(), limit.item(), delta.item()
    if step == 0:
        raise ValueError(f"Requires delta != 0: {step}")
    if step > 0 and lo > hi:
        raise ValueError(f"Requires start <= limit when delta > 0: {lo}/{hi}")
    if step < 0 and lo < hi:
        raise ValueError(f"Requires start >= limit when delta < 0: {lo}/{hi}")
    if np.issubdtype(dtype, np.integer):
        count = (abs(hi - lo) + abs(step) - 1) // abs(step)
    else:
        # NOTE: the element count is computed in the input dtype, as TensorFlow does, not in float64.
        t = dtype.type
        count = int(np.ceil(np.abs((t(hi) - t(lo)) / t(step))))
    check_elements(count, dtype, memory_limit, "Range output", (count,))
    # NOTE: start and delta as numpy scalars of their dtype (exact, as .item() is): on a GPU the inputs may
    # be host arrays, and a cupy array times a numpy array is a TypeError.
    t = dtype.type
    return ((xp.arange(count, dtype=dtype) * t(step) + t(lo)).astype(dtype, copy=False),)
