"""Kernels of TF Text's whitespace tokenizers, which split text at runs of whitespace:

- WhitespaceTokenizeWithOffsets, the first version: code points in (a ragged batch of strings as values and
  row splits) and tokens of code points out, with offsets counted in code points. Whitespace is ICU's
  White_Space property (u_isUWhiteSpace). (TF Text 2.21.1 crashes when no token at all comes out; here the
  outputs are empty then.)
- TFText>WhitespaceTokenizeWithOffsetsV2, what text.WhitespaceTokenizer runs: UTF-8 strings in, string tokens
  and byte offsets out. Whitespace is whatever `input_config` says: a bitset over code points (bit cp & 7 of
  byte cp >> 3), which TF Text's python builds from ICU's White_Space set. The text is stepped with ICU's
  U8_NEXT, so bytes that are not UTF-8 belong to tokens.

NOTE: V2 ends a token one byte before the end of the whitespace character after it (TF Text's `position - 1`),
so a token followed by a multi-byte space (U+00A0, U+3000) keeps that character's first bytes:

    >>> whitespace_tokenize_with_offsets_v2(np, np.array(["a\\u3000b c".encode()], dtype=object),
    ...                                     np.array(WHITE_SPACE_CONFIG, dtype=object))[0].tolist()
    [b'a\\xe3\\x80', b'b', b'c']
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, string_array
from kernels.text.bert_chars import WHITESPACE

__all__ = ["WHITE_SPACE_CONFIG", "whitespace_tokenize_with_offsets", "whitespace_tokenize_with_offsets_v2"]

_HOST = ("cpu",)
_WHITESPACE = np.array(sorted(WHITESPACE), dtype=np.int64)


def _bitset(code_points: Any) -> bytes:
    """TF Text's BuildWhitespaceTokenizerConfig: one bit per code point, up to the largest one."""
    bits = bytearray((max(code_points) >> 3) + 1)
    for cp in code_points:
        bits[cp >> 3] |= 1 << (cp & 7)
    return bytes(bits)


# The config text.WhitespaceTokenizer() puts in its graphs (ICU's White_Space).
WHITE_SPACE_CONFIG = _bitset(WHITESPACE)


def _splits(splits: Any, num_values: int) -> np.ndarray:
    s = np.asarray(splits).reshape(-1)
    if s.size and (s[0] < 0 or s[-1] > num_values or np.any(np.diff(s) < 0)):
        raise ValueError(f"input_splits must be non-decreasing and within the {num_values} input values, got "
                         f"{s.tolist()}")
    return s


@kernel("WhitespaceTokenizeWithOffsets", devices=_HOST, outputs=5)
def whitespace_tokenize_with_offsets(xp: Any, input_values: Any, input_splits: Any) -> tuple:
    """Rows of code points split at White_Space: the tokens' code points with their row splits, each token's
    start and limit in code points from its row's start, and the tokens' splits per row."""
    values = np.asarray(input_values, dtype=np.int32).reshape(-1)
    splits = _splits(input_splits, values.size)
    dtype = np.asarray(input_splits).dtype
    if splits.size == 0:  # NOTE: TF Text's loop runs no row; its outputs are empty
        return (np.zeros(0, np.int32), np.zeros(1, dtype), np.zeros(0, np.int64), np.zeros(0, np.int64),
                np.zeros(0, dtype))
    kept = values[splits[0]:splits[-1]]
    space = np.isin(kept, _WHITESPACE)
    index = np.arange(splits[0], splits[-1])
    row = np.searchsorted(splits, index, side="right") - 1  # each value's row (empty rows hold none)
    row_start = splits[row]
    first = index == row_start
    last = index == splits[row + 1] - 1
    prev_space = np.concatenate([[True], space[:-1]])
    next_space = np.concatenate([space[1:], [True]])
    starts = ~space & (first | prev_space)
    ends = ~space & (last | next_space)
    token_values = kept[~space]
    # A token's values start where its first value lands among the kept (non-space) values.
    inner = np.concatenate([np.cumsum(~space)[starts] - 1, [token_values.size]]).astype(dtype)
    per_row = np.bincount(row[starts], minlength=splits.size - 1)
    outer = np.concatenate([[0], np.cumsum(per_row)]).astype(dtype)
    return (token_values.astype(np.int32), inner, (index - row_start)[starts].astype(np.int64),
            (index - row_start + 1)[ends].astype(np.int64), outer)


@functools.lru_cache(maxsize=16)
def _whitespace_runs(config: bytes) -> re.Pattern | None:
    """Runs of the code points `config` marks, as UTF-8 (a lead byte is never a continuation byte, so a match
    starts where U8_NEXT would read that character). None when it marks none U8_NEXT can produce."""
    code_points = [cp for cp in range(min(len(config) * 8, 0x110000))
                   if config[cp >> 3] >> (cp & 7) & 1 and not 0xD800 <= cp <= 0xDFFF]
    if not code_points:
        return None
    return re.compile(b"(?:" + b"|".join(re.escape(chr(cp).encode()) for cp in code_points) + b")+")


def _utf8_length(lead: int) -> int:
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


@kernel("TFText>WhitespaceTokenizeWithOffsetsV2", devices=_HOST, outputs=4)
def whitespace_tokenize_with_offsets_v2(xp: Any, input_values: Any, input_config: Any) -> tuple:
    """A vector of strings split at the code points `input_config` marks: the tokens, their row splits (int64)
    and each token's start and end byte offsets (int32)."""
    if np.ndim(input_values) != 1:
        raise ValueError(f"input_values must be a vector of strings, got shape {format_dims(np.shape(input_values))}")
    if np.ndim(input_config) != 0:
        raise ValueError(f"input_config must be a scalar string, got shape {format_dims(np.shape(input_config))}")
    runs = _whitespace_runs(as_bytes(np.asarray(input_config, dtype=object).item()))
    tokens: list[bytes] = []
    starts: list[int] = []
    ends: list[int] = []
    splits = [0]
    for data in flat_strings(input_values):
        position = 0
        for match in runs.finditer(data) if runs is not None else ():
            begin = match.start()
            if begin > position:
                end = begin + _utf8_length(data[begin]) - 1  # NOTE: TF Text's `position - 1`, see above
                tokens.append(data[position:end])
                starts.append(position)
                ends.append(end)
            position = match.end()
        if position < len(data):
            tokens.append(data[position:])
            starts.append(position)
            ends.append(len(data))
        splits.append(len(tokens))
    return (string_array(tokens), np.array(splits, np.int64), np.array(starts, np.int32), np.array(ends, np.int32))
