"""StringSplit, StringSplitV2 and StringNGrams against outputs read off TensorFlow 2.21, errors included.
tests/fixtures/ops/strings/split/ and ngrams/ hold more."""

from __future__ import annotations

import numpy as np
import pytest


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def scalar(value: str) -> np.ndarray:
    return np.array(value.encode(), dtype=object)


def rows(indices, values) -> dict[int, list[bytes]]:
    """The sparse output as {row: tokens}, checking positions run 0, 1, ... in each row."""
    out: dict[int, list[bytes]] = {}
    for (row, position), value in zip(indices.tolist(), values.tolist()):
        assert position == len(out.setdefault(row, []))
        out[row].append(value)
    return out


def test_string_split_by_byte_set(run_kernel):
    indices, values, shape = run_kernel("StringSplit", strings("a,b,,c", "", ",,", "x;y,z"), scalar(",;"))
    assert indices.dtype == np.int64 and values.dtype == object and shape.dtype == np.int64
    assert rows(indices, values) == {0: [b"a", b"b", b"c"], 3: [b"x", b"y", b"z"]}
    assert shape.tolist() == [4, 3]


def test_string_split_keeping_empty_tokens(run_kernel):
    indices, values, shape = run_kernel("StringSplit", strings("a,b,,c", "", ",,", "x;y,z"), scalar(",;"),
                                        skip_empty=False)
    # An empty string has no tokens even then.
    assert rows(indices, values) == {0: [b"a", b"b", b"", b"c"], 2: [b"", b"", b""], 3: [b"x", b"y", b"z"]}
    assert shape.tolist() == [4, 4]


def test_string_split_with_empty_delimiter_gives_bytes(run_kernel):
    indices, values, shape = run_kernel("StringSplit", strings("ab", "", "h\u00e9"), scalar(""))
    assert rows(indices, values) == {0: [b"a", b"b"], 2: [b"h", b"\xc3", b"\xa9"]}
    assert shape.tolist() == [3, 3]


def test_string_split_of_an_empty_batch(run_kernel):
    indices, values, shape = run_kernel("StringSplit", strings(), scalar(","))
    assert indices.shape == (0, 2) and values.shape == (0,) and shape.tolist() == [0, 0]


V2_CASES = [
    pytest.param(["  a  b\tc\n", "", "   ", "x\x0by\x0cz\rw\u0085q"], "", -1,
                 {0: [b"a", b"b", b"c"], 3: [b"x", b"y", b"z", b"w\xc2\x85q"]}, [4, 4], id="whitespace"),
    pytest.param(["  a  b\tc\n", "x y z"], "", 1, {0: [b"a", b"b\tc\n"], 1: [b"x", b"y z"]}, [2, 2],
                 id="whitespace-maxsplit"),
    pytest.param(["a b  "], "", 2, {0: [b"a", b"b", b""]}, [1, 3], id="whitespace-maxsplit-keeps-empty-rest"),
    pytest.param(["a,,b,", "", ",", "abc"], ",", -1, {0: [b"a", b"", b"b", b""], 1: [b""], 2: [b"", b""], 3: [b"abc"]},
                 [4, 4], id="separator"),
    pytest.param(["a<>b<><>c", "<>"], "<>", 2, {0: [b"a", b"b", b"<>c"], 1: [b"", b""]}, [2, 3],
                 id="separator-maxsplit"),
    pytest.param(["a,b", "  "], ",", 0, {0: [b"a,b"], 1: [b"  "]}, [2, 1], id="maxsplit-zero"),
    pytest.param(["a b", ""], "", 0, {0: [b"a b"], 1: [b""]}, [2, 1], id="maxsplit-zero-whitespace"),
]


@pytest.mark.parametrize("texts, sep, maxsplit, expected, shape", V2_CASES)
def test_string_split_v2(run_kernel, texts, sep, maxsplit, expected, shape):
    indices, values, dense_shape = run_kernel("StringSplitV2", strings(*texts), scalar(sep), maxsplit=maxsplit)
    assert rows(indices, values) == expected
    assert dense_shape.tolist() == shape


def ngrams(run_kernel, data, splits, **attrs):
    defaults = dict(separator=" ", ngram_widths=(2,), left_pad="<", right_pad=">", pad_width=0,
                    preserve_short_sequences=False)
    return run_kernel("StringNGrams", strings(*data), np.asarray(splits), **{**defaults, **attrs})


