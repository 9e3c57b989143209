"""Kernels of the ops that split strings into tokens and join tokens into n-grams.

StringSplit and StringSplitV2 split each string of a vector and return the tokens as a SparseTensor:
indices [n, 2] (row, position), values [n], dense shape [rows, most tokens in a row]. StringSplit's
delimiter is a set of bytes, each of which ends a token (an empty delimiter splits into single bytes);
empty tokens are dropped with skip_empty, and an empty string has no tokens either way. StringSplitV2
splits as Python's str.split does: on every occurrence of `sep` (empty tokens kept, "" is one empty
token), or, when `sep` is empty, on runs of ASCII whitespace (none kept, "" has no tokens); at most
`maxsplit` splits when it is >= 0, the rest of the string being the last token.

StringNGrams makes the n-grams of each row of a ragged tensor (flat `data`, row `data_splits`): for each
width, every window of that many tokens, padded at either end with up to `pad_width` `left_pad` and
`right_pad` tokens (width - 1 of them when pad_width < 0), joined with `separator`. With
preserve_short_sequences, a non-empty row too short for any n-gram gives one n-gram of all its tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, scalar_string, string_array

__all__ = ["string_split", "string_split_v2", "string_ngrams"]

# What C's isspace() calls whitespace; Python's bytes.split() splits on the same six.
_WHITESPACE = b" \t\n\v\f\r"


def _vector(input: Any) -> list[bytes]:
    if np.ndim(input) != 1:
        raise ValueError(f"input must be a vector, got shape: {format_dims(np.shape(input))}")
    return flat_strings(input)


def _sparse(rows: list[list[bytes]]) -> tuple:
    """The tokens of each row as a SparseTensor's indices, values and dense shape."""
    indices = [(i, j) for i, row in enumerate(rows) for j in range(len(row))]
    values = [token for row in rows for token in row]
    width = max((len(row) for row in rows), default=0)
    return (np.array(indices, dtype=np.int64).reshape(-1, 2), string_array(values),
            np.array([len(rows), width], dtype=np.int64))


def _split_any(text: bytes, delimiter: bytes, skip_empty: bool) -> list[bytes]:
    if not text:
        return []
    if not delimiter:
        return [text[i:i + 1] for i in range(len(text))]
    # Every delimiter byte becomes the first one, so one split on it splits on the whole set.
    table = bytes.maketrans(delimiter, delimiter[:1] * len(delimiter))
    tokens = text.translate(table).split(delimiter[:1])
    return [t for t in tokens if t] if skip_empty else tokens


def _split_whitespace(text: bytes, maxsplit: int) -> list[bytes]:
    if maxsplit < 0:
        return text.split()
    tokens: list[bytes] = []
    rest = text.lstrip(_WHITESPACE)
    while rest:
        end = next((i for i, c in enumerate(rest) if c in _WHITESPACE), len(rest))
        tokens.append(rest[:end])
        rest = rest[end:].lstrip(_WHITESPACE)
        if len(tokens) == maxsplit:
            # NOTE: unlike Python, TensorFlow keeps the (possibly empty) rest after the last split.
            tokens.append(rest)
            break
    return tokens


# Strings are Python objects: these run on the host only (so `xp` is numpy).
@kernel("StringSplit", devices=("cpu",), outputs=3)
def string_split(xp: Any, input: Any, delimiter: Any, *, skip_empty: bool = True) -> tuple:
    """Each string of a vector split at any byte of `delimiter`, as a SparseTensor of tokens."""
    strings = _vector(input)
    delim = scalar_string(delimiter, "delimiter must be a scalar, got shape: ")
    return _sparse([_split_any(s, delim, skip_empty) for s in strings])


@kernel("StringSplitV2", devices=("cpu",), outputs=3)
def string_split_v2(xp: Any, input: Any, sep: Any, *, maxsplit: int = -1) -> tuple:
    """Each string of a vector split as Python's str.split(sep or None, maxsplit), as a SparseTensor."""
    strings = _vector(input)
    separator = scalar_string(sep, "sep must be a scalar, got shape: ")
    if maxsplit == 0:
        return _sparse([[s] for s in strings])
    if not separator:
        return _sparse([_split_whitespace(s, maxsplit) for s in strings])
    return _sparse([s.split(separator, maxsplit) for s in strings])


