"""The pieces TF Text's model-driven ops share: reading their flatbuffer models (fields, absent fields, decoding
once per model), the darts-clone trie inside them, and the UTF-8 stepping and character classes of BERT."""

from __future__ import annotations

import flatbuffers
import numpy as np
import pytest

from kernels.text.bert_chars import (
    has_multibyte_whitespace,
    is_punctuation_or_cjk,
    is_whitespace,
    non_whitespace_chunks,
    utf8_steps,
)
from kernels.text.darts_trie import DartsTrie
from kernels.text.flatbuffer_models import (
    cached_model,
    read_fast_bert_normalizer_model,
    read_fast_wordpiece_config,
)
from tests.golden import FIXTURES, load_case

CASES = FIXTURES / "ops" / "text" / "wordpiece"
SINGLE_WORDS = load_case(CASES / "fast" / "single_words").feeds["wp_model:0"]
END_TO_END = load_case(CASES / "fast" / "end_to_end").feeds["wp_model:0"]


def test_fast_wordpiece_config_fields():
    config = read_fast_wordpiece_config(SINGLE_WORDS.tobytes())
    assert (config.suffix_indicator, config.unk_token, config.unk_token_id) == (b"##", b"[UNK]", 0)
    assert (config.max_bytes_per_token, config.end_to_end, config.support_detokenization) == (30, False, True)
    assert config.vocab_array[:3] == (b"[UNK]", b"[CLS]", b"[SEP]") and config.vocab_is_suffix_array[5]
    assert config.failure_links.size == config.failure_pops.size == config.trie_array.size
    e2e = read_fast_wordpiece_config(END_TO_END.tobytes())
    assert (e2e.end_to_end, e2e.max_bytes_per_token) == (True, 16)
    assert e2e.trie_punct_failure_link_node != 0


def test_a_model_without_a_required_field():
    b = flatbuffers.Builder(0)
    suffix = b.CreateString("##")
    b.StartObject(14)
    b.PrependUOffsetTRelativeSlot(5, suffix, 0)
    b.Finish(b.EndObject())
    with pytest.raises(ValueError, match="FastWordpieceTokenizerConfig has no failure_struct_array"):
        read_fast_wordpiece_config(bytes(b.Output()))


def test_a_vector_past_the_buffer():
    data = bytearray(load_case(CASES / "normalize" / "controls_only").feeds["model:0"].tobytes())
    model = read_fast_bert_normalizer_model(bytes(data))
    assert model.trie_array.size > 0 and model.normalized_string_pool
    with pytest.raises(ValueError, match="not a valid FastBertNormalizerModel"):
        read_fast_bert_normalizer_model(bytes(data[:len(data) // 2]))


def test_models_are_decoded_once_per_array_and_per_content():
    calls = []

    def build(data: bytes) -> object:
        calls.append(data)
        return object()

    first = cached_model(SINGLE_WORDS, "m", "test", build)
    assert cached_model(SINGLE_WORDS, "m", "test", build) is first
    assert cached_model(SINGLE_WORDS.copy(), "m", "test", build) is first
    assert cached_model(END_TO_END, "m", "test", build) is not first
    assert len(calls) == 2


def test_darts_trie_walks_and_values():
    trie = DartsTrie(read_fast_wordpiece_config(SINGLE_WORDS.tobytes()).trie_array)
    node = trie.walk(DartsTrie.ROOT, b"great")
    assert node > 0 and trie.value(node) is not None
    assert trie.walk(DartsTrie.ROOT, b"gr") > 0 and trie.value(trie.walk(DartsTrie.ROOT, b"gr")) is None
    assert trie.walk(DartsTrie.ROOT, b"qqq") == -1 and trie.lookup(b"qqq") is None
    assert (trie.walk_all(np.array([DartsTrie.ROOT, node]), b"gr") >= 0).tolist() == [True, False]


def test_a_trie_that_points_past_its_units():
    # The root's offset (unit >> 10) sends every child far past the array's two units.
    with pytest.raises(ValueError, match="past its 2 units"):
        DartsTrie(np.array([0xFFFF << 10, 0], np.uint32)).walk(DartsTrie.ROOT, b"a")


def test_utf8_steps_are_icus():
    assert utf8_steps("aé東😀".encode()) == [(0, 1, 97), (1, 3, 0xE9), (3, 6, 0x6771), (6, 10, 0x1F600)]
    # Each maximal ill-formed subsequence is one character, -1: a truncated sequence, a surrogate's three bytes
    # one at a time (ED A0 is not a valid start), a lone continuation byte, an overlong lead.
    assert utf8_steps(b"\xe2\x82(\xed\xa0\x80\x80\xc0\xaf") == [
        (0, 2, -1), (2, 3, 40), (3, 4, -1), (4, 5, -1), (5, 6, -1), (6, 7, -1), (7, 8, -1), (8, 9, -1)]
    assert utf8_steps(b"\xf0\x9f\x98") == [(0, 3, -1)]


def test_bert_character_classes():
    assert all(map(is_whitespace, [0x20, 0x09, 0x0A, 0x85, 0xA0, 0x3000, 0x2028]))
    assert not any(map(is_whitespace, [0x1C, 0x200B, ord("a"), -1]))
    assert all(map(is_punctuation_or_cjk, map(ord, "!$+<^`~。「中\u4e00\U00020000")))
    assert not any(map(is_punctuation_or_cjk, [ord("a"), ord("é"), 0x1F600, ord(" "), -1]))


def test_non_whitespace_chunks():
    text = "a b\u3000c\xa0\xc2d\u2000".encode() + b"\xe2 \xe2\x80\x80y"
    assert list(non_whitespace_chunks(text)) == [(0, b"a"), (2, b"b"), (6, b"c"), (9, "\xc2d".encode()),
                                                 (15, b"\xe2"), (20, b"y")]
    assert list(non_whitespace_chunks(b"")) == [] and list(non_whitespace_chunks(b" \t")) == []
    assert has_multibyte_whitespace("a\xa0".encode()) and has_multibyte_whitespace(b"\xe2\xe3\x80\x80")
    assert not has_multibyte_whitespace(b"a \t\xc2\xe2\x80 \x80") and not has_multibyte_whitespace("é東".encode())
