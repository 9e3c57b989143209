"""FastBertNormalize beyond the golden fixtures (tests/fixtures/ops/text/wordpiece/normalize/, whose fed models
these tests reuse): outputs read off TF Text 2.21 (TF Text's documented example among them), a batch mixing
valid and ill-formed UTF-8, and the errors bad inputs and models give."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from tests.golden import FIXTURES, load_case

CASES = FIXTURES / "ops" / "text" / "wordpiece" / "normalize"
LOWER_CASE = load_case(CASES / "lower_case_nfd_strip_accents").feeds["model:0"]
CONTROLS_ONLY = load_case(CASES / "controls_only").feeds["model:0"]


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def normalize(model, texts: np.ndarray, get_offsets: bool) -> list[list]:
    outs = kernels.lookup("FastBertNormalize", "cpu").bind(np, {"get_offsets": get_offsets})(texts, model)
    assert [o.dtype for o in outs] == [np.dtype(object), np.dtype(np.int64), np.dtype(np.int64)]
    return [o.tolist() for o in outs]


def test_lower_case_nfd_strip_accents_with_offsets():
    # "\xc0bc" is TF Text's documented example: "À" (2 bytes) becomes "a", which maps to its first byte.
    assert normalize(LOWER_CASE, strings("They're", "the", "Greatest", "\xc0bc", "", b"A\xffB", "ﬁ½\x00x"), True) == [
        [b"they're", b"the", b"greatest", b"abc", b"", b"a\xffb", "fi1\u20442 x".encode()],
        [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 2, 3, 4, 0, 0, 1, 2, 3, 0, 0, 3, 3, 3, 3, 3,
         5, 6, 7],
        [0, 8, 12, 21, 25, 26, 30, 40]]


def test_without_offsets_the_offsets_are_empty_and_the_splits_zero():
    assert normalize(LOWER_CASE, strings("They're", b"A\xffB"), False) == [[b"they're", b"a\xffb"], [], [0, 0, 0]]


def test_controls_only():
    # Control characters become spaces (tab, NUL) or nothing (a zero-width space); case and accents stay.
    assert normalize(CONTROLS_ONLY, strings("They're\tA\x00", "É\u200b"), True) == [
        [b"They're A ", "É ".encode()], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 5], [0, 11, 15]]


def test_a_batch_of_valid_and_ill_formed_text_gives_each_its_own_offsets():
    texts = strings("Ab", b"\xc3(\xe2\x82Z", "", "ÉÉ", b"\xff")
    batch = normalize(LOWER_CASE, texts, True)
    alone = [normalize(LOWER_CASE, texts[i:i + 1], True) for i in range(len(texts))]
    assert batch[0] == [a[0][0] for a in alone] == [b"ab", b"\xc3(\xe2\x82z", b"", b"ee", b"\xff"]
    assert batch[1] == [o for a in alone for o in a[1]] == [0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 0, 2, 4, 0, 1]
    assert batch[2] == [0, 3, 9, 10, 13, 15]


def test_input_must_be_a_vector():
    with pytest.raises(ValueError, match=r"input_values must be a vector, got shape \[\]"):
        normalize(LOWER_CASE, np.array(b"A", dtype=object), True)


@pytest.mark.parametrize("model, error, match", [
    (np.zeros(2, np.uint8), ValueError, "too short"),
    (np.frombuffer(b"\x10\x00\x00\x00" + b"\xff" * 60, np.uint8), ValueError, "not a valid FastBertNormalizerModel"),
    (LOWER_CASE.astype(np.int64), TypeError, "fast_bert_normalizer_model must be a uint8 tensor"),
])
def test_malformed_models(model, error, match):
    with pytest.raises(error, match=match):
        normalize(model, strings("A"), True)


def test_an_empty_batch():
    assert normalize(LOWER_CASE, strings(), True) == normalize(LOWER_CASE, strings(), False) == [[], [], [0]]
