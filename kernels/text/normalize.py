"""Kernels of TF Text's Unicode normalizers: CaseFoldUTF8 (ICU's NFKC_Casefold), NormalizeUTF8 (NFC, NFKC, NFD
or NFKD, the attr read case-insensitively), NormalizeUTF8WithOffsetsMap (the same, and per string an offsets
map: the icu::Edits ICU recorded) and FindSourceOffsets (offsets in normalized strings mapped back to the
originals through those maps). Each string is normalized as ICU's normalizeUTF8 does it
(kernels.text.icu_normalization): well-formed stretches normalized, bytes that are not UTF-8 copied unchanged.

An offsets map is a DT_VARIANT scalar: an `OffsetsMap` object, a tensor of them a numpy object array (as
kernels.ragged.variant holds its variants). It lives as long as the request; TF Text serializes one only to
send it elsewhere, and tensorgate never does. FindSourceOffsets maps each offset with ICU's own
Edits::Iterator::sourceIndexFromDestinationIndex over the fine changes (pyicu), one iterator per row as TF
Text does: an offset inside a replaced span maps to the end of its source span.

    >>> out, maps = normalize_utf8_with_offsets_map(np, np.array(["ﬁx".encode()], dtype=object),
    ...                                             normalization_form="NFKC")
    >>> out[0], find_source_offsets(np, maps, np.array([0, 1, 2, 3]), np.array([0, 4]))[0].tolist()
    (b'fix', [0, 3, 3, 4])

Normalization data: ICU 77.1 (Unicode 16) through pyicu-wheels. TF Text 2.21 builds ICU 77.1 too; both agree
on every assigned code point, alone and among combining marks, checked against tensorflow-text 2.21.1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import icu
import numpy as np

from kernels.registry import kernel
from kernels.strings.tensors import flat_strings, message_text, string_array
from kernels.text.icu_normalization import FORMS, Span, normalize_with_edits
from kernels.text.icu_normalization import normalize_utf8 as _normalize

__all__ = [
    "OffsetsMap",
    "case_fold_utf8",
    "find_source_offsets",
    "normalize_utf8",
    "normalize_utf8_with_offsets_map",
]

_HOST = ("cpu",)


@dataclass(frozen=True, eq=False)
class OffsetsMap:
    """The edits ICU made normalizing one string: (source bytes, bytes written, changed) per span.

        >>> OffsetsMap(((3, 2, True), (1, 1, False)))
        OffsetsMap(1 of 2 spans changed, 4 bytes)
    """

    spans: tuple[Span, ...]

    # NOTE: as TensorFlow's Shape and Rank see it, the variant is a scalar of dtype variant.
    shape = ()
    ndim = 0
    dtype = np.dtype(object)

    def edits(self) -> Any:
        """The spans as an icu.Edits, added as ICU's normalizer added them."""
        edits = icu.Edits()
        for old, new, changed in self.spans:
            if changed:
                edits.addReplace(old, new)
            else:
                edits.addUnchanged(old)
        return edits

    def __repr__(self) -> str:
        changed = sum(1 for span in self.spans if span[2])
        return f"OffsetsMap({changed} of {len(self.spans)} spans changed, {sum(s[0] for s in self.spans)} bytes)"


def _form(normalization_form: str | bytes, with_offsets: bool) -> str:
    """TF Text reads the attr upper-cased (absl::AsciiStrToUpper) and checks it when the kernel runs."""
    name = normalization_form if isinstance(normalization_form, str) else message_text(normalization_form)
    form = "".join(c.upper() if "a" <= c <= "z" else c for c in name)
    if form not in FORMS:
        if with_offsets:
            raise ValueError(f"Offset not supported for this normalization form: {form}")
        raise ValueError(f"Unknown normalization form requrested: {form}")  # sic: TF Text's spelling
    return form


@kernel("CaseFoldUTF8", devices=_HOST)
def case_fold_utf8(xp: Any, input: Any) -> tuple:
    """Each string case-folded with ICU's NFKC_Casefold (which also NFKC-normalizes it)."""
    return (string_array([_normalize(s, "NFKC_CF") for s in flat_strings(input)], np.shape(input)),)


@kernel("NormalizeUTF8", devices=_HOST)
def normalize_utf8(xp: Any, input: Any, *, normalization_form: str) -> tuple:
    """Each string normalized to `normalization_form` (NFC, NFKC, NFD or NFKD, any case)."""
    form = _form(normalization_form, with_offsets=False)
    return (string_array([_normalize(s, form) for s in flat_strings(input)], np.shape(input)),)


@kernel("NormalizeUTF8WithOffsetsMap", devices=_HOST, outputs=2)
def normalize_utf8_with_offsets_map(xp: Any, input: Any, *, normalization_form: str) -> tuple:
    """Each string normalized, and beside it the OffsetsMap of the edits that made it."""
    form = _form(normalization_form, with_offsets=True)
    results = [normalize_with_edits(s, form) for s in flat_strings(input)]
    maps = np.empty(len(results), dtype=object)
    maps[:] = [OffsetsMap(tuple(spans)) for _, spans in results]
    return string_array([out for out, _ in results], np.shape(input)), maps.reshape(np.shape(input))


def _int32(value: int) -> int:
    """ICU takes the offset as int32_t: TF Text's int64 offset wraps around."""
    return (value + 2**31) % 2**32 - 2**31


@kernel("FindSourceOffsets", devices=_HOST)
def find_source_offsets(xp: Any, offsets_map: Any, input_offsets_values: Any, input_offsets_splits: Any) -> tuple:
    """Offsets into normalized strings (a ragged tensor's values and row splits, one row per string) mapped to
    offsets into the strings before normalization. Like TF Text, a row without offsets skips its string's map
    without using it, and then the maps left over fail the count check."""
    maps = np.asarray(offsets_map, dtype=object).reshape(-1).tolist()
    values = np.asarray(input_offsets_values).reshape(-1).tolist()
    splits = np.asarray(input_offsets_splits).reshape(-1).tolist()
    for m in maps:
        if not isinstance(m, OffsetsMap):
            raise TypeError(f"offsets_map holds {type(m).__name__}, not an offsets map from "
                            "NormalizeUTF8WithOffsetsMap")
    if any(not 0 <= splits[k] <= splits[k + 1] <= len(values) for k in range(len(splits) - 1)):
        raise ValueError(f"input_offsets_splits must be non-decreasing and within the {len(values)} offsets, got "
                         f"{splits}")
    mismatch = "Input offset tensor dimension did not match the offset map dimension."
    out = [0] * len(values)  # NOTE: offsets no row covers stay 0, as in TF Text's output vector
    used = written = 0
    for begin, end in itertools.pairwise(splits):
        if begin == end:
            continue
        if used == len(maps):
            raise ValueError(mismatch)
        edits = maps[used].edits()
        used += 1
        changes = edits.getFineChangesIterator()
        for j in range(begin, end):
            out[written] = changes.sourceIndexFromdestinationIndex(_int32(values[j]))
            written += 1
    if used != len(maps):
        raise ValueError(mismatch)
    return (np.array(out, dtype=np.int64),)
