"""The kernel of TF Text's deprecated SentenceFragments (text.sentence_fragments): sentence fragments over a
batch of tokenized documents, by sentence_fragmenter.cc's state machine over whole tokens (the older sibling of
SentenceFragmentsV2, kernels.text.sentence_fragments, which walks the text byte by byte).

A token counts as punctuation of a class only when it is one character of it (or "..." / "''"); the caller's
per-token bits mark emoticons (0x80) and acronyms (0x100, when the token ends with "."). Fragments, their
first terminal punctuation and their ends are token indices within the document. Tokens are decoded as UTF-8
(ICU's converter, U+FFFD for an ill-formed sequence); an empty token is an error, as ICU's decoder makes it.
TF Text's other input encodings are left out: only the names ICU reads as UTF-8 are accepted.

    >>> # "Hi !", then "( Yes . )" (1 | 4 | 8: terminal punctuation, a close parenthesis whose open one starts
    >>> # the fragment), then "no"
    >>> words = np.array([b"Hi", b"!", b"(", b"Yes", b".", b")", b"no"], dtype=object)
    >>> zeros = np.zeros(7, np.int64)
    >>> [a.tolist() for a in sentence_fragments(np, np.array([7]), zeros, zeros, words, zeros, input_encoding="UTF-8")]
    [[0, 2, 6], [2, 6, 7], [1, 13, 0], [1, 4, -1], [3]]
"""

from __future__ import annotations

import re
from typing import Any, Literal

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings
from kernels.text.bert_chars import u8_next
from kernels.text.sentence_fragments import (
    CLOSE_PAREN,
    CLOSE_PUNC,
    PUNCTUATION_WORD,
    TERMINAL,
    code_points,
)

__all__ = ["sentence_fragments", "token_fragments"]

_OPEN_PAREN = code_points("[[:Line_Break=OP:]]") | {ord("<"), 64830}
_EMOTICON, _ACRONYM = 0x80, 0x100
_TERMINAL_PUNC, _MULTIPLE_TERMINAL_PUNC, _HAS_CLOSE_PAREN, _HAS_SENTENTIAL_CLOSE_PAREN = 1, 2, 4, 8


def _single_char(word: bytes) -> int | None:
    """UnicodeUtil::GetOneUChar: the token's code point when it is one character, None when it is more."""
    if not word:
        raise ValueError("Failed to decode string, error status=8 (an empty token)")
    cp, end = u8_next(word, 0, len(word))
    if end != len(word):
        return None
    return 0xFFFD if cp < 0 else cp


class _Token:
    """What the fragmenter asks about one token, computed once."""

    def __init__(self, word: bytes, properties: int):
        cp = _single_char(word)
        self.ellipsis = word == b"..." or cp == 0x2026
        self.terminal = self.ellipsis or cp in TERMINAL
        self.close_punc = word == b"''" or cp in CLOSE_PUNC
        self.close_paren = cp in CLOSE_PAREN
        self.open_paren = cp in _OPEN_PAREN
        self.punctuation = cp in PUNCTUATION_WORD
        self.emoticon = bool(properties & _EMOTICON)
        self.acronym = bool(properties & _ACRONYM) and word.endswith(b".")
        self.space_allowed_before = self.emoticon or self.terminal or self.close_paren


def _advance(match: tuple[int, int, int, int], token: _Token, index: int) -> tuple[int, int, int, int] | None:
    """FragmentBoundaryMatch::Advance over (state, first terminal punc, first close punc, limit)."""
    state, first_terminal, first_close, _ = match
    if state == 0:
        if token.terminal or token.acronym or token.emoticon:
            state, first_terminal = 1, index
    elif state == 1:
        if not (token.terminal or token.emoticon):
            if not token.close_punc:
                return None
            state, first_close = 2, index
    elif not (token.close_punc or token.ellipsis or token.emoticon):
        return None
    limit = index + 1
    return state, first_terminal, limit if state == 1 else first_close, limit


