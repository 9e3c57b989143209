"""The kernel of TF Text's SentenceFragmentsV2 (text.StateBasedSentenceBreaker): each document cut into sentence
fragments by sentence_fragmenter_v2.cc's state machine, which collects terminal punctuation (.!?, ellipses,
acronyms such as U.S., emoticons) and then closing punctuation, and ends a fragment at the first character
that continues neither.

The fragmenter walks bytes, not characters: it looks at the text from every byte offset, decoding one
character there as ICU's U8_NEXT_OR_FFFD does (a continuation byte reads as U+FFFD), and skips whitespace one
byte at a time. Character classes are ICU's (Sentence_Break ATerm/STerm, Line_Break CL/CP/QU, the P*
categories, Dash, Hyphen, White_Space), plus the characters TF Text adds by hand.

Each fragment has a start and end byte offset, its properties (1: ends with terminal punctuation, 2: more than
one terminal mark, 4: has a closing parenthesis; never 8, which TF Text's fragmenter cannot reach) and the byte
offset of its first terminal punctuation (-1 without).

    >>> out = sentence_fragments_v2(np, np.array([b"Hi there! Bye."], dtype=object))
    >>> [a.tolist() for a in out]
    [[0, 10], [9, 14], [1, 1], [8, 13], [2]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import icu
import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings
from kernels.text.bert_chars import WHITESPACE, u8_next

__all__ = ["CLOSE_PAREN", "CLOSE_PUNC", "PUNCTUATION_WORD", "TERMINAL", "code_points", "fragments",
           "sentence_fragments_v2"]


def code_points(pattern: str) -> frozenset[int]:
    """The code points of an ICU UnicodeSet pattern."""
    found = icu.UnicodeSet(pattern)
    return frozenset(c for start, end in found.ranges() for c in range(ord(start), ord(end) + 1))


# The characters of each class, as sentence_fragmenter_v2.cc's helpers (and sentence_breaking_utils.cc's) test them.
TERMINAL = code_points("[[:Sentence_Break=ATerm:][:Sentence_Break=STerm:]]") | {0x055C, 0x055E, 0x17D4, 0x037E,
                                                                                     0x2026}
CLOSE_PAREN = code_points("[[:Line_Break=CL:][:Line_Break=CP:]]") | {ord(">"), 64831}
CLOSE_PUNC = CLOSE_PAREN | code_points("[[:Line_Break=QU:]]") | {ord("]"), ord("`"), 65282, 65287}
PUNCTUATION_WORD = code_points("[[:P:][:Dash:][:Hyphen:]]") | {ord(c) for c in "`<>~"} | {5741}

# TF Text's emoticons, in its order (the first that matches wins). NOTE: its list has ";-*=(" where a missing comma
# joined ";-*" and "=(".
_EMOTICONS = tuple(e.encode() for e in (
    ":(:)", ":)", ":(", ":o)", ":]", ":3", ":>", "=]", "=)", ":}", ":^)", ":-D", ":-)))))", ":-))))", ":-)))",
    ":-))", ":-)", ">:[", ":-(", ":(", ":-c", ":c", ":-<", ":<", ":-[", ":[", ":{", ";(", ":-||", ":@", ">:(",
    ":'-(", ":'(", ":'-)", ":')", "D:<", ">:O", ":-O", ":-o", ":*", ":-*", ":^*", ";-)", ";)", "*-)", "*)", ";-]",
    ";]", ";^)", ":-,", ">:P", ":-P", ":p", "=p", ":-p", "=p", ":P", "=P", ";p", ";-p", ";P", ";-P", ">:\\",
    ">:/", ":-/", ":-.", ":/", ":\\", "=/", "=\\", ":|", ":-|", ":$", ":-#", ":#", "O:-)", "0:-)", "0:)", "0;^)",
    ">:)", ">;)", ">:-)", "}:-)", "}:)", "3:-)", ">_>^", "^<_<", "|;-)", "|-O", ":-J", ":-&", ":&", "#-)", "<3",
    "8-)", "^_^", ":D", ":-D", "=D", "^_^;;", "O=)", "}=)", "B)", "B-)", "=|", "-_-", "o_o;", "u_u", ":-\\", ":s",
    ":S", ":-s", ":-S", ";*", ";-*=(", ">.<", ">:-(", ">:(", ">=(", ";_;", "T_T", "='(", ">_<", "D:", ":o", ":-o",
    "=o", "o.o", ":O", ":-O", "=O", "O.O", "x_x", "X-(", "X(", "X-o", "X-O", ":X)", "(=^.^=)", "(=^..^=)", "=^_^=",
    "-<@%", ":(|)", "(]:{", "<\\3", "~@~", "8'(", "XD", "DX"))
# The emoticons by their first byte, each list in TF Text's order.
_EMOTICONS_BY_FIRST_BYTE: dict[int, list[bytes]] = {}
for _emoticon in _EMOTICONS:
    _EMOTICONS_BY_FIRST_BYTE.setdefault(_emoticon[0], []).append(_emoticon)

_TERMINAL_PUNC, _MULTIPLE_TERMINAL_PUNC, _HAS_CLOSE_PAREN = 1, 2, 4


class _Text:
    """One document, asked about the text from each byte offset as sentence_fragmenter_v2.cc's helpers are."""

    def __init__(self, doc: bytes):
        self.doc = doc

    def char(self, i: int) -> tuple[int, int]:
        """U8_NEXT_OR_FFFD at `i`: the code point and the bytes it takes (U+0000 past the end)."""
        if i >= len(self.doc):
            return 0, 0
        cp, j = u8_next(self.doc, i, len(self.doc))
        return (0xFFFD if cp < 0 else cp), j - i

    def ellipsis(self, i: int) -> int:
        """The ellipsis' length at `i`, 0 if none."""
        if self.doc.startswith(b"...", i):
            return 3
        cp, size = self.char(i)
        return size if cp == 0x2026 else 0

    def terminal_punc(self, i: int) -> int:
        """IsTerminalPunc: the mark's length at `i`, 0 if none."""
        size = self.ellipsis(i)
        if size:
            return size
        cp, size = self.char(i)
        return size if cp in TERMINAL else 0

    def close_punc(self, i: int) -> int:
        if self.doc.startswith(b"''", i):
            return 2
        cp, size = self.char(i)
        return size if cp in CLOSE_PUNC else 0

    def is_close_paren(self, i: int) -> bool:
        return self.char(i)[0] in CLOSE_PAREN

    def is_punctuation_word(self, i: int) -> bool:
        return self.char(i)[0] in PUNCTUATION_WORD

    def acronym(self, i: int) -> int:
        """IsPeriodSeparatedAcronym: the length of two or more "X." pairs (ASCII capitals) at `i`, 0 if none."""
        doc, k = self.doc, i
        while k < len(doc) - 1 and 65 <= doc[k] <= 90 and doc[k + 1] == 46:
            k += 2
        return k - i if k - i > 2 else 0

    def emoticon(self, i: int) -> int:
        """IsEmoticon: the length of the first of TF Text's emoticons at `i`, 0 if none."""
        if i >= len(self.doc):
            return 0
        for emoticon in _EMOTICONS_BY_FIRST_BYTE.get(self.doc[i], ()):
            if self.doc.startswith(emoticon, i):
                return len(emoticon)
        return 0

    def space_allowed_before(self, i: int) -> bool:
        return bool(self.terminal_punc(i)) or self.is_close_paren(i) or bool(self.emoticon(i))

    def is_whitespace(self, i: int) -> bool:
        if self.doc.startswith((b" ", b"\n"), i):
            return True
        return self.char(i)[0] in WHITESPACE


