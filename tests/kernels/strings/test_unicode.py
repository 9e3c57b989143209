"""The Unicode ops against outputs read off TensorFlow 2.21: how invalid UTF-8, UTF-16-BE and UTF-32-BE
are cut into bad characters, what each `errors` mode does with them (and with control characters), byte
offsets, encoding code points, and TensorFlow's errors. tests/fixtures/ops/strings/unicode/ holds more."""

from __future__ import annotations

import numpy as np
import pytest

FFFD = 0xFFFD


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def decode(run_kernel, data: bytes, encoding="UTF-8", **attrs) -> tuple[list[int], list[int]]:
    """(code points, byte offsets) of one string."""
    splits, values, offsets = run_kernel("UnicodeDecodeWithOffsets", strings(data), input_encoding=encoding, **attrs)
    assert splits.tolist() == [0, len(values)]
    return values.tolist(), offsets.tolist()


UTF8_CASES = [  # bytes, code points and offsets with errors=replace, code points and offsets with errors=ignore
    (b"h\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80", [104, 233, 26085, 128512], [0, 1, 3, 6], None),
    (b"a\xffb", [97, FFFD, 98], [0, 1, 2], ([97, 98], [0, 2])),
    (b"\xe2\x82a", [FFFD, 97], [0, 2], ([97], [2])),  # a truncated sequence is one bad character
    (b"a\xe2\x82", [97, FFFD], [0, 1], ([97], [0])),
    (b"\xed\xa0\x80x", [FFFD, FFFD, FFFD, 120], [0, 1, 2, 3], ([120], [3])),  # an encoded surrogate is three
    (b"\xc0\xaf", [FFFD, FFFD], [0, 1], ([], [])),  # overlong
    (b"\xf4\x90\x80\x80", [FFFD] * 4, [0, 1, 2, 3], ([], [])),  # past U+10FFFF
    (b"\xf0\x9f\x98", [FFFD], [0], ([], [])),
    (b"\xef\xbf\xbd", [FFFD], [0], None),  # a real U+FFFD is no error
]


@pytest.mark.parametrize("data, values, offsets, ignored", UTF8_CASES, ids=[repr(c[0]) for c in UTF8_CASES])
def test_decode_utf8(run_kernel, data, values, offsets, ignored):
    assert decode(run_kernel, data) == (values, offsets)
    assert decode(run_kernel, data, errors="ignore") == (ignored or (values, offsets))
    if ignored is not None:
        with pytest.raises(ValueError, match="^Invalid formatting on input string$"):
            decode(run_kernel, data, errors="strict")


def test_decode_control_characters(run_kernel):
    data = b"\x01\x1f\x7f\x00z\xff"
    assert decode(run_kernel, data, replace_control_characters=True, replacement_char=63) == \
        ([63, 63, 127, 63, 122, 63], [0, 1, 2, 3, 4, 5])
    assert decode(run_kernel, data, replace_control_characters=True, errors="ignore") == ([127, 122], [2, 4])
    # Under strict, control characters are replaced rather than refused.
    assert decode(run_kernel, b"\x01a", replace_control_characters=True, errors="strict") == ([FFFD, 97], [0, 1])


UTF16_CASES = [
    (b"\x00a\x00b", [97, 98], [0, 2]), (b"\xd8\x3d\xde\x00", [128512], [0]), (b"\xd8\x3d\x00a", [FFFD, 97], [0, 2]),
    (b"\xde\x00\x00a", [FFFD, 97], [0, 2]), (b"\x00a\x00", [97, FFFD], [0, 2]), (b"\xd8\x3d", [FFFD], [0]),
    (b"\xd8\x3d\xd8\x3d\xde\x00", [FFFD, 128512], [0, 2]), (b"\xfe\xff\x00a", [0xFEFF, 97], [0, 2]),
]


@pytest.mark.parametrize("data, values, offsets", UTF16_CASES, ids=[repr(c[0]) for c in UTF16_CASES])
def test_decode_utf16be(run_kernel, data, values, offsets):
    assert decode(run_kernel, data, "UTF-16-BE") == (values, offsets)


