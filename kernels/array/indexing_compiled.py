"""Compiled loops of the indexing kernels (kernels.array.indexing, kernels.array.unique), where their numpy
twins pay numpy's per-call cost many times over for small inputs or take a sort where a pass would do:

- `first_out_of_range`: the gathers' index check in one pass (the twin takes a min and a max, two
  reductions of a few microseconds each even for one index);
- `unique_integers`: Unique of an integer vector with a hash table, the distinct values in order of first
  appearance directly (the twin sorts, then sorts the first appearances back into order);
- `top_k_rows`: TopKV2 on float32 rows with a heap of k per row, O(n log k) (the twin partitions and sorts).
  Entries are ranked by an int64 key: the value's float32 bits made monotonic (-0.0 taken as 0.0, any NaN
  above +inf, as the twin's sort ranks NaN) in the high half and the complement of the position in the low
  half, so that of equal values the lower position ranks first, as in TensorFlow and the twin.
"""

from __future__ import annotations

import math

import numpy as np

from kernels.jit import compiled, readonly

__all__ = ["first_out_of_range", "top_k_rows", "unique_integers"]

_INT64S = "Array(int64, 1, 'C', readonly=True)"
_INT32S = "Array(int32, 1, 'C', readonly=True)"
_INDEX_TYPES = (np.int32, np.int64)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing's multiplier: 2^64 / golden ratio
_LOW32 = np.int64(0xFFFFFFFF)


@compiled(f"int64({_INT64S}, int64)", f"int64({_INT32S}, int64)", ops=("GatherV2", "Gather"))
def _first_out_of_range(indices, limit):  # pragma: no cover - compiled
    for i in range(indices.shape[0]):
        if indices[i] < 0 or indices[i] >= limit:
            return i
    return -1


def first_out_of_range(indices: np.ndarray, limit: int) -> int | None:
    """The flat position of the first index outside [0, limit), -1 if none; None where the loop does not
    take `indices` (not a C-contiguous int32/int64 array): the twin checks them."""
    if indices.dtype.type not in _INDEX_TYPES or not indices.flags.c_contiguous:
        return None
    return _first_out_of_range(indices if indices.ndim == 1 else indices.reshape(-1), limit)


@compiled(f"int64({_INT64S}, int64[::1], int64[::1], int64[::1])",
          ops=("Unique", "UniqueWithCounts", "UniqueV2", "UniqueWithCountsV2"))
def _unique(x, first, inverse, counts):  # pragma: no cover - compiled
    """Writes each distinct value's first position and count (in order of first appearance) and each element's
    distinct value; returns how many there are. Open addressing, linear probing, a table at most half full."""
    n = x.shape[0]
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    table = np.full(1 << bits, -1, np.int64)
    found = 0
    for i in range(n):
        value = x[i]
        slot = np.int64((np.uint64(value) * _GOLDEN) >> shift) & mask
        while True:
            u = table[slot]
            if u < 0:
                table[slot] = found
                first[found] = i
                counts[found] = 1
                inverse[i] = found
                found += 1
                break
            if x[first[u]] == value:
                inverse[i] = u
                counts[u] += 1
                break
            slot = (slot + 1) & mask
    return found


def unique_integers(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For an integer vector: its distinct values in order of first appearance, each element's position among
    them (int64) and each distinct value's count (int64)."""
    n = x.shape[0]
    first, inverse, counts = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    found = _unique(np.ascontiguousarray(x, dtype=np.int64), first, inverse, counts)
    return x[first[:found]], inverse, counts[:found]


@compiled(f"void({readonly(2)}, int64, float32[:, ::1], int64[:, ::1])", ops=("TopKV2",))
def _top_k(x, k, values, indices):  # pragma: no cover - compiled
    rows, n = x.shape
    bits = x.view(np.int32)
    heap = np.empty(k, np.int64)  # a min-heap of keys: its root is the lowest ranked of the k kept

    def sift_down(size, key):  # the root replaced by `key`, moved down to its place in heap[:size]
        at = 0
        while True:
            child = 2 * at + 1
            if child >= size:
                break
            if child + 1 < size and heap[child + 1] < heap[child]:
                child += 1
            if heap[child] >= key:
                break
            heap[at] = heap[child]
            at = child
        heap[at] = key

    for r in range(rows):
        size = 0
        floor = np.float32(0.0)  # the root's value: anything below it is out without computing its key
        for j in range(n):
            value = x[r, j]
            if size == k and value < floor:
                continue
            b = np.int64(bits[r, j])
            if math.isnan(value):
                b = 0x7FFFFFFF  # NaN: above +inf (0x7F800000)
            elif b == -2147483648:
                b = 0  # -0.0 is 0.0
            elif b < 0:
                b = b ^ 0x7FFFFFFF  # negative floats: the larger the magnitude, the lower
            key = (b << 32) | (_LOW32 - j)
            if size < k:
                at = size  # sift up
                size += 1
                while at > 0:
                    parent = (at - 1) >> 1
                    if heap[parent] <= key:
                        break
                    heap[at] = heap[parent]
                    at = parent
                heap[at] = key
            elif key > heap[0]:
                sift_down(size, key)
            else:
                continue
            if size == k:
                floor = x[r, _LOW32 - (heap[0] & _LOW32)]
        for out in range(k - 1, -1, -1):  # the lowest ranked comes off first: it goes last
            position = _LOW32 - (heap[0] & _LOW32)
            values[r, out] = x[r, position]
            indices[r, out] = position
            size -= 1
            if size:
                sift_down(size, heap[size])


def top_k_rows(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k highest ranked entries of each row of float32 `x` [rows, n] (0 < k <= n < 2^32), highest first,
    and their positions (int64)."""
    rows = x.shape[0]
    values, indices = np.empty((rows, k), np.float32), np.empty((rows, k), np.int64)
    _top_k(np.ascontiguousarray(x), k, values, indices)
    return values, indices