@dataclass(frozen=True)
class _Match:
    """FragmentBoundaryMatch: how far the end-of-fragment state machine got."""

    state: int = 0  # 0 initial, 1 collecting terminal punctuation, 2 collecting close punctuation
    first_terminal_punc: int = -1
    first_close_punc: int = -1
    limit: int = -1

    @property
    def got_terminal_punc(self) -> bool:
        return self.first_terminal_punc >= 0


def _advance(match: _Match, text: _Text, index: int) -> _Match | None:
    """FragmentBoundaryMatch::Advance: the match after the text at `index`, or None without a transition."""
    offset = 1
    terminal = text.terminal_punc(index)
    if terminal:
        offset = terminal
    ellipsis = text.ellipsis(index)
    if ellipsis:
        offset = ellipsis
    close = text.close_punc(index)
    if close:
        offset = close
    acronym = text.acronym(index)
    if acronym:
        terminal, offset = 0, acronym
    emoticon = text.emoticon(index)
    if emoticon:
        terminal, offset = 0, emoticon
    state, first_terminal, first_close = match.state, match.first_terminal_punc, match.first_close_punc
    if state == 0:
        if terminal or acronym or emoticon:
            state, first_terminal = 1, index
    elif state == 1:
        if not (terminal or emoticon):
            if not close:
                return None
            state, first_close = 2, index
    elif not (close or ellipsis or emoticon):
        return None
    limit = index + offset
    if state == 1:
        first_close = limit
    return _Match(state, first_terminal, first_close, limit)


