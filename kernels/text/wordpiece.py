"""WordpieceTokenizeWithOffsets: TF Text's WordPiece over a vocabulary lookup table (text.WordpieceTokenizer,
and text.BertTokenizer after its basic tokenization), as wordpiece_tokenizer.cc defines it.

Each input is one word. From its start, the longest prefix in the vocabulary is a piece; the rest of the
word continues the same way, each later piece looked up (and output) with the suffix indicator in front.
Prefixes are whole characters (ICU's U8_NEXT: an ill-formed sequence is one character), at most
max_chars_per_token of them when that is positive. A word where some position has no matching piece
becomes one piece spanning the word: the unknown token with use_unknown_token, else the word itself; with
split_unknown_characters, an unmatched character is instead a piece of its own (the unknown token, or the
character, with the suffix indicator after the word's start). A word longer than max_bytes_per_word bytes
is one piece too, the unknown token (whose end offset TF Text gives as the unknown token's length) or the
word. Offsets are bytes into the word.

A string is in the vocabulary when the table maps it to a value other than -1 (the default TF Text looks
up with). Static tables cannot change once initialized, so their vocabulary and the words already
tokenized with each set of attrs are kept; a mutable table is read again on each run.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Literal

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.registry import kernel
from kernels.state.lookup_tables import LookupTable
from kernels.strings.tensors import as_bytes
from kernels.text.bert_chars import flat_texts, utf8_steps
from kernels.text.token_cache import TokenCache

__all__ = ["wordpiece_tokenize", "wordpiece_tokenize_with_offsets"]

_OUT_OF_VOCABULARY = -1

# A word's pieces, as (piece, start, end).
_Pieces = tuple[tuple[bytes, int, int], ...]


def wordpiece_tokenize(word: bytes, vocab: set[bytes] | frozenset[bytes], suffix: bytes, max_bytes_per_word: int,
                       max_chars_per_token: int, use_unknown_token: bool, unknown_token: bytes,
                       split_unknown_characters: bool) -> _Pieces:
    """One word's pieces (WordpieceTokenize)."""
    size = len(word)
    if size > max_bytes_per_word:
        # NOTE: TF Text ends the unknown token at its own length, not at the word's.
        return ((unknown_token, 0, len(unknown_token)),) if use_unknown_token else ((word, 0, size),)
    char_ends = [end for _, end, _ in utf8_steps(word)]
    pieces = []
    start, char = 0, 0
    while start < size:
        ends = char_ends[char:char + max_chars_per_token] if max_chars_per_token > 0 else char_ends[char:]
        for taken in range(len(ends), 0, -1):
            end = ends[taken - 1]
            candidate = word[start:end] if start == 0 else suffix + word[start:end]
            if candidate in vocab:
                pieces.append((candidate, start, end))
                break
            if taken == 1 and split_unknown_characters:
                piece = unknown_token if use_unknown_token else word[start:end]
                pieces.append((piece if start == 0 else suffix + piece, start, end))
                break
        else:
            return ((unknown_token if use_unknown_token else word, 0, size),)
        start = end
        char += taken
    return tuple(pieces)


class _Vocabulary:
    """The strings a table holds (with a value other than -1), and words already tokenized, per attrs."""

    def __init__(self, table: LookupTable):
        if table.key_dtype != np.dtype(object) or table.value_dtype != np.dtype(np.int64) or table.value_shape:
            raise TypeError(f"WordpieceTokenizeWithOffsets needs a table from string to int64 scalars, got "
                            f"'{table.name}' from {tf_name_of_numpy(table.key_dtype)} to "
                            f"{tf_name_of_numpy(table.value_dtype)}{list(table.value_shape) or ''}")
        if not table.initialized:
            raise ValueError("Table not initialized.")
        keys, values = table.export()
        self.words = frozenset(k for k, v in zip(keys.tolist(), values.tolist()) if v != _OUT_OF_VOCABULARY)
        self._caches: dict[tuple, TokenCache] = {}

    def cache(self, attrs: tuple) -> TokenCache:
        """The words tokenized with these attrs: their pieces, (start, end)."""
        found = self._caches.get(attrs)
        if found is None:
            with _LOCK:
                found = self._caches.setdefault(attrs, TokenCache(fields=2))
        return found


_LOCK = threading.Lock()
_STATIC: weakref.WeakKeyDictionary[LookupTable, _Vocabulary] = weakref.WeakKeyDictionary()


def _vocabulary(table: Any) -> _Vocabulary:
    if not isinstance(table, LookupTable):
        raise TypeError(f"vocab_lookup_table must be a lookup table handle, got {type(table).__name__}")
    if table.mutable:
        return _Vocabulary(table)
    with _LOCK:
        found = _STATIC.get(table)
    if found is None:
        found = _Vocabulary(table)
        with _LOCK:
            found = _STATIC.setdefault(table, found)
    return found


@kernel("WordpieceTokenizeWithOffsets", devices=("cpu",), outputs=4, stateful=True)
def wordpiece_tokenize_with_offsets(xp: Any, input_values: Any, vocab_lookup_table: Any, *,
                                    suffix_indicator: str | bytes, max_bytes_per_word: int,
                                    max_chars_per_token: int = 0, use_unknown_token: bool,
                                    unknown_token: str | bytes, split_unknown_characters: bool = False,
                                    output_row_partition_type: Literal["row_lengths", "row_splits"] = "row_lengths"
                                    ) -> tuple:
    """Each string's word pieces, with their byte offsets, flattened; row lengths or row splits."""
    words = flat_texts(input_values)
    vocab = _vocabulary(vocab_lookup_table)
    attrs = (as_bytes(suffix_indicator), max_bytes_per_word, max_chars_per_token, use_unknown_token,
             as_bytes(unknown_token), split_unknown_characters)
    cache = vocab.cache(attrs)
    pieces, offsets, lengths = cache.gather(words, lambda word: _pieces(wordpiece_tokenize(word, vocab.words, *attrs)))
    partition = lengths
    if output_row_partition_type == "row_splits":
        partition = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])
    return pieces, partition, offsets[:, 0].copy(), offsets[:, 1].copy()


def _pieces(pieces: _Pieces) -> tuple[list[bytes], list[tuple[int, int]]]:
    return [p for p, _, _ in pieces], [(start, end) for _, start, end in pieces]
