"""Elementwise math kernels: TensorFlow's values and dtypes, checked against hand values, math-module
references, and values read off TensorFlow 2.21 (noted "TF" where a case records one)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tests.kernels.checks import a, check

# IEEE results (1/0, log(0), casts of NaN) are TensorFlow's answers too; numpy's warnings about them are noise.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

nan, inf = math.nan, math.inf
f32, f64, f16, bf16 = np.float32, np.float64, np.float16, ml_dtypes.bfloat16
i8, i32, i64, u8 = np.int8, np.int32, np.int64, np.uint8




UNARY = [
    ("Abs", a([-2, 3, -(2**31)], i32), a([2, 3, -(2**31)], i32)),  # abs(INT_MIN) wraps, as in C
    ("Neg", a([1.5, -0.0], f32), a([-1.5, 0.0], f32)),
    ("Square", a([100], i8), a([16], i8)),  # 10000 wraps to 16 in int8
    ("Sqrt", a([4, 2], f32), a([2, math.sqrt(2)], f32)),
    ("Rsqrt", a([4, 0.25], f32), a([0.5, 2], f32)),
    ("Reciprocal", a([4, -0.5], f64), a([0.25, -2], f64)),
    ("Inv", a([8], f16), a([0.125], f16)),
    ("Sign", a([-3.5, 0.0, 2.0, nan], f32), a([-1, 0, 1, nan], f32)),
    ("Sign", a([-5, 0, 5], i32), a([-1, 0, 1], i32)),
    ("Floor", a([-1.5, 1.5], f32), a([-2, 1], f32)),
    ("Ceil", a([-1.5, 1.5], f32), a([-1, 2], f32)),
    ("Round", a([0.5, 1.5, 2.5, -0.5, -2.5, 2.6], f32), a([0, 2, 2, -0.0, -2, 3], f32)),
    ("Round", a([3, -4], i32), a([3, -4], i32)),
    ("Rint", a([0.5, 1.5, -2.5], f64), a([0, 2, -2], f64)),
    ("IsNan", a([nan, inf, 1], f32), a([True, False, False], bool)),
    ("IsInf", a([nan, -inf, 1], f16), a([False, True, False], bool)),
    ("IsFinite", a([nan, inf, 1], bf16), a([False, False, True], bool)),
    ("LogicalNot", a([True, False], bool), a([False, True], bool)),
    ("Invert", a([0, 5], u8), a([255, 250], u8)),
    ("Invert", a([0, -1], i32), a([-1, 0], i32)),
]


@pytest.mark.parametrize("op, x, expected", UNARY, ids=[c[0] for c in UNARY])
def test_unary_exact(run_kernel, op, x, expected):
    check(run_kernel(op, x)[0], expected)


MATH_REFERENCE = [
    ("Exp", math.exp), ("Expm1", math.expm1), ("Log", math.log), ("Log1p", math.log1p),
    ("Sin", math.sin), ("Cos", math.cos), ("Tan", math.tan), ("Asin", math.asin), ("Acos", math.acos),
    ("Atan", math.atan), ("Sinh", math.sinh), ("Cosh", math.cosh), ("Asinh", math.asinh),
    ("Acosh", math.acosh), ("Atanh", math.atanh), ("Tanh", math.tanh),
    ("Sigmoid", lambda v: 1 / (1 + math.exp(-v))),
]
_POINTS = [1e-6, 0.1, 0.25, 0.5, 0.9]  # inside every domain here


@pytest.mark.parametrize("dtype, rtol", [(f32, 2e-7), (f64, 1e-15), (f16, 1e-3)], ids=["f32", "f64", "f16"])
@pytest.mark.parametrize("op, ref", MATH_REFERENCE, ids=[c[0] for c in MATH_REFERENCE])
def test_unary_transcendental_keeps_dtype(run_kernel, op, ref, dtype, rtol):
    x = a(_POINTS, dtype) + dtype(1) if op == "Acosh" else a(_POINTS, dtype)
    expected = a([ref(float(v)) for v in x], dtype)
    check(run_kernel(op, x)[0], expected, rtol=rtol)


def test_sigmoid_keeps_precision_far_out(run_kernel):
    x = a([-20.0, -80.0, 20.0, 100.0, nan], f32)
    expected = a([1 / (1 + math.exp(20)), 1 / (1 + math.exp(80)), 1.0, 1.0, nan], f32)
    check(run_kernel("Sigmoid", x)[0], expected, rtol=2e-7)


def test_bfloat16_stays_bfloat16(run_kernel):
    x = a([-1.0, 0.5, 2.0], bf16)
    for op in ("Sigmoid", "Exp", "Tanh", "Rsqrt", "Erf"):
        assert run_kernel(op, x)[0].dtype == np.dtype(bf16), op


# ---- Erf / Erfc: correctly rounded float32 against math.erf, over every range of the approximation ----

_ERF_POINTS = [0.0, -0.0, 1e-30, 1e-5, 0.3, 0.46875, 0.47, 0.9, 1.0, 2.0, 3.9, 4.0, 4.1, 5.0, 9.0, 10.5, 27.0]
_ERF_POINTS = _ERF_POINTS + [-v for v in _ERF_POINTS]


@pytest.mark.parametrize("dtype", [f32, f64], ids=["f32", "f64"])
@pytest.mark.parametrize("op, ref", [("Erf", math.erf), ("Erfc", math.erfc)], ids=["Erf", "Erfc"])
def test_erf_erfc_match_math_module(run_kernel, op, ref, dtype):
    x = a(_ERF_POINTS, dtype)
    expected = a([ref(float(v)) for v in x], dtype)
    # float32 takes the fast single-formula route (relative error < 1.2e-7 before rounding: <= 2 ulp);
    # float64 the exact Cody route.
    check(run_kernel(op, x)[0], expected, rtol=2.5e-7 if dtype == f32 else 2e-15)


@pytest.mark.parametrize("op, expected", [("Erf", [nan, 1.0, -1.0]), ("Erfc", [nan, 0.0, 2.0])])
def test_erf_erfc_special_values(run_kernel, op, expected):
    check(run_kernel(op, a([nan, inf, -inf], f32))[0], a(expected, f32))


def test_gelu_through_erfc_matches_tensorflow(run_kernel):
    # 0.5 * x * erfc(-x / sqrt(2)), as Keras GELU freezes; expected values from TF 2.21.
    x = a([-3.0, -1.0, -0.1, 0.5, 2.0], f32)
    erfc = run_kernel("Erfc", -x * f32(0.70710678))[0]
    tf_gelu = a([-0.004049695562571287, -0.15865525603294373, -0.04601721838116646, 0.3457312285900116, 1.9544997215270996], f32)
    check(f32(0.5) * x * erfc, tf_gelu, rtol=1e-6)


# ---- Cast ----

CASTS = [
    (a([2.7, -2.7, 0.0], f32), i32, False, a([2, -2, 0], i32)),  # truncates toward zero
    (a([nan, inf, -inf, 3e9], f32), i32, False, a([-(2**31)] * 4, i32)),  # TF on x86: INT_MIN
    (a([300, -3], i32), u8, False, a([44, 253], u8)),  # integers wrap
    (a([nan, 1.0, -2.0, 0.0, -0.0, inf], f32), bool, False, a([True, True, True, False, False, True], bool)),
    (a([True, False], bool), f32, False, a([1, 0], f32)),
    (a([1 + 2j], np.complex64), f32, False, a([1], f32)),  # keeps the real part
    (a([1.00390625 + 2**-9], f32), bf16, False, a([1.0078125], bf16)),  # rounds to nearest
    (a([1.00390625 + 2**-9], f32), bf16, True, a([1.0], bf16)),  # TF: truncates the mantissa
    (a([1 + 2**-11 + 2**-20, 70000.0], f32), f16, True, a([1.0, inf], f16)),  # TF
    (a([1 + 2**-24 + 2**-40], f64), f32, True, a([1.0], f32)),  # TF
    (a([1 + 2**-8 + 2**-9], f64), bf16, True, a([1.0078125], bf16)),  # TF: no truncation for this pair
    (a([nan], f32), bf16, True, a([nan], bf16)),
]


@pytest.mark.parametrize("x, dst, truncate, expected", CASTS)
def test_cast(run_kernel, x, dst, truncate, expected):
    check(run_kernel("Cast", x, SrcT=x.dtype, DstT=np.dtype(dst), Truncate=truncate)[0], expected)


# ---- CheckNumerics ----


@pytest.mark.parametrize(
    "values, status", [([1.0, nan], "NaN"), ([inf, 1.0], "Inf"), ([nan, -inf], "Inf and NaN")]
)
def test_check_numerics_raises_tensorflow_message(run_kernel, values, status):
    with pytest.raises(ValueError, match=f"^boom : Tensor had {status} values$"):
        run_kernel("CheckNumerics", a(values, f32), message="boom")


def test_check_numerics_passes_finite_tensor(run_kernel):
    x = a([1.0, -2.0], f16)
    check(run_kernel("CheckNumerics", x, message="m")[0], x)


@pytest.mark.parametrize(
    "values, status",
    [([1.0, inf], "\\+Inf"), ([-inf], "-Inf"), ([inf, -inf], "-Inf and \\+Inf"), ([nan, 1.0], "NaN"),
     ([nan, inf, -inf], "-Inf, \\+Inf, and NaN"), ([-inf, nan], "-Inf and NaN")],
)
def test_check_numerics_v2_tells_the_infinities_apart(run_kernel, values, status):
    with pytest.raises(ValueError, match=f"^boom : Tensor had {status} values$"):
        run_kernel("CheckNumericsV2", a(values, f32), message="boom")


def test_check_numerics_v2_passes_finite_tensor(run_kernel):
    x = a([1.0, -2.0], bf16)
    check(run_kernel("CheckNumericsV2", x, message="m")[0], x)


# ---- binary ----

# TF 2.21 integer division facts: [-7, 7, -7, 7] op [2, 2, -2, -2].
_N, _D = a([-7, 7, -7, 7], i32), a([2, 2, -2, -2], i32)

BINARY = [
    ("Div", _N, _D, a([-3, 3, 3, -3], i32)),
    ("RealDiv", _N, _D, a([-3, 3, 3, -3], i32)),
    ("TruncateDiv", _N, _D, a([-3, 3, 3, -3], i32)),
    ("FloorDiv", _N, _D, a([-4, 3, 3, -4], i32)),
    ("FloorMod", _N, _D, a([1, 1, -1, -1], i32)),
    ("TruncateMod", _N, _D, a([-1, 1, -1, 1], i32)),
    ("Mod", _N, _D, a([-1, 1, -1, 1], i32)),
    ("Div", _N.astype(i64), _D.astype(i64), a([-3, 3, 3, -3], i64)),
    ("Div", a([7, 200], u8), a([2, 3], u8), a([3, 66], u8)),
    ("Div", a([1, -1], f32), a([4, 0], f32), a([0.25, -inf], f32)),
    ("TruncateDiv", a([-7, 7], f32), a([2, 2], f32), a([-3, 3], f32)),
    ("FloorDiv", a([1.0, -7, 7], f32), a([0.1, 2, 0], f32), a([10, -4, inf], f32)),  # TF: floor(x / y)
    ("FloorMod", a([5.5, -5.5, 1], f32), a([-2, 2, inf], f32), a([-0.5, 0.5, 1], f32)),
    ("TruncateMod", a([5.5, -5.5], f64), a([-2, 2], f64), a([1.5, -1.5], f64)),
    ("Add", a([100], i8), a([100], i8), a([-56], i8)),  # wraps
    ("Add", a([1.5], f32), a([[1], [2]], f32), a([[2.5], [3.5]], f32)),  # broadcasts
    ("Add", a([b"ab", b"c"], object), a([b"x", b""], object), a([b"abx", b"c"], object)),
    ("AddV2", a([1, 2], f16), a(0.5, f16), a([1.5, 2.5], f16)),
    ("Sub", a([0], u8), a([1], u8), a([255], u8)),
    ("Mul", a([2**30], i32), a([4], i32), a([0], i32)),
    ("Maximum", a([nan, 1, -0.0, 3], f32), a([0, nan, 0, 2], f32), a([nan, nan, -0.0, 3], f32)),
    ("Minimum", a([nan, 1, 3], f32), a([0, nan, 2], f32), a([nan, nan, 2], f32)),
    ("Pow", a([2, 3, -2], i32), a([10, 0, 3], i32), a([1024, 1, -8], i32)),
    ("Pow", a([4, 2], f32), a([0.5, -1], f32), a([2, 0.5], f32)),
    ("SquaredDifference", a([1, 5], i32), a([4, 5], i32), a([9, 0], i32)),
    ("Atan2", a([1, 1, -1], f64), a([1, -1, 0], f64), a([math.pi / 4, 3 * math.pi / 4, -math.pi / 2], f64)),
    ("DivNoNan", a([1, nan, 0, 6], f32), a([0, 0, 0, 3], f32), a([0, 0, 0, 2], f32)),
    ("MulNoNan", a([inf, nan, 1, 2], f32), a([0, 0, nan, 3], f32), a([0, 0, nan, 6], f32)),
    ("Xdivy", a([0, 0, 1, 6], f32), a([0, nan, 0, 3], f32), a([0, 0, inf, 2], f32)),
    ("Xlogy", a([0, 0, 1, 2], f32), a([0, nan, 0, math.e], f32), a([0, 0, -inf, 2], f32)),
    ("BitwiseAnd", a([12], u8), a([10], u8), a([8], u8)),
    ("BitwiseOr", a([12], i32), a([10], i32), a([14], i32)),
    ("BitwiseXor", a([12], i64), a([10], i64), a([6], i64)),
    # TF clamps the shift count to [0, bits - 1]
    ("LeftShift", a([1, 1, 1, -1], i32), a([31, 32, 40, -1], i32), a([-(2**31)] * 3 + [-1], i32)),
    ("RightShift", a([-8, -8, 8, 8], i32), a([1, 32, 40, -1], i32), a([-4, -1, 0, 8], i32)),
    ("RightShift", a([255, 255], u8), a([9, 200], u8), a([1, 1], u8)),
    ("Equal", a([1, nan, 2], f32), a([1, nan, 3], f32), a([True, False, False], bool)),
    ("Equal", a([b"a", b"b"], object), a([b"a", b"c"], object), a([True, False], bool)),
    ("NotEqual", a([1, 2], i32), a([1, 3], i32), a([False, True], bool)),
    ("Less", a([1, 2], i32), a(2, i32), a([True, False], bool)),
    ("LessEqual", a([1, 2], i32), a(2, i32), a([True, True], bool)),
    ("Greater", a([1, nan], f32), a(0, f32), a([True, False], bool)),
    ("GreaterEqual", a([1, 2], f32), a(2, f32), a([False, True], bool)),
    ("LogicalAnd", a([True, True, False], bool), a([True, False, False], bool), a([True, False, False], bool)),
    ("LogicalOr", a([True, True, False], bool), a([True, False, False], bool), a([True, True, False], bool)),
]


@pytest.mark.parametrize("op, x, y, expected", BINARY, ids=[c[0] for c in BINARY])
def test_binary(run_kernel, op, x, y, expected):
    check(run_kernel(op, x, y)[0], expected)


@pytest.mark.parametrize("op", ["Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Mod", "RealDiv"])
@pytest.mark.parametrize("dtype", [i32, i64, u8])
def test_integer_division_by_zero_is_an_error(run_kernel, op, dtype):
    with pytest.raises(ValueError, match="Integer division by zero"):
        run_kernel(op, a([1, 2], dtype), a([1, 0], dtype))


def test_integer_to_negative_power_is_an_error(run_kernel):
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        run_kernel("Pow", a([2], i32), a([-1], i32))


@pytest.mark.parametrize("dtype", [f16, bf16, f64], ids=["f16", "bf16", "f64"])
@pytest.mark.parametrize("op", ["AddV2", "Div", "FloorDiv", "FloorMod", "DivNoNan", "MulNoNan", "Xlogy", "Maximum"])
def test_float_binary_keeps_dtype(run_kernel, op, dtype):
    assert run_kernel(op, a([1.0, 2.0], dtype), a([3.0, 0.0], dtype))[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("op, expected", [("Equal", False), ("NotEqual", True)])
def test_equality_of_incompatible_shapes(run_kernel, op, expected):
    x, y = a([1, 2], f32), a([1, 2, 3], f32)
    check(run_kernel(op, x, y, incompatible_shape_error=False)[0], np.array(expected))
    with pytest.raises(ValueError):
        run_kernel(op, x, y, incompatible_shape_error=True)


# ---- AddN, Select, BiasAdd, ClipByValue ----


def test_add_n_sums_and_wraps(run_kernel):
    xs = [a([100, 1], i8)] * 3
    check(run_kernel("AddN", *xs, N=3)[0], a([44, 3], i8))
    check(run_kernel("AddN", a([1.5], f32), N=1)[0], a([1.5], f32))


def test_add_n_leaves_inputs_alone(run_kernel):
    x, y, z = a([1.0], f32), a([2.0], f32), a([3.0], f32)
    check(run_kernel("AddN", x, y, z, N=3)[0], a([6.0], f32))
    assert x[0] == 1.0 and y[0] == 2.0 and z[0] == 3.0


_X23 = a([[1, 2, 3], [4, 5, 6]], f32)
_Y23 = -_X23

SELECTS = [
    ("Select", a([True, False], bool), _X23, _Y23, a([[1, 2, 3], [-4, -5, -6]], f32)),  # vector picks rows
    ("Select", a([[True, False, True], [False, True, False]], bool), _X23, _Y23, a([[1, -2, 3], [-4, 5, -6]], f32)),
    ("Select", np.array(False), _X23, _Y23, _Y23),
    ("SelectV2", a([True, False, True], bool), _X23, a(0, f32), a([[1, 0, 3], [4, 0, 6]], f32)),  # broadcasts
]


@pytest.mark.parametrize("op, cond, x, y, expected", SELECTS)
def test_select(run_kernel, op, cond, x, y, expected):
    check(run_kernel(op, cond, x, y)[0], expected)


BIAS = [
    ("BiasAdd", np.zeros((1, 2, 3), f32), a([1, 2, 3], f32), "NHWC", a([[[1, 2, 3], [1, 2, 3]]], f32)),
    ("BiasAdd", np.zeros((1, 2, 3), f32), a([1, 2], f32), "NCHW", a([[[1, 1, 1], [2, 2, 2]]], f32)),
    ("BiasAdd", np.zeros((1, 2), f32), a([1, 2], f32), "NCHW", a([[1, 2]], f32)),
    ("BiasAdd", np.zeros((1, 2, 1, 1, 2), f32), a([1, 2], f32), "NCHW", a([1, 2], f32).reshape(1, 2, 1, 1, 1).repeat(2, -1)),
    ("BiasAddV1", np.zeros((2, 2), i32), a([1, 2], i32), None, a([[1, 2], [1, 2]], i32)),
]


@pytest.mark.parametrize("op, value, bias, data_format, expected", BIAS)
def test_bias_add(run_kernel, op, value, bias, data_format, expected):
    attrs = {"data_format": data_format} if data_format else {}
    check(run_kernel(op, value, bias, **attrs)[0], expected)


def test_bias_add_rejects_a_mismatched_bias(run_kernel):
    with pytest.raises(ValueError, match="as many biases"):
        run_kernel("BiasAdd", np.zeros((2, 3), f32), a([1], f32))


CLIPS = [
    (a([nan, 1, -2, 0.5, inf], f32), a(0, f32), a(1, f32), a([nan, 1, 0, 0.5, 1], f32)),
    (a([nan, 5, -5], f32), a(1, f32), a(0, f32), a([nan, 1, 1], f32)),  # TF: lo > hi gives lo
    (a([1, 5, 9], i32), a([2, 2, 2], i32), a(6, i32), a([2, 5, 6], i32)),
]


@pytest.mark.parametrize("t, lo, hi, expected", CLIPS)
def test_clip_by_value(run_kernel, t, lo, hi, expected):
    check(run_kernel("ClipByValue", t, lo, hi)[0], expected)


def test_large_sigmoid_in_chunks_equals_whole_tensor_formula():
    """A Sigmoid larger than a chunk runs chunk by chunk on the kernel pool: the same values, bit for bit."""
    from kernels.math import elementwise

    x = np.random.default_rng(5).standard_normal(5 * elementwise._SIGMOID_CHUNK + 7).astype(np.float32) * 40
    x[:4] = [np.nan, np.inf, -np.inf, -0.0]
    e = np.exp(-np.abs(x))
    r = np.reciprocal(e + np.float32(1))
    want = np.where(x >= 0, r, e * r)
    got = elementwise.sigmoid(np, x.reshape(5, -1) if x.size % 5 == 0 else x)[0]
    np.testing.assert_array_equal(got.reshape(-1), want)
    np.testing.assert_array_equal(elementwise.sigmoid(np, x[::2])[0], want[::2])  # a strided view