def _next_boundary(text: _Text, start: int) -> _Match:
    """SentenceFragmenterV2::FindNextFragmentBoundary: a space may end the match or sit inside it (x? !!), so
    the match so far is kept while a longer one is tried."""
    current, previous = _Match(), _Match()
    i = start
    while i < len(text.doc):
        if current.got_terminal_punc and i > start:
            if not text.space_allowed_before(i):
                break
            previous = current
        advanced = _advance(current, text, i)
        if advanced is None:
            if previous.got_terminal_punc:
                return previous
            current = _Match()  # start again, at the same character
            continue
        current = advanced
        i = current.limit
    return current


def _adjusted_first_terminal_punc(text: _Text, match: _Match) -> int:
    """An ellipsis or emoticon followed by unambiguous terminal punctuation (agreed...!) leaves the mark
    after it as the first terminal punctuation."""
    first, close = match.first_terminal_punc, match.first_close_punc
    if first < 0:
        return first
    for i in range(close, first, -1):
        if text.ellipsis(i) or text.emoticon(i):
            return first if i == close else i
    return first


def _has_unattachable_terminal_punc(text: _Text, match: _Match) -> bool:
    """Whether a second unambiguous mark follows the first (agreed!?)."""
    first = match.first_terminal_punc
    if first < 0:
        return False
    # NOTE: an ellipsis and an emoticon at the same place both move the walk on, as TF Text's does.
    skip = max(text.ellipsis(first) - 1, 0) + max(text.emoticon(first) - 1, 0)
    i = first + skip + 1
    while i < match.first_close_punc:
        ellipsis, emoticon = text.ellipsis(i), text.emoticon(i)
        if text.is_punctuation_word(i) and not ellipsis and not emoticon:
            return True
        i += max(ellipsis - 1, 0) + max(emoticon - 1, 0) + 1
    return False


def _has_close_paren(text: _Text, match: _Match) -> bool:
    first = match.first_close_punc
    return first >= 0 and any(text.is_close_paren(i) for i in range(first, match.limit))


def fragments(doc: bytes) -> list[tuple[int, int, int, int]]:
    """SentenceFragmenterV2::FindFragments: (start, end, properties, terminal punctuation offset) of each."""
    text = _Text(doc)
    out = []
    start = 0
    while start < len(doc):
        if text.is_whitespace(start):
            start += 1
            continue
        match = _next_boundary(text, start)
        properties, terminal_index = 0, -1
        if match.got_terminal_punc:
            properties |= _TERMINAL_PUNC
            terminal_index = _adjusted_first_terminal_punc(text, match)
            if _has_unattachable_terminal_punc(text, match):
                properties |= _MULTIPLE_TERMINAL_PUNC
            if _has_close_paren(text, match):
                # NOTE: never also HAS_SENTENTIAL_CLOSE_PAREN: TF Text's UpdateLatestOpenParenForFragment looks
                # for the open parenthesis after the fragment's first byte only, so it never finds it initial.
                properties |= _HAS_CLOSE_PAREN
        out.append((start, match.limit, properties, terminal_index))
        start = match.limit
    return out


@kernel("SentenceFragmentsV2", devices=("cpu",), outputs=5)
def sentence_fragments_v2(xp: Any, doc: Any) -> tuple:
    """Every fragment's start, end, properties and terminal punctuation offset (flat, int64), and how many
    fragments each document has."""
    doc = np.asarray(doc, dtype=object)
    if doc.ndim != 1:
        raise ValueError(f"Shape must be rank 1: {format_dims(doc.shape)}")
    found = [fragments(d) for d in flat_strings(doc)]
    flat = [f for per_doc in found for f in per_doc]
    columns = [np.array([f[k] for f in flat], np.int64) for k in range(4)]
    return (*columns, np.array([len(per_doc) for per_doc in found], np.int64))

