"""The darts-clone double-array trie inside TF Text's flatbuffer models (DartsCloneTrieWrapper): an array of
uint32 units in which node n's child along byte c is the unit at n ^ offset(n) ^ c when that unit's label
is c, and a node holding a value has its leaf at n ^ offset(n).

Traversal follows the units exactly as TF Text's C++ does, so a model's results come from its own data.
An index past the array (which only a malformed model reaches) raises ValueError.

    >>> trie = DartsTrie(units)
    >>> node = trie.walk(DartsTrie.ROOT, b"ab")    # -1 when there is no such path
    >>> trie.value(node)                           # None when the node holds no value
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np

__all__ = ["DartsTrie", "uint32_array"]


def uint32_array(values: np.ndarray) -> array:
    """A uint32 vector as an array.array: indexed one element at a time as fast as a list, in 4 bytes each."""
    out = array("I")
    if out.itemsize != 4:
        out = array("L")
    out.frombytes(np.ascontiguousarray(values, dtype=np.dtype(f"=u{out.itemsize}")).tobytes())
    return out


class DartsTrie:
    """Read access to a darts-clone trie given as its units."""

    ROOT = 0

    def __init__(self, units: np.ndarray, what: str = "trie_array", *, allow_empty: bool = False):
        units = np.asarray(units, dtype=np.uint32).reshape(-1)
        if units.size == 0 and not allow_empty:  # (an empty trie holds no key: `prefix_matches` finds none)
            raise ValueError(f"{what} is empty")
        self.what = what
        self.units = units
        self._units = uint32_array(units)  # the per-byte loops index them one at a time

    def _unit(self, index: int) -> int:
        try:
            return self._units[index]
        except IndexError:
            raise ValueError(f"{self.what} is malformed: index {index} is past its {len(self._units)} units") from None

    @staticmethod
    def offset(unit: int) -> int:
        return (unit >> 10) << ((unit & 0x200) >> 6)

    def child(self, node: int, byte: int) -> int:
        """The node reached from `node` along `byte`, or -1."""
        unit = self._unit(node)
        nxt = node ^ ((unit >> 10) << ((unit & 0x200) >> 6)) ^ byte
        return nxt if self._unit(nxt) & 0x800000FF == byte else -1

    def walk(self, node: int, data: bytes, start: int = 0, end: int | None = None) -> int:
        """The node reached from `node` along data[start:end] (all of it, or -1: TryTraverseSeveralSteps)."""
        for byte in data[start:end]:
            unit = self._unit(node)
            node = node ^ ((unit >> 10) << ((unit & 0x200) >> 6)) ^ byte
            if self._unit(node) & 0x800000FF != byte:
                return -1
        return node

    def value(self, node: int) -> int | None:
        """The value `node` holds (TryGetData), or None."""
        unit = self._unit(node)
        if not unit & 0x100:
            return None
        return self._unit(node ^ ((unit >> 10) << ((unit & 0x200) >> 6))) & 0x7FFFFFFF

    def prefix_matches(self, data: bytes, start: int = 0) -> Iterator[tuple[int, int]]:
        """(value, length) of each key that is a prefix of data[start:], shortest first (CommonPrefixSearch). A
        walk that would leave the units ends the search, as the bounds checks of TF Text's SentencePiece trie
        (double_array_trie.h) end it, rather than raising."""
        units = self._units
        size = len(units)
        if not size:
            return
        pos = self.offset(units[self.ROOT])
        for i in range(start, len(data)):
            byte = data[i]
            pos ^= byte
            if pos >= size:
                return
            unit = units[pos]
            if unit & 0x800000FF != byte:
                return
            pos ^= (unit >> 10) << ((unit & 0x200) >> 6)
            if pos >= size:
                return
            if unit & 0x100:
                yield units[pos] & 0x7FFFFFFF, i - start + 1

    def lookup(self, key: bytes) -> int | None:
        """The value stored for `key`, or None."""
        node = self.walk(self.ROOT, key)
        return None if node < 0 else self.value(node)

    def walk_all(self, nodes: np.ndarray, data: bytes) -> np.ndarray:
        """`walk` from each of `nodes` at once: the nodes reached, -1 where a walk fails."""
        units = self.units.astype(np.int64)
        current = np.asarray(nodes, dtype=np.int64).copy()
        alive = np.ones(current.shape, dtype=bool)
        for byte in data:
            unit = units[current[alive]]
            nxt = current[alive] ^ ((unit >> 10) << ((unit & 0x200) >> 6)) ^ byte
            ok = nxt < units.size
            ok[ok] = (units[nxt[ok]] & 0x800000FF) == byte
            current[alive] = np.where(ok, nxt, -1)
            alive &= current >= 0
        return current

    def reachable(self, starts: np.ndarray | None = None) -> np.ndarray:
        """Every node a walk from the root (or from any of `starts`) can reach, those included, as sorted
        int64 ids."""
        units = self.units.astype(np.int64)
        size = units.size
        offsets = (units >> 10) << ((units & 0x200) >> 6)
        labels = units & 0x800000FF
        seen = np.zeros(size, dtype=bool)
        frontier = np.unique(np.append(np.asarray([] if starts is None else starts, dtype=np.int64), self.ROOT))
        if frontier.size and (frontier[0] < 0 or frontier[-1] >= size):
            raise ValueError(f"{self.what} is malformed: a start node is past its {size} units")
        seen[frontier] = True
        byte = np.arange(256, dtype=np.int64)
        while frontier.size:
            found = []
            for block in range(0, frontier.size, 4096):
                part = frontier[block:block + 4096]
                children = (part ^ offsets[part])[:, None] ^ byte[None, :]
                inside = children < size
                hit = np.zeros(children.shape, dtype=bool)
                hit[inside] = labels[children[inside]] == np.broadcast_to(byte, children.shape)[inside]
                found.append(children[hit])
            nodes = np.unique(np.concatenate(found))
            frontier = nodes[~seen[nodes]]
            seen[frontier] = True
        return np.flatnonzero(seen)
