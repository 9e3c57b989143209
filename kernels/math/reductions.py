"""Kernels of the reduction ops: a tensor folded along some of its axes into fewer values.

Sum, Mean, Max, Min, Prod, All, Any and EuclideanNorm take the axes as an input tensor (a scalar or a
vector, negatives count from the end, an empty vector reduces nothing) and a `keep_dims` attr; ArgMax
and ArgMin take one axis; Cumsum and Cumprod scan along one axis; L2Loss folds everything.
The result keeps the input's dtype as in TensorFlow: int32 sums wrap in int32 (numpy would widen to
int64), integer means sum in 64 bits and truncate, and half-precision floats accumulate in float32.
An empty reduction gives the reduction's identity: 0, 1, True/False, or for Max/Min the dtype's lowest
/highest value (-inf/inf for floats).
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from kernels.host import format_dims, host_vector
from kernels.registry import kernel

__all__ = [
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_all",
    "reduce_any",
    "euclidean_norm",
    "arg_max",
    "arg_min",
    "cumsum",
    "cumprod",
    "l2_loss",
]

_HALF_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype in _HALF_FLOATS


def _accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype to accumulate in: float32 for 16-bit floats (summing in 16 bits stalls), else the dtype."""
    return np.dtype(np.float32) if dtype in _HALF_FLOATS else dtype


def _reduction_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """The axis input as sorted non-negative ints; ValueError (TensorFlow's words) when out of range
    or repeated."""
    axes = []
    for a in host_vector(axis):
        if not -ndim <= a < ndim:
            raise ValueError(f"Invalid reduction dimension ({a} for input with {ndim} dimension(s)")
        a %= ndim
        if a in axes:
            raise ValueError(f"Invalid reduction arguments: Axes contains duplicate dimension: {a}")
        axes.append(a)
    return tuple(sorted(axes))


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keep_dims: bool) -> tuple[int, ...]:
    if keep_dims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@kernel("Sum")
