"""FastWordpieceTokenizeWithOffsets and TFText>FastWordpieceDetokenize: TF Text's linear-time WordPiece
(FastWordpieceTokenizer, FastBertTokenizer), run on the model flatbuffer the Python API builds.

The model is a trie of the vocabulary (suffix tokens under the suffix indicator's node) with, per node, a
failure link and failure pops: the tokens to emit, and the node to go on from, when the next byte has no
edge. Tokenizing walks the input through the trie, following failure links where it must; a word that
cannot be segmented becomes the unknown token spanning the whole word. This module executes the model's
own trie, links and pops step for step as fast_wordpiece_tokenizer.cc does, so results equal TF Text's for
any vocabulary.

Single-word models (end_to_end false: `no_pretokenization`) tokenize each input as one word. End-to-end
models (FastBertTokenizer) split text themselves: whitespace ends a word and is dropped, each punctuation
or CJK character is a word of its own (the unknown token when the vocabulary lacks it), a word longer than
max_bytes_per_token or with a character no token has becomes the unknown token. Offsets are in bytes.

Results are cached per word: per input for single-word models, per whitespace-separated chunk for
end-to-end ones. A chunk's tokens do not depend on the text around it when no trie path holds a whitespace
character and the suffix indicator is not empty (the model's state is then back at its start after every
whitespace); other models run the whole text through the trie.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import kernel
from kernels.text.bert_chars import (
    WHITESPACE,
    flat_texts,
    has_multibyte_whitespace,
    is_punctuation_or_cjk,
    non_whitespace_chunks,
    u8_next,
)
from kernels.text.darts_trie import DartsTrie, uint32_array
from kernels.text.flatbuffer_models import (
    FastWordpieceConfig,
    cached_model,
    detokenize_rows,
    read_fast_wordpiece_config,
    vector,
)
from kernels.text.token_cache import TokenCache

__all__ = ["FastWordpiece", "fast_wordpiece_detokenize", "fast_wordpiece_tokenize_with_offsets"]

_NULL = 0xFFFFFFFF
_SUFFIX_BIT = 30
_ID_MASK = ((1 << _SUFFIX_BIT) - 1) ^ 0xFF


class _Output:
    """The tokens collected so far, and how many of them belong to words already finished."""

    __slots__ = ("done", "ends", "ids", "pieces", "starts")

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.ids: list[int] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.done = 0  # original_num_tokens

    def reset_to_unknown(self, unk: bytes, unk_id: int, start: int, length: int) -> None:
        """ResetOutputAppendUnknownToken: the tokens of the unfinished word become one unknown token."""
        keep = self.done
        del self.pieces[keep:], self.ids[keep:], self.starts[keep:], self.ends[keep:]
        self.pieces.append(unk)
        self.ids.append(unk_id)
        self.starts.append(start)
        self.ends.append(start + length)
        self.done = keep + 1


class FastWordpiece:
    """A decoded FastWordpieceTokenizerConfig that tokenizes and detokenizes as TF Text does.

        >>> wp = FastWordpiece(read_fast_wordpiece_config(model))
        >>> wp.tokenize(b"greatest")
        ((b'great', b'##est'), (4, 5), (0, 5), (5, 8))
    """

    def __init__(self, config: FastWordpieceConfig):
        self.config = config
        self.trie = DartsTrie(config.trie_array)
        self.links = uint32_array(config.failure_links)
        self.pops = uint32_array(config.failure_pops)
        self.pool = uint32_array(config.failure_pops_pool.view(np.uint32))  # encoded tokens are non-negative
        self.suffix = config.suffix_indicator
        self.unk, self.unk_id = config.unk_token, config.unk_token_id
        self.suffix_root = config.trie_suffix_root
        self.punct_node = config.trie_punct_failure_link_node
        self.max_bytes = config.max_bytes_per_token
        self._cache = TokenCache(fields=3)  # id, start, end
        self._by_chunk = config.end_to_end and bool(self.suffix) and not self._trie_holds_whitespace()

    def _trie_holds_whitespace(self) -> bool:
        """Whether a walk from some node the tokenizer can be at takes a whole whitespace character. The
        suffix indicator's node and failure links may lie below edges the model cut (so that punctuation in
        a suffix indicator stays a word of its own): walks start from those too."""
        links = np.unique(self.config.failure_links)
        starts = np.concatenate([links[links != _NULL], [self.suffix_root, self.punct_node]]).astype(np.int64)
        nodes = self.trie.reachable(starts[starts < self.config.trie_array.size])
        return any((self.trie.walk_all(nodes, chr(c).encode()) >= 0).any() for c in WHITESPACE)

    # --- tokenizing -------------------------------------------------------------------------------------

    def tokenize(self, text: bytes) -> tuple[tuple, tuple, tuple, tuple]:
        """(pieces, ids, starts, ends) of one input."""
        pieces, ids, _, starts, ends = self.tokenize_all([text])
        return tuple(pieces.tolist()), tuple(ids.tolist()), tuple(starts.tolist()), tuple(ends.tolist())

    def tokenize_all(self, texts: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The outputs of FastWordpieceTokenizeWithOffsets for `texts`: pieces, ids, row splits, starts, ends."""
        if not self._by_chunk:
            words, bases, splits = texts, np.zeros(len(texts), np.int64), np.arange(len(texts) + 1)
        else:
            joined = b"\n".join(texts)
            if not has_multibyte_whitespace(joined):
                words, bases, splits = _split_on_ascii_whitespace(texts, joined)
            else:
                words, base_list, split_list = [], [], [0]
                for text in texts:
                    for start, chunk in non_whitespace_chunks(text):
                        words.append(chunk)
                        base_list.append(start)
                    split_list.append(len(words))
                bases, splits = np.array(base_list, np.int64), np.array(split_list, np.int64)
        pieces, ints, counts = self._cache.gather(words, self._tokenize_new)
        # Row splits count tokens now, not chunks.
        token_splits = np.concatenate([[0], np.cumsum(counts)])[splits].astype(np.int64)
        shift = np.repeat(bases, counts)
        return pieces, ints[:, 0].copy(), token_splits, ints[:, 1] + shift, ints[:, 2] + shift

    def _tokenize_new(self, text: bytes) -> tuple[list[bytes], list[tuple[int, int, int]]]:
        """The tokens of a word (a chunk, for end-to-end models): pieces, and (id, start, end) of each."""
        out = _Output()
        if self.config.end_to_end:
            self._tokenize_text(text, out)
        else:
            self._tokenize_word(text, out)
        return out.pieces, list(zip(out.ids, out.starts, out.ends))

    def _append(self, text: bytes, base: int, at: int, encoded: int, out: _Output) -> int:
        """AppendTokenToOutput: the token `encoded` at `at` bytes into the word at `base`; the new `at`."""
        token_id = (encoded & _ID_MASK) >> 8
        length = (encoded & 0xFF) + 1
        if not at and encoded >> _SUFFIX_BIT:
            # The word starts with the suffix indicator and a suffix token matched there.
            length += len(self.suffix)
        if token_id == self.unk_id:
            piece = self.unk
        else:
            piece = text[base + at:base + at + length]
        out.pieces.append(self.suffix + piece if at else piece)
        out.ids.append(token_id)
        out.starts.append(base + at)
        out.ends.append(base + at + length)
        return at + length

    def _follow_failure(self, text: bytes, base: int, at: int, node: int, out: _Output) -> tuple[int, int]:
        """TryFollowFailureLinkAndCollectTokens: (next node or -1, new `at`)."""
        value = self.trie.value(node)
        try:
            if value is not None:
                at = self._append(text, base, at, value, out)
                link = self._link(node)
            else:
                link = self.links[node]
                if link == _NULL:
                    return -1, at
                packed = self.pops[node]
                first = packed >> 8
                for k in range(first, first + (packed & 0xFF) + 1):
                    at = self._append(text, base, at, self.pool[k], out)
        except IndexError:
            raise ValueError(f"the model's failure structures do not cover trie node {node}") from None
        # NOTE: every transition emits tokens of the bytes walked so far; a malformed model whose links loop
        # would emit past the text instead of ending.
        if base + at > len(text):
            raise ValueError(f"the model's failure pops at trie node {node} run past the text")
        return link, at

    def _link(self, node: int) -> int:
        link = self.links[node]
        if link == _NULL:
            raise ValueError(f"the model's trie node {node} holds a token but has no failure link")
        return link

    def _finish_word(self, text: bytes, base: int, length: int, node: int, at: int, out: _Output) -> None:
        """HandleTheRemainingStringOnTriePath for the word text[base:base + length] ending at `node`."""
        if node == DartsTrie.ROOT:
            return  # an empty word
        if node == self.suffix_root and len(out.ids) == out.done:
            # The word is the suffix indicator itself: its precomputed tokens.
            precomputed = self.config.precomputed_result_for_suffix_indicator
            if len(precomputed) == 1 and (precomputed[0] & _ID_MASK) >> 8 == self.unk_id:
                out.reset_to_unknown(self.unk, self.unk_id, base, length)
            else:
                for encoded in precomputed:
                    at = self._append(text, base, at, encoded, out)
            out.done = len(out.ids)
            return
        while node != self.suffix_root and node != self.punct_node:
            node, at = self._follow_failure(text, base, at, node, out)
            if node < 0:
                out.reset_to_unknown(self.unk, self.unk_id, base, length)
                return
        out.done = len(out.ids)

    def _tokenize_word(self, word: bytes, out: _Output) -> None:
        """TokenizeSingleWordImpl: one word, byte by byte."""
        if not word:
            return
        if len(word) > self.max_bytes:
            out.reset_to_unknown(self.unk, self.unk_id, 0, len(word))
            return
        at = 0
        node = DartsTrie.ROOT
        for byte in word:
            while (nxt := self.trie.child(node, byte)) < 0:
                node, at = self._follow_failure(word, 0, at, node, out)
                if node < 0:
                    out.reset_to_unknown(self.unk, self.unk_id, 0, len(word))
                    return
            node = nxt
        self._finish_word(word, 0, len(word), node, at, out)

    def _tokenize_text(self, text: bytes, out: _Output) -> None:
        """TokenizeTextImpl: text split into words on whitespace and punctuation as it is walked."""
        size = len(text)
        cur_pos, prev_pos = 0, -1
        cp = prev_cp = -1
        next_pos = 0
        while cur_pos < size:
            if prev_pos == cur_pos:
                raise ValueError("Failed to make any progress in tokenizing the input text.")
            prev_pos = cur_pos
            at, node, word_bytes, word_start = 0, DartsTrie.ROOT, 0, cur_pos
            prev_inner = -1
            while cur_pos < size:
                if prev_inner == cur_pos:
                    raise ValueError("Failed to make any progress in tokenizing the input text.")
                prev_inner = cur_pos
                prev_cp = cp
                cp, next_pos = u8_next(text, cur_pos, size)
                if word_bytes + next_pos - cur_pos > self.max_bytes:
                    break
                while (nxt := self.trie.walk(node, text, cur_pos, next_pos)) < 0:
                    linked, at = self._follow_failure(text, word_start, at, node, out)
                    if linked < 0:
                        break
                    node = linked
                if nxt < 0:
                    break  # no token continues with this character (the node stays where it was)
                node = nxt
                word_bytes += next_pos - cur_pos
                cur_pos = next_pos
            if cur_pos >= size:
                self._finish_word(text, word_start, size - word_start, node, at, out)
                break
            white = cp in WHITESPACE
            if white or is_punctuation_or_cjk(cp) or (cur_pos and is_punctuation_or_cjk(prev_cp)):
                # A word boundary: finish the word so far.
                self._finish_word(text, word_start, cur_pos - word_start, node, at, out)
                if white:
                    cur_pos = next_pos
                elif cur_pos == word_start:
                    # A separator the model cannot map: the unknown token.
                    cur_pos = next_pos
                    out.reset_to_unknown(self.unk, self.unk_id, word_start, cur_pos - word_start)
                continue
            # A character no token continues with, or a word too long: the whole word is unknown.
            cur_pos = next_pos
            end_of_word = cur_pos
            while cur_pos < size:
                skip_cp, skip_next = u8_next(text, cur_pos, size)
                if skip_cp in WHITESPACE:
                    cur_pos = skip_next
                    break
                if is_punctuation_or_cjk(skip_cp):
                    break
                end_of_word = cur_pos = skip_next
            out.reset_to_unknown(self.unk, self.unk_id, word_start, end_of_word - word_start)

    # --- detokenizing -----------------------------------------------------------------------------------

    def detokenize(self, ids: list[int]) -> bytes:
        """The words of `ids` (suffix tokens joined to the word before), separated by spaces."""
        config = self.config
        if not config.support_detokenization:
            raise ValueError("Detokenize function is only enabled when support_detokenization is true in the "
                             "config flatbuffer. Please rebuild the model flatbuffer by setting "
                             "support_detokenization=true.")
        if config.vocab_array is None or config.vocab_is_suffix_array is None:
            raise ValueError("Missing vocab_array or vocab_is_suffix_array in config.")
        vocab, is_suffix = config.vocab_array, config.vocab_is_suffix_array
        limit = min(len(vocab), len(is_suffix))
        words: list[bytes] = []
        word: list[bytes] = []
        for token_id in ids:
            if token_id < 0 or token_id >= limit:
                raise ValueError(f"Token ID out of bounds: {token_id}")
            suffix = is_suffix[token_id]
            if word and not suffix:
                words.append(b"".join(word))
                word = []
            if not word and suffix:
                word.append(self.suffix)
            word.append(vocab[token_id])
        if word:
            words.append(b"".join(word))
        return b" ".join(words)


