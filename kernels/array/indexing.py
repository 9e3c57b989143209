"""Kernels of the ops that read or write a tensor's elements at positions given by another tensor.

Gathers (GatherV2, Gather, GatherNd) read at indices, ScatterNd writes at them, OneHot and
MatrixBandPart build values from positions, and Where, TopKV2 and Unique return positions. Like
TensorFlow on CPU, out-of-range indices raise IndexError naming the bad index and the valid range.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from kernels.array.indexing_compiled import first_out_of_range, top_k_rows, unique_integers
from kernels.host import format_dims, host, host_scalar
from kernels.jit import use_compiled
from kernels.limits import check_bytes, check_elements
from kernels.registry import kernel

__all__ = [
    "gather_v2",
    "gather",
    "gather_nd",
    "scatter_nd",
    "one_hot",
    "where",
    "top_k_v2",
    "matrix_band_part",
    "unique",
    "unique_with_counts",
]

# TensorFlow's bad_indices_policy attr: "" and "DEFAULT" mean ERROR on CPU; IGNORE skips bad indices.
BadIndicesPolicy = Literal["", "DEFAULT", "ERROR", "IGNORE"]


def _position(flat: int, shape: tuple[int, ...]) -> str:
    """A flat position in an array of `shape`, written as TensorFlow writes it: "1,0"."""
    return ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) if shape else ""


_FEW_INDICES = 8


def _check_indices(xp: Any, indices: Any, limit: int, compiled: bool = False) -> None:
    """IndexError unless every index is in [0, limit); negatives do not wrap as they would in numpy."""
    size = indices.size
    if size == 0:
        return
    if size <= _FEW_INDICES and indices.ndim <= 1 and xp is np:
        # A handful (a shape's dim, one example's ids): Python's min and max of a list beat two numpy reductions.
        values = indices.tolist()
        if not isinstance(values, list):
            values = [values]
        if min(values) >= 0 and max(values) < limit:
            return
    elif use_compiled(xp, compiled) and first_out_of_range(indices, limit) == -1:
        return  # the compiled pass found none; where it found one (or took no pass), the twin words the error
    # Two reductions and no temporaries on the good path; the bad one is located only on error.
    if int(indices.min()) >= 0 and int(indices.max()) < limit:
        return
    bad = (indices < 0) | (indices >= limit)
    flat = int(xp.argmax(bad.reshape(-1)))
    value = int(indices.reshape(-1)[flat])
    raise IndexError(f"indices[{_position(flat, indices.shape)}] = {value} is not in [0, {limit})")


def _as_array(xp: Any, x: Any) -> Any:
    # numpy returns a scalar, not a 0-d array, when every dim is indexed away.
    return x if isinstance(x, xp.ndarray) else xp.asarray(x)


# ---------------------------------------------------------------------------------------------------
# Gathers


def _gather_batched(xp: Any, params: Any, indices: Any, axis: int, batch_dims: int) -> Any:
    """GatherV2 with batch_dims > 0: for each batch position b, gather params[b] at indices[b].

    params is viewed as [B, P, N, Q] (batch, dims before the axis, the axis, dims after) and indices
    as [B, I], so one advanced-indexing call does every batch at once.
    """
    b_shape = params.shape[:batch_dims]
    p_shape = params.shape[batch_dims:axis]
    q_shape = params.shape[axis + 1 :]
    i_shape = indices.shape[batch_dims:]
    nb, np_, nq, ni = math.prod(b_shape), math.prod(p_shape), math.prod(q_shape), math.prod(i_shape)
    p = params.reshape(nb, np_, params.shape[axis], nq)
    idx = indices.reshape(nb, ni)
    # Advanced indices split by a slice put their broadcast dims first: the result is [B, I, P, Q].
    out = p[xp.arange(nb).reshape(nb, 1), :, idx]
    if np_ != 1:
        out = xp.transpose(out, (0, 2, 1, 3))
    return out.reshape(b_shape + p_shape + i_shape + q_shape)


@kernel("GatherV2")
def gather_v2(xp: Any, params: Any, indices: Any, axis: Any, *, batch_dims: int = 0, compiled: bool = False) -> tuple:
    """Slices of `params` along `axis` at `indices`.

    Output shape: params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis+1:]; the first
    batch_dims dims of params and indices are matched position by position.
    """
    rank = params.ndim
    if rank == 0:
        raise ValueError("params must be at least 1 dimensional")
    a = host_scalar(axis, "axis must be a scalar")
    if not -rank <= a < rank:
        raise ValueError(f"Expected axis in the range [{-rank}, {rank}), but got {a}")
    a %= rank
    if batch_dims < 0:
        batch_dims += indices.ndim
    if batch_dims != 0:
        if not 0 <= batch_dims <= indices.ndim:
            raise ValueError(
                f"Expected batch_dims in the range [{-indices.ndim}, {indices.ndim}], but got {batch_dims}"
            )
        if batch_dims >= rank:
            raise ValueError(f"batch_dims ({batch_dims}) must be less than rank(params) ({rank}).")
        if batch_dims > a:
            raise ValueError(f"batch_dims ({batch_dims}) must be less than or equal to axis ({a}).")
        for d in range(batch_dims):
            if params.shape[d] != indices.shape[d]:
                raise ValueError(
                    f"params.shape[{d}]: {params.shape[d]} should be equal to "
                    f"indices.shape[{d}]: {indices.shape[d]}"
                )
    _check_indices(xp, indices, params.shape[a], compiled)
    if batch_dims == 0:
        return (_as_array(xp, params.take(indices, axis=a)),)
    return (_gather_batched(xp, params, indices, a, batch_dims),)


@kernel("Gather")
def gather(xp: Any, params: Any, indices: Any, *, validate_indices: bool = True, compiled: bool = False) -> tuple:
    """Gather v1: GatherV2 on axis 0 (indices are always validated, as TensorFlow now does)."""
    if params.ndim == 0:
        raise ValueError("params must be at least 1 dimensional")
    _check_indices(xp, indices, params.shape[0], compiled)
    return (_as_array(xp, xp.take(params, indices, axis=0)),)


def _bad_rows(xp: Any, indices: Any, limits: tuple[int, ...]) -> Any:
    """A bool per index row of `indices` [..., K]: whether some coordinate is outside `limits`."""
    bound = xp.asarray(limits, dtype=indices.dtype)
    return ((indices < 0) | (indices >= bound)).any(axis=-1)


def _index_rows(xp: Any, indices: Any, shape: tuple[int, ...], policy: str, what: str) -> Any | None:
    """Check the rows of `indices` [..., K] against `shape`[:K]; the bad-row mask under IGNORE, else None."""
    k = indices.shape[-1]
    if indices.size == 0 or k == 0:
        return None
    bad = _bad_rows(xp, indices, shape[:k])
    if not bool(bad.any()):
        return None
    if policy == "IGNORE":
        return bad
    rows = indices.reshape(-1, k)
    flat = int(xp.argmax(bad.reshape(-1)))
    raise IndexError(
        f"indices[{flat}] = {format_dims(host(rows[flat]))} does not index into {what} {format_dims(shape)}"
    )


@kernel("GatherNd")
def gather_nd(xp: Any, params: Any, indices: Any, *, bad_indices_policy: BadIndicesPolicy = "") -> tuple:
    """Slices of `params` at the index rows of `indices` [..., K].

    Output shape: indices.shape[:-1] + params.shape[K:]. Under bad_indices_policy IGNORE a bad row
    gives zeros.
    """
    if indices.ndim < 1:
        raise ValueError(f"indices must be at least a vector, got shape {format_dims(indices.shape)}")
    k = indices.shape[-1]
    if k > params.ndim:
        raise ValueError(f"index innermost dimension length must be <= params rank; saw: {k} vs. {params.ndim}")
    out_shape = indices.shape[:-1] + params.shape[k:]
    if k == 0:
        # Every (empty) index row selects the whole of params.
        return (xp.broadcast_to(params, out_shape).copy(),)
    bad = _index_rows(xp, indices, params.shape, bad_indices_policy, "param shape")
    if bad is not None:
        indices = xp.where(bad[..., None], 0, indices)
    out = params[tuple(indices[..., i] for i in range(k))]
    if bad is not None:
        keep = xp.logical_not(bad).reshape(bad.shape + (1,) * (params.ndim - k))
        out = xp.where(keep, out, xp.zeros((), dtype=params.dtype))
    return (_as_array(xp, out),)


@kernel("ScatterNd")
def scatter_nd(
    xp: Any, indices: Any, updates: Any, shape: Any, *, bad_indices_policy: BadIndicesPolicy = "",
    memory_limit: int | None = None,
) -> tuple:
    """Zeros of `shape` with `updates` added at the index rows of `indices` (duplicates sum)."""
    out_shape = tuple(int(d) for d in host(shape))
    if indices.ndim < 1:
        raise ValueError(f"indices must be at least a vector, got shape {format_dims(indices.shape)}")
    k = indices.shape[-1]
    if k > len(out_shape) or updates.shape != indices.shape[:-1] + out_shape[k:]:
        raise ValueError(
            f"Dimensions mismatch: indices {format_dims(indices.shape)}, updates {format_dims(updates.shape)}, "
            f"shape {format_dims(out_shape)}: updates must have shape indices.shape[:-1] + shape[indices.shape[-1]:]"
        )
    if all(d >= 0 for d in out_shape):
        check_elements(math.prod(out_shape), updates.dtype, memory_limit, "ScatterNd output", out_shape)
    out = xp.zeros(out_shape, dtype=updates.dtype)
    if updates.size == 0:
        return (out,)
    rows = indices.reshape(-1, k).astype(np.int64, copy=False)
    values = updates.reshape(rows.shape[0], -1)
    bad = _index_rows(xp, indices, out_shape, bad_indices_policy, "shape")
    if bad is not None:
        keep = xp.logical_not(bad.reshape(-1))
        rows, values = rows[keep], values[keep]
    # Row-major linear position of each index row within shape[:K]; the rest is one flat slab.
    strides = [math.prod(out_shape[d + 1 : k]) for d in range(k)]
    linear = (rows * xp.asarray(strides, dtype=np.int64)).sum(axis=1)
    flat = out.reshape(math.prod(out_shape[:k]), -1)
    # add.at, not fancy-index assignment, so that duplicate indices accumulate as TensorFlow's do.
    xp.add.at(flat, linear, values)
    return (out,)


# ---------------------------------------------------------------------------------------------------
# Values built from positions


@kernel("OneHot")
def one_hot(xp: Any, indices: Any, depth: Any, on_value: Any, off_value: Any, *, axis: int = -1,
            memory_limit: int | None = None) -> tuple:
    """`on_value` where the new `axis` position equals the index, `off_value` elsewhere.

    Indices outside [0, depth), negative ones included, give a row of `off_value`.
    """
    d = host_scalar(depth, "depth must be a scalar")
    if d < 0:
        raise ValueError(f"depth must be non-negative, got: {d}")
    out_rank = indices.ndim + 1
    if axis != -1 and not 0 <= axis < out_rank:
        raise ValueError(f"Expected axis to be -1 or between [0, {out_rank}).  But received: {axis}")
    at = indices.ndim if axis == -1 else axis
    # The boolean mask and the output: one byte plus an output element per cell.
    check_bytes(indices.size * d * (on_value.dtype.itemsize + 1), memory_limit, "OneHot output",
                indices.shape[:at] + (d,) + indices.shape[at:])
    # Compare the indices, with a size-1 dim at `at`, against 0..depth-1 laid along that dim.
    classes = xp.arange(d, dtype=np.int64)
    if at < indices.ndim:
        classes = classes.reshape((d,) + (1,) * (indices.ndim - at))
    hot = indices.reshape(indices.shape[:at] + (1,) + indices.shape[at:]) == classes
    if on_value.dtype.kind in "biuf" and on_value.item() == 1 and off_value.item() == 0 \
            and not bool(xp.signbit(off_value)):
        return (hot.astype(on_value.dtype),)  # the usual 1/0 encoding: a cast, not a select
    return (xp.where(hot, on_value, off_value),)


@kernel("MatrixBandPart")
def matrix_band_part(xp: Any, input: Any, num_lower: Any, num_upper: Any) -> tuple:
    """The band of each innermost matrix: num_lower sub- and num_upper super-diagonals (-1: all)."""
    if input.ndim < 2:
        raise ValueError(f"input must be at least 2-dim, received shape: {format_dims(input.shape)}")
    lower, upper = host_scalar(num_lower, "num_lower must be a scalar"), host_scalar(num_upper, "num_upper must be a scalar")
    m, n = input.shape[-2:]
    if lower > m:
        raise ValueError(f"num_lower must be negative or less or equal to number of rows ({m}) got: {lower}")
    if upper > n:
        raise ValueError(f"num_upper must be negative or less or equal to number of columns ({n}) got: {upper}")
    if lower < 0 and upper < 0:
        return (input,)
    offset = xp.arange(n).reshape(1, n) - xp.arange(m).reshape(m, 1)  # column - row
    band = xp.ones((m, n), dtype=bool)
    if lower >= 0:
        band &= offset >= -lower
    if upper >= 0:
        band &= offset <= upper
    # where, not multiply, so that inf/nan outside the band still become 0.
    return (xp.where(band, input, xp.zeros((), dtype=input.dtype)),)


# ---------------------------------------------------------------------------------------------------
# Positions of elements


@kernel("Where")
def where(xp: Any, input: Any) -> tuple:
    """The coordinates of the true (non-zero) elements of `input`, row-major, as int64 [n, rank]."""
    if input.ndim == 0:
        raise ValueError("WhereOp : Unhandled input dimensions: 0")
    if input.ndim == 1:  # the usual mask: its positions as a column, without argwhere's generic transpose
        return (input.nonzero()[0].astype(np.int64, copy=False).reshape(-1, 1),)
    return (xp.argwhere(input).astype(np.int64, copy=False),)


@kernel("TopKV2", outputs=2)
def top_k_v2(xp: Any, input: Any, k: Any, *, sorted: bool = True, index_type: Any = np.int32,
             compiled: bool = False) -> tuple:
    """The k largest entries of each last-axis row, largest first, and their positions.

    Equal values come out lower index first, as in TensorFlow. `sorted=False` still returns them
    sorted, which TensorFlow allows.
    """
    if input.ndim < 1:
        raise ValueError(f"input must be >= 1-D, got shape {format_dims(input.shape)}")
    kk = host_scalar(k, "k must be a scalar")
    if kk < 0:
        raise ValueError(f"Need k >= 0, got {kk}")
    n = input.shape[-1]
    if n < kk:
        raise ValueError(f"input must have at least k columns. Had {n}, needed {kk}")
    if kk > 0 and input.size and use_compiled(xp, compiled, input.dtype):
        values, idx = top_k_rows(input.reshape(-1, n), kk)
        shape = input.shape[:-1] + (kk,)
        return values.reshape(shape), idx.astype(index_type).reshape(shape)
    if kk == 1:
        # argmax returns the first of equal maxima: the tie rule for free, without a sort.
        idx = xp.expand_dims(xp.argmax(input, axis=-1), -1)
    elif 0 < kk and 4 * kk < n and not (input.dtype.kind == "f" and bool(xp.isnan(input).any())):
        idx = _top_k_by_partition(xp, input, kk)
    else:
        idx = _descending_order(xp, input, kk)
    values = xp.take_along_axis(input, idx, axis=-1)
    return (values, idx.astype(index_type, copy=False))


def _descending_order(xp: Any, x: Any, k: int) -> Any:
    """Positions of the k largest of each last-axis row, largest first, equal values lower index first."""
    n = x.shape[-1]
    # A stable ascending sort of the reversed row, read backwards, is a descending sort in which
    # equal values keep their original order.
    order = xp.argsort(x[..., ::-1], axis=-1, kind="stable")
    stop = n - k - 1  # -1 would mean "the last element" to Python: spell it None
    return (n - 1) - order[..., : stop if stop >= 0 else None : -1]


def _top_k_by_partition(xp: Any, x: Any, k: int) -> Any:
    """`_descending_order` for k much smaller than the row, in O(n) plus a sort of k per row.

    Partitioning finds each row's k-th largest value; everything above it is kept, and of the values
    equal to it only the lowest-indexed ones, so the tie rule holds. NaN-free input only: NaN compares
    false with everything and would break the count.
    """
    n = x.shape[-1]
    kth = xp.partition(x, n - k, axis=-1)[..., n - k : n - k + 1]
    above = x > kth
    tied = x == kth
    need = k - above.sum(axis=-1, keepdims=True)
    chosen = above | (tied & (xp.cumsum(tied, axis=-1) <= need))
    # Exactly k chosen per row; nonzero lists them row by row in increasing index order.
    candidates = xp.nonzero(chosen.reshape(-1, n))[1].reshape(x.shape[:-1] + (k,))
    order = _descending_order(xp, xp.take_along_axis(x, candidates, axis=-1), k)
    return xp.take_along_axis(candidates, order, axis=-1)


def _unique(xp: Any, x: Any, out_idx: Any, counts: bool, compiled: bool = False) -> tuple:
    if x.ndim != 1:
        raise ValueError("unique expects a 1D vector.")
    if x.dtype.kind in "iu" and use_compiled(xp, compiled):
        values, inverse, count = unique_integers(x)
        out = (values, inverse.astype(out_idx, copy=False))
        return out + ((count.astype(out_idx, copy=False),) if counts else ())
    # NaNs stay distinct, as in TensorFlow (numpy would fold them into one by default).
    extra = {"equal_nan": False} if x.dtype.kind in "fc" else {}
    values, first, inverse, count = xp.unique(
        x, return_index=True, return_inverse=True, return_counts=True, **extra
    )
    # numpy sorts the unique values; TensorFlow lists them in order of first appearance.
    order = xp.argsort(first, kind="stable")
    rank = xp.empty_like(order)
    rank[order] = xp.arange(order.size, dtype=order.dtype)
    out = (values[order], rank[inverse.reshape(-1)].astype(out_idx, copy=False))
    return out + ((count[order].astype(out_idx, copy=False),) if counts else ())


@kernel("Unique", outputs=2)
def unique(xp: Any, x: Any, *, out_idx: Any = np.int32, compiled: bool = False) -> tuple:
    """The distinct values of 1-D `x` in order of first appearance, and each element's position among them."""
    return _unique(xp, x, out_idx, counts=False, compiled=compiled)


@kernel("UniqueWithCounts", outputs=3)
def unique_with_counts(xp: Any, x: Any, *, out_idx: Any = np.int32, compiled: bool = False) -> tuple:
    """Unique, plus how many times each distinct value occurs."""
    return _unique(xp, x, out_idx, counts=True, compiled=compiled)
