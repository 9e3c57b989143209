"""PhraseTokenize and TFText>PhraseDetokenize: TF Text's PhraseTokenizer (text.PhraseTokenizer), run on the
model flatbuffer the Python API builds, as phrase_tokenizer.cc defines it.

The input is split on the model's whitespace (a bitmap of code points) and the words joined with single
spaces; with split_end_punctuation a word ending in "'t", "'s", ".", ",", "!", "?", "'m", "'re", "'ll",
"'d" or "'ve" has that ending split off as a word of its own. Then, left to right, the longest vocabulary
phrase that ends at a word boundary is taken (sentencepiece's double-array trie holds the phrases, ids as
values); a position where none matches gives the unknown token for its word. With `prob` > 0 each
matching phrase, shortest first, is instead taken with probability prob/100: a random choice in TF Text
too, made here with numpy's generator (prob >= 100 always takes the shortest).

A quirk of TF Text kept: a whitespace character ends the word before it one byte after its own start (so
a word before a multi-byte whitespace keeps that character's other bytes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import kernel
from kernels.strings.tensors import string_array
from kernels.text.bert_chars import flat_texts, u8_next
from kernels.text.flatbuffer_models import (
    PhraseTokenizerConfig,
    cached_model,
    detokenize_rows,
    read_phrase_tokenizer_config,
    vector,
)

__all__ = ["PhraseTokenizer", "phrase_detokenize", "phrase_tokenize"]

_SPECIAL_ENDINGS = (b"'t", b"'s", b".", b",", b"!", b"?", b"'m", b"'re", b"'ll", b"'d", b"'ve")


class PhraseTokenizer:
    """A decoded PhraseTokenizerConfig.

        >>> PhraseTokenizer(read_phrase_tokenizer_config(model)).tokenize(b"I have a dream", rng)
        ([b'I have a', b'dream'], [5, 3])
    """

    def __init__(self, config: PhraseTokenizerConfig):
        self.config = config
        self.nodes = config.trie_nodes.tolist()
        self.whitespace = config.whitespace_config
        self.prob = config.prob / 100

    def _is_whitespace(self, cp: int) -> bool:
        """WhitespaceTokenizerConfig::IsWhitespace."""
        return 0 <= cp < len(self.whitespace) * 8 and bool(self.whitespace[cp >> 3] & (1 << (cp & 7)))

    def words(self, text: bytes) -> list[bytes]:
        """WhitespaceTokenizer::Tokenize."""
        words = []
        position, size = 0, len(text)
        start = -1
        while position < size:
            before = position
            cp, position = u8_next(text, position, size)
            if self._is_whitespace(cp):
                if start >= 0:
                    # NOTE: TF Text ends the word one byte into the whitespace, whatever its length.
                    words.append(text[start:position - 1])
                    start = -1
            elif start < 0:
                start = before
        if start >= 0:
            words.append(text[start:position])
        return words

    def _prefix_matches(self, text: bytes, start: int) -> list[tuple[int, int]]:
        """DoubleArrayTrie::IteratePrefixMatches from `start`: (id, length), shortest first."""
        nodes = self.nodes
        if not nodes:
            return []
        size = len(nodes)
        matches = []
        unit = nodes[0]
        pos = (unit >> 10) << ((unit & 0x200) >> 6)
        for i in range(start, len(text)):
            byte = text[i]
            pos ^= byte
            if pos >= size or nodes[pos] & 0x800000FF != byte:
                return matches
            unit = nodes[pos]
            pos ^= (unit >> 10) << ((unit & 0x200) >> 6)
            if pos >= size:
                return matches
            if unit & 0x100:
                matches.append((nodes[pos] & 0x7FFFFFFF, i + 1 - start))
        return matches

    def _lookup(self, text: bytes, start: int, rng: np.random.Generator) -> tuple[int, int] | None:
        """PhraseLookup: the (id, length) of the phrase taken at `start`, or None."""
        found = None
        for token_id, length in self._prefix_matches(text, start):
            end = start + length
            if end < len(text) and text[end] != 0x20:
                continue  # the phrase would split a word
            found = (token_id, length)
            if self.prob > 0 and (self.prob >= 1 or rng.random() < self.prob):
                break
        return found

    def tokenize(self, text: bytes, rng: np.random.Generator) -> tuple[list[bytes], list[int]]:
        words = self.words(text)
        if self.config.split_end_punctuation:
            words = [_split_ending(w) for w in words]
        joined = b" ".join(words)
        pieces, ids = [], []
        index = 0
        while index < len(joined):
            found = self._lookup(joined, index, rng)
            if found is None:
                pieces.append(self.config.unk_token)
                ids.append(self.config.unk_token_id)
                space = joined.find(b" ", index)
                if space < 0:
                    break
                index = space + 1
            else:
                token_id, length = found
                pieces.append(joined[index:index + length])
                ids.append(token_id)
                index += length + 1
        return pieces, ids

    def detokenize(self, ids: list[int]) -> bytes:
        config = self.config
        if not config.support_detokenization:
            raise ValueError("Detokenize function is only enabled when support_detokenization is true in the "
                             "config flatbuffer. Please rebuild the model flatbuffer by setting "
                             "support_detokenization=true.")
        if config.vocab_array is None:
            raise ValueError("Missing vocab_array in config.")
        tokens = []
        for token_id in ids:
            if token_id < 0 or token_id >= len(config.vocab_array):
                raise ValueError(f"Token ID out of bounds: {token_id}")
            tokens.append(config.vocab_array[token_id])
        if not config.split_end_punctuation:
            return b" ".join(tokens)
        result = b""
        for token in tokens:
            result += token if token in _SPECIAL_ENDINGS else (b" " if result else b"") + token
        return result


def _split_ending(word: bytes) -> bytes:
    for ending in _SPECIAL_ENDINGS:
        if word.endswith(ending):
            return word[:len(word) - len(ending)] + b" " + ending
    return word


def _model(phrase_model: Any) -> PhraseTokenizer:
    return cached_model(phrase_model, "phrase_model", "phrase",
                        lambda data: PhraseTokenizer(read_phrase_tokenizer_config(data)))



@kernel("PhraseTokenize", devices=("cpu",), outputs=3, stateful=True)
def phrase_tokenize(xp: Any, input_values: Any, phrase_model: Any) -> tuple:
    """Each string's phrases and their ids, flattened, with row splits."""
    texts = flat_texts(vector(input_values, "input_values"))
    tokenizer = _model(phrase_model)
    rng = np.random.default_rng()
    pieces: list[bytes] = []
    ids: list[int] = []
    splits = [0]
    for text in texts:
        p, i = tokenizer.tokenize(text, rng)
        pieces += p
        ids += i
        splits.append(len(ids))
    return string_array(pieces), np.array(ids, dtype=np.int64), np.array(splits, dtype=np.int64)


@kernel("TFText>PhraseDetokenize", devices=("cpu",))
def phrase_detokenize(xp: Any, input_values: Any, input_row_splits: Any, phrase_model: Any) -> tuple:
    """Each row of phrase ids (input_row_splits) joined back into text."""
    return (detokenize_rows(input_values, input_row_splits, _model(phrase_model).detokenize),)
