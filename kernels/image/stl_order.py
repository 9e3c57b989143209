"""The orders libstdc++ leaves equal elements in: std::priority_queue's pops and std::sort's result.

Neither is stable, so where TensorFlow's kernels order records by score alone (CombinedNonMaxSuppression
pops each class's boxes from a priority_queue over a vector and sorts the selections with std::sort),
records with equal scores come out in an order only these algorithms define. Here they are step for
step as libstdc++ writes them (bits/stl_heap.h, bits/stl_algo.h): the heap's sift-up and hole-to-leaf
sift-down, and introsort with its median-of-three pivot, unguarded partition, depth limit of twice
log2(n) (then heapsort) and final insertion sort over runs of 16.

Both take `keys`, Python floats with no NaN, and compare them with `<` only, as the comparators do:

    >>> pop_order([0.5] * 5)                      # a max-heap over the keys, pushed in index order
    [0, 2, 4, 1, 3]
    >>> sort_order([0.5] * 20, descending=True)[:4]
    [10, 19, 18, 17]

They run in Python: the kernels call them only when equal keys reach a position that matters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

__all__ = ["iter_pops", "pop_order", "sort_order"]

_THRESHOLD = 16  # libstdc++'s _S_threshold: runs this short are left to the insertion sort


# --- the binary heap (std::push_heap / std::pop_heap with `less`) --------------------------------------


def _sift_up(keys: list[float], items: list[int], hole: int, top: int, key: float, item: int) -> None:
    """std::__push_heap: move the hole up while its parent is less than the value."""
    parent = (hole - 1) // 2
    while hole > top and keys[parent] < key:
        keys[hole], items[hole] = keys[parent], items[parent]
        hole = parent
        parent = (hole - 1) // 2
    keys[hole], items[hole] = key, item


def _adjust(keys: list[float], items: list[int], hole: int, length: int, key: float, item: int,
            less: Callable[[float, float], bool]) -> None:
    """std::__adjust_heap: the hole goes down to a leaf along the larger children, then the value sifts up."""
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if less(keys[child], keys[child - 1]):
            child -= 1
        keys[hole], items[hole] = keys[child], items[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        keys[hole], items[hole] = keys[child - 1], items[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and less(keys[parent], key):
        keys[hole], items[hole] = keys[parent], items[parent]
        hole = parent
        parent = (hole - 1) // 2
    keys[hole], items[hole] = key, item


def _less(a: float, b: float) -> bool:
    return a < b


def _greater(a: float, b: float) -> bool:
    return b < a


def iter_pops(keys: Sequence[float]) -> Iterator[int]:
    """The indices of `keys` in the order a std::priority_queue (vector, std::less) pops them after each
    was pushed in index order; lazily, so a caller that stops early pays for the pushes only."""
    heap_keys: list[float] = []
    heap_items: list[int] = []
    for index, key in enumerate(keys):
        heap_keys.append(key)
        heap_items.append(index)
        _sift_up(heap_keys, heap_items, len(heap_keys) - 1, 0, key, index)
    while heap_keys:
        yield heap_items[0]
        last_key, last_item = heap_keys.pop(), heap_items.pop()
        if heap_keys:  # std::pop_heap: the last element fills the hole left at the root
            _adjust(heap_keys, heap_items, 0, len(heap_keys), last_key, last_item, _less)


def pop_order(keys: Sequence[float]) -> list[int]:
    """Every index of `keys` in std::priority_queue pop order (see iter_pops)."""
    return list(iter_pops(keys))


# --- std::sort --------------------------------------------------------------------------------------


class _Sorter:
    """std::sort over parallel lists of keys and items with comparator `less`."""

    def __init__(self, keys: list[float], items: list[int], less: Callable[[float, float], bool]):
        self.keys, self.items, self.less = keys, items, less

    def swap(self, i: int, j: int) -> None:
        k, it = self.keys, self.items
        k[i], k[j] = k[j], k[i]
        it[i], it[j] = it[j], it[i]

    def sort(self) -> None:
        n = len(self.keys)
        if n > 1:
            self.introsort(0, n, 2 * (n.bit_length() - 1))
            self.final_insertion_sort(0, n)

    def introsort(self, first: int, last: int, depth: int) -> None:
        while last - first > _THRESHOLD:
            if depth == 0:
                self.heapsort(first, last)
                return
            depth -= 1
            cut = self.partition_pivot(first, last)
            self.introsort(cut, last, depth)
            last = cut

    def partition_pivot(self, first: int, last: int) -> int:
        mid = first + (last - first) // 2
        self.median_to_first(first, first + 1, mid, last - 1)
        return self.unguarded_partition(first + 1, last, first)

    def median_to_first(self, result: int, a: int, b: int, c: int) -> None:
        k, less = self.keys, self.less
        if less(k[a], k[b]):
            if less(k[b], k[c]):
                self.swap(result, b)
            elif less(k[a], k[c]):
                self.swap(result, c)
            else:
                self.swap(result, a)
        elif less(k[a], k[c]):
            self.swap(result, a)
        elif less(k[b], k[c]):
            self.swap(result, c)
        else:
            self.swap(result, b)

    def unguarded_partition(self, first: int, last: int, pivot: int) -> int:
        k, less = self.keys, self.less
        while True:
            while less(k[first], k[pivot]):
                first += 1
            last -= 1
            while less(k[pivot], k[last]):
                last -= 1
            if not first < last:
                return first
            self.swap(first, last)
            first += 1

    def heapsort(self, first: int, last: int) -> None:
        """std::__partial_sort(first, last, last): make_heap, then sort_heap."""
        k, it = self.keys, self.items
        keys, items = k[first:last], it[first:last]
        length = len(keys)
        parent = (length - 2) // 2
        while True:
            _adjust(keys, items, parent, length, keys[parent], items[parent], self.less)
            if parent == 0:
                break
            parent -= 1
        while length > 1:
            length -= 1
            key, item = keys[length], items[length]
            keys[length], items[length] = keys[0], items[0]
            _adjust(keys, items, 0, length, key, item, self.less)
        k[first:last], it[first:last] = keys, items

    def linear_insert(self, last: int) -> None:
        """std::__unguarded_linear_insert."""
        k, it, less = self.keys, self.items, self.less
        key, item = k[last], it[last]
        prev = last - 1
        while less(key, k[prev]):
            k[last], it[last] = k[prev], it[prev]
            last = prev
            prev -= 1
        k[last], it[last] = key, item

    def insertion_sort(self, first: int, last: int) -> None:
        k, it, less = self.keys, self.items, self.less
        for i in range(first + 1, last):
            if less(k[i], k[first]):
                key, item = k[i], it[i]
                k[first + 1:i + 1], it[first + 1:i + 1] = k[first:i], it[first:i]
                k[first], it[first] = key, item
            else:
                self.linear_insert(i)

    def final_insertion_sort(self, first: int, last: int) -> None:
        if last - first > _THRESHOLD:
            self.insertion_sort(first, first + _THRESHOLD)
            for i in range(first + _THRESHOLD, last):
                self.linear_insert(i)
        else:
            self.insertion_sort(first, last)


def sort_order(keys: Sequence[float], *, descending: bool = False) -> list[int]:
    """The indices of `keys` in the order std::sort leaves them, comparing with `a < b` (or, descending,
    `b < a`, TensorFlow's `rc_j.score < rc_i.score`)."""
    sorter = _Sorter(list(keys), list(range(len(keys))), _greater if descending else _less)
    sorter.sort()
    return sorter.items
