"""The kernel of TF Text's MaxSpanningTree (text.max_spanning_tree): the maximum directed spanning tree (or
forest) of each digraph of a batch, by TF Text's MstSolver (mst_solver.h: Tarjan's O(n^2) variant of
Chu-Liu-Edmonds for dense digraphs).

scores[b, t, s] scores the arc s -> t, or t as a root where s == t; non-finite scores are missing arcs. The
solver is replayed step by step (the order it visits arcs, its ties going to the last best source, the root
penalty that makes a tree of a forest, its arithmetic in the scores' dtype, int32 wrapping), so the tree it
picks among equal-scoring ones is TF Text's.

    >>> scores = np.array([[[0, 1], [5, 0]]], np.int32)  # 0 as the root, then 1 -> 0 scores 5 + 0
    >>> max_scores, sources = max_spanning_tree(np, np.array([2], np.int32), scores)
    >>> max_scores.tolist(), sources.tolist()
    ([5], [[0, 0]])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel

__all__ = ["max_spanning_tree", "solve"]

# TF Text's solver indexes nodes with uint16, so 2n must stay below its null index, 65535.
_MAX_INDEX = 65535


def _arithmetic(dtype: np.dtype) -> Callable[[Any], Any]:
    """The scores' arithmetic: a value rounded (or wrapped) to `dtype`, as the C++ Score type holds it."""
    if dtype == np.int32:
        return lambda v: (int(v) + 2**31) % 2**32 - 2**31
    if dtype == np.float32:
        return np.float32
    return float


class _DisjointSets:
    """TF Text's DisjointSetForest; union by rank or, without it, the first root under the second."""

    def __init__(self, size: int, by_rank: bool = True):
        self.parents = list(range(size))
        self.ranks = [0] * size
        self.by_rank = by_rank

    def find(self, element: int) -> int:
        root = element
        while self.parents[root] != root:
            root = self.parents[root]
        while self.parents[element] != root:
            self.parents[element], element = root, self.parents[element]
        return root

    def union_of_roots(self, root1: int, root2: int) -> None:
        if root1 == root2:
            return
        if self.by_rank and self.ranks[root2] < self.ranks[root1]:
            self.parents[root2] = root1
        else:
            self.parents[root1] = root2
            if self.by_rank and self.ranks[root1] == self.ranks[root2]:
                self.ranks[root2] += 1


def solve(num_nodes: int, scores: np.ndarray, forest: bool) -> list[int]:
    """The argmax sources of one digraph's [n, n] scores (`argmax[t]` is t for a root), as MstSolver::Solve.

    Nodes are shifted up by one for an artificial root 0, whose arcs carry the root scores; each node's arcs
    in are a column `columns[target][source] = (score, source, target)` over the n + 1 initial sources, and a
    contracted cycle appends a column of its own (the arcs into its members, rescored)."""
    score = _arithmetic(scores.dtype)
    lowest = score(np.iinfo(scores.dtype).min if scores.dtype == np.int32 else np.finfo(scores.dtype).min)
    n, initial = num_nodes, num_nodes + 1
    columns = _initial_columns(scores, n, score)
    if not forest:
        _penalize_roots(columns, initial, score)
    argmax_arcs: list[tuple | None] = [None] * (2 * n)
    contracted_into: list[int | None] = [0] * (2 * n)  # 0: not contracted (yet); None: deleted in expansion
    weak, strong = _DisjointSets(initial), _DisjointSets(initial)
    contracted = _DisjointSets(2 * n, by_rank=False)
    target = 1
    while target < len(columns):  # contraction phase: columns grow as cycles contract
        arc = _best_arc_in(columns[target], lowest)
        if arc is None:
            raise ValueError("Infeasible digraph")
        argmax_arcs[target] = arc
        if arc[1] != 0:
            source_root, target_root = weak.find(arc[1]), weak.find(arc[2])
            if source_root == target_root:
                _contract_cycle(target, columns, argmax_arcs, contracted_into, strong, contracted, initial, score)
            else:
                weak.union_of_roots(source_root, target_root)
        target += 1
    _expand(argmax_arcs, contracted_into, len(columns), initial)
    argmax = [t if argmax_arcs[t + 1][1] == 0 else argmax_arcs[t + 1][1] - 1 for t in range(n)]
    if not forest and sum(argmax[t] == t for t in range(n)) != 1:
        raise ValueError("Infeasible digraph")
    return argmax


def _initial_columns(scores: np.ndarray, n: int, score: Callable[[Any], Any]) -> list[list[tuple | None]]:
    """The arcs with finite scores, a column per target; the diagonal's scores are root arcs from node 0."""
    columns: list[list[tuple | None]] = [[None] * (n + 1) for _ in range(n + 1)]
    finite = np.isfinite(scores[:n, :n].astype(np.float64))
    for target in range(n):
        for source in range(n):
            if finite[target, source]:
                origin = 0 if source == target else source + 1
                columns[target + 1][origin] = (score(scores[target, source]), origin, target + 1)
    return columns


