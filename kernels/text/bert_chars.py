"""Text as TF Text's WordPiece and BERT kernels see it: strings as bytes; characters as ICU's U8_NEXT steps
through UTF-8 (an ill-formed sequence is one character, as long as its longest well-formed prefix, with
code point -1); and the classes BERT splits words on: ICU's White_Space, and "punctuation", which BERT
takes to be ICU's P* categories, the ASCII symbols and the CJK ideograph blocks (TF Text's
IsPunctuationOrChineseChar).

    >>> utf8_steps(b"a\\xc3\\xa9\\xff")
    [(0, 1, 97), (1, 3, 233), (3, 4, -1)]
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import icu
import numpy as np

from kernels.strings.tensors import flat_strings

__all__ = ["WHITESPACE", "flat_texts", "has_multibyte_whitespace", "is_punctuation_or_cjk", "is_whitespace",
           "non_whitespace_chunks", "u8_next", "utf8_steps"]


def _code_points(pattern: str) -> frozenset[int]:
    found = icu.UnicodeSet(pattern)
    # NOTE: pyicu gives a range's ends as one-character strings.
    return frozenset(c for start, end in found.ranges() for c in range(ord(start), ord(end) + 1))


# u_isUWhiteSpace and u_ispunct, from the ICU build tensorgate uses (pyicu-wheels).
WHITESPACE = _code_points("[[:White_Space:]]")
_PUNCTUATION = _code_points("[[:P:]]")

# Runs of whitespace characters in UTF-8. Every whitespace encoding starts with a byte that is never a
# continuation byte, and U8_NEXT never takes such a byte into the character before it, so these are the
# whitespace characters U8_NEXT finds, even in ill-formed text.
_WHITESPACE_RUNS = re.compile(b"(?:" + b"|".join(re.escape(chr(c).encode()) for c in sorted(WHITESPACE)) + b")+")


_MULTIBYTE_WHITESPACE = re.compile(b"|".join(re.escape(chr(c).encode()) for c in sorted(WHITESPACE) if c >= 0x80))


def has_multibyte_whitespace(text: bytes) -> bool:
    """Whether `text` holds a whitespace character other than ASCII's (where bytes.split() splits)."""
    return _MULTIBYTE_WHITESPACE.search(text) is not None


def non_whitespace_chunks(text: bytes) -> Iterator[tuple[int, bytes]]:
    """The runs of `text` between whitespace characters, with where each starts."""
    position = 0
    for gap in _WHITESPACE_RUNS.finditer(text):
        if gap.start() > position:
            yield position, text[position:gap.start()]
        position = gap.end()
    if position < len(text):
        yield position, text[position:]

# TF Text's CJK blocks, which BERT splits around as it does around punctuation.
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
        (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def flat_texts(values: Any) -> list[bytes]:
    """A string tensor's elements in row-major order as bytes (kernels.strings.tensors.flat_strings, without
    its per-element call when every element is bytes already, as a graph's strings are)."""
    items = np.asarray(values, dtype=object).reshape(-1).tolist()
    if set(map(type, items)) <= {bytes}:
        return items
    return flat_strings(items)


def is_whitespace(cp: int) -> bool:
    return cp in WHITESPACE


def is_punctuation_or_cjk(cp: int) -> bool:
    """TF Text's IsPunctuationOrChineseChar (-1, an ill-formed sequence, is neither)."""
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    if cp < 0x3400:
        return cp in _PUNCTUATION
    return any(lo <= cp <= hi for lo, hi in _CJK) or cp in _PUNCTUATION


# ICU's tables of the second bytes a 3-byte and a 4-byte lead may take (utf8.h).
_LEAD3_T1_BITS = b"\x20\x30\x30\x30\x30\x30\x30\x30\x30\x30\x30\x30\x30\x10\x30\x30"
_LEAD4_T1_BITS = b"\x00\x00\x00\x00\x00\x00\x00\x00\x1e\x0f\x0f\x0f\x00\x00\x00\x00"


def u8_next(data: bytes, i: int, end: int) -> tuple[int, int]:
    """ICU's U8_NEXT at `i` (< end): the code point (-1 when ill-formed) and the position after it."""
    c = data[i]
    i += 1
    if c < 0x80:
        return c, i
    if i == end:
        return -1, i
    if c >= 0xE0:
        t = data[i]
        if c < 0xF0:
            if not _LEAD3_T1_BITS[c & 0xF] & (1 << (t >> 5)):
                return -1, i
            cp = c & 0xF
        else:
            cp = c - 0xF0
            if cp > 4 or not _LEAD4_T1_BITS[t >> 4] & (1 << cp):
                return -1, i
            cp = (cp << 6) | (t & 0x3F)
            i += 1
            if i == end:
                return -1, i
            t = data[i]
            if not 0x80 <= t <= 0xBF:
                return -1, i
        cp = (cp << 6) | (t & 0x3F)
        i += 1
        if i == end:
            return -1, i
    elif c >= 0xC2:
        cp = c & 0x1F
    else:
        return -1, i
    t = data[i]
    if not 0x80 <= t <= 0xBF:
        return -1, i
    return (cp << 6) | (t & 0x3F), i + 1


def utf8_steps(data: bytes) -> list[tuple[int, int, int]]:
    """Each character of `data` as U8_NEXT steps through it: (start, end, code point or -1)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        steps = []
        i, end = 0, len(data)
        while i < end:
            cp, j = u8_next(data, i, end)
            steps.append((i, j, cp))
            i = j
        return steps
    steps = []
    i = 0
    for ch in text:
        cp = ord(ch)
        j = i + (1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4)
        steps.append((i, j, cp))
        i = j
    return steps
