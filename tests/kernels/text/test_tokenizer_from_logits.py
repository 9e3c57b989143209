"""TokenizerFromLogits beyond the golden fixtures: NaN logits, text that is not UTF-8, and the errors bad inputs
get."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.text.split_merge import tokenizer_from_logits

SPLIT, MERGE = [2.0, 1.0], [1.0, 3.0]


def _strings(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _tokens(text: bytes, logits: list, force: bool = True) -> list[bytes]:
    out = tokenizer_from_logits(np, _strings(text), np.array([logits], np.float32), np.bool_(force))
    return out[0].tolist()


def test_new_york():
    """The examples of SplitMergeFromLogitsTokenizer's docstring."""
    s, m = SPLIT, MERGE
    assert _tokens(b"New York", [s, m, m, s, m, m, m, m]) == [b"New", b"York"]
    assert _tokens(b"New York", [s, m, m, m, m, m, m, m]) == [b"New", b"York"]
    assert _tokens(b"New York", [s, m, m, s, m, m, m, m], force=False) == [b"NewYork"]
    assert _tokens(b"New York", [s, m, m, m, s, m, m, m], force=False) == [b"New", b"York"]


def test_nan_and_tied_logits_merge():
    assert _tokens(b"abc", [SPLIT, [np.nan, 0.0], [1.0, 1.0]]) == [b"abc"]


def test_offsets_are_bytes_and_stray_bytes_are_characters():
    tokens, splits, begins, ends = tokenizer_from_logits(np, _strings(b"\x80\xc3\xa9 x"), np.array(
        [[SPLIT, SPLIT, MERGE, SPLIT]], np.float32), np.bool_(True))
    assert tokens.tolist() == [b"\x80", "é".encode(), b"x"]
    assert begins.tolist() == [0, 1, 4] and ends.tolist() == [1, 3, 5] and splits.tolist() == [0, 3]


@pytest.mark.parametrize("strings, logits, message", [
    (_strings(b"ab"), np.zeros((2, 2, 2), np.float32), "Expecting logits to have 1 rows, got 2"),
    (_strings(b"ab"), np.zeros((1, 2, 3), np.float32), "Bad logits dimension #2: 3 != 2"),
    (_strings(b"abc"), np.zeros((1, 2, 2), np.float32), 'Number of logits, 2, is insufficient for text "abc"'),
    (_strings(b"a\xe6\x97"), np.zeros((1, 4, 2), np.float32), "ends inside a UTF-8 sequence"),
    (_strings(b"ab"), np.zeros((1, 2), np.float32), "logits must be rank 3"),
])
def test_errors(strings, logits, message):
    with pytest.raises(ValueError, match=message):
        tokenizer_from_logits(np, strings, logits, np.bool_(True))
