"""EditDistance: the Levenshtein distance between the sequences of two SparseTensors (tf.edit_distance,
the error rate of CTC decoders).

Each SparseTensor holds one sequence per index of its leading dims, in the order of the last coordinate
(its values are not required to be contiguous). Both are walked group by group in their given order and
merged as TensorFlow merges them. It assumes row-major order and does not check it, so unsorted indices
give TensorFlow's results, not sorted ones.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.host import format_dims, host, host_vector
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["edit_distance", "levenshtein"]


def levenshtein(a: list, b: list) -> int:
    """Insertions, deletions and substitutions turning `a` into `b`; elements compare with == (NaN never
    equals NaN)."""
    if not a or not b:
        return len(a) + len(b)
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (0 if x == y else 1)))
        previous = current
    return previous[-1]


def _groups(indices: list[list[int]], values: list) -> list[tuple[tuple[int, ...], list]]:
    """Runs of consecutive entries with equal leading coordinates, as (group index, its values)."""
    groups: list[tuple[tuple[int, ...], list]] = []
    for row, value in zip(indices, values):
        key = tuple(row[:-1])
        if groups and groups[-1][0] == key:
            groups[-1][1].append(value)
        else:
            groups.append((key, [value]))
    return groups


def _check(h_indices: Any, h_values: Any, h_shape: Any, t_indices: Any, t_values: Any, t_shape: Any) -> None:
    for name, t, rank in (("hypothesis_indices", h_indices, 2), ("truth_indices", t_indices, 2),
                          ("hypothesis_values", h_values, 1), ("truth_values", t_values, 1),
                          ("hypothesis_shape", h_shape, 1), ("truth_shape", t_shape, 1)):
        if t.ndim != rank:
            raise ValueError(f"{name} should be a {'matrix' if rank == 2 else 'vector'}, but got shape: "
                             f"{format_dims(t.shape)}")
    if h_shape.shape[0] != h_indices.shape[1]:
        raise ValueError(f"Expected hypothesis_shape.NumElements == #cols(hypothesis_indices), their shapes are: "
                         f"{format_dims(h_shape.shape)} and {format_dims(h_indices.shape)}")
    if t_shape.shape[0] < 2:
        raise ValueError(f"Input SparseTensors must have rank at least 2, but truth_shape rank is: {t_shape.shape[0]}")
    if t_shape.shape[0] != t_indices.shape[1]:
        raise ValueError(f"Expected truth_shape.NumElements == #cols(truth_indices), their shapes are: "
                         f"{format_dims(t_shape.shape)} and {format_dims(t_indices.shape)}")
    if t_shape.shape[0] != h_shape.shape[0]:
        raise ValueError(f"Expected truth and hypothesis to have matching ranks, but their shapes are: "
                         f"{format_dims(t_shape.shape)} and {format_dims(h_shape.shape)}")
    for name, indices, values in (("hypothesis", h_indices, h_values), ("truth", t_indices, t_values)):
        if indices.shape[0] != values.shape[0]:
            raise ValueError(f"{name}_indices has {indices.shape[0]} rows but {name}_values has {values.shape[0]} "
                             "values")


# Host only: a sequential merge and a dynamic program per pair of sequences, on values that may be strings.
@kernel("EditDistance", devices=("cpu",))
def edit_distance(xp: Any, hypothesis_indices: Any, hypothesis_values: Any, hypothesis_shape: Any,
                  truth_indices: Any, truth_values: Any, truth_shape: Any, *, normalize: bool = True,
                  memory_limit: int | None = None) -> tuple:
    """float32 [max(hypothesis_shape[:-1], truth_shape[:-1])]: the edit distance of each pair of sequences,
    divided by the truth's length when `normalize` (inf for a hypothesis without truth, 1.0 for a truth
    without hypothesis), 0 where both are missing."""
    _check(hypothesis_indices, hypothesis_values, hypothesis_shape, truth_indices, truth_values, truth_shape)
    h_dims, t_dims = host_vector(hypothesis_shape), host_vector(truth_shape)
    for name, dims in (("hypothesis_shape", h_dims), ("truth_shape", t_dims)):
        if any(d < 0 for d in dims):
            raise ValueError(f"{name} has a negative dim: {dims}")
    out_shape = tuple(max(h, t) for h, t in zip(h_dims[:-1], t_dims[:-1]))
    # The dense shapes are values a request sends: the output they ask for is checked before it exists.
    check_elements(math.prod(out_shape), np.float32, memory_limit, "EditDistance output", out_shape)
    out = np.zeros(out_shape, dtype=np.float32)

    def write(group: tuple[int, ...], value: float) -> None:
        if any(not 0 <= g < n for g, n in zip(group, out_shape)):
            raise ValueError(f"sequence index {list(group)} is outside the output shape {format_dims(out_shape)}")
        out[group] = value

    hyp = _groups(host(hypothesis_indices), hypothesis_values.tolist())
    truth = _groups(host(truth_indices), truth_values.tolist())
    i = j = 0
    with np.errstate(divide="ignore"):
        while i < len(hyp) or j < len(truth):
            # Merged as TensorFlow merges them: the smaller group first, by lexicographic comparison.
            if j == len(truth) or (i < len(hyp) and hyp[i][0] < truth[j][0]):  # no truth for this hypothesis
                n = len(hyp[i][1])
                write(hyp[i][0], np.float32(n) / np.float32(0.0) if normalize else n)
                i += 1
            elif i == len(hyp) or truth[j][0] < hyp[i][0]:  # no hypothesis for this truth
                write(truth[j][0], 1.0 if normalize else len(truth[j][1]))
                j += 1
            else:
                distance = levenshtein(truth[j][1], hyp[i][1])
                # float32 division, as the kernel divides its float output in place
                write(truth[j][0], np.float32(distance) / np.float32(len(truth[j][1])) if normalize else distance)
                i += 1
                j += 1
    return (out,)
