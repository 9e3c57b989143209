"""The kernel of Bucketize: each value replaced by the index of its bucket among sorted boundaries
(Keras `Discretization`, Keras 3 `digitize`, `tf.raw_ops.Bucketize`).

The bucket is `std::upper_bound`'s answer: the index of the first boundary greater than the value, so a
value equal to a boundary goes to the bucket above it and NaN goes to the last bucket. The boundaries
are float32 (a list(float) attr); double inputs are compared with them in double, int32 and int64
inputs are converted to float32 first, as C++ converts them. The output is int32, in the input's shape.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from kernels.registry import kernel

__all__ = ["bucketize"]


def _upper_bound(xp: Any, edges: Any, values: Any) -> Any:
    """std::upper_bound's binary search, step for step, for every value at once: needed only when the
    boundaries hold NaN, where a sorted search (numpy's puts NaN last) would answer differently."""
    first = xp.zeros(values.shape, dtype=xp.int64)
    length = xp.full(values.shape, edges.shape[0], dtype=xp.int64)
    while bool((length > 0).any()):
        half = length >> 1
        middle = first + half
        below = values < edges[xp.minimum(middle, edges.shape[0] - 1)]
        active = length > 0
        first = xp.where(active & ~below, middle + 1, first)
        length = xp.where(active, xp.where(below, half, length - half - 1), 0)
    return first


@functools.lru_cache(maxsize=256)
def _edges(boundaries: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray, bool]:
    """The boundaries as float32 and float64 arrays (read-only: shared by every call) and whether one is
    NaN; checked once per attr value."""
    edges = np.asarray(boundaries, dtype=np.float32).reshape(-1)
    # NOTE: std::is_sorted compares with <, so NaN boundaries never make the list unsorted.
    if edges.size > 1 and bool(np.any(edges[1:] < edges[:-1])):
        raise ValueError("Expected sorted boundaries")
    wide = edges.astype(np.float64)
    edges.setflags(write=False)
    wide.setflags(write=False)
    return edges, wide, bool(np.isnan(edges).any())


@kernel("Bucketize")
def bucketize(xp: Any, input: Any, *, boundaries: tuple[float, ...]) -> tuple:
    """The index of the first boundary greater than each value, as int32."""
    edges, wide, has_nan = _edges(tuple(boundaries))
    values = input if input.dtype == np.float64 else input.astype(np.float32, copy=False)
    device_edges = xp.asarray(wide if values.dtype == np.float64 else edges)
    if has_nan:
        buckets = _upper_bound(xp, device_edges, values)
    else:
        buckets = xp.searchsorted(device_edges, values.reshape(-1), side="right").reshape(values.shape)
    return (buckets.astype(xp.int32),)
