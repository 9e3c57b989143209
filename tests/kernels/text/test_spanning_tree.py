"""MaxSpanningTree beyond the golden fixtures: the tree found is a maximum one (against brute force), the
solver's arithmetic in the scores' dtype, and the errors TF Text gives."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels.text.spanning_tree import max_spanning_tree


def _is_tree(sources: list[int], forest: bool) -> bool:
    roots = [t for t, s in enumerate(sources) if s == t]
    if not roots or (not forest and len(roots) != 1):
        return False
    for t in range(len(sources)):  # every node reaches a root without a cycle
        seen, node = set(), t
        while sources[node] != node:
            if node in seen:
                return False
            seen.add(node)
            node = sources[node]
    return True


def _best_score(scores: np.ndarray, n: int, forest: bool) -> float:
    best = -np.inf
    for sources in itertools.product(range(n), repeat=n):
        if _is_tree(list(sources), forest) and all(np.isfinite(scores[t, s]) for t, s in enumerate(sources)):
            best = max(best, sum(float(scores[t, s]) for t, s in enumerate(sources)))
    return best


@pytest.mark.parametrize("forest", [False, True])
def test_the_tree_is_a_maximum_one(forest):
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 6))
        scores = rng.integers(-5, 6, (1, n, n)).astype(np.float64)
        scores[0, rng.random((n, n)) < 0.2] = -np.inf
        np.fill_diagonal(scores[0], rng.integers(-5, 6, n))  # every node may be a root: a forest always exists
        best = _best_score(scores[0], n, forest)
        if best == -np.inf:
            with pytest.raises(ValueError, match="Infeasible digraph"):
                max_spanning_tree(np, np.array([n], np.int32), scores, forest=forest)
            continue
        max_scores, sources = max_spanning_tree(np, np.array([n], np.int32), scores, forest=forest)
        assert _is_tree(sources[0].tolist(), forest)
        assert max_scores[0] == best
        assert max_scores[0] == sum(scores[0, t, s] for t, s in enumerate(sources[0]))


def test_padding_and_dtypes():
    scores = np.zeros((2, 3, 3), np.float32)
    max_scores, sources = max_spanning_tree(np, np.array([1, 3], np.int32), scores)
    assert max_scores.dtype == np.float32 and sources.dtype == np.int32
    assert sources[0].tolist() == [0, -1, -1]
    empty_scores, empty_sources = max_spanning_tree(np, np.zeros(0, np.int32), np.zeros((0, 4, 4), np.int32))
    assert empty_scores.shape == (0,) and empty_sources.shape == (0, 4)


def test_int32_scores_wrap_as_the_solver_adds_them():
    big = np.int32(2**31 - 1)
    scores = np.array([[[big, 0], [big, big]]], np.int32)  # 0 the root, 0 -> 1: two maxima, summed in int32
    max_scores, sources = max_spanning_tree(np, np.array([2], np.int32), scores)
    assert sources.tolist() == [[0, 0]] and max_scores.tolist() == [-2]


@pytest.mark.parametrize("num_nodes, scores, message", [
    (np.array([3], np.int32), np.zeros((1, 2, 2), np.int32), "overflows input dimension: got 3 but expected <= 2"),
    (np.array([0], np.int32), np.zeros((1, 2, 2), np.int32), "Non-positive number of nodes: 0"),
    (np.array([2, 2], np.int32), np.zeros((1, 2, 2), np.int32), "num_nodes misshapen: got \\[2\\] but expected \\[1\\]"),
    (np.array([2], np.int32), np.zeros((1, 2, 3), np.int32), "scores misshapen"),
    (np.array(2, np.int32), np.zeros((1, 2, 2), np.int32), "num_nodes must be a vector"),
    (np.array([2], np.int32), np.zeros((2, 2), np.int32), "scores must be rank 3"),
    # No root may be chosen, or (for a tree) only one node may not be reached: infeasible.
    (np.array([2], np.int32), np.array([[[-np.inf, 1.0], [1.0, -np.inf]]]), "Infeasible digraph"),
    (np.array([2], np.int32), np.array([[[1.0, -np.inf], [-np.inf, 1.0]]]), "Infeasible digraph"),
])
def test_errors(num_nodes, scores, message):
    with pytest.raises(ValueError, match=message):
        max_spanning_tree(np, num_nodes, scores)


def test_two_roots_make_a_forest_but_not_a_tree():
    scores = np.array([[[1.0, -np.inf], [-np.inf, 1.0]]])
    max_scores, sources = max_spanning_tree(np, np.array([2], np.int32), scores, forest=True)
    assert sources.tolist() == [[0, 1]] and max_scores.tolist() == [2.0]
