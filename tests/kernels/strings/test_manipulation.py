"""Case, strip, length, Substr, StringJoin and ReduceJoin against outputs read off TensorFlow 2.21, errors
included. tests/fixtures/ops/strings/ holds more."""

from __future__ import annotations

import numpy as np
import pytest


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def scalar(value) -> np.ndarray:
    return np.array(value.encode() if isinstance(value, str) else value, dtype=object)


CASE_INPUT = strings("HeLLo \u00c9\u00d6", "A\x00B", b"A\xffB\xe2\x82C")


def test_ascii_case_changes_ascii_letters_only(run_kernel):
    (out,) = run_kernel("StringLower", CASE_INPUT)
    assert out.tolist() == [b"hello \xc3\x89\xc3\x96", b"a\x00b", b"a\xffb\xe2\x82c"]
    assert run_kernel("StringUpper", strings("stra\u00dfe abc"))[0].tolist() == [b"STRA\xc3\x9fE ABC"]


def test_utf8_lower_is_full_unicode_up_to_the_first_nul(run_kernel):
    (out,) = run_kernel("StringLower", strings("\u0130 \u03a3\u0391\u03a3 \u1e9e", "A\x00B", b"A\xffB\xe2\x82C"),
                        encoding="utf-8")
    assert out.tolist() == ["i\u0307 \u03c3\u03b1\u03c2 \u00df".encode(), b"a", "a\ufffdb\ufffdc".encode()]


def test_utf8_upper_uses_full_case_mappings(run_kernel):
    (out,) = run_kernel("StringUpper", strings("stra\u00dfe \ufb01 \u0149 i").reshape(1, 1), encoding="utf-8")
    assert out.shape == (1, 1) and out[0, 0] == "STRASSE FI \u02bcN I".encode()


def test_strip_ascii_whitespace_only(run_kernel):
    (out,) = run_kernel("StringStrip", strings(" \t\n\x0b\x0cab c\r ", "\u00a0x\u00a0", "", "   "))
    assert out.tolist() == [b"ab c", b"\xc2\xa0x\xc2\xa0", b"", b""]


def test_length_in_bytes_and_utf8_characters(run_kernel):
    values = strings(b"\xff\x80\x80ab", b"a\x80\x80", "h\u00e9").reshape(1, 3)
    (by_bytes,) = run_kernel("StringLength", values)
    (by_chars,) = run_kernel("StringLength", values, unit="UTF8_CHAR")
    assert by_bytes.dtype == np.int32 and by_bytes.tolist() == [[5, 3, 3]]
    assert by_chars.tolist() == [[3, 1, 2]]


TEXT = strings("hello", "h\u00e9llo")
SUBSTR_CASES = [
    pytest.param(TEXT, 1, 2, "BYTE", [b"el", b"\xc3\xa9"], id="bytes"),
    pytest.param(TEXT, -3, 2, "BYTE", [b"ll", b"ll"], id="bytes-negative-pos"),
    pytest.param(TEXT, 1, -1, "BYTE", [b"ello", b"\xc3\xa9llo"], id="bytes-negative-len-to-the-end"),
    pytest.param(TEXT, 5, 3, "BYTE", [b"", b"o"], id="bytes-pos-at-end"),
    pytest.param(strings("hello", "h\u00e9llo", "", "\u65e5\u672c\u8a9e"), 0, 2, "UTF8_CHAR",
                 [b"he", b"h\xc3\xa9", b"", "\u65e5\u672c".encode()], id="chars"),
    pytest.param(TEXT, -3, 2, "UTF8_CHAR", [b"ll", b"ll"], id="chars-negative-pos"),
    pytest.param(TEXT, 1, -1, "UTF8_CHAR", [b"", b""], id="chars-negative-len-is-nothing"),
    pytest.param(TEXT, -2, 5, "UTF8_CHAR", [b"lo", b"lo"], id="chars-len-past-the-end"),
    pytest.param(strings(b"\xff\x80\x80ab", b"a\x80\x80"), 1, 2, "UTF8_CHAR", [b"ab", b""],
                 id="chars-continuation-bytes-join-the-character-before"),
]


@pytest.mark.parametrize("values, pos, length, unit, expected", SUBSTR_CASES)
def test_substr_scalar_pos(run_kernel, values, pos, length, unit, expected):
    for dtype in (np.int32, np.int64):
        (out,) = run_kernel("Substr", values, np.array(pos, dtype), np.array(length, dtype), unit=unit)
        assert out.tolist() == expected


def test_substr_elementwise(run_kernel):
    values = strings("hello", "h\u00e9llo", "", "\u65e5\u672c\u8a9e")
    (out,) = run_kernel("Substr", values, np.array([0, 1, 0, 3], np.int32), np.array([1, 2, 3, 3], np.int32))
    assert out.tolist() == [b"h", b"\xc3\xa9", b"", "\u672c".encode()]


def test_substr_broadcasts_to_two_dims(run_kernel):
    pos, length = np.array([0, 1, 2], np.int32), np.array([1, 2, 5], np.int32)
    (out,) = run_kernel("Substr", strings("abc", "defg").reshape(2, 1), pos, length)
    assert out.tolist() == [[b"a", b"bc", b"c"], [b"d", b"ef", b"fg"]]
    (out,) = run_kernel("Substr", scalar("abc"), np.array([0, 1, 3], np.int32), length)
    assert out.tolist() == [b"a", b"bc", b""]