UTF32_CASES = [
    (b"\x00\x01\xf6\x00", [128512], [0]), (b"\x00\x11\x00\x00\x00\x00\x00a", [FFFD, 97], [0, 4]),
    (b"\x00\x00\xd8\x00\x00\x00\x00a", [FFFD, 97], [0, 4]), (b"\x00\x00\x00a\x00\x00", [97, FFFD], [0, 4]),
    (b"\xff\xff\xff\xff\x00\x00\x00b", [FFFD, 98], [0, 4]), (b"\x00\x00\xff\xfe", [0xFFFE], [0]),
]


@pytest.mark.parametrize("data, values, offsets", UTF32_CASES, ids=[repr(c[0]) for c in UTF32_CASES])
def test_decode_utf32be(run_kernel, data, values, offsets):
    assert decode(run_kernel, data, "UTF-32-BE") == (values, offsets)


def test_decode_flattens_any_shape_and_takes_icu_names(run_kernel):
    splits, values = run_kernel("UnicodeDecode", strings("ab", "c", "", "d").reshape(2, 2), input_encoding="utf8",
                                Tsplits=np.int32)
    assert splits.dtype == np.int32 and splits.tolist() == [0, 2, 3, 3, 4]
    assert values.dtype == np.int32 and values.tolist() == [97, 98, 99, 100]
    splits, values = run_kernel("UnicodeDecode", np.array(b"ab", dtype=object), input_encoding="UTF_8")
    assert splits.dtype == np.int64 and splits.tolist() == [0, 2]
    splits, values = run_kernel("UnicodeDecode", strings(b"a\x00\xff\xe9"), input_encoding="ISO-8859-1")
    assert values.tolist() == [97, 0, 255, 233]


def encode(run_kernel, values, splits, encoding, **attrs) -> list[bytes]:
    (out,) = run_kernel("UnicodeEncode", np.array(values, np.int32), np.array(splits, np.int64),
                        output_encoding=encoding, **attrs)
    return out.tolist()


BAD_CODE_POINTS = [97, 0xD800, 98, 0x110000, -5, 0xFFFE, 0xDFFF, 0x1F600, 0, 0x10FFFF]


def test_encode_utf8(run_kernel):
    assert encode(run_kernel, BAD_CODE_POINTS, [0, 3, 10], "UTF-8") == [
        b"a\xef\xbf\xbdb", b"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbe\xef\xbf\xbd\xf0\x9f\x98\x80\x00\xf4\x8f\xbf\xbf"]
    assert encode(run_kernel, BAD_CODE_POINTS, [0, 3, 10], "UTF-8", errors="ignore") == [
        b"ab", b"\xef\xbf\xbe\xf0\x9f\x98\x80\x00\xf4\x8f\xbf\xbf"]
    assert encode(run_kernel, BAD_CODE_POINTS[:3], [0, 3], "UTF-8", replacement_char=63) == [b"a?b"]


def test_encode_utf16_and_utf32(run_kernel):
    assert encode(run_kernel, BAD_CODE_POINTS, [0, 3, 10], "UTF-16-BE") == [
        b"\x00a\xff\xfd\x00b", b"\xff\xfd\xff\xfd\xff\xfe\xff\xfd\xd8=\xde\x00\x00\x00\xdb\xff\xdf\xff"]
    assert encode(run_kernel, BAD_CODE_POINTS, [0, 3, 10], "UTF-32-BE", errors="ignore") == [
        b"\x00\x00\x00a\x00\x00\x00b", b"\x00\x00\xff\xfe\x00\x01\xf6\x00\x00\x00\x00\x00\x00\x10\xff\xff"]


def test_a_surrogate_replacement_char_is_written_as_icu_writes_it(run_kernel):
    assert encode(run_kernel, [0xD800], [0, 1], "UTF-8", replacement_char=0xD800) == [b"\xef\xbf\xbd"]
    (out,) = run_kernel("UnicodeTranscode", strings(b"\xff"), input_encoding="UTF-8", output_encoding="UTF-16-BE",
                        replacement_char=0xD800)
    assert out.tolist() == [b"\xd8\x00"]
    (out,) = run_kernel("UnicodeTranscode", strings(b"\xff"), input_encoding="UTF-8", output_encoding="UTF-32-BE",
                        replacement_char=0xD800)
    assert out.tolist() == [b"\x00\x00\xd8\x00"]


def test_encode_rows(run_kernel):
    assert encode(run_kernel, [], [0], "UTF-8") == []
    assert encode(run_kernel, [97, 98], [0, 1, 1, 2], "UTF-8") == [b"a", b"", b"b"]


