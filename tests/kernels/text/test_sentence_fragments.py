"""SentenceFragmentsV2 and the deprecated SentenceFragments beyond the golden fixtures: the byte-by-byte walk
(outputs TF Text 2.21 gives), and the errors bad inputs get."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.text.sentence_fragments import sentence_fragments_v2
from kernels.text.token_sentence_fragments import sentence_fragments


def _strings(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@pytest.mark.parametrize("doc, expected", [
    # A multi-byte space is skipped one byte at a time: the next fragment starts at its continuation byte.
    (b"\xe3\x80\x80x. y", [[1, 6], [5, 7], [1, 0], [4, -1], [2]]),
    # An ellipsis then "!": the "!" is the first terminal punctuation, and a second mark.
    (b"He agreed...! ok", [[0, 14], [13, 16], [3, 0], [9, -1], [2]]),
    (b"A.B.C. next", [[0, 7], [6, 11], [3, 0], [0, -1], [2]]),
    (b"Hi!? (yes) no", [[0, 5], [4, 13], [3, 0], [2, -1], [2]]),
    (b"fine :) ok", [[0, 8], [7, 10], [1, 0], [5, -1], [2]]),
    (b"x\x80. y", [[0, 4], [3, 5], [1, 0], [2, -1], [2]]),
])
def test_fragments_v2(doc, expected):
    assert [a.tolist() for a in sentence_fragments_v2(np, _strings(doc))] == expected


def test_fragments_v2_of_an_empty_batch_and_rank_errors():
    out = sentence_fragments_v2(np, _strings())
    assert [a.tolist() for a in out] == [[], [], [], [], []] and all(a.dtype == np.int64 for a in out)
    with pytest.raises(ValueError, match="Shape must be rank 1"):
        sentence_fragments_v2(np, np.array([[b"a"]], dtype=object))


def _token_fragments(words, properties=None, **attrs):
    n = len(words)
    zeros = np.zeros(n, np.int64)
    props = np.array(properties or [0] * n, np.int64)
    return sentence_fragments(np, np.array([n]), zeros, zeros, _strings(*words), props,
                              **{"input_encoding": "UTF-8", **attrs})


def test_token_fragments_read_emoticon_and_acronym_bits():
    out = _token_fragments([b"U.S.", b"is", b"big", b":)", b"Ok"], [0x100, 0, 0, 0x80, 0])
    assert [a.tolist() for a in out] == [[0, 1, 4], [1, 4, 5], [1, 1, 0], [0, 3, -1], [3]]
    # Without the bits, neither is terminal punctuation.
    assert [a.tolist() for a in _token_fragments([b"U.S.", b"is", b":)", b"Ok"])][:2] == [[0], [4]]


@pytest.mark.parametrize("attrs, words, message", [
    ({"input_encoding": "latin1"}, [b"a"], "decodes UTF-8 only"),
    ({"replacement_char": 0x110000}, [b"a"], "replacement_char out of unicode codepoint range"),
    ({}, [b"a", b""], "Failed to decode string"),
])
def test_token_fragments_errors(attrs, words, message):
    with pytest.raises(ValueError, match=message):
        _token_fragments(words, **attrs)


def test_token_fragments_sizes_must_agree():
    with pytest.raises(ValueError, match="must all be the same size"):
        sentence_fragments(np, np.array([3]), np.zeros(2, np.int64), np.zeros(2, np.int64), _strings(b"a", b"b"),
                           np.zeros(2, np.int64), input_encoding="UTF-8")


def test_an_empty_document_has_no_fragments():
    assert [a.tolist() for a in _token_fragments([], input_encoding="utf8")] == [[], [], [], [], [0]]
