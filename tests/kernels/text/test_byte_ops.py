"""TF Text's byte-level ops beyond the golden fixtures (tests/fixtures/ops/text/unicode/bytes/):
TFText>Utf8Binarize, TFText>ByteSplitWithOffsets and TFText>ByteSplitByOffsets, with outputs and errors read
off TF Text 2.21.1."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels.limits import AllocationTooLarge


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def test_utf8_binarize(run_kernel):
    (out,) = run_kernel("TFText>Utf8Binarize", strings("hi", b"\xff"), word_length=2, bits_per_char=4,
                        replacement_char=-2)
    assert out.dtype == np.float32
    assert out.tolist() == [[0, 0, 0, 1, 1, 0, 0, 1], [0, 1, 1, 1, 0, 0, 0, 0]]


def test_utf8_binarize_shifts_a_32_bit_int():
    # Past bit 31 a code point's bits are 0 and a negative replacement's are 1.
    fn = kernels.lookup("TFText>Utf8Binarize", "cpu").bind(np, {"word_length": 2, "bits_per_char": 34,
                                                               "replacement_char": -1})
    (out,) = fn(strings(b"\xffA"))
    assert out[0, :34].tolist() == [1.0] * 34
    assert out[0, 34:].tolist() == [1, 0, 0, 0, 0, 0, 1] + [0] * 27


def test_utf8_binarize_checks(run_kernel):
    with pytest.raises(ValueError, match="must not be negative"):
        run_kernel("TFText>Utf8Binarize", strings("a"), word_length=-1, bits_per_char=2, replacement_char=0)
    with pytest.raises(ValueError, match=r"^Shape must be rank 1: \[1,1\]$"):
        run_kernel("TFText>Utf8Binarize", strings("a").reshape(1, 1), word_length=1, bits_per_char=2,
                   replacement_char=0)
    fn = kernels.lookup("TFText>Utf8Binarize", "cpu").bind(
        np, {"word_length": 1000, "bits_per_char": 1000, "replacement_char": 0}, {"memory_limit": 10**6})
    with pytest.raises(AllocationTooLarge):
        fn(strings("a"))


def test_byte_split_with_offsets(run_kernel):
    outs = run_kernel("TFText>ByteSplitWithOffsets", strings("ab", "", "é"))
    assert [o.tolist() for o in outs] == [[97, 98, 195, 169], [0, 2, 2, 4], [0, 1, 0, 1], [1, 2, 1, 2]]
    assert [o.dtype for o in outs] == [np.dtype(np.uint8), np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int32)]
    outs = run_kernel("TFText>ByteSplitWithOffsets", strings())
    assert [o.tolist() for o in outs] == [[], [0], [], []]


def test_byte_split_by_offsets(run_kernel):
    outs = run_kernel("TFText>ByteSplitByOffsets", strings("hello", "", "日本"), np.array([0, 1, 0, 3], np.int32),
                      np.array([1, 5, 3, 6], np.int32), np.array([0, 2, 2, 4], np.int64))
    assert [o.tolist() for o in outs] == [[b"h", b"ello", "日".encode(), "本".encode()], [0, 2, 2, 4]]


@pytest.mark.parametrize("start, end, message", [(4, 4, "Start offsets out of range."),
                                                 (0, -1, "End offsets out of range."),
                                                 (2, 1, "Start offset after end offset.")])
def test_byte_split_by_offsets_errors(run_kernel, start, end, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        run_kernel("TFText>ByteSplitByOffsets", strings("abc"), np.array([start], np.int32),
                   np.array([end], np.int32), np.array([0, 1], np.int64))


def test_byte_split_by_offsets_checks_row_splits(run_kernel):
    with pytest.raises(ValueError, match="2 strings need 3"):
        run_kernel("TFText>ByteSplitByOffsets", strings("a", "b"), np.array([0], np.int32), np.array([1], np.int32),
                   np.array([0, 1], np.int64))
    with pytest.raises(ValueError, match="lies outside"):
        run_kernel("TFText>ByteSplitByOffsets", strings("a"), np.array([0], np.int32), np.array([1], np.int32),
                   np.array([0, 2], np.int64))
