"""WordpieceTokenizeWithOffsets beyond the golden fixtures (tests/fixtures/ops/text/wordpiece/table/): each attr
against outputs read off TF Text 2.21 for one small vocabulary, the table's values (-1 is missing), a mutable
table read afresh on each run, and the errors bad tables give."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels.state.lookup_tables import LookupTable

VOCAB = ["they", "##'", "##re", "the", "great", "##est", "[UNK]", "un", "##aff", "##able", "x", "é", "##é"]
WORDS = ["they're", "the", "greatest", "", "unaffable", "x", "éé", b"the\xff"]
DEFAULTS = {"suffix_indicator": "##", "max_bytes_per_word": 100, "max_chars_per_token": 0, "use_unknown_token": True,
            "unknown_token": "[UNK]", "split_unknown_characters": False}


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def static_table(tokens=VOCAB, missing=("x",)) -> LookupTable:
    table = LookupTable("vocab", np.dtype(object), np.dtype(np.int64))
    table.initialize(strings(*tokens), np.array([-1 if t in missing else i for i, t in enumerate(tokens)]))
    return table


def tokenize(words, table, **attrs) -> list[list]:
    bound = kernels.lookup("WordpieceTokenizeWithOffsets", "cpu").bind(np, DEFAULTS | attrs)
    outs = bound(strings(*words), table)
    assert [o.dtype for o in outs] == [np.dtype(object)] + [np.dtype(np.int64)] * 3
    return [o.tolist() for o in outs]


def test_longest_match_first_with_unknown_words():
    # "x" maps to -1, which TF Text looks up as its default: missing. The ill-formed byte is a character.
    assert tokenize(WORDS, static_table()) == [
        [b"they", b"##'", b"##re", b"the", b"great", b"##est", b"un", b"##aff", b"##able", b"[UNK]", "é".encode(),
         "##é".encode(), b"[UNK]"],
        [3, 1, 2, 0, 3, 1, 2, 1],
        [0, 4, 5, 0, 0, 5, 0, 2, 5, 0, 0, 2, 0],
        [4, 5, 7, 3, 5, 8, 2, 5, 9, 1, 2, 4, 4]]


def test_words_past_max_bytes_end_at_the_unknown_tokens_length():
    assert tokenize(WORDS, static_table(), max_bytes_per_word=5, unknown_token="<unknown>") == [
        [b"<unknown>", b"the", b"<unknown>", b"<unknown>", b"<unknown>", "é".encode(), "##é".encode(), b"<unknown>"],
        [1, 1, 1, 0, 1, 1, 2, 1],
        [0, 0, 0, 0, 0, 0, 2, 0],
        [9, 3, 9, 9, 1, 2, 4, 4]]


def test_split_unknown_characters_without_the_unknown_token():
    assert tokenize(WORDS, static_table(), use_unknown_token=False, split_unknown_characters=True,
                    output_row_partition_type="row_splits") == [
        [b"they", b"##'", b"##re", b"the", b"great", b"##est", b"un", b"##aff", b"##able", b"x", "é".encode(),
         "##é".encode(), b"the", b"##\xff"],
        [0, 3, 4, 6, 6, 9, 10, 12, 14],
        [0, 4, 5, 0, 0, 5, 0, 2, 5, 0, 0, 2, 0, 3],
        [4, 5, 7, 3, 5, 8, 2, 5, 9, 1, 2, 4, 3, 4]]


def test_max_chars_per_token_limits_the_pieces_tried():
    assert tokenize(WORDS, static_table(), max_chars_per_token=2) == [
        [b"[UNK]", b"[UNK]", b"[UNK]", b"[UNK]", b"[UNK]", "é".encode(), "##é".encode(), b"[UNK]"],
        [1, 1, 1, 0, 1, 1, 2, 1],
        [0, 0, 0, 0, 0, 0, 2, 0],
        [7, 3, 8, 9, 1, 2, 4, 4]]


def test_attrs_do_not_share_tokenized_words():
    table = static_table()
    first = tokenize(["greatest"], table)
    assert tokenize(["greatest"], table, suffix_indicator="@@")[0] == [b"[UNK]"]
    assert tokenize(["greatest"], table) == first


def test_a_mutable_table_is_read_on_each_run():
    table = LookupTable("mutable", np.dtype(object), np.dtype(np.int64), mutable=True)
    table.insert(strings("un", "##a"), np.array([0, 1]))
    assert tokenize(["unaa", "una", "unb"], table) == [
        [b"un", b"##a", b"##a", b"un", b"##a", b"[UNK]"], [3, 2, 1], [0, 2, 3, 0, 2, 0], [2, 3, 4, 2, 3, 3]]
    table.insert(strings("##b"), np.array([2]))
    assert tokenize(["unb"], table)[0] == [b"un", b"##b"]


def test_string_elements_count_as_their_utf8_bytes():
    words = np.array(["they're", "é"], dtype=object)
    bound = kernels.lookup("WordpieceTokenizeWithOffsets", "cpu").bind(np, DEFAULTS)
    assert bound(words, static_table())[0].tolist() == [b"they", b"##'", b"##re", "é".encode()]


def test_a_table_not_initialized():
    table = LookupTable("vocab", np.dtype(object), np.dtype(np.int64))
    with pytest.raises(ValueError, match="Table not initialized"):
        tokenize(["a"], table)


@pytest.mark.parametrize("key_dtype, value_dtype", [(np.int64, np.int64), (object, object), (object, np.int32)])
def test_a_table_of_other_types(key_dtype, value_dtype):
    table = LookupTable("ints", np.dtype(key_dtype), np.dtype(value_dtype))
    with pytest.raises(TypeError, match="table from string to int64"):
        tokenize(["a"], table)


def test_a_handle_that_is_not_a_table():
    with pytest.raises(TypeError, match="lookup table handle"):
        tokenize(["a"], np.array(b"vocab", dtype=object))


def test_an_unknown_row_partition_type_is_refused_at_binding():
    with pytest.raises(ValueError, match="output_row_partition_type"):
        kernels.lookup("WordpieceTokenizeWithOffsets", "cpu").bind(
            np, DEFAULTS | {"output_row_partition_type": "value_rowids"})
