"""Kernels of TF Text's round-robin trimmer: TFText>RoundRobinTrim and TFText>RoundRobinGenerateMasks, which
text.RoundRobinTrimmer puts in BERT-style graphs to fit N segments of each batch row into
`max_sequence_length` values (the other trimmers, WaterfallTrimmer and ShrinkLongestTrimmer, are built from
core ops).

Per batch row, as TF Text's round_robin_trimmer.h computes it: segments are taken from the shortest up, each
kept whole while every segment not yet kept could still get as many values; the others get an equal share of
what is left (rounded down); the remainder goes one value at a time to the segments with values left, in
segment order. A negative `max_sequence_length` counts as 0.

    >>> out = round_robin_trim(np, np.int32(4), np.array([1, 2, 3]), np.array([4, 5]),
    ...                        np.array([0, 3], np.int64), np.array([0, 2], np.int64), N=2)
    >>> [a.tolist() for a in out]
    [[1, 2], [4, 5], [0, 2], [0, 2]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel

__all__ = ["kept_counts", "round_robin_generate_masks", "round_robin_trim"]


def _check(max_sequence_length: Any, values: tuple, splits: tuple) -> np.ndarray:
    """The segments' row lengths, [batch, N], after checking the inputs as TF Text's shape function does."""
    if np.ndim(max_sequence_length) != 0:
        raise ValueError(f"Shape must be a scalar: {format_dims(np.shape(max_sequence_length))}")
    for tensor in (*values, *splits):
        if np.ndim(tensor) != 1:
            raise ValueError(f"Shape must be rank 1: {format_dims(np.shape(tensor))}")
    batch = len(splits[0]) - 1
    lengths = []
    for i, (v, s) in enumerate(zip(values, splits)):
        s = np.asarray(s, np.int64)
        if len(s) != batch + 1:
            raise ValueError(f"segment {i}'s row_splits describe {len(s) - 1} rows; segment 0's describe {batch}")
        if batch >= 0 and (len(s) == 0 or s[0] != 0 or np.any(np.diff(s) < 0) or s[-1] > len(v)):
            raise ValueError(f"segment {i}'s row_splits must start at 0, never decrease and end within its "
                             f"{len(v)} values; they are {s.tolist()}")
        lengths.append(np.diff(s))
    return np.stack(lengths, axis=1) if lengths else np.zeros((0, 0), np.int64)


def kept_counts(sizes: list[int], max_sequence_length: int) -> list[int]:
    """How many values each segment of one batch row keeps (round_robin_trimmer.h's ProcessBatch)."""
    left = max(max_sequence_length, 0)
    n = len(sizes)
    used = [0] * n
    order = sorted(range(n), key=lambda i: sizes[i])  # equal sizes fill alike, so the sort's stability is moot
    filled = 0
    for i in order:
        if sizes[i] * (n - filled) > left:
            break
        used[i] = sizes[i]
        left -= sizes[i]
        filled += 1
    if filled < n:
        share = left // (n - filled)
        for i in order[filled:]:
            used[i] = share
            left -= share
    for i in range(n):
        if left <= 0:
            break
        if used[i] < sizes[i]:
            used[i] += 1
            left -= 1
    return used


def _kept_per_row(lengths: np.ndarray, limit: int) -> np.ndarray:
    """`kept_counts` of every batch row at once ([batch, N] lengths), looping over the N segments only."""
    batch, n = lengths.shape
    order = np.argsort(lengths, axis=1, kind="stable")
    ranked = np.take_along_axis(lengths, order, axis=1)
    left = np.full(batch, max(limit, 0), np.int64)
    alive = np.ones(batch, bool)
    used_ranked = np.zeros_like(ranked)
    filled = np.zeros(batch, np.int64)
    for i in range(n):  # shortest first, each kept whole while the rest could still get as many
        alive &= ranked[:, i] * (n - i) <= left
        used_ranked[:, i] = np.where(alive, ranked[:, i], 0)
        left -= used_ranked[:, i]
        filled += alive
    share = np.where(filled < n, left // np.maximum(n - filled, 1), 0)
    rest = np.arange(n)[None, :] >= filled[:, None]
    used_ranked = np.where(rest, share[:, None], used_ranked)
    left -= share * (n - filled)
    used = np.empty_like(used_ranked)
    np.put_along_axis(used, order, used_ranked, axis=1)
    for i in range(n):  # the remainder, one value at a time in segment order
        extra = (left > 0) & (used[:, i] < lengths[:, i])
        used[:, i] += extra
        left -= extra
    return used


def _counts(max_sequence_length: Any, values: tuple, splits: tuple) -> tuple[np.ndarray, np.ndarray]:
    lengths = _check(max_sequence_length, values, splits)
    return lengths, _kept_per_row(lengths.astype(np.int64), int(np.asarray(max_sequence_length)))


def _kept_mask(length_column: np.ndarray, kept_column: np.ndarray, size: int) -> np.ndarray:
    """Over a segment's values: whether each is kept (a row keeps its first `kept` values; values past the
    last row split belong to no row)."""
    total = int(length_column.sum())
    starts = np.repeat(np.cumsum(length_column) - length_column, length_column)
    position = np.arange(total) - starts
    mask = np.zeros(size, bool)
    mask[:total] = position < np.repeat(kept_column, length_column)
    return mask


def _inputs(args: tuple, N: int) -> tuple[tuple, tuple]:
    if len(args) != 2 * N:
        raise ValueError(f"expected {N} input_values and {N} input_row_splits, got {len(args)} tensors")
    return args[:N], args[N:]


@kernel("TFText>RoundRobinTrim", devices=("cpu",), outputs=lambda attrs: 2 * attrs["N"])
def round_robin_trim(xp: Any, max_sequence_length: Any, *args: Any, N: int) -> tuple:
    """Each segment's values and row splits, trimmed: N values tensors, then N row splits (the input's dtype)."""
    values, splits = _inputs(args, N)
    lengths, kept = _counts(max_sequence_length, values, splits)
    out_values, out_splits = [], []
    for s, (v, sp) in enumerate(zip(values, splits)):
        v = np.asarray(v)
        out_values.append(v[_kept_mask(lengths[:, s], kept[:, s], len(v))])
        out_splits.append(np.concatenate([[0], np.cumsum(kept[:, s])]).astype(np.asarray(sp).dtype))
    return (*out_values, *out_splits)


@kernel("TFText>RoundRobinGenerateMasks", devices=("cpu",), outputs=lambda attrs: attrs["N"])
def round_robin_generate_masks(xp: Any, max_sequence_length: Any, *args: Any, N: int) -> tuple:
    """For each segment, a bool per value: whether the trimmer keeps it."""
    values, splits = _inputs(args, N)
    lengths, kept = _counts(max_sequence_length, values, splits)
    masks = [_kept_mask(lengths[:, s], kept[:, s], int(lengths[:, s].sum())) for s in range(N)]
    return tuple(masks)
