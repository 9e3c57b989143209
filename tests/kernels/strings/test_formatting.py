"""AsString: TensorFlow's printf formats, signs of zeros and NaNs, fills, and its attr errors. Every
expected value was read off TensorFlow 2.21; tests/fixtures/ops/preprocessing/as_string/ holds more."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

nan, inf = float("nan"), float("inf")
SPECIALS = np.array([0.0, -0.0, 1.5, -2.25, inf, -inf, nan, -nan], np.float32)


def strings(*values) -> list[bytes]:
    return [v.encode() if isinstance(v, str) else v for v in values]


CASES = [
    pytest.param(SPECIALS, {}, strings("0.000000", "-0.000000", "1.500000", "-2.250000", "inf", "-inf", "nan", "-nan"),
                 id="float-default"),
    pytest.param(SPECIALS, {"scientific": True},
                 strings("0.000000e+00", "-0.000000e+00", "1.500000e+00", "-2.250000e+00", "inf", "-inf", "nan", "-nan"),
                 id="float-scientific"),
    pytest.param(np.array([0.0, -0.0, 1e-7, 123456789.0, 0.1], np.float32), {"shortest": True},
                 strings("0", "-0", "1e-07", "1.23457e+08", "0.1"), id="float-shortest"),
    pytest.param(np.array([2.5, 0.5, 1.5, 123456789.0], np.float32), {"precision": 0},
                 strings("2", "0", "2", "123456792"), id="float-precision0-rounds-half-even"),
    pytest.param(np.array([1 / 3], np.float64), {"precision": 30}, strings("0.333333333333333314829616256247"),
                 id="double-exact-digits"),
    pytest.param(np.array([0.1], np.float32), {"precision": 20}, strings("0.10000000149011611938"),
                 id="float32-digits-of-the-float"),
    pytest.param(np.array([1.5, nan, -inf, -nan], np.float32), {"width": 6, "fill": "0"},
                 strings("1.500000", "   nan", "  -inf", "  -nan"), id="zero-fill-pads-non-finite-with-spaces"),
    pytest.param(np.array([-3.5, 42.0], np.float32), {"width": 11, "fill": "-"}, strings("-3.500000  ", "42.000000  "),
                 id="minus-fill-left-justifies"),
    pytest.param(np.array([nan, inf, -nan, 0.0, -0.0], np.float32), {"width": 6, "fill": "+"},
                 strings("  +nan", "  +inf", "  -nan", "+0.000000", "-0.000000"), id="plus-fill"),
    pytest.param(np.array([1.0, -1.0], np.float32), {"fill": " "}, strings(" 1.000000", "-1.000000"),
                 id="space-fill-without-width"),
    pytest.param(np.array([3.0, 1.5], np.float32), {"fill": "#", "precision": 0}, strings("3.", "2."),
                 id="hash-fill-keeps-the-point"),
    pytest.param(np.array([1.5, 100.0], np.float32), {"fill": "#", "shortest": True}, strings("1.50000", "100.000"),
                 id="hash-fill-keeps-trailing-zeros"),
    pytest.param(np.array([1e-45, -1e-45, 1.2e-38], np.float32), {"scientific": True},
                 strings("0.000000e+00", "-0.000000e+00", "1.200000e-38"), id="subnormals-read-as-zero"),
    pytest.param(np.array([5e-324, -2.2e-308], np.float64), {"scientific": True},
                 strings("0.000000e+00", "-0.000000e+00"), id="double-subnormals-read-as-zero"),
    pytest.param(np.array([6e-8, 1.5], np.float16), {"scientific": True}, strings("5.960464e-08", "1.500000e+00"),
                 id="half-subnormal-is-a-normal-float"),
    pytest.param(np.array([1.5, 3.140625], ml_dtypes.bfloat16), {"shortest": True}, strings("1.5", "3.14062"),
                 id="bfloat16"),
    pytest.param(np.array([1.5 - 2j], np.complex64), {"precision": 2, "scientific": True, "width": 10},
                 strings("(  1.50e+00, -2.00e+00)"), id="complex64"),
    pytest.param(np.array([0.1 + 1e20j], np.complex128), {"shortest": True}, strings("(0.1,1e+20)"), id="complex128"),
    pytest.param(np.array([0, -1, 2**31 - 1, -2**31], np.int32), {}, strings("0", "-1", "2147483647", "-2147483648"),
                 id="int32"),
    pytest.param(np.array([2**63 - 1, -2**63], np.int64), {}, strings("9223372036854775807", "-9223372036854775808"),
                 id="int64"),
    pytest.param(np.array([0, 2**64 - 1], np.uint64), {}, strings("0", "18446744073709551615"), id="uint64"),
    pytest.param(np.array([-3, 42], np.int32), {"width": 5, "fill": "0"}, strings("-0003", "00042"), id="int-zero-fill"),
    pytest.param(np.array([-3, 42], np.int32), {"width": 5, "fill": "-"}, strings("-3   ", "42   "), id="int-minus-fill"),
    pytest.param(np.array([7, -7], np.int64), {"width": 5, "fill": "+"}, strings("   +7", "   -7"), id="int-plus-fill"),
    pytest.param(np.array([7, 255], np.uint8), {"width": 5, "fill": "+"}, strings("    7", "  255"),
                 id="unsigned-ignores-plus"),
    pytest.param(np.array([3], np.int32), {"fill": "0"}, strings("3"), id="int-fill-without-width"),
    pytest.param(np.array([-128, 127], np.int8), {"width": 5}, strings(" -128", "  127"), id="int8-width"),
    pytest.param(np.array([True, False]), {"width": 8, "fill": "-"}, strings("true", "false"),
                 id="bool-ignores-width-and-fill"),
    pytest.param(np.array([b"abc", b"", "héllo".encode()], dtype=object), {"precision": 1, "scientific": True},
                 strings("abc", "", "héllo"), id="strings-pass-through"),
    pytest.param(np.array([b"abc", b"", "héllo".encode()], dtype=object), {"width": 6},
                 strings("   abc", "      ", "héllo"), id="strings-padded-to-width-in-bytes"),
    pytest.param(np.array([b"abc", "héllo".encode()], dtype=object), {"width": 5, "precision": 2, "fill": "-"},
                 strings("ab   ", b"h\xc3   "), id="strings-cut-to-precision-bytes-even-mid-character"),
]


@pytest.mark.parametrize("values, attrs, expected", CASES)
def test_as_string(run_kernel, values, attrs, expected):
    (out,) = run_kernel("AsString", values, **attrs)
    assert out.dtype == object and out.shape == values.shape
    assert out.tolist() == expected


def test_as_string_keeps_shape(run_kernel):
    (scalar,) = run_kernel("AsString", np.int32(3))
    assert scalar.shape == () and scalar.item() == b"3"
    (matrix,) = run_kernel("AsString", np.array([[1, 2], [3, 4]], np.int64))
    assert matrix.tolist() == [[b"1", b"2"], [b"3", b"4"]]
    (empty,) = run_kernel("AsString", np.zeros((0, 3), np.float32))
    assert empty.shape == (0, 3) and empty.dtype == object


ERRORS = [
    pytest.param(np.array([3], np.int32), {"precision": 2}, "precision not supported for datatype int32", id="int-precision"),
    pytest.param(np.array([3], np.uint8), {"precision": 0}, "precision not supported for datatype uint8",
                 id="uint8-precision"),
    pytest.param(np.array([True]), {"precision": 2}, "precision not supported for datatype bool", id="bool-precision"),
    pytest.param(np.array([3], np.int64), {"scientific": True},
                 "scientific and shortest format not supported for datatype int64", id="int-scientific"),
    pytest.param(np.array([3], np.int32), {"shortest": True},
                 "scientific and shortest format not supported for datatype int32", id="int-shortest"),
    pytest.param(np.array([3.0], np.float32), {"scientific": True, "shortest": True},
                 "Cannot select both scientific and shortest notation", id="scientific-and-shortest"),
    pytest.param(np.array([3], np.int32), {"fill": "00"}, "Fill string must be one or fewer characters", id="fill-two"),
    pytest.param(np.array([3], np.int32), {"fill": "é"}, "Fill string must be one or fewer characters",
                 id="fill-two-bytes"),
    pytest.param(np.array([3], np.int32), {"fill": "x", "width": 5}, 'Fill argument not supported: "x"', id="fill-x"),
    pytest.param(np.array([True]), {"fill": "*"}, r'Fill argument not supported: "\*"', id="fill-star-bool"),
    # TensorFlow's order: the dtype's attrs first, then the fill's length, both notations, the fill's kind.
    pytest.param(np.array([3], np.int32), {"fill": "xx", "precision": 2}, "precision not supported", id="order-precision"),
    pytest.param(np.array([3.0], np.float32), {"fill": "xx", "scientific": True, "shortest": True},
                 "Fill string must be", id="order-fill-length"),
    pytest.param(np.array([3.0], np.float32), {"fill": "x", "scientific": True, "shortest": True},
                 "Cannot select both", id="order-both-notations"),
]


@pytest.mark.parametrize("values, attrs, message", ERRORS)
def test_as_string_errors(run_kernel, values, attrs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("AsString", values, **attrs)
