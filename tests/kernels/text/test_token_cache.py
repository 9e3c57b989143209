"""The cache of tokenized words the WordPiece kernels gather their outputs from: order, words seen once, pieces
kept byte for byte, starting over past its limit, and runs on several threads at once."""

from __future__ import annotations

import threading

import numpy as np

from kernels.text.token_cache import TokenCache


def split_letters(word: bytes):
    """One token per byte: the byte, (its position, its value)."""
    return [word[i:i + 1] for i in range(len(word))], [(i, word[i]) for i in range(len(word))]


def test_tokens_come_in_the_order_of_the_words():
    cache = TokenCache(fields=2)
    pieces, ints, counts = cache.gather([b"ab", b"", b"c", b"ab"], split_letters)
    assert pieces.tolist() == [b"a", b"b", b"c", b"a", b"b"]
    assert ints.tolist() == [[0, 97], [1, 98], [0, 99], [0, 97], [1, 98]]
    assert counts.tolist() == [2, 0, 1, 2]
    pieces, ints, counts = cache.gather([], split_letters)
    assert (pieces.shape, ints.shape, counts.shape) == ((0,), (0, 2), (0,))


def test_each_word_is_tokenized_once_and_kept_byte_for_byte():
    seen = []

    def tokenize(word):
        seen.append(word)
        return [word + b"\x00"], [(len(word), 0)]

    cache = TokenCache(fields=2)
    for _ in range(3):
        pieces, _, _ = cache.gather([b"x", b"y\x00", b"x"], tokenize)
        assert pieces.tolist() == [b"x\x00", b"y\x00\x00", b"x\x00"]
    assert seen == [b"x", b"y\x00"]


def test_past_its_limit_it_starts_over_and_still_answers():
    cache = TokenCache(fields=2, limit=50)
    for n in range(200):
        words = [bytes([97 + n % 26]) * (1 + n % 7), b"ab"]
        pieces, _, counts = cache.gather(words, split_letters)
        assert counts.tolist() == [len(words[0]), 2] and pieces.tolist()[-2:] == [b"a", b"b"]
    assert cache._store.tokens <= 60


def test_threads_share_it():
    cache = TokenCache(fields=2, limit=2000)
    errors = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            words = [bytes(rng.integers(97, 100, rng.integers(0, 5)).tolist()) for _ in range(rng.integers(1, 20))]
            pieces, _, counts = cache.gather(words, split_letters)
            expected = [split_letters(w) for w in words]
            if pieces.tolist() != [p for e in expected for p in e[0]] or counts.tolist() != [len(w) for w in words]:
                errors.append(words)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
