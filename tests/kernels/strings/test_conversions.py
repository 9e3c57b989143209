"""StringToNumber, base64 and StringFormat against outputs read off TensorFlow 2.21, errors included.
tests/fixtures/ops/strings/to_number/, base64/ and format hold more."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest


def strings(*values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


FLOATS = [
    ("1", 1.0), (" 12 ", 12.0), ("-7", -7.0), ("+5", 5.0), ("0x1A", 26.0), ("-0x1a", -26.0), ("0X1a", 26.0),
    ("0x1.8p1", 3.0), ("0x.8", 0.5), ("0x1P-2", 0.25), ("1e3", 1000.0), ("1E+5", 1e5), (".5", 0.5), ("5.", 5.0),
    ("-.5e-1", -0.05), ("\t3\n", 3.0), ("\x0b4\x0c", 4.0), ("007", 7.0), ("inf", math.inf), ("-Inf", -math.inf),
    ("Infinity", math.inf), ("1e400", math.inf), ("1e99999999999999", math.inf), ("-1e-99999999999", -0.0),
]


@pytest.mark.parametrize("text, value", FLOATS, ids=[repr(t) for t, _ in FLOATS])
def test_floats_read_as_abseil_reads_them(run_kernel, text, value):
    for dtype in (np.float32, np.float64):
        (out,) = run_kernel("StringToNumber", strings(text), out_type=dtype)
        assert out.dtype == dtype and out[0] == value and math.copysign(1, out[0]) == math.copysign(1, value)


def test_nan_spellings(run_kernel):
    (out,) = run_kernel("StringToNumber", strings("nan", "NAN", "-nan", "nan(abc)", "nan()"), out_type=np.float64)
    assert np.isnan(out).all()


def test_float32_is_rounded_once(run_kernel):
    """Decimal to float32 directly: a tie goes to even, a hair past it up (via double it would tie)."""
    values = strings("1.000000059604644775390625", "1.00000005960464477539062500001", "3.4028235e38", "3.4028236e38",
                     "1e-45", "1e-50", "2147483648", "99999999999999999999")
    (out,) = run_kernel("StringToNumber", values, out_type=np.float32)
    expected = np.array([1.0, np.nextafter(np.float32(1), np.float32(2)), np.finfo(np.float32).max, np.inf,
                         1e-45, 0.0, 2147483648.0, 1e20], np.float32)
    np.testing.assert_array_equal(out, expected)
    (out,) = run_kernel("StringToNumber", values[:4], out_type=np.float64)
    np.testing.assert_array_equal(out, [1.000000059604644775390625, 1.00000005960464477539062500001,
                                        3.4028235e38, 3.4028236e38])


INTEGERS = [
    (np.int32, ["-2147483648", " 2147483647 ", "+5", "007", "\t3\n"], [-2**31, 2**31 - 1, 5, 7, 3]),
    (np.int64, ["-9223372036854775808", "9223372036854775807", "2147483648"], [-2**63, 2**63 - 1, 2**31]),
    (np.uint32, ["4294967295", "+7"], [2**32 - 1, 7]),
    (np.uint64, ["18446744073709551615", "4294967296"], [2**64 - 1, 2**32]),
]


@pytest.mark.parametrize("dtype, texts, values", INTEGERS, ids=[d.__name__ for d, _, _ in INTEGERS])
def test_integers(run_kernel, dtype, texts, values):
    (out,) = run_kernel("StringToNumber", strings(*texts).reshape(1, -1), out_type=dtype)
    assert out.dtype == dtype and out.tolist() == [values]


REFUSED = [
    (np.float32, ["", "  ", "1e", "1e+", ".", "1,5", "- 1", "+-1", "++1", "infin", "INFINITYx", "0x", "0x1p", "1_0",
                  "0xinfp0", "nan("]),
    (np.int32, ["2147483648", "-2147483649", "0x1A", "1e3", "1.5", "5.", "inf", "", "1_0", "\u0663"]),
    (np.int64, ["9223372036854775808", "99999999999999999999", ".5"]),
    (np.uint32, ["-0", "-1", "4294967296"]),
    (np.uint64, ["18446744073709551616", "-1"]),
]


@pytest.mark.parametrize("dtype, texts", REFUSED, ids=[d.__name__ for d, _ in REFUSED])
def test_refused_strings(run_kernel, dtype, texts):
    for text in texts:
        with pytest.raises(ValueError, match="^StringToNumberOp could not correctly convert string: "):
            run_kernel("StringToNumber", strings(text), out_type=dtype)


def test_refusal_names_the_string_up_to_its_first_nul(run_kernel):
    with pytest.raises(ValueError, match="convert string: 1$"):
        run_kernel("StringToNumber", strings("1\x002"))


def test_base64_round_trip_and_padding(run_kernel):
    values = strings("", "a", "ab", "abc", "abcd", b"\xff\xfe\xfd\xfc")
    (plain,) = run_kernel("EncodeBase64", values)
    (padded,) = run_kernel("EncodeBase64", values, pad=True)
    assert plain.tolist() == [b"", b"YQ", b"YWI", b"YWJj", b"YWJjZA", b"__79_A"]
    assert padded.tolist() == [b"", b"YQ==", b"YWI=", b"YWJj", b"YWJjZA==", b"__79_A=="]
    assert run_kernel("DecodeBase64", plain)[0].tolist() == values.tolist()
    assert run_kernel("DecodeBase64", padded)[0].tolist() == values.tolist()


def test_base64_decode_ignores_leftover_bits(run_kernel):
    assert run_kernel("DecodeBase64", strings("QR", "QQ"))[0].tolist() == [b"A", b"A"]


BASE64_ERRORS = [
    ("YQ=", "Invalid character found in base64."), ("//79", "Invalid character found in base64."),
    ("YQ==YQ==", "Invalid character found in base64."), ("Y===", "Invalid character found in base64."),
    ("YW=j", "Invalid character found in base64."), (" YQ", "Invalid character found in base64."),
    ("YQ\n", "Invalid character found in base64."), ("Y\u00e9A", "Invalid character found in base64."),
    ("Y", "Base64 string length cannot be 1 modulo 4."), ("YWJjZ", "Base64 string length cannot be 1 modulo 4."),
    ("YWJj=", "Base64 string length cannot be 1 modulo 4."), ("YW=jZ", "Invalid character found in base64."),
]


@pytest.mark.parametrize("text, message", BASE64_ERRORS, ids=[repr(t) for t, _ in BASE64_ERRORS])
def test_base64_decode_errors(run_kernel, text, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        run_kernel("DecodeBase64", strings(text))


def formatted(run_kernel, *inputs, **attrs) -> bytes:
    (out,) = run_kernel("StringFormat", *inputs, **attrs)
    assert out.shape == () and out.dtype == object
    return out.item()


def test_format_numbers(run_kernel):
    floats = np.array([1.5, 0.1, 1e20, -0.0, np.nan, np.inf, 1 / 3, 123456789.0, 1e-7, 1e-45], np.float32)
    assert formatted(run_kernel, floats, template="{}", placeholder="{}", summarize=-1) == \
        b"[1.5 0.1 1e+20 -0 nan inf 0.333333343 123456792 1e-07 0]"
    doubles = np.array([1.5, 0.1, 1e20, 1 / 3, 123456789.0, 1e-7, 5e-324])
    assert formatted(run_kernel, doubles, summarize=-1) == b"[1.5 0.1 1e+20 0.33333333333333331 123456789 1e-07 0]"
    assert formatted(run_kernel, np.array([1.5, 0.1], np.float16), summarize=-1) == b"[1.5 0.0999755859]"
    assert formatted(run_kernel, np.array([1.5, 3.14159], ml_dtypes.bfloat16), summarize=-1) == b"[1.5 3.140625]"
    assert formatted(run_kernel, np.array([True, False])) == b"[1 0]"
    assert formatted(run_kernel, np.array([-100, 3], np.int8), np.array([200], np.uint8), template="%s %s") == \
        b"[-100 3] [200]"
    assert formatted(run_kernel, np.int32(5), template="x={}!", placeholder="{}") == b"x=5!"


def test_format_strings_are_quoted_and_escaped(run_kernel):
    values = strings("a", "b'c", 'q"x', "\n", "h\u00e9", b"a\x00b\x7f")
    assert formatted(run_kernel, values, summarize=-1) == \
        b'["a" "b\\\'c" "q\\"x" "\\n" "h\xc3\xa9" "a\\000b\\177"]'
    assert formatted(run_kernel, np.array(b"hi", dtype=object), template="[%s]") == b'["hi"]'


def test_format_summarizes_each_dim(run_kernel):
    matrix = np.arange(24, dtype=np.int32).reshape(4, 6)
    assert formatted(run_kernel, matrix) == \
        b"[[0 1 2 3 4 5]\n [6 7 8 9 10 11]\n [12 13 14 15 16 17]\n [18 19 20 21 22 23]]"
    assert formatted(run_kernel, matrix, summarize=2) == \
        b"[[0 1 ... 4 5]\n [6 7 ... 10 11]\n [12 13 ... 16 17]\n [18 19 ... 22 23]]"
    assert formatted(run_kernel, matrix.reshape(2, 3, 4), summarize=1) == \
        b"[[[0 ... 3]\n  ...\n  [8 ... 11]]\n\n [[12 ... 15]\n  ...\n  [20 ... 23]]]"
    assert formatted(run_kernel, np.arange(7), summarize=3) == b"[0 1 2 ... 4 5 6]"
    assert formatted(run_kernel, np.arange(6), summarize=3) == b"[0 1 2 3 4 5]"
    assert formatted(run_kernel, np.arange(10), summarize=0) == b"[ ...]"


def test_format_empty_and_unprintable_tensors(run_kernel):
    assert formatted(run_kernel, np.zeros([0], np.int32), np.zeros([2, 0], np.float32), template="{} {}",
                     placeholder="{}") == b"[] [\n ...]"
    assert formatted(run_kernel, np.array([1 + 2j, 3j, 4], np.complex64), summarize=2) == b"[? ?...]"
    assert formatted(run_kernel, np.float32(3.0), summarize=0) == b"..."


def test_format_template_edges(run_kernel):
    assert formatted(run_kernel, np.int32(7), template="ab", placeholder="") == b"a7b"  # split into characters
    assert formatted(run_kernel, template="no placeholders") == b"no placeholders"
    with pytest.raises(ValueError, match="num placeholders in template and num inputs must match: 2 vs. 1"):
        run_kernel("StringFormat", np.int32(1), template="a{}b{}", placeholder="{}")