NGRAM_CASES = [
    pytest.param(np.array([0, 2, 5], np.int64), {}, [b"a b", b"c d", b"d e"], [0, 1, 3], id="bigrams"),
    pytest.param(np.array([0, 2, 5], np.int64), {"ngram_widths": (3,), "pad_width": -1},
                 [b"< < a", b"< a b", b"a b >", b"b > >", b"< < c", b"< c d", b"c d e", b"d e >", b"e > >"], [0, 4, 9],
                 id="padded-by-width-minus-one"),
    pytest.param(np.array([0, 1, 5], np.int32), {"ngram_widths": (1, 3), "pad_width": 1},
                 [b"a", b"< a >", b"b", b"c", b"d", b"e", b"< b c", b"b c d", b"c d e", b"d e >"], [0, 2, 10],
                 id="two-widths-padded-by-one"),
    pytest.param(np.array([0, 1, 5], np.int32), {"ngram_widths": (6,)}, [], [0, 0, 0], id="wider-than-rows"),
    pytest.param(np.array([0, 1, 5], np.int32), {"ngram_widths": (6,), "preserve_short_sequences": True},
                 [b"a", b"b c d e"], [0, 1, 2], id="wider-than-rows-preserved"),
    pytest.param(np.array([0, 1, 5], np.int32), {"ngram_widths": (6,), "preserve_short_sequences": True,
                                                  "pad_width": 1},
                 [b"< a >", b"< b c d e >"], [0, 1, 2], id="preserved-and-padded"),
    pytest.param(np.array([0, 0, 5, 5], np.int32), {"ngram_widths": (), "preserve_short_sequences": True,
                                                     "separator": "+"},
                 [b"a+b+c+d+e"], [0, 0, 1, 1], id="no-widths-preserved-empty-rows-skipped"),
    pytest.param(np.array([0, 5], np.int64), {"ngram_widths": (2, 3), "separator": "", "left_pad": "",
                                               "right_pad": "", "pad_width": 2},
                 [b"a", b"ab", b"bc", b"cd", b"de", b"e", b"a", b"ab", b"abc", b"bcd", b"cde", b"de", b"e"], [0, 13],
                 id="empty-pads-and-separator"),
]


@pytest.mark.parametrize("splits, attrs, expected, expected_splits", NGRAM_CASES)
def test_string_ngrams(run_kernel, splits, attrs, expected, expected_splits):
    out, out_splits = ngrams(run_kernel, "abcde", splits, **attrs)
    assert out.tolist() == expected
    assert out_splits.dtype == splits.dtype and out_splits.tolist() == expected_splits


def test_ngrams_of_one_token_padded_by_three(run_kernel):
    out, out_splits = ngrams(run_kernel, "a", np.array([0, 1], np.int32), ngram_widths=(4,), pad_width=3)
    assert out.tolist() == [b"< < < a", b"< < a >", b"< a > >", b"a > > >"] and out_splits.tolist() == [0, 4]


def test_ngrams_of_an_empty_row_padded_are_pads_only(run_kernel):
    out, out_splits = ngrams(run_kernel, "abc", np.array([0, 0, 3], np.int64), ngram_widths=(3,), pad_width=-1)
    assert out.tolist()[:2] == [b"< < >", b"< > >"] and out_splits.tolist()[:2] == [0, 2]


def test_ngrams_without_data_or_splits(run_kernel):
    out, out_splits = ngrams(run_kernel, "", np.array([0, 0, 0], np.int32))
    assert out.shape == (0,) and out_splits.tolist() == [0, 0, 0]
    # NOTE: with no splits at all TensorFlow returns empty strings in the data's shape.
    out, out_splits = ngrams(run_kernel, "abcde", np.zeros([0], np.int32))
    assert out.tolist() == [b""] * 5 and out_splits.shape == (0,)


ERRORS = [
    pytest.param("StringSplit", [strings("a").reshape(1, 1), scalar(",")], {},
                 r"input must be a vector, got shape: \[1,1\]", id="split-matrix"),
    pytest.param("StringSplit", [strings("a"), strings(",")], {}, r"delimiter must be a scalar, got shape: \[1\]",
                 id="split-vector-delimiter"),
    pytest.param("StringSplitV2", [scalar("a b"), scalar("")], {}, r"input must be a vector, got shape: \[\]",
                 id="v2-scalar"),
    pytest.param("StringSplitV2", [strings("a"), strings(",")], {}, r"sep must be a scalar, got shape: \[1\]",
                 id="v2-vector-sep"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", ERRORS)
def test_split_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)


NGRAM_ERRORS = [
    pytest.param([1, 5], {}, "First split value must be 0, got 1", id="first-split"),
    pytest.param([0, 3, 2, 5], {}, r"Invalid split value 2, must be in \[3, 5\]", id="decreasing-split"),
    pytest.param([0, 3], {}, "Last split value must be data size. Expected 5, got 3", id="last-split"),
    pytest.param([0, 5], {"ngram_widths": (2, 0)}, "ngram_widths must contain positive values", id="zero-width"),
    pytest.param([0, 5], {"ngram_widths": (2**31 - 1,), "pad_width": 2**30},
                 "Pad width could lead to integer overflow, got pad_width = 1073741824", id="overflow"),
    pytest.param([0, 0, 5, 5], {"ngram_widths": (), "preserve_short_sequences": True, "pad_width": -1},
                 "Pad width should be >= 0 when preserve_short_sequences is True and ngram_widths are not provided, "
                 "got -1", id="preserve-without-widths-needs-pad"),
]


@pytest.mark.parametrize("splits, attrs, message", NGRAM_ERRORS)
def test_ngram_errors(run_kernel, splits, attrs, message):
    with pytest.raises(ValueError, match=message):
        ngrams(run_kernel, "abcde", np.array(splits, np.int64), **attrs)
