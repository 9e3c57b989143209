"""SplitMergeTokenizeWithOffsets and RougeL beyond the golden fixtures: bytes that are not UTF-8, and the
errors bad inputs get."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.text.rouge import rouge_l
from kernels.text.split_merge import split_merge_tokenize_with_offsets


def _strings(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def test_characters_are_cut_by_their_lead_byte():
    """A stray continuation byte is a character of its own, as the kernel's OneCharLen cuts them (not
    whitespace); a string that ends inside a sequence is an error, where TF Text reads past its end."""
    tokens, splits, begins, ends = split_merge_tokenize_with_offsets(
        np, _strings(b"a\x80b\xe6\x97\xa5"), np.zeros(4, np.int32), np.array([0, 4], np.int32))
    assert tokens.tolist() == [b"a", b"\x80", b"b", "日".encode()]
    assert begins.tolist() == [0, 1, 2, 3] and ends.tolist() == [1, 2, 3, 6] and splits.tolist() == [0, 4]
    with pytest.raises(ValueError, match="ends inside a UTF-8 sequence"):
        split_merge_tokenize_with_offsets(np, _strings(b"ab\xe6\x97"), np.zeros(3, np.int32), np.array([0, 3], np.int32))


def test_a_merge_never_reaches_into_the_previous_string():
    tokens, splits, _, _ = split_merge_tokenize_with_offsets(
        np, _strings(b"ab", b"cd"), np.array([0, 1, 1, 1], np.int32), np.array([0, 2, 4], np.int32))
    assert tokens.tolist() == [b"ab", b"cd"] and splits.tolist() == [0, 1, 2]


@pytest.mark.parametrize("labels, splits, message", [
    (np.zeros(2, np.int32), np.array([0, 2], np.int32), "Number of labels 2 is insufficient"),
    (np.zeros(3, np.int32), np.array([0, 3, 4], np.int32), "Expecting row_splits have 2 elements"),
    (np.zeros(3, np.int32), np.array([0, 9], np.int32), "fall outside the 3 labels"),
])
def test_split_merge_errors(labels, splits, message):
    with pytest.raises(ValueError, match=message):
        split_merge_tokenize_with_offsets(np, _strings(b"abc"), labels, splits)


def test_rouge_l_errors():
    words = _strings(b"a", b"b")
    with pytest.raises(ValueError, match="alpha must be <1"):
        rouge_l(np, words, np.array([0, 2]), words, np.array([0, 2]), np.float32(1.5))
    with pytest.raises(ValueError, match="must equal hyp splits len"):
        rouge_l(np, words, np.array([0, 2]), words, np.array([0, 1, 2]), np.float32(0.5))
    with pytest.raises(ValueError, match="non-decreasing"):
        rouge_l(np, words, np.array([0, 5]), words, np.array([0, 2]), np.float32(0.5))


def test_rouge_l_of_empty_rows_is_zero():
    f, p, r = rouge_l(np, _strings(), np.array([0, 0]), _strings(b"x"), np.array([0, 1]), np.float32(0.5))
    assert f.tolist() == [0.0] and p.tolist() == [0.0] and r.tolist() == [0.0]


def test_constrained_sequence_errors_and_dead_ends():
    from kernels.text.constrained_sequence import constrained_sequence

    scores = np.ones((1, 2, 3), np.float32)
    kwargs = {"use_viterbi": True, "use_log_space": True, "use_start_and_end_states": False}
    empty = np.zeros((0, 0))
    with pytest.raises(ValueError, match="too short"):
        constrained_sequence(np, scores, np.array([3]), empty, empty, **kwargs)
    with pytest.raises(ValueError, match="exactly one length"):
        constrained_sequence(np, scores, np.array([1, 1]), empty, empty, **kwargs)
    with pytest.raises(ValueError, match="zeroth dimension of size 3"):
        constrained_sequence(np, scores, np.array([2]), np.ones((4, 4), bool), empty, **kwargs)
    with pytest.raises(ValueError, match="must not contain negative"):
        constrained_sequence(np, scores, np.array([2]), empty, -np.ones((3, 3), np.float32),
                             **{**kwargs, "use_log_space": False})
    # Nothing may follow anything: no path, so every step is -1, as TF Text answers.
    states, splits = constrained_sequence(np, scores, np.array([2]), np.zeros((3, 3), bool), empty, **kwargs)
    assert states.tolist() == [-1, -1] and splits.tolist() == [0, 2]
