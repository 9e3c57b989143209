"""Kernels of TF Text's ByteSplitter: TFText>ByteSplitWithOffsets (each string of a vector into its bytes, as
uint8, with each byte's offsets: byte i spans [i, i + 1)) and TFText>ByteSplitByOffsets (each string cut into
the substrings given by start and end byte offsets, a ragged batch of them per string).

    >>> out = byte_split_with_offsets(np, np.array([b"ab", b"", "é".encode()], dtype=object))
    >>> [a.tolist() for a in out]
    [[97, 98, 195, 169], [0, 2, 2, 4], [0, 1, 0, 1], [1, 2, 1, 2]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, string_array

__all__ = ["byte_split_by_offsets", "byte_split_with_offsets"]

_HOST = ("cpu",)


def _vector(tensor: Any, what: str) -> np.ndarray:
    if np.ndim(tensor) != 1:
        raise ValueError(f"{what} must be rank 1, got shape {format_dims(np.shape(tensor))}")
    return np.asarray(tensor)


@kernel("TFText>ByteSplitWithOffsets", devices=_HOST, outputs=4)
def byte_split_with_offsets(xp: Any, input_values: Any) -> tuple:
    """A vector of strings split into bytes: the bytes (uint8), their row splits (int64) and each byte's start
    and end offsets (int32)."""
    strings = flat_strings(_vector(input_values, "Input values shape"))
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    starts = (np.arange(splits[-1], dtype=np.int64) - np.repeat(splits[:-1], lengths)).astype(np.int32)
    return np.frombuffer(b"".join(strings), dtype=np.uint8).copy(), splits, starts, starts + np.int32(1)


@kernel("TFText>ByteSplitByOffsets", devices=_HOST, outputs=2)
def byte_split_by_offsets(xp: Any, input_values: Any, input_start_offsets: Any, input_end_offsets: Any,
                          input_row_splits: Any) -> tuple:
    """Each string cut at its row's [start, end) byte offsets: the substrings and their row splits (int64)."""
    strings = flat_strings(_vector(input_values, "Input values shape"))
    starts = _vector(input_start_offsets, "Input start offsets shape").astype(np.int64).tolist()
    ends = _vector(input_end_offsets, "Input end offsets shape").astype(np.int64).tolist()
    row_splits = _vector(input_row_splits, "Input row splits shape").astype(np.int64).tolist()
    if len(row_splits) < len(strings) + 1:
        raise ValueError(f"input_row_splits has {len(row_splits)} values; {len(strings)} strings need "
                         f"{len(strings) + 1}")
    values: list[bytes] = []
    out_splits = [0]
    for i, s in enumerate(strings):
        begin, end = row_splits[i], row_splits[i + 1]
        if not 0 <= begin <= end <= min(len(starts), len(ends)):
            raise ValueError(f"input_row_splits [{begin}, {end}) of string {i} lies outside the {len(starts)} "
                             f"start and {len(ends)} end offsets")
        for start, stop in zip(starts[begin:end], ends[begin:end]):
            if start < 0 or start > len(s):
                raise ValueError("Start offsets out of range.")
            if stop < 0 or stop > len(s):
                raise ValueError("End offsets out of range.")
            if start > stop:
                raise ValueError("Start offset after end offset.")
            values.append(s[start:stop])
        out_splits.append(len(values))
    return string_array(values), np.array(out_splits, np.int64)
