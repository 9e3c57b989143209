"""TFText>RoundRobinTrim / RoundRobinGenerateMasks and TFText>NgramsStringJoin beyond the golden fixtures: the
trimmer's arithmetic on many shapes, and the errors bad inputs get."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels.text.ngrams import ngrams_string_join
from kernels.text.trimmers import kept_counts, round_robin_generate_masks, round_robin_trim


@pytest.mark.parametrize("sizes", [s for n in (1, 2, 3) for s in itertools.product(range(6), repeat=n)])
def test_kept_counts_fill_the_budget_fairly(sizes):
    for limit in range(14):
        kept = kept_counts(list(sizes), limit)
        assert all(0 <= k <= s for k, s in zip(kept, sizes))
        assert sum(kept) == min(limit, sum(sizes))  # every value the budget allows is kept
        # Round robin: a segment is only cut while a shorter share went to another cut segment.
        cut = [k for k, s in zip(kept, sizes) if k < s]
        assert not cut or max(kept) - min(cut) <= 1 or all(k == s for k, s in zip(kept, sizes) if k > min(cut))


def test_trim_and_masks_agree():
    a, b = np.array([1, 2, 3, 4, 5, 6]), np.array([7, 8, 9])
    sa, sb = np.array([0, 4, 4, 6], np.int32), np.array([0, 1, 3, 3], np.int32)
    values_a, values_b, splits_a, splits_b = round_robin_trim(np, np.int32(3), a, b, sa, sb, N=2)
    mask_a, mask_b = round_robin_generate_masks(np, np.int32(3), a, b, sa, sb, N=2)
    np.testing.assert_array_equal(values_a, a[mask_a])
    np.testing.assert_array_equal(values_b, b[mask_b])
    assert splits_a.dtype == np.int32 and splits_a.tolist() == [0, 2, 2, 4]  # rows (4, 1), (0, 2), (2, 0)
    assert splits_b.tolist() == [0, 1, 3, 3]


def test_empty_batch():
    out = round_robin_trim(np, np.int32(5), np.zeros(0, np.int64), np.array([0], np.int64), N=1)
    assert out[0].shape == (0,) and out[1].tolist() == [0]


@pytest.mark.parametrize("splits, message", [
    (np.array([0, 9]), "end within"), (np.array([1, 2]), "start at 0"), (np.array([0, 2, 1]), "never decrease"),
])
def test_bad_row_splits_are_errors(splits, message):
    with pytest.raises(ValueError, match=message):
        round_robin_trim(np, np.int32(2), np.arange(3), splits, N=1)


def test_segments_with_different_batch_sizes_are_an_error():
    with pytest.raises(ValueError, match="describe 1 rows"):
        round_robin_trim(np, np.int32(2), np.arange(3), np.arange(2), np.array([0, 1, 3]), np.array([0, 2]), N=2)


def test_max_sequence_length_must_be_a_scalar():
    with pytest.raises(ValueError, match="Shape must be a scalar"):
        round_robin_trim(np, np.array([2], np.int32), np.arange(3), np.array([0, 3]), N=1)


def test_ngrams_errors():
    words = np.array([b"a", b"b"], dtype=object)
    with pytest.raises(ValueError, match="axis != -1"):
        ngrams_string_join(np, words, np.array([0, 2]), width=2, axis=0, string_separator=" ", RAGGED_RANK=1)
    with pytest.raises(ValueError, match="width"):
        ngrams_string_join(np, words, np.array([0, 2]), width=0, axis=-1, string_separator=" ", RAGGED_RANK=1)
    with pytest.raises(ValueError, match="innermost row_splits"):
        ngrams_string_join(np, words, np.array([0, 5]), width=2, axis=-1, string_separator=" ", RAGGED_RANK=1)


def test_ngrams_keep_outer_splits_and_count_inner_rows():
    words = np.array([b"a", b"b", b"c", b"d", b"e"], dtype=object)
    values, outer, inner = ngrams_string_join(np, words, np.array([0, 1, 3]), np.array([0, 3, 3, 5]), width=2,
                                              axis=-1, string_separator="", RAGGED_RANK=2)
    assert values.tolist() == [b"ab", b"bc", b"de"] and outer.tolist() == [0, 1, 3] and inner.tolist() == [0, 2, 2, 3]


def test_the_batch_arithmetic_is_the_row_by_row_one():
    """The trimmer computes every row at once (kernels.text.trimmers._kept_per_row); it must equal TF Text's
    loop, row by row (kept_counts), on random rows."""
    from kernels.text.trimmers import _kept_per_row

    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 4):
        lengths = rng.integers(0, 9, (400, n))
        for limit in (-1, 0, 1, 5, 9, 17, 40):
            want = [kept_counts(row, limit) for row in lengths.tolist()]
            assert _kept_per_row(lengths, limit).tolist() == want, (n, limit)
