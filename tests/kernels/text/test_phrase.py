"""PhraseTokenize and TFText>PhraseDetokenize beyond the golden fixtures (tests/fixtures/ops/text/wordpiece/phrase/,
whose fed models these tests reuse): outputs read off TF Text 2.21, sampling (random in TF Text too, so its
properties), and the errors bad models, ids and splits give."""

from __future__ import annotations

import flatbuffers
import numpy as np
import pytest

import kernels
from kernels.text.flatbuffer_models import (
    PhraseTokenizerConfig,
    read_phrase_tokenizer_config,
)
from tests.golden import FIXTURES, load_case

CASES = FIXTURES / "ops" / "text" / "wordpiece" / "phrase"
LONGEST = load_case(CASES / "longest_phrase").feeds["phrase_model:0"]  # prob 0
SHORTEST = load_case(CASES / "shortest_phrase").feeds["phrase_model:0"]  # prob 100
TEXTS = ["i have a dream", "", "  i can't\tdream.", "a\u3000dream", "i have a dreamer", b"ok \xff ok"]


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def tokenize(model, *texts) -> list[list]:
    outs = kernels.lookup("PhraseTokenize", "cpu").bind(np, {})(strings(*texts), model)
    assert [o.dtype for o in outs] == [np.dtype(object), np.dtype(np.int64), np.dtype(np.int64)]
    return [o.tolist() for o in outs]


def detokenize(model, ids, splits) -> list[bytes]:
    (out,) = kernels.lookup("TFText>PhraseDetokenize", "cpu").bind(np, {})(np.array(ids, np.int32),
                                                                             np.array(splits, np.int64), model)
    return out.tolist()


def with_prob(config: PhraseTokenizerConfig, prob: int, *, detokenization: bool = True) -> np.ndarray:
    """`config` written again as a PhraseTokenizerConfig flatbuffer, with another prob."""
    b = flatbuffers.Builder(0)
    unk, whitespace = b.CreateString(config.unk_token), b.CreateString(config.whitespace_config)
    words = [b.CreateString(v) for v in config.vocab_array]
    b.StartVector(4, len(words), 4)
    for w in reversed(words):
        b.PrependUOffsetTRelative(w)
    vocab = b.EndVector()
    nodes = b.CreateNumpyVector(config.trie_nodes)
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, nodes, 0)
    trie = b.EndObject()
    b.StartObject(8)
    b.PrependInt32Slot(0, prob, 0)
    b.PrependUOffsetTRelativeSlot(1, unk, 0)
    b.PrependInt32Slot(2, config.unk_token_id, 0)
    b.PrependBoolSlot(3, detokenization, False)
    b.PrependUOffsetTRelativeSlot(4, vocab, 0)
    b.PrependUOffsetTRelativeSlot(5, trie, 0)
    b.PrependUOffsetTRelativeSlot(6, whitespace, 0)
    b.PrependBoolSlot(7, config.split_end_punctuation, False)
    b.Finish(b.EndObject())
    return np.frombuffer(bytes(b.Output()), np.uint8)


def test_the_longest_phrase_ending_at_a_word_boundary():
    # "a\u3000dream": TF Text ends the word "a" one byte into the 3-byte ideographic space, so it is unknown.
    assert tokenize(LONGEST, *TEXTS) == [
        [b"i have a", b"dream", b"i", b"<UNK>", b"<UNK>", b"<UNK>", b"dream", b"i have a", b"<UNK>", b"ok", b"<UNK>",
         b"ok"],
        [6, 4, 1, 0, 0, 0, 4, 6, 0, 12, 0, 12],
        [0, 2, 2, 5, 7, 9, 12]]


def test_prob_100_takes_the_shortest_phrase():
    assert tokenize(SHORTEST, *TEXTS) == [
        [b"i", b"have", b"a", b"dream", b"i", b"<UNK>", b"<UNK>", b"<UNK>", b"dream", b"i", b"have", b"a", b"<UNK>",
         b"ok", b"<UNK>", b"ok"],
        [1, 2, 3, 4, 1, 0, 0, 0, 4, 1, 2, 3, 0, 12, 0, 12],
        [0, 4, 4, 7, 9, 13, 16]]


def test_prob_50_samples_among_the_matching_phrases():
    model = with_prob(read_phrase_tokenizer_config(LONGEST.tobytes()), 50)
    seen = {tuple(tokenize(model, "i have a dream")[0]) for _ in range(200)}
    # "i", then "i have a" (the longest when "i" is not taken); "a", then "a dream".
    assert seen == {(b"i", b"have", b"a", b"dream"), (b"i", b"have", b"a dream"), (b"i have a", b"dream")}


def test_detokenize():
    assert detokenize(LONGEST, [1, 2, 5, 0], [0, 3, 4]) == [b"i have a dream", b"<UNK>"]
    assert detokenize(LONGEST, [], [0, 0]) == [b""]


def test_detokenize_errors():
    with pytest.raises(ValueError, match="Token ID out of bounds: 99"):
        detokenize(LONGEST, [1, 99], [0, 2])
    with pytest.raises(ValueError, match="input_row_splits"):
        detokenize(LONGEST, [1, 2], [0, 3])
    model = with_prob(read_phrase_tokenizer_config(LONGEST.tobytes()), 0, detokenization=False)
    with pytest.raises(ValueError, match="support_detokenization"):
        detokenize(model, [1], [0, 1])


def test_a_model_without_its_trie():
    b = flatbuffers.Builder(0)
    b.StartObject(8)
    b.PrependInt32Slot(2, 0, 0)
    b.Finish(b.EndObject())
    with pytest.raises(ValueError, match="PhraseTokenizerConfig has no vocab_trie"):
        tokenize(np.frombuffer(bytes(b.Output()), np.uint8), "i")
