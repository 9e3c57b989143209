"""The kernel of TF Text's SplitMergeTokenizeWithOffsets (text.SplitMergeTokenizer): each string's characters
grouped into tokens by a label per character, 0 to start a new token and 1 to merge into the one before.

As split_merge_tokenize_kernel.cc does it: characters are cut by their UTF-8 lead byte alone (a stray
continuation byte is a character of its own; a sequence cut short at the end is a shorter one); White_Space
characters (ICU's u_isUWhiteSpace) are dropped and never merged into, and with force_split_at_break_character a
character after one starts a new token whatever its label; the first kept character of a string always starts a
token. Offsets are bytes. A row with fewer labels than characters is an error.

    >>> out = split_merge_tokenize_with_offsets(np, np.array([b"IloveFlume!"], dtype=object),
    ...     np.array([0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0], np.int32), np.array([0, 11], np.int32))
    >>> out[0].tolist(), out[2].tolist(), out[3].tolist()
    ([b'I', b'love', b'Flume', b'!'], [0, 1, 5, 10], [1, 5, 10, 11])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, string_array
from kernels.text.bert_chars import WHITESPACE

__all__ = ["split_merge_tokenize_with_offsets"]

_LENGTH_BY_LEAD_NIBBLE = (1,) * 12 + (2, 2, 3, 4)


def _characters(text: bytes) -> list[tuple[int, int]]:
    """(start, end) of each character as the kernel's OneCharLen cuts them."""
    out, start = [], 0
    while start < len(text):
        end = min(start + _LENGTH_BY_LEAD_NIBBLE[text[start] >> 4], len(text))
        out.append((start, end))
        start = end
    return out


def _is_break(char: bytes) -> bool:
    try:
        code_point = ord(char.decode("utf-8")[0]) if char else 0xFFFD
    except UnicodeDecodeError:  # U8_NEXT_OR_FFFD: not whitespace
        return False
    return code_point in WHITESPACE


@kernel("SplitMergeTokenizeWithOffsets", devices=("cpu",), outputs=4)
def split_merge_tokenize_with_offsets(xp: Any, input_values: Any, labels: Any, row_splits: Any, *,
                                      force_split_at_break_character: bool = True) -> tuple:
    """Tokens, their row splits (int64), and each token's begin and end byte offsets (int64)."""
    texts = flat_strings(input_values)
    labels = np.asarray(labels).reshape(-1).tolist()
    splits = np.asarray(row_splits).reshape(-1).astype(np.int64).tolist()
    if len(texts) != len(splits) - 1:
        raise ValueError(f"Expecting row_splits have {len(texts) + 1} elements, got {len(splits)}")
    tokens: list[bytes] = []
    begins: list[int] = []
    ends: list[int] = []
    out_splits = [0]
    for i, text in enumerate(texts):
        if not 0 <= splits[i] <= splits[i + 1] <= len(labels):
            raise ValueError(f"row_splits [{splits[i]}, {splits[i + 1]}) of string {i} fall outside the "
                             f"{len(labels)} labels")
        row = labels[splits[i]:splits[i + 1]]
        chars = _characters(text)
        if len(chars) > len(row):
            raise ValueError(f"Number of labels {len(row)} is insufficient for text {text!r}")
        started, after_break = False, False
        for (start, end), label in zip(chars, row):
            is_break = _is_break(text[start:end])
            if not is_break:
                if label == 0 or not started or (after_break and force_split_at_break_character):
                    tokens.append(text[start:end])
                    begins.append(start)
                    ends.append(end)
                    started = True
                else:
                    tokens[-1] += text[start:end]
                    ends[-1] = end
            after_break = is_break
        out_splits.append(len(tokens))
    return (string_array(tokens), np.array(out_splits, np.int64), np.array(begins, np.int64),
            np.array(ends, np.int64))
