"""Unicode normalization of UTF-8 as ICU's Normalizer2::normalizeUTF8 does it, with the icu::Edits it records:
which byte spans it copied and which it replaced, span by span. TF Text's NormalizeUTF8WithOffsetsMap keeps
those edits to map offsets in the normalized text back to the original (FindSourceOffsets), so the spans must
be ICU's own: a composing form (NFC, NFKC) replaces a single character where its mapping stands between
boundaries and otherwise the stretch between two composition boundaries it had to recompose; a decomposing
form (NFD, NFKD) replaces a stretch from the last boundary it copied to the end of the combining marks it had
to reorder.

The code replays ICU 77.1's Normalizer2Impl::composeUTF8 and decomposeUTF8 step by step. What those read from
ICU's normalization data (each character's type: quick-check values, combining classes, composition
boundaries, mappings) is read here through ICU's public API (pyicu). Bytes that are not UTF-8 are
normalization-inert, as in ICU: copied unchanged, a boundary on each side. Checked against TF Text 2.21.1 (which
builds ICU 77.1) in all four forms: every assigned code point alone and between combining marks, and random
mixes of jamo, marks out of order, compatibility characters and ill-formed bytes, offsets and all.

    >>> normalize_with_edits("ﬁx".encode(), "NFKC")
    (b'fix', [(3, 2, True), (1, 1, False)])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import icu

from kernels.text.bert_chars import utf8_steps

__all__ = ["FORMS", "Span", "normalize_utf8", "normalize_with_edits"]

_YES, _MAYBE = icu.UNormalizationCheckResult.YES, icu.UNormalizationCheckResult.MAYBE
_INSTANCES = {"NFC": icu.Normalizer2.getNFCInstance(), "NFD": icu.Normalizer2.getNFDInstance(),
              "NFKC": icu.Normalizer2.getNFKCInstance(), "NFKD": icu.Normalizer2.getNFKDInstance(),
              "NFKC_CF": icu.Normalizer2.getNFKCCasefoldInstance()}
FORMS = ("NFC", "NFKC", "NFD", "NFKD")
# NFC and NFD read the same data (nfc), NFKC and NFKD theirs (nfkc): a character's type is the pair's.
_PAIR = {"NFC": ("NFC", "NFD"), "NFD": ("NFC", "NFD"), "NFKC": ("NFKC", "NFKD"), "NFKD": ("NFKC", "NFKD")}

_MAX_DELTA = 0x40  # Normalizer2Impl::MAX_DELTA: how far an algorithmic (one code point) mapping may reach
_HANGUL_BASE, _HANGUL_COUNT = 0xAC00, 11172
_JAMO_L_BASE, _JAMO_L_COUNT, _JAMO_V_BASE, _JAMO_V_COUNT, _JAMO_T_BASE, _JAMO_T_COUNT = (
    0x1100, 19, 0x1161, 21, 0x11A7, 28)

# One span of the edits: (bytes of the source, bytes written, whether it changed).
Span = tuple[int, int, bool]


@dataclass(frozen=True)
class _Char:
    """What a pair of forms' data says of one character (C composes, D decomposes)."""

    ccc: int
    comp_yes: bool  # C's quick check is YES
    comp_no: bool  # ... is NO: the character has a mapping (else MAYBE: it combines with one before it)
    decomp_yes: bool  # D's quick check is YES: the character does not decompose
    boundary_before: bool  # a composition boundary before it (C.hasBoundaryBefore)
    boundary_after: bool  # ... and after it
    composed: str  # C of the character alone
    lead_cc: int  # the combining class of the first character of D of the character alone
    maps_alone: bool  # a "no" whose mapping ICU writes on its own when boundaries surround it

    @property
    def comp_yes_zero_cc(self) -> bool:
        """Normalizer2Impl::isCompYesAndZeroCC: the compose fast path copies it."""
        return self.comp_yes and self.ccc == 0

    @property
    def maybe_yes_or_nonzero_cc(self) -> bool:
        """Normalizer2Impl::isMaybeYesOrNonZeroCC: it does not decompose, and it combines back or has a
        combining class."""
        return self.decomp_yes and (self.ccc != 0 or not self.comp_yes)


# Bytes that are not UTF-8: ICU's trie gives them the inert value.
_INERT = _Char(ccc=0, comp_yes=True, comp_no=False, decomp_yes=True, boundary_before=True, boundary_after=True,
               composed="", lead_cc=0, maps_alone=False)