class _NGrams:
    """One StringNGrams node's attrs, and the n-gram arithmetic of TensorFlow's string_ngrams_op.cc."""

    def __init__(self, separator: bytes, left_pad: bytes, right_pad: bytes, pad_width: int):
        self.separator, self.left_pad, self.right_pad, self.pad_width = separator, left_pad, right_pad, pad_width

    def pad(self, width: int) -> int:
        """Padding on each side for n-grams of `width`: pad_width (width - 1 when negative), at most width - 1."""
        return min(width - 1 if self.pad_width < 0 else self.pad_width, width - 1)

    def count(self, length: int, width: int) -> int:
        pad = self.pad(width)
        if pad > (2**31 - 1) // 2 - length:
            raise ValueError(f"Pad width could lead to integer overflow, got pad_width = {pad}")
        return max(0, length + 2 * pad - width + 1)

    def make(self, tokens: list[bytes], count: int, width: int) -> list[bytes]:
        """The first `count` n-grams of `width` over a row's tokens."""
        pad, sep = self.pad(width), self.separator
        out = []
        for index in range(count):
            left = max(0, pad - index)
            right = max(0, pad - (count - (index + 1)))
            taken = width - (left + right)
            first = 0 if left > 0 else index - pad
            words = [self.left_pad] * left + tokens[first:first + max(taken, 0)]
            if taken > 0:
                out.append(sep.join(words + [self.right_pad] * right))
            else:
                # NOTE: no tokens: the left pads each end with a separator, then the right pads are joined.
                out.append(b"".join(p + sep for p in words) + sep.join([self.right_pad] * right))
        return out


def _check_splits(splits: list[int], size: int) -> None:
    if not splits:
        return
    if splits[0] != 0:
        raise ValueError(f"First split value must be 0, got {splits[0]}")
    previous = splits[0]
    for value in splits[1:]:
        if not previous <= value <= size:
            raise ValueError(f"Invalid split value {value}, must be in [{previous}, {size}]")
        previous = value
    if previous != size:
        raise ValueError(f"Last split value must be data size. Expected {size}, got {previous}")


@kernel("StringNGrams", devices=("cpu",), outputs=2)
def string_ngrams(xp: Any, data: Any, data_splits: Any, *, separator: str | bytes, ngram_widths: tuple[int, ...],
                  left_pad: str | bytes, right_pad: str | bytes, pad_width: int,
                  preserve_short_sequences: bool) -> tuple:
    """The n-grams of each row of the ragged tensor (data, data_splits), and their row splits."""
    if any(width <= 0 for width in ngram_widths):
        raise ValueError("ngram_widths must contain positive values")
    tokens = flat_strings(data)
    splits = np.asarray(data_splits).reshape(-1).tolist()
    _check_splits(splits, len(tokens))
    splits_dtype = np.asarray(data_splits).dtype
    if not tokens or not splits:
        # NOTE: TensorFlow returns empty strings in the data's shape and zero splits in the splits' shape.
        return (string_array([b""] * len(tokens), np.shape(data)), np.zeros(np.shape(data_splits), splits_dtype))
    ngrams = _NGrams(as_bytes(separator), as_bytes(left_pad), as_bytes(right_pad), pad_width)
    rows = [tokens[start:end] for start, end in zip(splits[:-1], splits[1:])]
    # TensorFlow counts every row's n-grams (checking the padding) before it makes any.
    counts = [[ngrams.count(len(row), width) for width in ngram_widths] for row in rows]
    out: list[bytes] = []
    row_splits = [0]
    for row, row_counts in zip(rows, counts):
        made = []
        for width, count in zip(ngram_widths, row_counts):
            made += ngrams.make(row, count, width)
        if preserve_short_sequences and not made and row:
            if pad_width < 0:
                raise ValueError("Pad width should be >= 0 when preserve_short_sequences is True and ngram_widths "
                                 f"are not provided, got {pad_width}")
            made = ngrams.make(row, 1, len(row) + 2 * pad_width)
        out += made
        row_splits.append(len(out))
    return string_array(out), np.array(row_splits, dtype=splits_dtype).reshape(np.shape(data_splits))
