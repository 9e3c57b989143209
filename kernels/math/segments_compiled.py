"""The sparse segment reductions as one compiled loop: SparseSegment{Sum,Mean,SqrtN}(WithNumSegments) on float32
data, where the numpy twin (kernels.math.segments) pays numpy's per-call cost a dozen times over (checks, a
gather, a reduceat, the counts and the division) for what is, behind an embedding lookup of a batch of one, a
handful of rows.

`sparse_segment_rows` walks the ids once to check them as the twin does (ids non-decreasing and within the
output, indices within the data), then adds each gathered row into its segment's row in order (float32, as
the twin's sorted-run reduction adds) and divides a segment by its count (mean) or by the float32 square
root of its count taken in float64 (sqrtn), as the twin does. Where a check fails it returns the position
and the kernel runs its twin, whose walk words TensorFlow's error.
"""

from __future__ import annotations

import math

import numpy as np

from kernels.jit import compiled, readonly

__all__ = ["COMBINERS", "OPS", "sparse_segment_rows"]

OPS = ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN", "SparseSegmentSumWithNumSegments",
       "SparseSegmentMeanWithNumSegments", "SparseSegmentSqrtNWithNumSegments")

# How a segment's sum becomes its output row, by the twin's combiner name.
_SUM, _MEAN, _SQRTN = range(3)
COMBINERS = {"sum": _SUM, "mean": _MEAN, "sqrtn": _SQRTN}

_IDS = "Array(int64, 1, 'C', readonly=True)"
_ALL_VALID = -1


@compiled(f"int64({readonly(2)}, {_IDS}, {_IDS}, int64, float32[:, ::1])", ops=OPS)
def _segment_rows(data, indices, ids, combiner, out):  # pragma: no cover - compiled
    n = ids.shape[0]
    limit = data.shape[0]
    rows = out.shape[0]
    width = data.shape[1]
    previous = ids[0] if n else 0
    for i in range(n):
        segment = ids[i]
        index = indices[i]
        if segment < previous or segment < 0 or segment >= rows or index < 0 or index >= limit:
            return i
        previous = segment
    for r in range(rows):
        for c in range(width):
            out[r, c] = 0.0
    i = 0
    while i < n:
        segment = ids[i]
        j = i
        while j < n and ids[j] == segment:
            index = indices[j]
            for c in range(width):
                out[segment, c] += data[index, c]
            j += 1
        if combiner != _SUM:
            count = np.float64(j - i)
            divisor = np.float32(count) if combiner == _MEAN else np.float32(math.sqrt(count))
            for c in range(width):
                out[segment, c] = out[segment, c] / divisor
        i = j
    return _ALL_VALID


def sparse_segment_rows(data: np.ndarray, indices: np.ndarray, ids: np.ndarray, num_rows: int,
                        combiner: str) -> np.ndarray | None:
    """The reduction of float32 `data` rows gathered at `indices` into `num_rows` rows by the sorted `ids`
    (int64 on the host); None where a check fails (the twin then says which)."""
    flat = np.ascontiguousarray(data).reshape(data.shape[0], math.prod(data.shape[1:]))
    out = np.empty((num_rows, flat.shape[1]), np.float32)
    status = _segment_rows(flat, np.ascontiguousarray(indices, dtype=np.int64), np.ascontiguousarray(ids),
                           COMBINERS[combiner], out)
    if status != _ALL_VALID:
        return None
    return out.reshape((num_rows,) + data.shape[1:])
