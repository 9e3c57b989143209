"""The regex ops against outputs read off TensorFlow 2.21: RE2's GlobalReplace/Replace (groups, empty
matches stepping over UTF-8 characters or bad bytes, bad rewrites), full matches, and TensorFlow's errors.
tests/fixtures/ops/strings/regex/ holds more."""

from __future__ import annotations

import numpy as np
import pytest


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def scalar(value) -> np.ndarray:
    return np.array(value.encode() if isinstance(value, str) else value, dtype=object)


REPLACE_CASES = [
    pytest.param(strings("aaa", "abc", ""), "a*", "-", True, [b"-", b"-b-c-", b"-"], id="empty-matches"),
    pytest.param(strings("aaa", "abc", ""), "(a)", r"<\1\0\\>", True, [b"<aa\\><aa\\><aa\\>", b"<aa\\>bc", b""],
                 id="groups-whole-match-backslash"),
    pytest.param(strings("aaa", "abc"), "(a)", r"<\2>", True, [b"aaa", b"abc"], id="missing-group-replaces-nothing"),
    pytest.param(strings("aaa", "abc", ""), "(a)", r"<\x>", True, [b"<<<", b"<bc", b""],
                 id="bad-escape-global-writes-up-to-it"),
    pytest.param(strings("aaa", "abc"), "(a)", r"<\x>", False, [b"aaa", b"abc"], id="bad-escape-first-changes-nothing"),
    pytest.param(strings("a@b c@d"), r"(\w+)@(\w+)", r"\2 at \1", False, [b"b at a c@d"], id="first-only"),
    pytest.param(strings(b"h\xc3\xa9llo", b"\xff\xfea", b"a\xe2\x82"), "", "-", True,
                 [b"-h-\xc3\xa9-l-l-o-", b"-\xff-\xfe-a-", b"-a-\xe2-\x82-"], id="empty-pattern-steps-chars-or-bytes"),
    pytest.param(strings(b"h\xc3\xa9llo", b"\xff\xfea"), ".", "-", True, [b"-----", b"\xff\xfe-"],
                 id="dot-matches-no-bad-byte"),
    pytest.param(strings("  trim me  "), r"^\s+|\s+$", "", True, [b"trim me"], id="anchors"),
    pytest.param(strings("ab"), "^", "x", True, [b"xab"], id="start-anchor-once"),
]


@pytest.mark.parametrize("values, pattern, rewrite, replace_global, expected", REPLACE_CASES)
def test_static_regex_replace(run_kernel, values, pattern, rewrite, replace_global, expected):
    (out,) = run_kernel("StaticRegexReplace", values, pattern=pattern, rewrite=rewrite, replace_global=replace_global)
    assert out.dtype == object and out.tolist() == expected


@pytest.mark.parametrize("values, pattern, rewrite, replace_global, expected", REPLACE_CASES)
def test_regex_replace_with_tensor_pattern_agrees(run_kernel, values, pattern, rewrite, replace_global, expected):
    (out,) = run_kernel("RegexReplace", values, scalar(pattern), scalar(rewrite), replace_global=replace_global)
    assert out.tolist() == expected


def test_replace_keeps_shape_and_defaults_to_global(run_kernel):
    (out,) = run_kernel("StaticRegexReplace", strings("aXa", "Xb", "c", "").reshape(2, 2), pattern="X", rewrite="")
    assert out.shape == (2, 2) and out.tolist() == [[b"aa", b"b"], [b"c", b""]]


def test_full_match(run_kernel):
    values = strings(b"\xff", "a", "\u00e9", "ab")
    assert run_kernel("StaticRegexFullMatch", values, pattern=".")[0].tolist() == [False, True, True, False]
    assert run_kernel("StaticRegexFullMatch", values, pattern=r"\C")[0].tolist() == [True, True, False, False]
    (out,) = run_kernel("RegexFullMatch", values.reshape(2, 2), scalar("a|ab"))
    assert out.dtype == np.bool_ and out.tolist() == [[False, True], [False, True]]


ERRORS = [
    pytest.param("StaticRegexReplace", [strings("x")], {"pattern": "(abc", "rewrite": "-"},
                 r"Invalid pattern: \(abc, error: missing \): \(abc", id="static-replace-bad-pattern"),
    pytest.param("RegexReplace", [strings("x"), scalar("a["), scalar("-")], {},
                 r"Invalid pattern: a\[, error: missing \]: \[", id="replace-bad-pattern"),
    pytest.param("RegexReplace", [strings("x"), strings("a", "b"), scalar("-")], {},
                 r"Pattern must be scalar, but received \[2\]", id="replace-vector-pattern"),
    pytest.param("RegexReplace", [strings("x"), scalar("a"), strings("a", "b")], {},
                 r"Rewrite must be scalar, but received \[2\]", id="replace-vector-rewrite"),
    pytest.param("RegexReplace", [strings("x"), scalar("a["), strings("a", "b")], {},
                 "Invalid pattern", id="bad-pattern-reported-before-bad-rewrite"),
    pytest.param("StaticRegexFullMatch", [strings("x")], {"pattern": "\\"}, "Invalid pattern: \\\\, error: trailing",
                 id="static-full-match-trailing-backslash"),
    pytest.param("RegexFullMatch", [strings("x"), strings("a")], {}, r"Pattern must be scalar, but received \[1\]",
                 id="full-match-vector-pattern"),
]


@pytest.mark.parametrize("op, inputs, attrs, message", ERRORS)
def test_errors(run_kernel, op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs, **attrs)