@functools.lru_cache(maxsize=65536)
def _char(compose: str, cp: int) -> _Char:
    comp, decomp = _INSTANCES[compose], _INSTANCES[_PAIR[compose][1]]
    ch = chr(cp)
    qc = comp.quickCheck(ch)
    composed, decomposed = comp.normalize(ch), decomp.normalize(ch)
    # NOTE: ICU stores a "no" character's mapping ready to write when it is already composed (its full
    # decomposition is composition-normalized) or is one code point near it (an algorithmic mapping); any
    # other "no" character (one whose mapping recomposes, as NFKC's U+320E does) takes the slow path.
    maps_alone = qc not in (_YES, _MAYBE) and comp.hasBoundaryBefore(ch) and (
        composed == decomposed or (len(composed) == 1 and abs(ord(composed) - cp) <= _MAX_DELTA))
    return _Char(ccc=icu.Char.getCombiningClass(cp), comp_yes=qc == _YES, comp_no=qc not in (_YES, _MAYBE),
                 decomp_yes=decomp.quickCheck(ch) == _YES, boundary_before=comp.hasBoundaryBefore(ch),
                 boundary_after=comp.hasBoundaryAfter(ch), composed=composed,
                 lead_cc=icu.Char.getCombiningClass(ord(decomposed[0])) if decomposed else 0, maps_alone=maps_alone)


def _last_cc(text: str) -> int:
    return icu.Char.getCombiningClass(ord(text[-1])) if text else 0


class _Writer:
    """The output and the edits, appended as ICU's ByteSinkUtil appends them."""

    def __init__(self, data: bytes, pos: list[int]):
        self.data, self.pos = data, pos
        self.pieces: list[bytes] = []
        self.spans: list[Span] = []

    def text(self, start: int, end: int) -> str:
        """The characters of units [start, end): always well-formed, as ICU never takes ill-formed bytes apart
        from their neighbours."""
        return self.data[self.pos[start]:self.pos[end]].decode("utf-8")

    def copy(self, start: int, end: int) -> None:
        if end > start:
            length = self.pos[end] - self.pos[start]
            self.pieces.append(self.data[self.pos[start]:self.pos[end]])
            if self.spans and not self.spans[-1][2]:  # icu::Edits joins adjacent unchanged spans
                self.spans[-1] = (self.spans[-1][0] + length, self.spans[-1][1] + length, False)
            else:
                self.spans.append((length, length, False))

    def replace(self, start: int, end: int, text: str) -> None:
        written = text.encode("utf-8")
        self.pieces.append(written)
        self.spans.append((self.pos[end] - self.pos[start], len(written), True))


def _compose(w: _Writer, cps: list[int], info: list[_Char], compose: str) -> None:
    """Normalizer2Impl::composeUTF8 (onlyContiguous false) over units of one character each."""
    n = len(info)
    normalizer = _INSTANCES[compose]
    prev_boundary = i = 0

    def boundary_before(k: int) -> bool:
        return k == n or info[k].boundary_before

    while True:
        while i < n and info[i].comp_yes_zero_cc:
            i += 1
        if i == n:
            w.copy(prev_boundary, n)
            return
        prev_src, c, cp = i, info[i], cps[i]
        i += 1
        if c.comp_no:
            if c.maps_alone:
                if c.boundary_after or boundary_before(i):
                    w.copy(prev_boundary, prev_src)
                    w.replace(prev_src, i, c.composed)
                    prev_boundary = i
                    continue
            elif c.composed == "" and (boundary_before(i) or prev_boundary == prev_src
                                       or info[prev_src - 1].boundary_after):
                # Maps to nothing: dropped where a boundary stands before or after it.
                w.copy(prev_boundary, prev_src)
                w.replace(prev_src, i, "")
                prev_boundary = i
                continue
        elif _JAMO_V_BASE <= cp < _JAMO_V_BASE + _JAMO_V_COUNT or _JAMO_T_BASE < cp < _JAMO_T_BASE + _JAMO_T_COUNT:
            p = prev_src - 1  # previousHangulOrJamo: a 3-byte character in U+1000..U+D7FF after prev_boundary
            prev = cps[p] if p >= prev_boundary and w.pos[prev_src] - w.pos[p] == 3 and 0x1000 <= cps[p] <= 0xD7FF \
                else -1
            syllable = -1
            if cp < _JAMO_T_BASE:  # a vowel: compose with the Jamo L before it and a Jamo T after it
                lead = prev - _JAMO_L_BASE
                if 0 <= lead < _JAMO_L_COUNT:
                    trail = cps[i] - _JAMO_T_BASE if i < n and _JAMO_T_BASE < cps[i] < _JAMO_T_BASE + _JAMO_T_COUNT \
                        else -1
                    if trail > 0:
                        i += 1
                    elif boundary_before(i):
                        trail = 0
                    if trail >= 0:
                        syllable = _HANGUL_BASE + (lead * _JAMO_V_COUNT + cp - _JAMO_V_BASE) * _JAMO_T_COUNT + trail
            elif _HANGUL_BASE <= prev < _HANGUL_BASE + _HANGUL_COUNT and (prev - _HANGUL_BASE) % _JAMO_T_COUNT == 0:
                syllable = prev + cp - _JAMO_T_BASE  # a trailing consonant after an LV syllable
            if syllable >= 0:
                w.copy(prev_boundary, p)
                w.replace(p, i, chr(syllable))
                prev_boundary = i
                continue
        elif c.comp_yes:  # combining marks that do not combine back: copied while in canonical order
            cc = c.ccc
            while True:
                if i == n:
                    w.copy(prev_boundary, n)
                    return
                prev_cc, nxt = cc, info[i]
                if not (nxt.comp_yes and nxt.ccc != 0):
                    break
                cc = nxt.ccc
                if prev_cc > cc:
                    break
                i += 1
            if nxt.boundary_before:
                if nxt.comp_yes_zero_cc:
                    i += 1
                continue
        # The slow path: from the boundary before this character to the next one, decompose and recompose.
        if prev_boundary != prev_src and not c.boundary_before and not info[prev_src - 1].boundary_after:
            prev_src -= 1
        while i < n:  # decomposeShort(STOP_AT_COMP_BOUNDARY)
            u = info[i]
            if u.maybe_yes_or_nonzero_cc:
                i += 1
                continue
            if u.boundary_before:
                break
            i += 1
            if u.boundary_after:
                break
        source = w.text(prev_src, i)
        result = normalizer.normalize(source)
        if result != source:
            w.copy(prev_boundary, prev_src)
            w.replace(prev_src, i, result)
            prev_boundary = i


