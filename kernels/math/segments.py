"""Kernels of the segment reductions: the rows of a tensor folded into groups ("segments") named by an id per
row, the reductions behind `tf.math.segment_*`, `tf.math.unsorted_segment_*` and, through the sparse
variants, `tf.nn.embedding_lookup_sparse`.

Segment{Sum,Mean,Max,Min,Prod} take sorted ids: the output has `last id + 1` rows, and a row no id names
holds 0 (1 for Prod; 0 also for Max and Min, not the dtype's lowest or highest). TensorFlow walks the ids
run by run and fails on the first run that is out of order or out of range, so the error depends on where
the ids go wrong; these kernels report the same one. UnsortedSegment{Sum,Max,Min,Prod} take any order and
a `num_segments`; ids may be a tensor of any rank that prefixes the data's shape, negative ids are
dropped, an id >= num_segments is an error, and empty segments hold the reduction's identity (the dtype's
lowest finite value for Max, highest for Min). SparseSegment{Sum,Mean,SqrtN}(WithNumSegments) first
gather rows of the data by `indices`, then reduce them by sorted segment ids; empty segments hold 0.

Integer means truncate, as C++ division does. Max and Min fold a segment as TensorFlow's scalar loop does:
a NaN replaces the running value and the next number replaces a NaN, so only a segment ending in NaN
gives NaN (TensorFlow's vectorized path for wide rows differs again; that is not reproduced).
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from kernels.host import format_dims
from kernels.jit import use_compiled
from kernels.limits import check_elements
from kernels.math.segments_compiled import sparse_segment_rows
from kernels.registry import kernel

__all__ = [
    "fold_segments",
    "segment_sum",
    "segment_mean",
    "segment_max",
    "segment_min",
    "segment_prod",
    "unsorted_segment_sum",
    "unsorted_segment_max",
    "unsorted_segment_min",
    "unsorted_segment_prod",
    "sparse_segment_sum",
    "sparse_segment_mean",
    "sparse_segment_sqrt_n",
    "sparse_segment_sum_with_num_segments",
    "sparse_segment_mean_with_num_segments",
    "sparse_segment_sqrt_n_with_num_segments",
]

_HALF_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def _to_numpy(a: Any) -> np.ndarray:
    """An index array on the host (ids are validated there: they are small next to the data)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or dtype in _HALF_FLOATS


def _lowest(dtype: np.dtype) -> Any:
    """The dtype's lowest finite value (TensorFlow's `NumTraits<T>::lowest()`)."""
    if dtype in _HALF_FLOATS or dtype.kind == "f":
        return -ml_dtypes.finfo(dtype).max
    return np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    if dtype in _HALF_FLOATS or dtype.kind == "f":
        return ml_dtypes.finfo(dtype).max
    return np.iinfo(dtype).max


# The dtypes cupyx.scatter_add takes (its error message lists them); others scatter on the host.
_CUPY_SCATTER_ADD_DTYPES = frozenset(np.dtype(t) for t in ("int32", "int64", "float16", "float32", "float64",
                                                           "uint32", "uint64"))


def _scatter(xp: Any, ufunc: str, out: Any, rows: Any, values: Any) -> Any:
    """out[rows[i]] = ufunc(out[rows[i]], values[i]) in order of i (as TensorFlow's loops do); returns out."""
    if xp is np:
        if rows.size > 1 and bool((rows[1:] >= rows[:-1]).all()):
            # Sorted rows (the common case): one reduction per run is much faster than ufunc.at, and the same.
            starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
            targets = rows[starts]
            out[targets] = getattr(np, ufunc)(out[targets], getattr(np, ufunc).reduceat(values, starts, axis=0))
        else:
            getattr(np, ufunc).at(out, rows, values)
        return out
    import cupyx

    scatter = {"add": cupyx.scatter_add, "maximum": cupyx.scatter_max, "minimum": cupyx.scatter_min}.get(ufunc)
    if scatter is not None and (ufunc != "add" or out.dtype in _CUPY_SCATTER_ADD_DTYPES):
        scatter(out, rows, values)
        return out
    if ufunc == "add" and out.dtype.kind == "c" and out.dtype.type(0).real.dtype in _CUPY_SCATTER_ADD_DTYPES:
        # cupyx.scatter_add takes no complex dtypes: the real and imaginary parts are two float scatters.
        real, imag = xp.ascontiguousarray(out.real), xp.ascontiguousarray(out.imag)
        scatter(real, rows, xp.ascontiguousarray(values.real))
        scatter(imag, rows, xp.ascontiguousarray(values.imag))
        return xp.stack([real, imag], axis=-1).view(out.dtype).reshape(out.shape)
    # NOTE: cupy has no scatter-multiply; products of segments are rare enough to run on the host.
    host_out = out.get()
    getattr(np, ufunc).at(host_out, _to_numpy(rows), values.get())
    return xp.asarray(host_out)