def reduce_sum(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    axes = _reduction_axes(axis, input.ndim)
    total = xp.sum(input, axis=axes, dtype=_accumulator(input.dtype), keepdims=keep_dims)
    return (xp.asarray(total).astype(input.dtype, copy=False),)


@kernel("Mean")
def reduce_mean(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    """The mean; for integers the sum is taken in 64 bits and divided rounding toward zero."""
    axes = _reduction_axes(axis, input.ndim)
    count = math.prod(input.shape[a] for a in axes)
    if input.dtype.kind not in "iu":
        if count == 0:  # 0/0, as TensorFlow computes it; numpy would also warn
            return (xp.full(_reduced_shape(input.shape, axes, keep_dims), np.nan, dtype=input.dtype),)
        mean = xp.mean(input, axis=axes, dtype=_accumulator(input.dtype), keepdims=keep_dims)
        return (xp.asarray(mean).astype(input.dtype, copy=False),)
    wide = np.dtype(np.int64 if input.dtype.kind == "i" else np.uint64)
    total = xp.asarray(xp.sum(input, axis=axes, dtype=wide, keepdims=keep_dims))
    if count == 0:  # TensorFlow's integer mean of nothing is 0
        return (xp.zeros(total.shape, input.dtype),)
    # total - fmod(total, count) is an exact multiple of count, so floor division truncates here.
    mean = (total - xp.fmod(total, wide.type(count))) // wide.type(count)
    return (mean.astype(input.dtype),)


def _extremum(xp: Any, input: Any, axis: Any, keep_dims: bool, name: str, empty_value: Any) -> Any:
    axes = _reduction_axes(axis, input.ndim)
    if any(input.shape[a] == 0 for a in axes):
        return xp.full(_reduced_shape(input.shape, axes, keep_dims), empty_value, dtype=input.dtype)
    return xp.asarray(getattr(xp, name)(input, axis=axes, keepdims=keep_dims))


def _lowest(dtype: np.dtype) -> Any:
    return -math.inf if _is_float(dtype) else np.iinfo(dtype).min if dtype.kind in "iu" else False


def _highest(dtype: np.dtype) -> Any:
    return math.inf if _is_float(dtype) else np.iinfo(dtype).max if dtype.kind in "iu" else True


@kernel("Max")
def reduce_max(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    """The maximum, NaN if any element is NaN; over nothing, the dtype's lowest value (-inf for floats)."""
    return (_extremum(xp, input, axis, keep_dims, "max", _lowest(input.dtype)),)


@kernel("Min")
def reduce_min(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    """The minimum, NaN if any element is NaN; over nothing, the dtype's highest value (inf for floats)."""
    return (_extremum(xp, input, axis, keep_dims, "min", _highest(input.dtype)),)


@kernel("Prod")
def reduce_prod(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    axes = _reduction_axes(axis, input.ndim)
    product = xp.prod(input, axis=axes, dtype=_accumulator(input.dtype), keepdims=keep_dims)
    return (xp.asarray(product).astype(input.dtype, copy=False),)


@kernel("All")
def reduce_all(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    axes = _reduction_axes(axis, input.ndim)
    return (xp.asarray(xp.all(input, axis=axes, keepdims=keep_dims)),)


@kernel("Any")
def reduce_any(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    axes = _reduction_axes(axis, input.ndim)
    return (xp.asarray(xp.any(input, axis=axes, keepdims=keep_dims)),)


@kernel("EuclideanNorm")
def euclidean_norm(xp: Any, input: Any, axis: Any, *, keep_dims: bool = False) -> tuple[Any]:
    """sqrt(sum(|x|^2)); for integers the square root is truncated, as TensorFlow's integer sqrt is."""
    axes = _reduction_axes(axis, input.ndim)
    squares = input * input.conj() if input.dtype.kind == "c" else xp.square(input)
    total = xp.asarray(xp.sum(squares, axis=axes, dtype=_accumulator(input.dtype), keepdims=keep_dims))
    if input.dtype.kind in "iu":
        return (xp.sqrt(total.astype(np.float64)).astype(input.dtype),)
    return (xp.sqrt(total).astype(input.dtype, copy=False),)


def _arg_extremum(xp: Any, input: Any, dimension: Any, output_type: Any, name: str, nan_as: float) -> Any:
    axis = int(dimension)
    if not -input.ndim <= axis < input.ndim:
        raise ValueError(f"Expected dimension in the range [{-input.ndim}, {input.ndim}), but got {axis}")
    if input.shape[axis] == 0:
        raise ValueError(f"Reduction axis {axis} is empty in shape {format_dims(input.shape)}")
    index = getattr(xp, name)(input, axis=axis)
    if _is_float(input.dtype):
        # TensorFlow's comparisons pass over NaN (a row of NaNs gives 0); numpy's arg-max stops at the
        # first NaN. Checking the picked values costs one small gather; only rows with NaN are redone.
        picked = xp.take_along_axis(input, xp.expand_dims(index, axis), axis=axis)
        if xp.isnan(picked).any():
            index = getattr(xp, name)(xp.where(xp.isnan(input), nan_as, input), axis=axis)
    return xp.asarray(index).astype(output_type, copy=False)


@kernel("ArgMax")
def arg_max(xp: Any, input: Any, dimension: Any, *, output_type: np.dtype = np.dtype(np.int64)) -> tuple[Any]:
    """The index of the largest value along `dimension`; ties give the first index, NaN is skipped."""
    return (_arg_extremum(xp, input, dimension, output_type, "argmax", -math.inf),)


@kernel("ArgMin")
def arg_min(xp: Any, input: Any, dimension: Any, *, output_type: np.dtype = np.dtype(np.int64)) -> tuple[Any]:
    """The index of the smallest value along `dimension`; ties give the first index, NaN is skipped."""
    return (_arg_extremum(xp, input, dimension, output_type, "argmin", math.inf),)


def _scan(xp: Any, x: Any, axis: Any, exclusive: bool, reverse: bool, name: str, identity: int) -> Any:
    """An inclusive or exclusive running sum/product along `axis`, forward or from the end."""
    a = int(axis)
    if not -x.ndim <= a < x.ndim:
        raise ValueError(f"axis must be in the range [{-x.ndim}, {x.ndim}), but got {a}")
    a %= x.ndim
    scan = getattr(xp, name)
    if reverse:
        x = xp.flip(x, axis=a)
    if exclusive:
        out = xp.empty(x.shape, x.dtype)
        head = (slice(None),) * a
        out[head + (slice(0, 1),)] = identity
        # the running total before each element: the inclusive scan of all but the last, shifted by one
        shifted = out[head + (slice(1, None),)]
        result = scan(x[head + (slice(0, -1),)], axis=a, dtype=x.dtype, out=shifted)
        if result is not shifted:  # cupy may scan a strided `out` in a temporary and return that
            shifted[...] = result
    else:
        out = scan(x, axis=a, dtype=x.dtype)
    return xp.flip(out, axis=a) if reverse else out


@kernel("Cumsum")
def cumsum(xp: Any, x: Any, axis: Any, *, exclusive: bool = False, reverse: bool = False) -> tuple[Any]:
    return (_scan(xp, x, axis, exclusive, reverse, "cumsum", 0),)


@kernel("Cumprod")
def cumprod(xp: Any, x: Any, axis: Any, *, exclusive: bool = False, reverse: bool = False) -> tuple[Any]:
    return (_scan(xp, x, axis, exclusive, reverse, "cumprod", 1),)


@kernel("L2Loss")
def l2_loss(xp: Any, t: Any) -> tuple[Any]:
    """sum(t ** 2) / 2, a scalar."""
    total = xp.sum(xp.square(t), dtype=_accumulator(t.dtype))
    return (xp.asarray(total / 2).astype(t.dtype, copy=False),)