def _decompose(w: _Writer, info: list[_Char], decompose: str) -> None:
    """Normalizer2Impl::decomposeUTF8 over units of one character each."""
    n = len(info)
    normalizer = _INSTANCES[decompose]
    prev_boundary = prev_cc = i = 0
    while True:
        fast_start = i
        while i < n and info[i].decomp_yes and info[i].ccc == 0:
            i += 1
        if i == n:
            w.copy(prev_boundary, n)
            return
        prev_src, c = i, info[i]
        i += 1
        if prev_src != fast_start:
            w.copy(prev_boundary, prev_src)
            prev_boundary, prev_cc = prev_src, 0
        if c.decomp_yes:  # a combining mark: copied while in canonical order
            cc = c.ccc
            if prev_cc <= cc or cc == 0:
                prev_cc = cc
                if cc <= 1:
                    w.copy(prev_boundary, i)
                    prev_boundary = i
                continue
        # The slow path: decompose up to this character, and on while the marks after it may reorder.
        if prev_boundary != prev_src and c.lead_cc == 0:
            w.copy(prev_boundary, prev_src)
            prev_boundary = prev_src
        result = normalizer.normalize(w.text(prev_boundary, i))
        if _last_cc(result) > 1:
            while i < n and info[i].lead_cc != 0:  # decomposeShort(STOP_AT_DECOMP_BOUNDARY)
                i += 1
                result = normalizer.normalize(w.text(prev_boundary, i))
                if _last_cc(result) <= 1:
                    break
        if c.decomp_yes and result == w.text(prev_boundary, i):
            w.copy(prev_boundary, i)
        else:
            w.replace(prev_boundary, i, result)
        prev_boundary, prev_cc = i, 0


def normalize_with_edits(data: bytes, form: str) -> tuple[bytes, list[Span]]:
    """`data` normalized to `form` (NFC, NFKC, NFD or NFKD) as ICU's normalizeUTF8 writes it, and the edits it
    records: (source bytes, bytes written, changed) per span, adjacent unchanged spans joined."""
    unchanged = [(len(data), len(data), False)] if data else []
    if data.isascii():  # ASCII is normalization-inert in all four forms
        return data, unchanged
    try:
        if _INSTANCES[form].isNormalized(data.decode("utf-8")):  # then ICU copies it all, as one span
            return data, unchanged
    except UnicodeDecodeError:
        pass
    steps = utf8_steps(data)
    pos = [start for start, _, _ in steps] + [len(data)]
    cps = [cp for _, _, cp in steps]
    compose = _PAIR[form][0]
    info = [_char(compose, cp) if cp >= 0 else _INERT for cp in cps]
    w = _Writer(data, pos)
    if form in ("NFC", "NFKC"):
        _compose(w, cps, info, compose)
    else:
        _decompose(w, info, form)
    return b"".join(w.pieces), w.spans


def normalize_utf8(data: bytes, form: str) -> bytes:
    """`data` normalized to `form` (NFC, NFKC, NFD, NFKD or NFKC_CF), as ICU's normalizeUTF8 writes it: each
    stretch of well-formed UTF-8 normalized, bytes that are not UTF-8 copied as they are."""
    normalizer = _INSTANCES[form]
    try:
        return normalizer.normalize(data.decode("utf-8")).encode("utf-8")
    except UnicodeDecodeError:
        pass
    out, start = [], 0
    for begin, end, cp in utf8_steps(data):
        if cp < 0:
            if begin > start:
                out.append(normalizer.normalize(data[start:begin].decode("utf-8")).encode("utf-8"))
            out.append(data[begin:end])
            start = end
    if start < len(data):
        out.append(normalizer.normalize(data[start:].decode("utf-8")).encode("utf-8"))
    return b"".join(out)
