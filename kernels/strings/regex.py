"""Kernels of TensorFlow's regular-expression ops, with RE2's syntax and matching (google-re2 is the RE2
library's own Python binding): StaticRegexReplace and RegexReplace rewrite the first match or every match
of each string as RE2::Replace and RE2::GlobalReplace do; StaticRegexFullMatch and RegexFullMatch test
whether the whole string matches. Patterns and strings are bytes, matched as UTF-8 (RE2's default); a
byte that is not UTF-8 matches no `.` but is kept as it is.

A rewrite writes \\0 (the whole match) to \\9 for groups and \\\\ for a backslash. Like RE2, a rewrite that
names a group the pattern lacks changes nothing, and one with any other escape makes Replace change
nothing and GlobalReplace write each match's rewrite up to that escape. GlobalReplace never takes an
empty match where the previous match ended: it copies the next UTF-8 character (one byte where the bytes
are not UTF-8) and searches on from there.

Each pattern is compiled once: patterns are cached by their bytes, attrs and tensors alike.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import re2

from kernels.limits import STRING_ELEMENT_BYTES, AllocationTooLarge, check_bytes
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, message_text, scalar_string, string_array

__all__ = ["static_regex_replace", "regex_replace", "static_regex_full_match", "regex_full_match"]


@functools.lru_cache(maxsize=256)
def _compile(pattern: bytes) -> Any:
    """The compiled pattern; ValueError in TensorFlow's words when RE2 rejects it."""
    options = re2.Options()
    options.log_errors = False  # RE2 would also print the error to stderr; the message carries it
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        reason = e.args[0] if e.args else ""  # RE2's own message, as bytes for a bytes pattern
        reason = message_text(reason) if isinstance(reason, bytes) else str(reason)
        raise ValueError(f"Invalid pattern: {message_text(pattern)}, error: {reason}") from None


@dataclass(frozen=True)
class _Rewrite:
    """A rewrite string parsed as RE2::Rewrite reads it: literal bytes and group numbers, up to the first
    bad escape (`complete` is False when there is one)."""

    pieces: tuple[bytes | int, ...]
    complete: bool
    max_group: int  # RE2::MaxSubmatch: the largest \N anywhere in the rewrite, bad escapes or not


@functools.lru_cache(maxsize=256)
def _parse_rewrite(rewrite: bytes) -> _Rewrite:
    pieces: list[bytes | int] = []
    literal = bytearray()
    complete, i = True, 0
    while i < len(rewrite):
        c = rewrite[i]
        if c != 0x5C:  # not a backslash
            literal.append(c)
        elif i + 1 < len(rewrite) and 0x30 <= rewrite[i + 1] <= 0x39:
            pieces += [bytes(literal), rewrite[i + 1] - 0x30]
            literal.clear()
            i += 1
        elif i + 1 < len(rewrite) and rewrite[i + 1] == 0x5C:
            literal.append(0x5C)
            i += 1
        else:
            complete = False
            break
        i += 1
    pieces.append(bytes(literal))
    max_group, i = 0, 0
    while i < len(rewrite):
        if rewrite[i] == 0x5C:
            i += 1
            if i < len(rewrite) and 0x30 <= rewrite[i] <= 0x39:
                max_group = max(max_group, rewrite[i] - 0x30)
        i += 1
    return _Rewrite(tuple(p for p in pieces if p != b""), complete, max_group)


class _TooLong(Exception):
    """A rewritten string would pass the room left in the memory limit (`size`: its length so far)."""

    def __init__(self, size: int):
        self.size = size


def _write(out: bytearray, rewrite: _Rewrite, text: bytes, match: Any, room: int | None = None) -> None:
    if room is not None:
        # NOTE: a rewrite repeating \0 copies the match as often: the size is checked before writing.
        size = sum(len(p) if isinstance(p, bytes) else max(match.end(p) - match.start(p), 0) for p in rewrite.pieces)
        if len(out) + size > room:
            raise _TooLong(len(out) + size)
    for piece in rewrite.pieces:
        if isinstance(piece, bytes):
            out += piece
        else:
            start, end = match.span(piece)
            if start >= 0:
                out += text[start:end]


def _utf8_step(text: bytes, p: int) -> int:
    """How far RE2's GlobalReplace steps over text[p]: one whole UTF-8 character when text[p:] starts with
    one (as RE2's chartorune decodes: no overlong forms, nothing past U+10FFFF), else one byte."""
    c, left = text[p], len(text) - p
    if c < 0xC0:
        return 1
    if c < 0xE0:
        size, mask, smallest = 2, 0x7FF, 0x80
    elif c < 0xF0:
        size, mask, smallest = 3, 0xFFFF, 0x800
    elif c < 0xF8:
        size, mask, smallest = 4, 0x1FFFFF, 0x10000
    else:
        return 1
    if left < size or any(b & 0xC0 != 0x80 for b in text[p + 1:p + size]):
        return 1
    rune = c
    for b in text[p + 1:p + size]:
        rune = (rune << 6) | (b & 0x3F)
    rune &= mask
    return size if smallest <= rune <= 0x10FFFF else 1


