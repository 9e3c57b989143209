"""FastWordpieceTokenizeWithOffsets and TFText>FastWordpieceDetokenize beyond the golden fixtures
(tests/fixtures/ops/text/wordpiece/fast/, whose fed models these tests reuse): outputs read off TF Text 2.21,
the per-chunk results end-to-end models reuse against the model run over the whole text, and the errors
bad models, inputs, ids and splits give."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

import kernels
from kernels.text.fast_wordpiece import FastWordpiece
from kernels.text.flatbuffer_models import read_fast_wordpiece_config
from tests.golden import FIXTURES, load_case

CASES = FIXTURES / "ops" / "text" / "wordpiece"


def fed(case: str, name: str) -> np.ndarray:
    return load_case(CASES / case).feeds[f"{name}:0"]


SINGLE_WORDS = fed("fast/single_words", "wp_model")  # no_pretokenization, max_bytes_per_token 30
END_TO_END = fed("fast/end_to_end_words", "wp_model")  # max_bytes_per_token 100
NO_DETOKENIZATION = fed("fast/bert_tokenizer", "wp_model")


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def tokenize(model, *texts) -> list[list]:
    outs = kernels.lookup("FastWordpieceTokenizeWithOffsets", "cpu").bind(np, {})(strings(*texts), model)
    assert [o.dtype for o in outs] == [np.dtype(object)] + [np.dtype(np.int64)] * 4
    return [o.tolist() for o in outs]


def detokenize(model, ids, splits) -> list[bytes]:
    (out,) = kernels.lookup("TFText>FastWordpieceDetokenize", "cpu").bind(np, {})(
        np.array(ids, np.int32), np.array(splits, np.int64), model)
    return out.tolist()


def test_single_words():
    assert tokenize(SINGLE_WORDS, "they're", "greatest", "", "##", "##bc", "x!", "straßeß", "abx") == [
        [b"they", b"##'", b"##re", b"great", b"##est", b"[UNK]", b"##bc", b"[UNK]", "straße".encode(),
         "##ß".encode(), b"ab", b"##x"],
        [6, 7, 8, 4, 5, 0, 32, 0, 36, 37, 30, 34],
        [0, 3, 5, 5, 6, 7, 8, 10, 12],
        [0, 4, 5, 0, 5, 0, 0, 0, 0, 7, 0, 2],
        [4, 5, 7, 5, 8, 2, 4, 2, 7, 9, 2, 3]]


def test_end_to_end_text():
    # Whitespace (an ideographic space among it) ends words, punctuation and CJK are words of their own, '#' is
    # not in the vocabulary, and a word with a character no token has is unknown as a whole.
    assert tokenize(END_TO_END, "They're the greatest!", "", "  ab,c\u3000東京x 😀?", "##bc ##", "aÿb") == [
        [b"[UNK]", b"'", b"re", b"the", b"great", b"##est", b"!", b"ab", b",", b"[UNK]", "東".encode(),
         "京".encode(), b"x", "😀".encode(), b"?", b"[UNK]", b"[UNK]", b"[UNK]", b"[UNK]", b"[UNK]", b"[UNK]"],
        [0, 9, 10, 3, 4, 5, 21, 30, 23, 0, 18, 19, 33, 35, 24, 0, 0, 0, 0, 0, 0],
        [0, 7, 7, 15, 20, 21],
        [0, 4, 5, 8, 12, 17, 20, 2, 4, 5, 9, 12, 15, 17, 21, 0, 1, 2, 5, 6, 0],
        [4, 5, 7, 11, 17, 20, 21, 4, 5, 6, 12, 15, 16, 21, 22, 1, 2, 4, 6, 7, 4]]


def test_end_to_end_ill_formed_bytes_and_words_past_max_bytes_per_token():
    long = "greatest" * 13
    assert tokenize(END_TO_END, b"a\xffb c", long) == [
        [b"[UNK]", b"[UNK]", b"[UNK]"], [0, 0, 0], [0, 2, 3], [0, 4, 0], [3, 5, 104]]


def test_chunks_give_what_the_whole_text_gives():
    """End-to-end models reuse each whitespace-separated chunk's tokens: they must be the tokens the model gives
    walking the whole text at once."""
    model = FastWordpiece(read_fast_wordpiece_config(END_TO_END.tobytes()))
    whole = FastWordpiece(read_fast_wordpiece_config(END_TO_END.tobytes()))
    assert model._by_chunk
    whole._by_chunk = False
    rng = random.Random(7)
    parts = ["the", "great", "##est", "ab", "c", "x", "é", "東京", "😀", "!", ",", "'", "-", " ", "  ", "\t", "\u3000",
             "\xa0", "\u2003", "##", "#", "straße", "zz"]
    for _ in range(300):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12))).encode()
        if rng.random() < 0.1:
            text += b" \xe2\x82 a\xc3"
        assert model.tokenize(text) == whole.tokenize(text), text


def test_the_model_may_be_fed_or_constant():
    first = tokenize(END_TO_END, "the greatest")
    assert tokenize(END_TO_END.copy(), "the greatest") == first
    assert tokenize(END_TO_END, "the greatest") == first


def test_detokenize_joins_suffix_tokens_to_the_word_before():
    assert detokenize(SINGLE_WORDS, [6, 7, 8, 3, 4, 5, 26], [0, 3, 3, 7]) == [b"they're", b"", b"the greatests"]


def test_detokenize_needs_a_model_built_for_it():
    with pytest.raises(ValueError, match="support_detokenization"):
        detokenize(NO_DETOKENIZATION, [3], [0, 1])


@pytest.mark.parametrize("ids", [[-1], [40]])
def test_detokenize_ids_out_of_bounds(ids):
    with pytest.raises(ValueError, match=f"Token ID out of bounds: {ids[0]}"):
        detokenize(SINGLE_WORDS, ids, [0, 1])


@pytest.mark.parametrize("splits", [[0, 2, 1], [0, 4], [1, 0]])
def test_detokenize_bad_row_splits(splits):
    with pytest.raises(ValueError, match="input_row_splits"):
        detokenize(SINGLE_WORDS, [3, 4, 5], splits)


def test_input_must_be_a_vector():
    bound = kernels.lookup("FastWordpieceTokenizeWithOffsets", "cpu").bind(np, {})
    with pytest.raises(ValueError, match=r"input_values must be a vector, got shape \[1,1\]"):
        bound(strings("a").reshape(1, 1), SINGLE_WORDS)


@pytest.mark.parametrize("model, error, match", [
    (np.zeros(3, np.uint8), ValueError, "too short"),
    (np.frombuffer(b"\xff" * 64, np.uint8), ValueError, "not a valid FastWordpieceTokenizerConfig"),
    (SINGLE_WORDS[:200], ValueError, "not a valid FastWordpieceTokenizerConfig"),
    (SINGLE_WORDS.astype(np.int32), TypeError, "wp_model must be a uint8 tensor"),
    (SINGLE_WORDS.reshape(1, -1), ValueError, "wp_model must be a vector"),
])
def test_malformed_models(model, error, match):
    with pytest.raises(error, match=match):
        tokenize(model, "greatest")


def test_failure_links_that_loop_are_a_malformed_model():
    config = read_fast_wordpiece_config(SINGLE_WORDS.tobytes())
    looping = np.where(config.failure_links == 0xFFFFFFFF, config.failure_links,
                       np.arange(config.failure_links.size, dtype=np.uint32))
    model = FastWordpiece(dataclasses.replace(config, failure_links=looping))
    with pytest.raises(ValueError, match="run past the text"):
        model.tokenize(b"greatest")


def test_an_empty_batch():
    assert tokenize(END_TO_END) == tokenize(SINGLE_WORDS) == [[], [], [0], [], []]
    assert tokenize(END_TO_END, "a\nb", "", "\n") == [[b"a", b"[UNK]"], [27, 0], [0, 2, 2, 2], [0, 2], [1, 3]]
