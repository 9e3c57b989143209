"""The kernels of TF Text's SplitMergeTokenizeWithOffsets (text.SplitMergeTokenizer) and TokenizerFromLogits
(text.SplitMergeFromLogitsTokenizer): each string's characters grouped into tokens by a label per character, 0 to
start a new token and 1 to merge into the one before, or by a pair of logits per character (split when the split
logit is greater than the merge logit).

As split_merge_tokenize_kernel.cc does it: characters are cut by their UTF-8 lead byte alone (a stray
continuation byte is a character of its own; a string ending inside a sequence is an error: TF Text reads past it); White_Space
characters (ICU's u_isUWhiteSpace) are dropped and never merged into, and with force_split_at_break_character a
character after one starts a new token whatever its label; the first kept character of a string always starts a
token. Offsets are bytes. A row with fewer labels (or logits) than characters is an error.

    >>> out = split_merge_tokenize_with_offsets(np, np.array([b"IloveFlume!"], dtype=object),
    ...     np.array([0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0], np.int32), np.array([0, 11], np.int32))
    >>> out[0].tolist(), out[2].tolist(), out[3].tolist()
    ([b'I', b'love', b'Flume', b'!'], [0, 1, 5, 10], [1, 5, 10, 11])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, message_text, string_array
from kernels.text.bert_chars import WHITESPACE

__all__ = ["split_merge_tokenize_with_offsets", "tokenizer_from_logits"]

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
        if chars and chars[-1][1] - chars[-1][0] < _LENGTH_BY_LEAD_NIBBLE[text[chars[-1][0]] >> 4]:
            # NOTE: TF Text takes the character's full length from its lead byte and reads past the string.
            raise ValueError(f"string {i} ends inside a UTF-8 sequence, which TF Text reads past the end of: "
                             f"{message_text(text)!r}")
        if len(chars) > len(row):
            raise ValueError(f"Number of labels {len(row)} is insufficient for text {text!r}")
        _group(text, chars, [label == 0 for label in row], force_split_at_break_character, tokens, begins, ends)
        out_splits.append(len(tokens))
    return _outputs(tokens, out_splits, begins, ends)


def _group(text: bytes, chars: list[tuple[int, int]], splits_here: list[bool], force_split: bool,
           tokens: list[bytes], begins: list[int], ends: list[int]) -> None:
    """Append the tokens of one string, its characters grouped as the kernels' loop groups them."""
    started, after_break = False, False
    for (start, end), split_here in zip(chars, splits_here):
        is_break = _is_break(text[start:end])
        if not is_break:
            if split_here or not started or (after_break and force_split):
                tokens.append(text[start:end])
                begins.append(start)
                ends.append(end)
                started = True
            else:
                tokens[-1] += text[start:end]
                ends[-1] = end
        after_break = is_break


def _outputs(tokens: list[bytes], splits: list[int], begins: list[int], ends: list[int]) -> tuple:
    return (string_array(tokens), np.array(splits, np.int64), np.array(begins, np.int64),
            np.array(ends, np.int64))


@kernel("TokenizerFromLogits", devices=("cpu",), outputs=4)
def tokenizer_from_logits(xp: Any, strings: Any, logits: Any, force_split_at_break_character: Any) -> tuple:
    """Tokens, their row splits (int64), and each token's begin and end byte offsets (int64): a character
    starts a token where logits[i, j, 0] > logits[i, j, 1] (a NaN compares false: merge)."""
    strings = np.asarray(strings, dtype=object)
    logits = np.asarray(logits)
    force = np.asarray(force_split_at_break_character)
    if strings.ndim != 1:
        raise ValueError(f"strings must be a vector, got shape {format_dims(strings.shape)}")
    if logits.ndim != 3:
        raise ValueError(f"logits must be rank 3, got shape {format_dims(logits.shape)}")
    if force.ndim != 0:
        raise ValueError(f"force_split_at_break_character must be a scalar, got shape {format_dims(force.shape)}")
    if logits.shape[0] != strings.shape[0]:
        raise ValueError(f"Expecting logits to have {strings.shape[0]} rows, got {logits.shape[0]}")
    if logits.shape[2] != 2:
        raise ValueError(f"Bad logits dimension #2: {logits.shape[2]} != 2")
    split_first = (logits[..., 0].astype(np.float32) > logits[..., 1].astype(np.float32)).tolist()
    tokens: list[bytes] = []
    begins: list[int] = []
    ends: list[int] = []
    out_splits = [0]
    for i, text in enumerate(flat_strings(strings)):
        chars = _characters(text)
        if chars and chars[-1][1] - chars[-1][0] < _LENGTH_BY_LEAD_NIBBLE[text[chars[-1][0]] >> 4]:
            # NOTE: TF Text takes the character's full length from its lead byte and reads past the string.
            raise ValueError(f"string {i} ends inside a UTF-8 sequence, which TF Text reads past the end of: "
                             f"{message_text(text)!r}")
        if len(chars) > logits.shape[1]:
            raise ValueError(f"Number of logits, {logits.shape[1]}, is insufficient for text "
                             f"\"{message_text(text)}\"")
        _group(text, chars, split_first[i], bool(force), tokens, begins, ends)
        out_splits.append(len(tokens))
    return _outputs(tokens, out_splits, begins, ends)
