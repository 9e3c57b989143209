"""Words already tokenized, kept as rows of flat arrays, so that a batch's tokens come out of one numpy gather
instead of a Python loop over its words: the WordPiece kernels tokenize each distinct word once.

A word's entry is its tokens' pieces and integer fields (id, start, end, ...), stored at rows first..first+count
of the arrays. Entries are only ever added (published in the index after their rows are written, the arrays
copied when they grow), so concurrent runs read them without a lock; only adding takes one. Past `limit`
tokens the cache starts over, and runs under way keep the store they began with.

    >>> cache = TokenCache(fields=2)
    >>> pieces, ints, counts = cache.gather([b"ab", b"ab"], lambda w: ([w[:1], w[1:]], [(0, 1), (1, 2)]))
    >>> pieces.tolist(), ints.tolist(), counts.tolist()
    ([b'a', b'b', b'a', b'b'], [[0, 1], [1, 2], [0, 1], [1, 2]], [2, 2])
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["TokenCache"]

# What tokenizing a word gives: its pieces, and per piece its integer fields.
Tokenized = tuple[Sequence[bytes], Sequence[Sequence[int]]]


class _Store:
    def __init__(self, fields: int):
        self.index: dict[bytes, int] = {}
        self.first = np.zeros(1024, dtype=np.int64)
        self.count = np.zeros(1024, dtype=np.int64)
        self.pieces = np.empty(4096, dtype=object)
        self.ints = np.zeros((4096, fields), dtype=np.int64)
        self.entries = 0
        self.tokens = 0

    def add(self, word: bytes, pieces: Sequence[bytes], ints: Sequence[Sequence[int]]) -> None:
        """Write a word's rows, then publish it (the caller holds the lock)."""
        n = len(pieces)
        if self.entries == self.first.size:
            self.first = np.concatenate([self.first, np.zeros_like(self.first)])
            self.count = np.concatenate([self.count, np.zeros_like(self.count)])
        while self.tokens + n > self.pieces.size:
            self.pieces = np.concatenate([self.pieces, np.empty(self.pieces.size, dtype=object)])
            self.ints = np.concatenate([self.ints, np.zeros_like(self.ints)])
        rows = slice(self.tokens, self.tokens + n)
        self.pieces[rows] = list(pieces)
        if n:
            self.ints[rows] = ints
        self.first[self.entries] = self.tokens
        self.count[self.entries] = n
        self.tokens += n
        self.entries += 1
        self.index[word] = self.entries - 1


class TokenCache:
    """The tokens of words tokenized before, for one tokenizer (one model, or one vocabulary and attrs)."""

    def __init__(self, fields: int, limit: int = 2_000_000):
        self.fields = fields
        self.limit = limit
        self._lock = threading.Lock()
        self._store = _Store(fields)

    def gather(self, words: list[bytes], tokenize: Callable[[bytes], Tokenized]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The tokens of `words` in order (pieces, an object array; ints, [tokens, fields]) and how many each word
        has; `tokenize(word)` makes those of words seen for the first time."""
        store = self._store
        if store.tokens > self.limit:
            with self._lock:
                if self._store is store:
                    self._store = _Store(self.fields)
                store = self._store
        found = list(map(store.index.get, words))
        if None in found:
            missing = dict.fromkeys(word for word, entry in zip(words, found) if entry is None)
            made = {word: tokenize(word) for word in missing}
            with self._lock:
                for word, (pieces, ints) in made.items():
                    if word not in store.index:
                        store.add(word, pieces, ints)
            found = list(map(store.index.get, words))
        entries = np.fromiter(found, dtype=np.int64, count=len(found))
        counts = store.count[entries]
        ends = np.cumsum(counts)
        rows = np.repeat(store.first[entries] - (ends - counts), counts) + np.arange(int(ends[-1]) if len(ends) else 0)
        return store.pieces[rows], store.ints[rows], counts