def _after_last_nan(xp: Any, data: Any, rows: Any, num_rows: int) -> tuple[Any, Any]:
    """For a Max/Min fold in TensorFlow's scalar order: which values count (those after the last NaN of their
    segment and column) and which outputs are NaN (segments whose last value is NaN)."""
    n = data.shape[0]
    pos = xp.broadcast_to(xp.arange(n, dtype=xp.int64).reshape((n,) + (1,) * (data.ndim - 1)), data.shape)
    nan_pos = xp.where(xp.isnan(data), pos, -1)
    last_nan = _scatter(xp, "maximum", xp.full((num_rows,) + data.shape[1:], -1, dtype=xp.int64), rows, nan_pos)
    last_pos = _scatter(xp, "maximum", xp.full((num_rows,) + data.shape[1:], -1, dtype=xp.int64), rows, pos)
    return pos > last_nan[rows], (last_nan >= 0) & (last_nan == last_pos)


def fold_segments(xp: Any, kind: str, data: Any, rows: Any, num_rows: int, fill: Any) -> Any:
    """The rows of `data` folded by `kind` (sum, max, min, prod) into `num_rows` rows by `rows` (each in range,
    in the order TensorFlow folds them); a row nothing lands in holds `fill`. Shared with the sparse
    reductions."""
    shape = (num_rows,) + data.shape[1:]
    if kind == "sum":
        return _scatter(xp, "add", xp.zeros(shape, dtype=data.dtype), rows, data)
    if kind == "prod":
        return _scatter(xp, "multiply", xp.ones(shape, dtype=data.dtype), rows, data)
    ufunc, identity = ("maximum", _lowest(data.dtype)) if kind == "max" else ("minimum", _highest(data.dtype))
    nan_out = None
    if _is_float(data.dtype) and data.size and bool(xp.isnan(data).any()):
        counted, nan_out = _after_last_nan(xp, data, rows, num_rows)
        data = xp.where(counted, data, xp.asarray(identity, dtype=data.dtype))
    out = _scatter(xp, ufunc, xp.full(shape, identity, dtype=data.dtype), rows, data)
    if nan_out is not None:
        out = xp.where(nan_out, xp.asarray(math.nan, dtype=out.dtype), out)
    if fill != identity:
        landed = xp.bincount(rows, minlength=num_rows) > 0 if rows.size else xp.zeros(num_rows, dtype=bool)
        out = xp.where(landed.reshape((num_rows,) + (1,) * (out.ndim - 1)), out, xp.asarray(fill, dtype=out.dtype))
    return out