def _next_boundary(tokens: list[_Token], start: int) -> tuple[int, int, int, int]:
    """SentenceFragmenter::FindNextFragmentBoundary (every token follows a space)."""
    fresh = (0, -1, -1, -1)
    current, previous = fresh, fresh
    i = start
    while i < len(tokens):
        if current[1] >= 0 and i > start:
            if not tokens[i].space_allowed_before:
                break
            previous = current
        advanced = _advance(current, tokens[i], i)
        if advanced is None:
            if previous[1] >= 0:
                return previous
            current = fresh  # start again, at the same token
            continue
        current = advanced
        i += 1
    return current


def token_fragments(tokens: list[_Token]) -> list[tuple[int, int, int, int]]:
    """SentenceFragmenter::FindFragments: (start, end, properties, terminal punctuation token) of each."""
    out = []
    open_paren_is_sentential = False
    start = 0
    while start < len(tokens):
        _, first_terminal, first_close, limit = _next_boundary(tokens, start)
        for i in range(limit, start, -1):
            if tokens[i - 1].open_paren:
                open_paren_is_sentential = i - 1 == start  # fragment-initial: taken as sentence-initial
                break
        properties, terminal_index = 0, -1
        if first_terminal >= 0:
            properties |= _TERMINAL_PUNC
            terminal_index = first_terminal
            for i in range(first_close, first_terminal, -1):  # an ellipsis then "!" makes "!" the first
                if tokens[i - 1].ellipsis or tokens[i - 1].emoticon:
                    terminal_index = first_terminal if i == first_close else i
                    break
            if any(t.punctuation and not t.ellipsis and not t.emoticon for t in tokens[first_terminal + 1:first_close]):
                properties |= _MULTIPLE_TERMINAL_PUNC
            if any(t.close_paren for t in tokens[first_close:limit]):
                properties |= _HAS_CLOSE_PAREN
                if open_paren_is_sentential:
                    properties |= _HAS_SENTENTIAL_CLOSE_PAREN
        out.append((start, limit, properties, terminal_index))
        start = limit
    return out


def _is_utf8(name: str | bytes) -> bool:
    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
    return re.sub(r"[^0-9a-z]", "", name.lower()) == "utf8"


@kernel("SentenceFragments", devices=("cpu",), outputs=5)
def sentence_fragments(xp: Any, row_lengths: Any, token_start: Any, token_end: Any, token_word: Any,
                       token_properties: Any, *, input_encoding: str | bytes,
                       errors: Literal["strict", "replace", "ignore"] = "replace", replacement_char: int = 65533,
                       replace_control_characters: bool = False) -> tuple:
    """Every fragment's start and end token, properties and terminal punctuation token (flat, int64), and how
    many fragments each document has. The error attrs are TF Text's too, which its fragmenter never reads."""
    if not _is_utf8(input_encoding):
        raise ValueError(f"input_encoding {input_encoding!r}: tensorgate's SentenceFragments decodes UTF-8 only")
    if not 0 <= replacement_char <= 0x10FFFF:
        raise ValueError("replacement_char out of unicode codepoint range")
    inputs = {"row_lengths": row_lengths, "token_start": token_start, "token_end": token_end,
              "token_word": token_word, "token_properties": token_properties}
    for name, tensor in inputs.items():
        if np.ndim(tensor) != 1:
            raise ValueError(f"'{name}' must be a vector, got shape: {format_dims(np.shape(tensor))}")
    lengths = np.asarray(row_lengths, np.int64).tolist()
    words = flat_strings(token_word)
    properties = np.asarray(token_properties, np.int64).tolist()
    total = sum(lengths)
    if not total == len(token_start) == len(token_end) == len(words) or any(n < 0 for n in lengths):
        raise ValueError(f"num_elements({total}), token_start({len(token_start)}), token_end({len(token_end)}), "
                         f"token_word({len(words)}) must all be the same size.")
    if len(properties) < total:
        raise ValueError(f"token_properties has {len(properties)} values for {total} tokens")
    found, position = [], 0
    for n in lengths:
        tokens = [_Token(words[i], properties[i]) for i in range(position, position + n)]
        found.append(token_fragments(tokens))
        position += n
    flat = [f for per_doc in found for f in per_doc]
    columns = [np.array([f[k] for f in flat], np.int64) for k in range(4)]
    return (*columns, np.array([len(per_doc) for per_doc in found], np.int64))