TRANSCODE_INPUT = strings("abc", "h\u00e9\U0001F600", b"a\xffb\xe2\x82", b"\x01\x00z", "")


def test_transcode(run_kernel):
    (out,) = run_kernel("UnicodeTranscode", TRANSCODE_INPUT, input_encoding="UTF-8", output_encoding="UTF-16-BE")
    assert out.tolist() == [b"\x00a\x00b\x00c", b"\x00h\x00\xe9\xd8=\xde\x00", b"\x00a\xff\xfd\x00b\xff\xfd",
                            b"\x00\x01\x00\x00\x00z", b""]
    (out,) = run_kernel("UnicodeTranscode", TRANSCODE_INPUT, input_encoding="UTF-8", output_encoding="UTF-8",
                        errors="ignore", replacement_char=0x2603, replace_control_characters=True)
    assert out.tolist() == [b"abc", "h\u00e9\U0001F600".encode(), b"ab", b"z", b""]
    (out,) = run_kernel("UnicodeTranscode", TRANSCODE_INPUT, input_encoding="UTF-8", output_encoding="UTF-8",
                        replacement_char=0x2603, replace_control_characters=True)
    assert out.tolist()[2:4] == ["a\u2603b\u2603".encode(), "\u2603\u2603z".encode()]
    (out,) = run_kernel("UnicodeTranscode", strings(b"\xd8=\x00a").reshape(1, 1), input_encoding="UTF-16-BE",
                        output_encoding="UTF-16-BE", errors="ignore")
    assert out.shape == (1, 1) and out.tolist() == [[b"\x00a"]]


def test_transcode_strict(run_kernel):
    with pytest.raises(ValueError, match="^Invalid formatting on input string$"):
        run_kernel("UnicodeTranscode", TRANSCODE_INPUT, input_encoding="UTF-8", output_encoding="UTF-8",
                   errors="strict")
    # Unlike the decoders, a strict transcode refuses control characters it was told to replace.
    with pytest.raises(ValueError, match="^Invalid formatting on input string$"):
        run_kernel("UnicodeTranscode", strings(b"\x01a"), input_encoding="UTF-8", output_encoding="UTF-8",
                   errors="strict", replace_control_characters=True)


ENCODE_ERRORS = [
    pytest.param([97, 98], [[0, 2]], "Both the input_tensor and input_splits should be of rank 1. ", id="rank"),
    pytest.param([1, 2, 3], [], "Input_splits should contain elements, but given input_values has 0 elements",
                 id="no-splits"),
    pytest.param([97, 98], [1, 3], "First value in input_splits must be zero.", id="first"),
    pytest.param([97, 98, 99], [0, 3, 1], "Last value in input_splits must be equal to length of input_tensor.",
                 id="last-before-order"),
    pytest.param([97, 98], [0, -1, 2], "Values in input_splits must be equal or in ascending order.", id="order"),
]


@pytest.mark.parametrize("values, splits, message", ENCODE_ERRORS)
def test_encode_errors(run_kernel, values, splits, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        encode(run_kernel, values, splits, "UTF-8")


def test_encode_strict_refuses_surrogates_and_out_of_range(run_kernel):
    for code_point in (0xD800, 0x110000, -1):
        with pytest.raises(ValueError, match="^Code point is out of range for Unicode, or is a surrogate.$"):
            encode(run_kernel, [97, code_point], [0, 2], "UTF-16-BE", errors="strict")


def test_replacement_char_must_be_a_code_point(run_kernel):
    for op, inputs, attrs in [
        ("UnicodeDecode", [strings("a")], {"input_encoding": "UTF-8"}),
        ("UnicodeDecodeWithOffsets", [strings("a")], {"input_encoding": "UTF-8"}),
        ("UnicodeTranscode", [strings("a")], {"input_encoding": "UTF-8", "output_encoding": "UTF-8"}),
        ("UnicodeEncode", [np.array([97], np.int32), np.array([0, 1], np.int64)], {"output_encoding": "UTF-8"}),
    ]:
        for bad in (0x110000, -1):
            with pytest.raises(ValueError, match="^replacement_char out of unicode codepoint range$"):
                run_kernel(op, *inputs, replacement_char=bad, **attrs)


def test_unknown_input_encoding(run_kernel):
    with pytest.raises(ValueError, match="^Could not create converter for input encoding: bogus"):
        run_kernel("UnicodeDecode", strings("a"), input_encoding="bogus")