def _split_on_ascii_whitespace(texts: list[bytes], joined: bytes) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """The chunks of texts whose only whitespace is ASCII's (joined by a newline, which no chunk spans), found in one
    pass: the chunks, where each starts in its text, and how many chunks each text has (as splits)."""
    # NOTE: bytes.split() splits on exactly the ASCII whitespace (\t-\r and space), dropping empty chunks; those
    # bytes are never inside a character U8_NEXT steps over, even in ill-formed text.
    chunks = joined.split()
    data = np.frombuffer(joined, dtype=np.uint8)
    white = (data == 0x20) | ((data >= 0x09) & (data <= 0x0D))
    starts = np.flatnonzero(~white & np.concatenate([[True], white[:-1]]))
    text_starts = np.cumsum([0] + [len(t) + 1 for t in texts])
    splits = np.searchsorted(starts, text_starts, side="left")
    splits[-1] = len(chunks)
    owner = np.searchsorted(text_starts, starts, side="right") - 1
    return chunks, starts - text_starts[owner], splits


def _model(wp_model: Any) -> FastWordpiece:
    return cached_model(wp_model, "wp_model", "fast_wordpiece",
                        lambda data: FastWordpiece(read_fast_wordpiece_config(data)))



@kernel("FastWordpieceTokenizeWithOffsets", devices=("cpu",), outputs=5)
def fast_wordpiece_tokenize_with_offsets(xp: Any, input_values: Any, wp_model: Any) -> tuple:
    """Each string's word pieces (strings and ids), with row splits and byte offsets, flattened."""
    texts = flat_texts(vector(input_values, "input_values"))
    return _model(wp_model).tokenize_all(texts)


@kernel("TFText>FastWordpieceDetokenize", devices=("cpu",))
def fast_wordpiece_detokenize(xp: Any, input_values: Any, input_row_splits: Any, wp_model: Any) -> tuple:
    """Each row of word-piece ids (input_row_splits) joined back into text."""
    return (detokenize_rows(input_values, input_row_splits, _model(wp_model).detokenize),)
