"""TFText>OffsetsToBoiseTags and TFText>BoiseTagsToOffsets beyond the golden fixtures: TF Text's reading of odd
tags and row splits, and the errors bad inputs get."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.text.boise import boise_tags_to_offsets, offsets_to_boise_tags


def _strings(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _splits(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _tags(token_begins, token_ends, span_begins, span_ends, types, token_splits, span_splits, strict=False):
    return offsets_to_boise_tags(np, np.array(token_begins, np.int32), np.array(token_ends, np.int32),
                                 np.array(span_begins, np.int32), np.array(span_ends, np.int32), _strings(*types),
                                 token_splits, token_splits, span_splits, span_splits, span_splits,
                                 np.bool_(strict))[0].tolist()


def test_tags_loose_and_strict():
    # "Who let the dogs out" with the span "let the dog" (ends inside "dogs"), then "Getty Center" over two spans.
    args = ([0, 4, 8, 12, 17, 0], [3, 7, 11, 16, 20, 12], [4, 0, 6], [15, 5, 12], [b"animal", b"per", b"loc"],
            _splits(0, 5, 6), _splits(0, 1, 3))
    assert _tags(*args) == [b"O", b"B-animal", b"I-animal", b"E-animal", b"O", b"B-loc"]
    # Strict: "dogs" ends past the span, and "Getty Center" ends past "per", which stops it before "loc".
    assert _tags(*args, strict=True) == [b"O", b"B-animal", b"I-animal", b"O", b"O", b"O"]


def test_a_span_type_stops_at_a_nul_byte():
    spans = boise_tags_to_offsets(np, np.array([0, 2], np.int32), np.array([1, 3], np.int32),
                                  _strings(b"S-a\x00b", b"B-\xc3\xa9"), _splits(0, 2), _splits(0, 2), _splits(0, 2))
    assert [a.tolist() for a in spans] == [[0, 2], [1, 3], [b"a", "é".encode()], [0, 2]]


def test_only_all_but_the_last_row_splits_are_compared():
    """TF Text compares the row splits of its inputs except the last entry, and cuts rows by the first's."""
    tags = offsets_to_boise_tags(np, np.array([0, 2], np.int32), np.array([1, 3], np.int32), np.array([0], np.int32),
                                 np.array([1], np.int32), _strings(b"t"), _splits(0, 2), _splits(0, 1),
                                 _splits(0, 1), _splits(0, 0), _splits(0, 1), np.bool_(False))[0]
    assert tags.tolist() == [b"S-t", b"O"]


def test_no_row_splits_is_no_rows():
    spans = boise_tags_to_offsets(np, np.array([0], np.int32), np.array([1], np.int32), _strings(b"S-x"),
                                  _splits(), _splits(), _splits())
    assert [a.tolist() for a in spans] == [[], [], [], [0]]


@pytest.mark.parametrize("splits, message", [
    ((_splits(0, 2), _splits(0, 2), _splits(0, 1, 2)), "must have the same size"),
    ((_splits(0, 2, 2), _splits(0, 1, 2), _splits(0, 2, 2)), "Row splits must be the same"),
    ((_splits(0, 3), _splits(0, 3), _splits(0, 3)), "end within its 2 values"),
])
def test_tags_to_offsets_errors(splits, message):
    with pytest.raises(ValueError, match=message):
        boise_tags_to_offsets(np, np.array([0, 2], np.int32), np.array([1, 3], np.int32), _strings(b"O", b"O"),
                              *splits)


def test_offsets_to_tags_errors():
    with pytest.raises(ValueError, match="Span begin/end offsets and span type must have the same size"):
        _tags([0], [1], [0, 1], [1, 2], [b"a"], _splits(0, 1), _splits(0, 2))
    with pytest.raises(ValueError, match="end within its 1 values"):
        _tags([0], [1], [0], [1], [b"a"], _splits(0, 4), _splits(0, 1))
    with pytest.raises(ValueError, match="Shape must be rank 1"):
        offsets_to_boise_tags(np, np.zeros((1, 1), np.int32), np.zeros(1, np.int32), np.zeros(0, np.int32),
                              np.zeros(0, np.int32), _strings(), *[_splits(0, 0)] * 5, np.bool_(False))
