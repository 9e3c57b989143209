"""The kernel of TF Text's TFText>NgramsStringJoin (text.ngrams with reduction_type STRING_JOIN): each window of
`width` consecutive strings along the last axis joined with `string_separator`.

On a dense tensor (RAGGED_RANK 0) the last dim becomes max(0, n - width + 1); on a ragged tensor the outer row
splits pass through and the innermost ones count the n-grams of each row (a row shorter than `width` has none).
TF Text only supports axis -1.

    >>> out = ngrams_string_join(np, np.array([b"a", b"b", b"c", b"d"], dtype=object), np.array([0, 3, 4]),
    ...                          width=2, axis=-1, string_separator="-", RAGGED_RANK=1)
    >>> out[0].tolist(), out[1].tolist()
    ([b'a-b', b'b-c'], [0, 2, 2])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, string_array

__all__ = ["ngrams_string_join"]


def _join_rows(tokens: list[bytes], starts: list[int], ends: list[int], width: int,
               separator: bytes) -> tuple[list[bytes], list[int]]:
    out: list[bytes] = []
    counts = []
    for start, end in zip(starts, ends):
        n = max(0, end - start - width + 1)
        out.extend(separator.join(tokens[i:i + width]) for i in range(start, start + n))
        counts.append(n)
    return out, counts


@kernel("TFText>NgramsStringJoin", devices=("cpu",), outputs=lambda attrs: 1 + attrs["RAGGED_RANK"])
def ngrams_string_join(xp: Any, input_values: Any, *input_row_splits: Any, width: int, axis: int,
                       string_separator: str | bytes, RAGGED_RANK: int) -> tuple:
    """The n-grams' values, then the row splits (outer ones as given, the innermost counting n-grams)."""
    if axis != -1:
        raise ValueError(f"axis != -1: {axis}")
    if width < 1:
        raise ValueError(f"width must be at least 1; it is {width}")
    if len(input_row_splits) != RAGGED_RANK:
        raise ValueError(f"expected {RAGGED_RANK} row splits tensors, got {len(input_row_splits)}")
    separator = as_bytes(string_separator)
    values = np.asarray(input_values, dtype=object)
    tokens = flat_strings(values)
    if RAGGED_RANK == 0:
        if values.ndim == 0:
            raise ValueError("input_values must have at least one dimension")
        n = values.shape[-1]
        rows = len(tokens) // n if n else 0
        out, _ = _join_rows(tokens, [r * n for r in range(rows)], [(r + 1) * n for r in range(rows)], width,
                            separator)
        return (string_array(out, (*values.shape[:-1], max(0, n - width + 1))),)
    if values.ndim != 1:
        raise ValueError(f"input_values of a ragged tensor must be a vector; its shape is {list(values.shape)}")
    inner = np.asarray(input_row_splits[-1])
    if inner.ndim != 1 or len(inner) == 0 or inner[0] != 0 or np.any(np.diff(inner) < 0) or inner[-1] > len(tokens):
        raise ValueError(f"the innermost row_splits must start at 0, never decrease and end within the "
                         f"{len(tokens)} values; they are {inner.tolist()}")
    out, counts = _join_rows(tokens, inner[:-1].tolist(), inner[1:].tolist(), width, separator)
    splits = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(inner.dtype)
    return (string_array(out), *input_row_splits[:-1], splits)