def _expand(argmax_arcs: list, contracted_into: list, num_nodes: int, initial: int) -> None:
    """MstSolver::ExpansionPhase: each contracted node not yet broken, newest first, gives its best arc to the
    member it enters, which breaks every cycle nested between the two."""
    for root in range(num_nodes - 1, initial - 1, -1):
        if contracted_into[root] is None:
            continue
        arc = argmax_arcs[root]
        argmax_arcs[arc[2]] = arc
        node = contracted_into[arc[2]]
        while node is not None and node != root:
            contracted_into[node], node = None, contracted_into[node]


def _penalize_roots(columns: list, initial: int, score: Callable[[Any], Any]) -> None:
    """Lower every root score by more than any tree's range of arc scores, so one root beats two."""
    existing = [arc[0] for column in columns for arc in column if arc is not None]
    if not existing:
        return
    penalty = score(1 + score(initial * score(max(existing) - min(existing))))
    for column in columns[1:]:
        if column[0] is not None:
            column[0] = (score(column[0][0] - penalty), 0, column[0][2])


def _best_arc_in(column: list, lowest: Any) -> tuple | None:
    """MstSolver::MaximumInboundArc: the best arc, from the dtype's lowest value up (a NaN or -inf never wins);
    ties go to the last source, as the solver's `max_score <= score` has it."""
    best, best_score = None, lowest
    for arc in column:
        if arc is not None and best_score <= arc[0]:
            best, best_score = arc, arc[0]
    return best


def _contract_cycle(node: int, columns: list, argmax_arcs: list, contracted_into: list, strong: _DisjointSets,
                    contracted: _DisjointSets, initial: int, score: Callable[[Any], Any]) -> None:
    """MstSolver::ContractCycle: the cycle through `node` becomes a new node, whose arcs in are its members'
    arcs in from outside the cycle, rescored by the cost of breaking the cycle there."""
    new = len(columns)
    columns.append([None] * initial)
    cycle = []
    member = node
    while True:
        arc = argmax_arcs[member]
        cycle.append((member, arc))
        strong.union_of_roots(strong.find(arc[1]), strong.find(arc[2]))
        next_member = contracted.find(arc[1])
        contracted.union_of_roots(member, new)
        contracted_into[member] = new
        member = next_member
        if member == new:
            break
    merged = columns[new]
    for member, arc in cycle:
        offset = score(-arc[0])
        for source, inbound in enumerate(columns[member]):
            if inbound is None or strong.find(inbound[1]) == strong.find(inbound[2]):
                continue
            value = score(inbound[0] + offset)
            if merged[source] is None or merged[source][0] < value:
                merged[source] = (value, inbound[1], inbound[2])


@kernel("MaxSpanningTree", devices=("cpu",), outputs=2)
def max_spanning_tree(xp: Any, num_nodes: Any, scores: Any, *, forest: bool = False) -> tuple:
    """Each digraph's maximum tree score ([B], the scores' dtype) and each node's source ([B, M] int32, -1
    past the digraph's nodes)."""
    num_nodes, scores = np.asarray(num_nodes), np.asarray(scores)
    if num_nodes.ndim != 1:
        raise ValueError(f"num_nodes must be a vector, got shape {format_dims(num_nodes.shape)}")
    if scores.ndim != 3:
        raise ValueError(f"scores must be rank 3, got shape {format_dims(scores.shape)}")
    if scores.dtype not in (np.int32, np.float32, np.float64):
        raise TypeError(f"scores must be int32, float32 or float64, not {scores.dtype}")
    batch, m = scores.shape[:2]
    if num_nodes.shape != (batch,):
        raise ValueError(f"num_nodes misshapen: got {format_dims(num_nodes.shape)} but expected {format_dims([batch])}")
    if scores.shape != (batch, m, m):
        raise ValueError(f"scores misshapen: got {format_dims(scores.shape)} but expected {format_dims([batch, m, m])}")
    score = _arithmetic(scores.dtype)
    max_scores = np.zeros(batch, scores.dtype)
    sources = np.full((batch, m), -1, np.int32)
    for b, n in enumerate(num_nodes.astype(np.int64).tolist()):
        if n > m:
            raise ValueError(f"number of nodes in digraph {b} overflows input dimension: got {n} but expected <= {m}")
        if n <= 0:
            raise ValueError(f"Non-positive number of nodes: {n} (digraph {b})")
        if 2 * n >= _MAX_INDEX:
            raise ValueError(f"Too many nodes: {n} (digraph {b})")
        argmax = solve(n, scores[b], forest)
        total = score(0)
        for target, source in enumerate(argmax):
            total = score(total + score(scores[b, target, source]))
        max_scores[b] = total
        sources[b, :n] = argmax
    return max_scores, sources
