"""RegexSplitWithOffsets (TF Text) beyond the golden fixtures (tests/fixtures/ops/text/unicode/regex_split/):
outputs and errors read off TF Text 2.21.1, and the patterns on which TF Text never returns."""

from __future__ import annotations

import numpy as np
import pytest


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def split(run_kernel, texts, delim: str, keep: str = "()") -> list[list]:
    outs = run_kernel("RegexSplitWithOffsets", texts, np.array(delim.encode(), dtype=object),
                      np.array(keep.encode(), dtype=object))
    return [o.tolist() for o in outs]


def test_each_search_starts_afresh(run_kernel):
    # ^ matches at the start of what is left after each delimiter.
    assert split(run_kernel, strings("abab b", "xa"), "(^a|b)", "(b)") == [
        [b"b", b"b", b" ", b"b", b"xa"], [1, 3, 4, 5, 0], [2, 4, 5, 6, 2], [0, 4, 5]]


def test_a_string_ends_at_its_first_nul(run_kernel):
    assert split(run_kernel, strings(b"a b\x00c d"), r"(\s)", "") == [[b"a", b"b"], [0, 2], [1, 3], [0, 2]]


def test_group_one_is_the_delimiter(run_kernel):
    # The piece after a match starts where the whole match ends ("o " is neither); without a group nothing
    # matches.
    assert split(run_kernel, strings("hello world"), r"(l+)o\s?", "(ll)") == [
        [b"he", b"ll", b"world"], [0, 2, 6], [2, 4, 11], [0, 3]]
    assert split(run_kernel, strings("a b", ""), r"\s", "") == [[b"a b"], [0], [3], [0, 1, 1]]


def test_shapes_flatten(run_kernel):
    out = split(run_kernel, strings("a b", "c", "", "d e f").reshape(2, 2), r"(\s)")
    assert out == [[b"a", b"b", b"c", b"d", b"e", b"f"], [0, 2, 0, 0, 2, 4], [1, 3, 1, 1, 3, 5], [0, 2, 3, 3, 6]]


def test_errors(run_kernel):
    with pytest.raises(ValueError, match=r"^Invalid pattern: \(, error: missing \): \($"):
        split(run_kernel, strings("a b"), "(")
    with pytest.raises(ValueError, match=r"^Invalid pattern: \(\[, error: missing \]: \[$"):
        split(run_kernel, strings("a b"), r"(\s)", "([")
    with pytest.raises(ValueError, match=r"^Pattern must be scalar, but received \[2\]$"):
        run_kernel("RegexSplitWithOffsets", strings("a b"), strings(r"(\s)", "x"), np.array(b"()", dtype=object))


def test_patterns_tf_text_never_finishes(run_kernel):
    # TF Text loops forever on an empty match and reads past the string when group 1 took no part.
    with pytest.raises(ValueError, match="matched an empty string at byte 0"):
        split(run_kernel, strings("ab"), "(x*)")
    with pytest.raises(ValueError, match="capture group 1 of the delimiter pattern .* took no part"):
        split(run_kernel, strings("ab cd"), r"(\b)c|( )")


def test_direct_match_path_equals_finditer(monkeypatch):
    """The fast path (RE2::Match through the binding) gives what google-re2's finditer gives, on BERT's own
    split pattern over random text with punctuation, CJK, runs of whitespace and bytes that are not UTF-8."""
    import numpy as np

    from kernels.text import regex_split

    bert = (rb"(\s+|[!-/]|[:-@]|[\[-`]|[{-~]|[\p{P}]|[\x{4E00}-\x{9FFF}]|[\x{3400}-\x{4DBF}]|[\x{F900}-\x{FAFF}])")
    keep = bert.replace(rb"\s+|", b"")
    rng = np.random.default_rng(7)
    alphabet = ["a", "b", "Z", " ", "  ", "\t", ",", ".", "!", "日", "本", "é", "—", "\u3000", "x"]
    texts = ["".join(rng.choice(alphabet, rng.integers(0, 30))).encode() for _ in range(300)] + [b"\xff\xfe a,b"]
    batch = np.array(texts, dtype=object)
    args = (np, batch, np.array(bert, dtype=object), np.array(keep, dtype=object))
    fast = regex_split.regex_split_with_offsets(*args)
    monkeypatch.setattr(regex_split, "_DIRECT_MATCH", False)
    slow = regex_split.regex_split_with_offsets(*args)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