SUBSTR_ERRORS = [
    pytest.param(strings("hello", "", "x"), 1, 2, "BYTE", r"pos 1 out of range for string b'' at index 1",
                 id="bytes-past-the-end"),
    pytest.param(strings("hello"), -6, 2, "BYTE", r"pos -6 out of range for string b'hello' at index 0",
                 id="bytes-before-the-start"),
    pytest.param(strings("hello"), 6, 2, "UTF8_CHAR", "pos 6 out of range for string at index 0",
                 id="chars-past-the-end"),
    pytest.param(strings("hello"), -6, 2, "UTF8_CHAR", "pos -6 out of range for string at index 0",
                 id="chars-before-the-start"),
    pytest.param(strings("hello"), -2, -1, "UTF8_CHAR", "pos -2 out of range for string at index 0",
                 id="chars-negative-pos-and-len"),
]


@pytest.mark.parametrize("values, pos, length, unit, message", SUBSTR_ERRORS)
def test_substr_errors(run_kernel, values, pos, length, unit, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("Substr", values, np.array(pos, np.int32), np.array(length, np.int32), unit=unit)


def test_substr_broadcast_errors(run_kernel):
    grid = strings("abc", "defg").reshape(2, 1)
    pos, length = np.array([0, 1, 4], np.int32), np.array([1, 2, 5], np.int32)
    with pytest.raises(ValueError, match=r"pos 4 out of range for string b'abc' at index \(0, 2\)"):
        run_kernel("Substr", grid, pos, length)
    with pytest.raises(ValueError, match=r"pos 4 out of range for string at index 0$"):  # the row only
        run_kernel("Substr", grid, pos, length, unit="UTF8_CHAR")
    with pytest.raises(ValueError, match="Substr broadcast not implemented for 3 dimensions"):
        run_kernel("Substr", strings("abc").reshape(1, 1, 1), pos[:2], length[:2])
    with pytest.raises(ValueError, match=r"Incompatible shapes: \[3\] vs. \[2\]"):
        run_kernel("Substr", strings("a", "b", "c"), pos[:2], length[:2])
    with pytest.raises(ValueError, match=r"pos and len should have the same shape, got: \[2\] vs. \[\]"):
        run_kernel("Substr", strings("a", "b"), pos[:2], np.array(1, np.int32))


def test_string_join_repeats_scalars(run_kernel):
    (out,) = run_kernel("StringJoin", strings("a", "b"), scalar("x"), strings("1", "2"), separator="-")
    assert out.tolist() == [b"a-x-1", b"b-x-2"]
    (out,) = run_kernel("StringJoin", scalar("x"), scalar("y"))
    assert out.shape == () and out.item() == b"xy"
    (out,) = run_kernel("StringJoin", scalar("a"), strings())
    assert out.shape == (0,)
    (out,) = run_kernel("StringJoin", separator="-")
    assert out.shape == () and out.item() == b""


def test_string_join_shape_mismatch(run_kernel):
    with pytest.raises(ValueError, match=r"Input shapes do not match: \[2\] vs. \[1,2\]"):
        run_kernel("StringJoin", strings("a", "b"), strings("1", "2").reshape(1, 2))


GRID = strings("a", "b", "c", "d", "e", "f").reshape(2, 3)
REDUCE_CASES = [
    pytest.param([0], False, [b"a-d", b"b-e", b"c-f"], id="axis-0"),
    pytest.param([0, 1], False, b"a-d-b-e-c-f", id="first-axis-listed-varies-fastest"),
    pytest.param([1, 0], False, b"a-b-c-d-e-f", id="reversed-axes"),
    pytest.param([-1], True, [[b"a-b-c"], [b"d-e-f"]], id="negative-axis-keep-dims"),
    pytest.param(1, False, [b"a-b-c", b"d-e-f"], id="scalar-axis"),
    pytest.param([], False, [[b"a", b"b", b"c"], [b"d", b"e", b"f"]], id="no-axes-unchanged"),
]


@pytest.mark.parametrize("axes, keep_dims, expected", REDUCE_CASES)
def test_reduce_join(run_kernel, axes, keep_dims, expected):
    (out,) = run_kernel("ReduceJoin", GRID, np.array(axes, np.int32), keep_dims=keep_dims, separator="-")
    assert out.tolist() == expected


def test_reduce_join_of_empty_axes(run_kernel):
    empty = strings().reshape(2, 0)
    assert run_kernel("ReduceJoin", empty, np.array([1], np.int32), separator=".")[0].tolist() == [b"", b""]
    assert run_kernel("ReduceJoin", empty.reshape(0, 2), np.array([1], np.int32))[0].shape == (0,)
    grid = strings(*[str(i) for i in range(24)]).reshape(2, 3, 4)
    (out,) = run_kernel("ReduceJoin", grid, np.array([2, 0], np.int32), separator=",")
    assert out.tolist() == [b"0,1,2,3,12,13,14,15", b"4,5,6,7,16,17,18,19", b"8,9,10,11,20,21,22,23"]


def test_reduce_join_errors(run_kernel):
    with pytest.raises(ValueError, match=r"Invalid reduction dimension 2 for input with 2 dimension\(s\)"):
        run_kernel("ReduceJoin", GRID, np.array([2], np.int32))
    with pytest.raises(ValueError, match="Duplicate reduction dimension -1"):
        run_kernel("ReduceJoin", GRID, np.array([1, -1], np.int32))


def test_case_encoding_must_be_utf8_or_nothing(run_kernel):
    with pytest.raises(ValueError, match="only utf-8 or '' \\(no encoding\\) is supported, received latin1"):
        run_kernel("StringLower", CASE_INPUT, encoding="latin1")
    with pytest.raises(ValueError, match="received UTF-8"):
        run_kernel("StringUpper", CASE_INPUT, encoding="UTF-8")
