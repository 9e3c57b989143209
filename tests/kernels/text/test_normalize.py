"""TF Text's normalizers beyond the golden fixtures (tests/fixtures/ops/text/unicode/normalize/): outputs and
source offsets read off TF Text 2.21.1 for the spans that are easy to get wrong (Hangul composed from jamo,
marks reordered, characters ICU recomposes with their neighbours, bytes that are not UTF-8), ICU's edits,
the normalization-form attr, and FindSourceOffsets' checks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kernels.text.icu_normalization import normalize_utf8, normalize_with_edits
from kernels.text.normalize import OffsetsMap


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def source_offsets(run_kernel, text: bytes | str, form: str) -> tuple[bytes, list[int]]:
    """The normalized string and where each of its offsets (and one past its end) maps back to."""
    out, maps = run_kernel("NormalizeUTF8WithOffsetsMap", strings(text), normalization_form=form)
    offsets = np.arange(len(out[0]) + 2, dtype=np.int64)
    (mapped,) = run_kernel("FindSourceOffsets", maps, offsets, np.array([0, offsets.size], np.int64))
    return out[0], mapped.tolist()


BAD = b"x\xff\xcc\x81\xcc\x81"  # a byte that is not UTF-8 between a letter and two acute accents
CASES = [  # text, form, normalized, source offsets (read off TF Text 2.21.1)
    ("\u1100\u1161\u11a8x", "NFC", "각x".encode(), [0, 9, 9, 9, 10, 10]),  # L V T composed in one span
    ("\uac00\u11a8", "NFKC", "각".encode(), [0, 6, 6, 6, 6]),  # LV + T
    ("e\u0301\u0316", "NFC", "é\u0316".encode(), [0, 5, 5, 5, 5, 5]),
    ("a\u0316\u0301b", "NFC", "á\u0316b".encode(), [0, 5, 5, 5, 5, 6, 6]),
    ("\u320e\u0301", "NFC", "\u320e\u0301".encode(), [0, 1, 2, 3, 4, 5, 5]),
    ("\u320e\u0301", "NFKC", "(가)\u0301".encode(), [0, 5, 5, 5, 5, 5, 5, 5, 5]),  # recomposed with the mark
    ("\u212b", "NFC", "Å".encode(), [0, 3, 3, 3]),
    (BAD, "NFC", BAD, [0, 1, 2, 3, 4, 5, 6, 6]),
    ("\u1e9b\u0323", "NFKC", "ṩ".encode(), [0, 5, 5, 5, 5]),
    ("\u0344", "NFC", "\u0308\u0301".encode(), [0, 2, 2, 2, 2, 2]),
    ("\u1100\u1161\u11a8x", "NFD", "\u1100\u1161\u11a8x".encode(), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10]),
    ("\uac00\u11a8", "NFD", "\u1100\u1161\u11a8".encode(), [0, 3, 3, 3, 3, 3, 3, 4, 5, 6, 6]),
    ("e\u0301\u0316", "NFD", "e\u0316\u0301".encode(), [0, 1, 5, 5, 5, 5, 5]),  # marks reordered: one span
    ("a\u0316\u0301b", "NFKD", "a\u0316\u0301b".encode(), [0, 1, 2, 3, 4, 5, 6, 6]),  # already in order
    ("\u320e\u0301", "NFKD", "(\u1100\u1161)\u0301".encode(), [0, 3, 3, 3, 3, 3, 3, 3, 3, 4, 5, 5]),
    ("\u212b", "NFD", "A\u030a".encode(), [0, 3, 3, 3, 3]),
    ("\u1e9b\u0323", "NFD", "\u017f\u0323\u0307".encode(), [0, 5, 5, 5, 5, 5, 5, 5]),
    ("\u1e9b\u0323", "NFKD", "s\u0323\u0307".encode(), [0, 5, 5, 5, 5, 5, 5]),
    (BAD, "NFKD", BAD, [0, 1, 2, 3, 4, 5, 6, 6]),
    ("ﬁﬁ", "NFKC", b"fifi", [0, 3, 3, 6, 6, 6]),  # one span per ligature
    ("", "NFKC", b"", [0, 0]),
]


@pytest.mark.parametrize("text, form, normalized, offsets", CASES, ids=[f"{c[1]}-{c[0]!r}" for c in CASES])
def test_source_offsets(run_kernel, text, form, normalized, offsets):
    assert source_offsets(run_kernel, text, form) == (normalized, offsets)
    (plain,) = run_kernel("NormalizeUTF8", strings(text), normalization_form=form)
    assert plain[0] == normalized


def test_edits_are_icus_spans():
    assert normalize_with_edits("ﬁx".encode(), "NFKC") == (b"fix", [(3, 2, True), (1, 1, False)])
    # A composed character is one replaced span per character where boundaries surround it...
    assert normalize_with_edits("ﬁﬁ".encode(), "NFKC")[1] == [(3, 2, True), (3, 2, True)]
    # ...and bytes that are not UTF-8 are copied, joined to the unchanged text around them.
    assert normalize_with_edits(b"a\xffb\xe1\x84", "NFD") == (b"a\xffb\xe1\x84", [(5, 5, False)])
    assert normalize_with_edits(b"", "NFC") == (b"", [])


def test_offsets_wrap_to_int32_and_clamp(run_kernel):
    _, maps = run_kernel("NormalizeUTF8WithOffsetsMap", strings("ﬁx"), normalization_form="NFKC")
    offsets = np.array([2**32 + 1, -5, 1000, 3, 1], np.int64)  # ICU takes an int32_t: 2**32 + 1 reads as 1
    assert run_kernel("FindSourceOffsets", maps, offsets, np.array([0, 5], np.int32))[0].tolist() == [3, 0, 4, 4, 3]


def test_case_fold(run_kernel):
    (out,) = run_kernel("CaseFoldUTF8", strings("Straße İ ﬁ A\u00adB Ａ ΣΑΣ", b"A\xffB\xc3", ""))
    assert out.tolist() == ["strasse i\u0307 fi ab a σασ".encode(), b"a\xffb\xc3", b""]


def test_shapes_are_kept(run_kernel):
    grid = strings("Ä", "ﬁ", "", "가", "e\u0301", "Ｘ").reshape(2, 3)
    (out,) = run_kernel("NormalizeUTF8", grid, normalization_form="NFKD")
    assert out.shape == (2, 3) and out[1, 2] == b"X"
    out, maps = run_kernel("NormalizeUTF8WithOffsetsMap", grid, normalization_form="NFC")
    assert out.shape == maps.shape == (2, 3) and all(isinstance(m, OffsetsMap) for m in maps.reshape(-1))
    assert run_kernel("CaseFoldUTF8", strings())[0].shape == (0,)


def test_normalization_form_is_read_case_insensitively(run_kernel):
    assert run_kernel("NormalizeUTF8", strings("ﬁ"), normalization_form="nfkc")[0].tolist() == [b"fi"]
    out = run_kernel("NormalizeUTF8WithOffsetsMap", strings("ﬁ"), normalization_form="Nfd")[0]
    assert out.tolist() == ["ﬁ".encode()]


def test_unknown_normalization_forms(run_kernel):
    with pytest.raises(ValueError, match="^Unknown normalization form requrested: NFKC_CF$"):
        run_kernel("NormalizeUTF8", strings("a"), normalization_form="nfkc_cf")
    with pytest.raises(ValueError, match="^Offset not supported for this normalization form: XYZ$"):
        run_kernel("NormalizeUTF8WithOffsetsMap", strings("a"), normalization_form="xyz")


def test_a_row_without_offsets_fails_the_count(run_kernel):
    # TF Text skips an empty row without using its map, so the maps left over fail its final check.
    _, maps = run_kernel("NormalizeUTF8WithOffsetsMap", strings("ﬁx", "", "abc"), normalization_form="NFKC")
    message = "^Input offset tensor dimension did not match the offset map dimension.$"
    with pytest.raises(ValueError, match=message):
        run_kernel("FindSourceOffsets", maps, np.array([0, 1, 2, 1]), np.array([0, 3, 3, 4]))
    with pytest.raises(ValueError, match=message):  # more rows than maps
        run_kernel("FindSourceOffsets", maps[:1], np.array([0, 1]), np.array([0, 1, 2]))
    # With every row holding an offset, each row reads its own string's map.
    assert run_kernel("FindSourceOffsets", maps, np.array([0, 1, 2, 0, 1]), np.array([0, 3, 4, 5]))[0].tolist() == \
        [0, 3, 3, 0, 1]


def test_no_offsets_give_no_source_offsets(run_kernel):
    # NOTE: TF Text 2.21.1 crashes (a segfault) on this; the answer is an empty vector.
    _, maps = run_kernel("NormalizeUTF8WithOffsetsMap", strings(), normalization_form="NFC")
    out = run_kernel("FindSourceOffsets", maps, np.zeros(0, np.int64), np.array([0], np.int64))[0]
    assert out.dtype == np.int64 and out.shape == (0,)


def test_find_source_offsets_checks_its_inputs(run_kernel):
    _, maps = run_kernel("NormalizeUTF8WithOffsetsMap", strings("a"), normalization_form="NFC")
    with pytest.raises(ValueError, match="non-decreasing and within the 2 offsets"):
        run_kernel("FindSourceOffsets", maps, np.array([0, 1]), np.array([0, 3]))
    with pytest.raises(ValueError, match="non-decreasing"):
        run_kernel("FindSourceOffsets", maps, np.array([0, 1]), np.array([1, 0]))
    with pytest.raises(TypeError, match="not an offsets map"):
        run_kernel("FindSourceOffsets", np.array([b"x"], dtype=object), np.array([0]), np.array([0, 1]))


ALPHABET = ["a", "e", "K", " ", "\u0301", "\u0308", "\u0316", "\u0323", "\u0334", "\u0345", "é", "Å", "\u212b",
            "ﬁ", "①", "\u3302", "\u320e", "Ａ", "²", "\u1100", "\u1161", "\u11a8", "가", "\u0344", "\u0f73",
            "\u1fee", "\uff9e", "\u3099", "か", "\u1e9b", "\u0958", "\u09cb", "\u0cc6", "\u0cc2", "😀", "日", "ß"]


def test_edits_reproduce_the_normalized_text():
    # The spans replayed from ICU's algorithm write exactly what ICU's normalizer writes for the whole text.
    rng = random.Random(7)
    for _ in range(300):
        pieces = [rng.choice(ALPHABET).encode() for _ in range(rng.randint(0, 8))]
        if rng.random() < 0.3:
            pieces.insert(rng.randint(0, len(pieces)), rng.choice([b"\xff", b"\xc3", b"\xe1\x84", b"\xed\xa0\x80"]))
        data = b"".join(pieces)
        for form in ("NFC", "NFKC", "NFD", "NFKD"):
            out, spans = normalize_with_edits(data, form)
            assert out == normalize_utf8(data, form), (data, form)
            assert sum(old for old, _, _ in spans) == len(data) and sum(new for _, new, _ in spans) == len(out)