def _mean(xp: Any, sums: Any, counts: Any, sqrt: bool = False) -> Any:
    """Segment sums divided by their counts (or the counts' square roots); empty segments stay 0.
    Integer means truncate toward zero, as C++ does."""
    counts = xp.maximum(counts, 1).reshape((-1,) + (1,) * (sums.ndim - 1))
    if sqrt:
        return (sums / xp.sqrt(counts.astype(np.float64)).astype(sums.dtype)).astype(sums.dtype)
    if sums.dtype.kind in "iu":
        return (xp.abs(sums) // counts * xp.sign(sums)).astype(sums.dtype)
    return (sums / counts.astype(sums.dtype)).astype(sums.dtype)


# ---------------------------------------------------------------------------------------------------
# Sorted segments


def _check_sorted_runs(ids: np.ndarray, num_rows: int) -> None:
    """TensorFlow's walk over the runs of equal ids: at each run, first "not increasing" (against the next
    run), then "out of range"; the first run that fails names the error."""
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    run_ids = ids[starts]
    not_increasing = np.r_[run_ids[:-1] > run_ids[1:], False]
    out_of_range = (run_ids < 0) | (run_ids >= num_rows)
    bad = np.flatnonzero(not_increasing | out_of_range)
    if bad.size:
        k = bad[0]
        if not_increasing[k]:
            raise ValueError("segment ids are not increasing")
        raise ValueError(f"Segment id {run_ids[k]} out of range [0, {num_rows}), possibly because "
                         "'segment_ids' input is not sorted.")


def _check_rows(num_rows: int, inner: tuple[int, ...], dtype: Any, memory_limit: int | None, op: str) -> None:
    """The output of `num_rows` rows of shape `inner` must fit in the memory limit: the ids (or
    num_segments) a client sends decide how many rows there are."""
    if memory_limit is not None:
        shape = (num_rows,) + tuple(inner)
        check_elements(math.prod(shape), dtype, memory_limit, f"{op} output", shape)


def _sorted_segment_rows(data: Any, segment_ids: Any, memory_limit: int | None = None,
                         op: str = "segment") -> tuple[np.ndarray, int]:
    """The segment ids on the host and the number of output rows, after TensorFlow's checks."""
    if data.ndim < 1:
        raise ValueError("input must be at least rank 1")
    if segment_ids.ndim != 1:
        raise ValueError("segment_ids should be a vector.")
    if segment_ids.shape[0] != data.shape[0]:
        raise ValueError("segment_ids should be the same size as dimension 0 of input.")
    ids = _to_numpy(segment_ids).astype(np.int64, copy=False)
    if ids.size == 0:
        return ids, 0
    num_rows = int(ids[-1]) + 1
    if num_rows <= 0:
        raise ValueError("segment ids must be >= 0")
    _check_rows(num_rows, data.shape[1:], data.dtype, memory_limit, op)
    _check_sorted_runs(ids, num_rows)
    return ids, num_rows


def _segment_reduce(xp: Any, kind: str, data: Any, segment_ids: Any, fill: Any, memory_limit: int | None) -> Any:
    ids, num_rows = _sorted_segment_rows(data, segment_ids, memory_limit, f"Segment{kind.capitalize()}")
    return fold_segments(xp, kind, data, xp.asarray(ids), num_rows, fill)


@kernel("SegmentSum")
def segment_sum(xp: Any, data: Any, segment_ids: Any, *, memory_limit: int | None = None) -> tuple:
    """Sums of the rows of `data` by sorted segment id; rows no id names are 0."""
    return (_segment_reduce(xp, "sum", data, segment_ids, 0, memory_limit),)


@kernel("SegmentProd")
def segment_prod(xp: Any, data: Any, segment_ids: Any, *, memory_limit: int | None = None) -> tuple:
    """Products of the rows of `data` by sorted segment id; rows no id names are 1."""
    return (_segment_reduce(xp, "prod", data, segment_ids, 1, memory_limit),)


@kernel("SegmentMax")
def segment_max(xp: Any, data: Any, segment_ids: Any, *, memory_limit: int | None = None) -> tuple:
    """Maxima of the rows of `data` by sorted segment id; rows no id names are 0."""
    return (_segment_reduce(xp, "max", data, segment_ids, 0, memory_limit),)


@kernel("SegmentMin")
def segment_min(xp: Any, data: Any, segment_ids: Any, *, memory_limit: int | None = None) -> tuple:
    """Minima of the rows of `data` by sorted segment id; rows no id names are 0."""
    return (_segment_reduce(xp, "min", data, segment_ids, 0, memory_limit),)


@kernel("SegmentMean")
def segment_mean(xp: Any, data: Any, segment_ids: Any, *, memory_limit: int | None = None) -> tuple:
    """Means of the rows of `data` by sorted segment id (integers truncate); rows no id names are 0."""
    ids, num_rows = _sorted_segment_rows(data, segment_ids, memory_limit, "SegmentMean")
    rows = xp.asarray(ids)
    sums = fold_segments(xp, "sum", data, rows, num_rows, 0)
    return (_mean(xp, sums, xp.bincount(rows, minlength=num_rows) if ids.size else xp.zeros(0, xp.int64)),)


# ---------------------------------------------------------------------------------------------------
# Unsorted segments


def _slice_debug_string(shape: tuple[int, ...], flat: int) -> str:
    """TensorFlow's SliceDebugString: a flat position as "[1,0]" in `shape` ("" for a scalar)."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def _num_segments(num_segments: Any) -> int:
    if num_segments.ndim != 0:
        raise ValueError(f"num_segments should be a scalar, not shape {format_dims(num_segments.shape)}")
    return int(num_segments)


def _unsorted_segment_reduce(xp: Any, kind: str, data: Any, segment_ids: Any, num_segments: Any,
                             memory_limit: int | None) -> Any:
    n = _num_segments(num_segments)
    if data.shape[: segment_ids.ndim] != segment_ids.shape:
        raise ValueError(f"data.shape = {format_dims(data.shape)} does not start with segment_ids.shape = "
                         f"{format_dims(segment_ids.shape)}")
    if n < 0:
        raise ValueError(f"Input num_segments == {n} must not be negative.")
    inner = data.shape[segment_ids.ndim:]
    _check_rows(n, inner, data.dtype, memory_limit, f"UnsortedSegment{kind.capitalize()}")
    identity = {"sum": 0, "prod": 1, "max": _lowest(data.dtype), "min": _highest(data.dtype)}[kind]
    if data.size == 0:  # TensorFlow checks no id when there is no data
        return xp.full((n,) + inner, identity, dtype=data.dtype)
    ids = _to_numpy(segment_ids).reshape(-1).astype(np.int64, copy=False)
    too_big = np.flatnonzero(ids >= n)
    if too_big.size:
        i = int(too_big[0])
        raise ValueError(f"segment_ids{_slice_debug_string(segment_ids.shape, i)} = {ids[i]} is out of range "
                         f"[0, {n})")
    kept = np.flatnonzero(ids >= 0)
    rows = data.reshape((ids.size,) + inner)
    if kept.size != ids.size:  # negative ids are dropped
        rows = rows[xp.asarray(kept)]
    return fold_segments(xp, kind, rows, xp.asarray(ids[kept]), n, identity)


@kernel("UnsortedSegmentSum")
def unsorted_segment_sum(xp: Any, data: Any, segment_ids: Any, num_segments: Any,
                         *, memory_limit: int | None = None) -> tuple:
    """Sums by segment id in any order; negative ids are dropped, empty segments are 0."""
    return (_unsorted_segment_reduce(xp, "sum", data, segment_ids, num_segments, memory_limit),)


@kernel("UnsortedSegmentProd")
def unsorted_segment_prod(xp: Any, data: Any, segment_ids: Any, num_segments: Any,
                          *, memory_limit: int | None = None) -> tuple:
    """Products by segment id in any order; negative ids are dropped, empty segments are 1."""
    return (_unsorted_segment_reduce(xp, "prod", data, segment_ids, num_segments, memory_limit),)


@kernel("UnsortedSegmentMax")
def unsorted_segment_max(xp: Any, data: Any, segment_ids: Any, num_segments: Any,
                         *, memory_limit: int | None = None) -> tuple:
    """Maxima by segment id in any order; empty segments hold the dtype's lowest value."""
    return (_unsorted_segment_reduce(xp, "max", data, segment_ids, num_segments, memory_limit),)


@kernel("UnsortedSegmentMin")
def unsorted_segment_min(xp: Any, data: Any, segment_ids: Any, num_segments: Any,
                         *, memory_limit: int | None = None) -> tuple:
    """Minima by segment id in any order; empty segments hold the dtype's highest value."""
    return (_unsorted_segment_reduce(xp, "min", data, segment_ids, num_segments, memory_limit),)


# ---------------------------------------------------------------------------------------------------
# Sparse segments: a gather by `indices`, then a sorted segment reduction


def _sparse_segment_reduce(xp: Any, data: Any, indices: Any, segment_ids: Any, num_segments: Any | None,
                           combiner: str, memory_limit: int | None, compiled: bool = False) -> Any:
    num_rows = -1
    if num_segments is not None:
        num_rows = _num_segments(num_segments)
        if num_rows < 0:
            raise ValueError("segment ids must be >= 0")
    if indices.ndim != 1:
        raise ValueError("indices should be a vector.")
    if segment_ids.ndim != 1:
        raise ValueError("segment_ids should be a vector.")
    if indices.shape[0] != segment_ids.shape[0]:
        raise ValueError("segment_ids and indices should have same size.")
    if data.ndim < 1:
        raise ValueError("Shape must be at least rank 1")
    ids = _to_numpy(segment_ids).astype(np.int64, copy=False)
    last_plus_one = int(ids[-1]) + 1 if ids.size else 0
    if num_segments is not None:
        if num_rows < last_plus_one:
            raise ValueError("segment ids must be < num_segments")
    else:
        num_rows = last_plus_one
    if num_rows < 0:
        raise ValueError("segment ids must be >= 0")
    _check_rows(num_rows, data.shape[1:], data.dtype, memory_limit, "SparseSegment")
    if ids.size == 0:
        return xp.zeros((num_rows,) + data.shape[1:], dtype=data.dtype)
    if num_rows == 0:
        raise ValueError("segment ids must be >= 0")
    if use_compiled(xp, compiled, data.dtype):
        out = sparse_segment_rows(data, indices, ids, num_rows, combiner)
        if out is not None:
            return out
    _check_sparse_runs(ids, _to_numpy(indices).astype(np.int64, copy=False), num_rows, data.shape[0])

    gathered = data[indices]
    accumulate = np.float32 if data.dtype in _HALF_FLOATS else data.dtype
    rows = xp.asarray(ids)
    sums = fold_segments(xp, "sum", gathered.astype(accumulate, copy=False), rows, num_rows, 0)
    if combiner != "sum":
        sums = _mean(xp, sums, xp.bincount(rows, minlength=num_rows), sqrt=combiner == "sqrtn")
    return sums.astype(data.dtype, copy=False)


def _check_sparse_runs(ids: np.ndarray, indices: np.ndarray, num_rows: int, num_data_rows: int) -> None:
    """TensorFlow's walk over the runs: the run's order, then its id's range, then its indices' range."""
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    run_ids = ids[starts]
    bad_index = (indices < 0) | (indices >= num_data_rows)
    # The run each bad index falls in; a run is bad if one of its indices is.
    run_of_bad = np.searchsorted(starts, np.flatnonzero(bad_index), side="right") - 1
    bad_run = np.zeros(run_ids.size, dtype=bool)
    bad_run[run_of_bad] = True
    not_increasing = np.r_[run_ids[:-1] > run_ids[1:], False]
    out_of_range = (run_ids < 0) | (run_ids >= num_rows)
    bad = np.flatnonzero(not_increasing | out_of_range | bad_run)
    if not bad.size:
        return
    k = bad[0]
    if not_increasing[k]:
        raise ValueError("segment ids are not increasing")
    if out_of_range[k]:
        raise ValueError(f"Segment id {run_ids[k]} out of range [0, {num_rows}), possibly because "
                         "'segment_ids' input is not sorted.")
    end = starts[k + 1] if k + 1 < starts.size else ids.size
    i = starts[k] + int(np.flatnonzero(bad_index[starts[k]:end])[0])
    raise ValueError(f"Bad: indices[{i}] == {indices[i]} out of range [0, {num_data_rows})")


@kernel("SparseSegmentSum")
def sparse_segment_sum(xp: Any, data: Any, indices: Any, segment_ids: Any,
                       *, sparse_gradient: bool = False, memory_limit: int | None = None,
                       compiled: bool = False) -> tuple:
    """Sums of the rows `data[indices]` by sorted segment id."""
    return (_sparse_segment_reduce(xp, data, indices, segment_ids, None, "sum", memory_limit, compiled),)


@kernel("SparseSegmentMean")
def sparse_segment_mean(xp: Any, data: Any, indices: Any, segment_ids: Any,
                        *, sparse_gradient: bool = False, memory_limit: int | None = None,
                        compiled: bool = False) -> tuple:
    """Means of the rows `data[indices]` by sorted segment id; empty segments are 0."""
    return (_sparse_segment_reduce(xp, data, indices, segment_ids, None, "mean", memory_limit, compiled),)


@kernel("SparseSegmentSqrtN")
def sparse_segment_sqrt_n(xp: Any, data: Any, indices: Any, segment_ids: Any, *,
                          sparse_gradient: bool = False, memory_limit: int | None = None,
                          compiled: bool = False) -> tuple:
    """Sums of the rows `data[indices]` by sorted segment id, divided by the square root of their count."""
    return (_sparse_segment_reduce(xp, data, indices, segment_ids, None, "sqrtn", memory_limit, compiled),)


@kernel("SparseSegmentSumWithNumSegments")
def sparse_segment_sum_with_num_segments(xp: Any, data: Any, indices: Any, segment_ids: Any, num_segments: Any, *,
                                         sparse_gradient: bool = False, memory_limit: int | None = None,
                                         compiled: bool = False) -> tuple:
    """SparseSegmentSum into `num_segments` rows (at least the last id + 1)."""
    return (_sparse_segment_reduce(xp, data, indices, segment_ids, num_segments, "sum", memory_limit,
                                   compiled),)


@kernel("SparseSegmentMeanWithNumSegments")
def sparse_segment_mean_with_num_segments(xp: Any, data: Any, indices: Any, segment_ids: Any, num_segments: Any, *,
                                          sparse_gradient: bool = False, memory_limit: int | None = None,
                                          compiled: bool = False) -> tuple:
    """SparseSegmentMean into `num_segments` rows (at least the last id + 1)."""
    return (_sparse_segment_reduce(xp, data, indices, segment_ids, num_segments, "mean", memory_limit,
                                   compiled),)


@kernel("SparseSegmentSqrtNWithNumSegments")
def sparse_segment_sqrt_n_with_num_segments(xp: Any, data: Any, indices: Any, segment_ids: Any, num_segments: Any, *,
                                            sparse_gradient: bool = False, memory_limit: int | None = None,
                                            compiled: bool = False) -> tuple:
    """SparseSegmentSqrtN into `num_segments` rows (at least the last id + 1)."""
    return (_sparse_segment_reduce(xp, data, indices, segment_ids, num_segments, "sqrtn", memory_limit,
                                   compiled),)
