"""The kernel of TF Text's RegexSplitWithOffsets: each string split at the matches of an RE2 delimiter pattern,
with each piece's byte offsets; a delimiter is kept as a token of its own when it fully matches the
keep-delimiter pattern (an empty keep pattern keeps none). Patterns are RE2's (google-re2, the RE2 library's
own binding, as kernels.strings.regex uses), matched as UTF-8.

TF Text's loop (RE2::FindAndConsume) shapes the details, and they are kept:
- The delimiter is capture group 1, not the whole match: the piece before it ends where group 1 starts and
  the next piece starts where the whole match ends (text.regex_split wraps both patterns in parentheses, so
  the two agree there). A pattern with no group never matches: the string stays one piece.
- Each search starts afresh on the rest of the string, so `^` matches there and `\\b` sees no character
  before it.
- A string is read up to its first NUL byte (TF Text builds it from the C string).
- Empty pieces are dropped.

TF Text loops forever when the delimiter matches an empty string (the rest never shrinks); here that is an
error naming the pattern.

    >>> out = regex_split_with_offsets(np, np.array([b"hello  there"], dtype=object),
    ...                                np.array(b"(\\\\s)", dtype=object), np.array(b"()", dtype=object))
    >>> out[0].tolist(), out[1].tolist(), out[2].tolist(), out[3].tolist()
    ([b'hello', b'there'], [0, 7], [5, 12], [0, 2])
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import re2

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, message_text, string_array

__all__ = ["regex_split_with_offsets"]


@functools.lru_cache(maxsize=64)
def _compile(pattern: bytes) -> Any:
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as e:
        reason = e.args[0] if e.args else ""
        reason = message_text(reason) if isinstance(reason, bytes) else str(reason)
        raise ValueError(f"Invalid pattern: {message_text(pattern)}, error: {reason}") from None


def _pattern(tensor: Any) -> bytes:
    if np.ndim(tensor) != 0:
        raise ValueError(f"Pattern must be scalar, but received {format_dims(np.shape(tensor))}")
    return as_bytes(np.asarray(tensor, dtype=object).item())


# Pattern syntax whose meaning depends on what precedes the match (anchors, word boundaries) or that can match
# an empty string at the end: with none of it, one scan of the whole string finds the matches that fresh
# searches of each rest would, and `_split` takes that fast path.
_CONTEXT_SYNTAX = (b"^", b"$", b"\\b", b"\\B", b"\\A", b"\\z")


_UNANCHORED = getattr(getattr(getattr(re2, "_re2", None), "RE2", None), "Anchor", None)
_UNANCHORED = None if _UNANCHORED is None else _UNANCHORED.UNANCHORED
_DIRECT_MATCH = _UNANCHORED is not None  # tests switch it off to hold the fast path to finditer's


def _context_free(pattern: bytes) -> bool:
    return not any(syntax in pattern for syntax in _CONTEXT_SYNTAX)


def _matches(text: bytes, delim: Any, scan_once: bool):
    """(group 1's span, the match's end, whether the match is empty) of each delimiter match, in order, as TF
    Text's loop of fresh searches on the rest of the string finds them."""
    if scan_once:
        # NOTE: google-re2's match objects cost a few Python calls each, and a BERT sentence has a delimiter every
        # few bytes: where the binding exposes RE2::Match itself (its `_regexp`, pybind11's wrapper of the C++
        # RE2), each match is one call returning the spans. Same matches either way (the tests run both).
        match_spans = getattr(getattr(delim, "_regexp", None), "Match", None)
        if match_spans is None or not _DIRECT_MATCH:
            for match in delim.finditer(text):
                start, end = match.span(0)
                yield match.span(1), end, start == end
            return
        pos, size = 0, len(text)
        while pos <= size:
            spans = match_spans(_UNANCHORED, text, pos, size)
            (start, end), group = spans[0], spans[1]
            if start < 0:
                return
            yield group, end, start == end
            if start == end:
                return  # (an error for the caller: TF Text would loop forever)
            pos = end
        return
    consumed = 0
    view = memoryview(text)
    while (match := delim.search(view[consumed:])) is not None:
        start, end = match.span(1)
        shift = consumed if start >= 0 else 0
        yield (start + shift, end + shift), consumed + match.end(), match.end() == 0
        consumed += match.end()


def _split(text: bytes, delim: Any, keep: Any | None, pattern: bytes, scan_once: bool,
           kept: dict[bytes, bool]) -> list[tuple[int, int]]:
    """The (begin, end) of each token of `text`, delimiters that `keep` fully matches included (`kept` caches
    that answer per delimiter text)."""
    pieces = []
    consumed = 0  # where the rest of the string starts
    for (group_start, group_end), match_end, empty in _matches(text, delim, scan_once):
        if group_start < 0:
            raise ValueError(f"RegexSplitWithOffsets: capture group 1 of the delimiter pattern "
                             f"{message_text(pattern)} took no part in a match")
        if empty:
            raise ValueError(f"RegexSplitWithOffsets: the delimiter pattern {message_text(pattern)} matched an "
                             f"empty string at byte {group_start}, where TF Text would loop forever")
        if group_start > consumed:
            pieces.append((consumed, group_start))
        if keep is not None:
            delimiter = text[group_start:group_end]
            if (keep_it := kept.get(delimiter)) is None:
                keep_it = kept[delimiter] = keep.fullmatch(delimiter) is not None
            if keep_it:
                pieces.append((group_start, group_end))
        consumed = match_end
    if consumed < len(text):
        pieces.append((consumed, len(text)))
    return pieces


@kernel("RegexSplitWithOffsets", devices=("cpu",), outputs=4)
def regex_split_with_offsets(xp: Any, input: Any, delim_regex_pattern: Any, keep_delim_regex_pattern: Any) -> tuple:
    """Every string of `input` (flattened) split at the delimiter's matches: the tokens, their begin and end byte
    offsets (int64) and the row splits (int64), one row per string."""
    delim_pattern = _pattern(delim_regex_pattern)
    delim = _compile(delim_pattern)
    keep_pattern = _pattern(keep_delim_regex_pattern)
    keep = _compile(keep_pattern)
    tokens: list[bytes] = []
    begins: list[int] = []
    ends: list[int] = []
    splits = [0]
    scan_once = _context_free(delim_pattern)
    kept: dict[bytes, bool] = {}
    has_group = delim.groups >= 1
    for s in flat_strings(input):
        text = s.split(b"\0", 1)[0] if b"\0" in s else s
        if has_group:
            pieces = _split(text, delim, keep if keep_pattern else None, delim_pattern, scan_once, kept)
        else:  # a pattern with no group never matches: the string stays one piece
            pieces = [(0, len(text))] if text else []
        tokens += [text[begin:end] for begin, end in pieces]
        if pieces:
            row_begins, row_ends = zip(*pieces)
            begins += row_begins
            ends += row_ends
        splits.append(len(begins))
    return string_array(tokens), np.array(begins, np.int64), np.array(ends, np.int64), np.array(splits, np.int64)