def _replace_first(regex: Any, text: bytes, rewrite: _Rewrite, room: int | None = None) -> bytes:
    """RE2::Replace: the first match rewritten; the text unchanged when nothing matches or the rewrite is bad."""
    if rewrite.max_group > regex.groups or not rewrite.complete:
        return text
    match = regex.search(text)
    if match is None:
        return text
    out = bytearray(text[:match.start()])
    _write(out, rewrite, text, match, room)
    out += text[match.end():]
    return bytes(out)


def _replace_all(regex: Any, text: bytes, rewrite: _Rewrite, room: int | None = None) -> bytes:
    """RE2::GlobalReplace: every match rewritten, left to right, no match overlapping the one before."""
    if rewrite.max_group > regex.groups:
        return text
    out = bytearray()
    p, last_end, count = 0, -1, 0
    while p <= len(text):
        match = regex.search(text, p)
        if match is None:
            break
        start, end = match.span()
        out += text[p:start]
        if start == last_end and start == end:
            # NOTE: RE2 disallows an empty match right after the previous match: step over one character.
            step = _utf8_step(text, p) if p < len(text) else 1
            out += text[p:p + step]
            p += step
            continue
        _write(out, rewrite, text, match, room)
        p = last_end = end
        count += 1
    if count == 0:
        return text
    out += text[p:]
    return bytes(out)


def _replace(input: Any, pattern: bytes, rewrite: bytes, replace_global: bool, memory_limit: int | None,
             op: str) -> np.ndarray:
    regex = _compile(pattern)
    parsed = _parse_rewrite(rewrite)
    replace = _replace_all if replace_global else _replace_first
    if memory_limit is None:
        return string_array([replace(regex, s, parsed) for s in flat_strings(input)], np.shape(input))
    # A rewrite can make every string longer many times over (an empty pattern matches between every two
    # bytes): the output's bytes are counted as they are written, and refused past the memory limit.
    out, used = [], 0
    for s in flat_strings(input):
        try:
            text = replace(regex, s, parsed, memory_limit - used)
        except _TooLong as e:
            raise AllocationTooLarge(used + e.size, memory_limit, f"{op} output (at least)") from None
        used += len(text) + STRING_ELEMENT_BYTES
        check_bytes(used, memory_limit, f"{op} output (at least)")
        out.append(text)
    return string_array(out, np.shape(input))


def _full_match(input: Any, pattern: bytes) -> np.ndarray:
    regex = _compile(pattern)
    flat = [regex.fullmatch(s) is not None for s in flat_strings(input)]
    return np.array(flat, dtype=np.bool_).reshape(np.shape(input))


# Strings are Python objects: these run on the host only (so `xp` is numpy).
@kernel("StaticRegexReplace", devices=("cpu",))
def static_regex_replace(xp: Any, input: Any, *, pattern: str | bytes, rewrite: str | bytes,
                         replace_global: bool = True, memory_limit: int | None = None) -> tuple:
    """Each string with the first match (every match, with replace_global) of `pattern` rewritten."""
    return (_replace(input, as_bytes(pattern), as_bytes(rewrite), replace_global, memory_limit, "StaticRegexReplace"),)


@kernel("RegexReplace", devices=("cpu",))
def regex_replace(xp: Any, input: Any, pattern: Any, rewrite: Any, *, replace_global: bool = True,
                  memory_limit: int | None = None) -> tuple:
    """StaticRegexReplace with the pattern and rewrite given as scalar string tensors."""
    pattern_bytes = scalar_string(pattern, "Pattern must be scalar, but received ")
    _compile(pattern_bytes)  # NOTE: TensorFlow reports a bad pattern before a non-scalar rewrite
    rewrite_bytes = scalar_string(rewrite, "Rewrite must be scalar, but received ")
    return (_replace(input, pattern_bytes, rewrite_bytes, replace_global, memory_limit, "RegexReplace"),)


@kernel("StaticRegexFullMatch", devices=("cpu",))
def static_regex_full_match(xp: Any, input: Any, *, pattern: str | bytes) -> tuple:
    """Whether each whole string matches `pattern`."""
    return (_full_match(input, as_bytes(pattern)),)


@kernel("RegexFullMatch", devices=("cpu",))
def regex_full_match(xp: Any, input: Any, pattern: Any) -> tuple:
    """StaticRegexFullMatch with the pattern given as a scalar string tensor."""
    return (_full_match(input, scalar_string(pattern, "Pattern must be scalar, but received ")),)
