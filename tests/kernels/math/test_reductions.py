"""Reduction kernels: axes from an input, keep_dims, TensorFlow's dtypes and empty-reduction values.
Expected values are hand-computed or numpy reference formulas; "TF" marks values read off TF 2.21."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tests.kernels.checks import a, check

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the mean of nothing is NaN, quietly in TF

nan, inf = math.nan, math.inf
f32, f16, bf16, i8, i32, i64, u8, u64 = np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.int32, np.int64, np.uint8, np.uint64




M = a([[1, 2, 3], [4, 5, 6]], f32)

REDUCTIONS = [
    ("Sum", M, a(1, i32), False, a([6, 15], f32)),
    ("Sum", M, a([-1, 0], i64), True, a([[21]], f32)),
    ("Sum", M, a([], i32), False, M),  # no axes: no reduction
    ("Sum", M, a(0, i64), True, a([[5, 7, 9]], f32)),
    ("Sum", a([2**30] * 4, i32), a(0, i32), False, a(0, i32)),  # int32 stays int32 and wraps
    ("Sum", a([100, 100], i8), a(0, i32), False, a(-56, i8)),  # TF
    ("Sum", np.zeros((0, 3), f32), a(0, i32), False, a([0, 0, 0], f32)),
    ("Mean", M, a(0, i32), False, a([2.5, 3.5, 4.5], f32)),
    ("Mean", a([-1, -2, -2], i32), a(0, i32), False, a(-1, i32)),  # TF: truncates toward zero
    ("Mean", a([2147483647, 2147483647, 2147483646], i32), a(0, i32), False, a(2147483646, i32)),  # TF: no overflow
    ("Mean", a([200, 200, 200], u8), a(0, i32), False, a(200, u8)),  # TF
    ("Mean", a([2**64 - 1] * 3, u64), a(0, i32), False, a(6148914691236517204, u64)),  # TF: the 64-bit sum wraps
    ("Mean", np.zeros((0,), f32), a(0, i32), False, a(nan, f32)),
    ("Mean", np.zeros((0,), i32), a(0, i32), False, a(0, i32)),  # TF
    ("Max", a([1, nan, 2], f32), a(0, i32), False, a(nan, f32)),  # TF: NaN propagates
    ("Max", M, a(1, i32), True, a([[3], [6]], f32)),
    ("Max", np.zeros((0, 2), f32), a(0, i32), False, a([-inf, -inf], f32)),  # TF
    ("Max", np.zeros((0,), i32), a(0, i32), False, a(-(2**31), i32)),  # TF
    ("Min", a([1, nan, 2], f32), a(0, i32), False, a(nan, f32)),
    ("Min", np.zeros((2, 0), f16), a(1, i32), True, a([[inf], [inf]], f16)),
    ("Min", np.zeros((0,), u8), a(0, i32), False, a(255, u8)),
    ("Prod", M, a(1, i32), False, a([6, 120], f32)),
    ("Prod", a([2**16, 2**16], i32), a(0, i32), False, a(0, i32)),  # wraps in int32
    ("Prod", np.zeros((0, 2), i32), a(0, i32), False, a([1, 1], i32)),  # TF
    ("All", a([[True, False], [True, True]], bool), a(1, i32), False, a([False, True], bool)),
    ("All", np.zeros((0,), bool), a(0, i32), False, a(True, bool)),
    ("Any", a([[True, False], [False, False]], bool), a(1, i32), True, a([[True], [False]], bool)),
    ("Any", np.zeros((0,), bool), a(0, i32), False, a(False, bool)),
    ("EuclideanNorm", a([[3, 4], [6, 8]], f32), a(1, i32), False, a([5, 10], f32)),
    ("EuclideanNorm", a([3, 4, 1], i32), a(0, i32), False, a(5, i32)),  # TF: integer square root
    ("EuclideanNorm", a([[-3]], f32), a([], i32), False, a([[3]], f32)),
]


@pytest.mark.parametrize("op, x, axis, keep_dims, expected", REDUCTIONS, ids=[c[0] for c in REDUCTIONS])
def test_reduction(run_kernel, op, x, axis, keep_dims, expected):
    check(run_kernel(op, x, axis, keep_dims=keep_dims)[0], expected)


@pytest.mark.parametrize("op, ref", [("Sum", np.sum), ("Mean", np.mean), ("Prod", np.prod)])
@pytest.mark.parametrize("dtype", [f16, bf16], ids=["f16", "bf16"])
def test_half_floats_accumulate_in_float32(run_kernel, op, ref, dtype):
    x = np.random.default_rng(0).uniform(0.9, 1.1, 3000).astype(dtype)
    expected = ref(x.astype(np.float64)).astype(dtype)
    check(run_kernel(op, x, a(0, i32))[0], np.asarray(expected), rtol=float(ml_dtypes.finfo(dtype).eps))


@pytest.mark.parametrize(
    "axis, message",
    [(a(2, i32), r"Invalid reduction dimension \(2 for input with 2 dimension\(s\)"),
     (a([0, -2], i32), "Axes contains duplicate dimension: 0")],
)
def test_bad_axes_are_errors(run_kernel, axis, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("Sum", M, axis)


ARG = [
    ("ArgMax", a([[1, 3, 3], [2, 2, 0]], f32), a(1, i32), None, a([1, 0], i64)),  # ties: first index
    ("ArgMin", a([[1, 3, 3], [2, 2, 0]], f32), a(0, i64), np.dtype(i32), a([0, 1, 1], i32)),
    ("ArgMax", a([1, nan, 2, nan], f32), a(0, i32), None, a(2, i64)),  # TF: NaN is passed over
    ("ArgMax", a([nan, 1, 2], f32), a(0, i32), None, a(2, i64)),  # TF
    ("ArgMax", a([nan, nan], f32), a(0, i32), None, a(0, i64)),  # TF
    ("ArgMax", a([[nan, 3, 3], [2, nan, 0]], f32), a(-1, i32), None, a([1, 0], i64)),  # TF
    ("ArgMin", a([1, nan, 0, nan], f32), a(0, i32), None, a(2, i64)),  # TF
    ("ArgMax", a([True, False, True], bool), a(0, i32), None, a(0, i64)),
    ("ArgMin", a([5, -3, 7, -3], i8), a(0, i32), None, a(1, i64)),
]


@pytest.mark.parametrize("op, x, dimension, output_type, expected", ARG, ids=[c[0] for c in ARG])
def test_arg_extremum(run_kernel, op, x, dimension, output_type, expected):
    attrs = {"output_type": output_type} if output_type is not None else {}
    check(run_kernel(op, x, dimension, **attrs)[0], expected)


def test_arg_max_of_an_empty_axis_is_an_error(run_kernel):
    with pytest.raises(ValueError, match=r"Reduction axis 0 is empty in shape \[0\]"):
        run_kernel("ArgMax", np.zeros((0,), f32), a(0, i32))


SCANS = [
    ("Cumsum", a([1, 2, 3], i32), a(0, i32), False, False, a([1, 3, 6], i32)),
    ("Cumsum", a([1, 2, 3], i32), a(0, i32), True, False, a([0, 1, 3], i32)),
    ("Cumsum", a([1, 2, 3], i32), a(0, i32), False, True, a([6, 5, 3], i32)),
    ("Cumsum", a([1, 2, 3], i32), a(0, i32), True, True, a([5, 3, 0], i32)),  # TF
    ("Cumsum", M, a(-1, i64), False, True, a([[6, 5, 3], [15, 11, 6]], f32)),  # TF
    ("Cumsum", a([100, 100], i8), a(0, i32), False, False, a([100, -56], i8)),  # stays int8, wraps
    ("Cumprod", M, a(1, i32), True, False, a([[1, 1, 2], [1, 4, 20]], f32)),  # TF
    ("Cumprod", M, a(0, i32), False, True, a([[4, 10, 18], [4, 5, 6]], f32)),
    ("Cumsum", np.zeros((0, 3), f32), a(0, i32), True, False, np.zeros((0, 3), f32)),
]


@pytest.mark.parametrize("op, x, axis, exclusive, reverse, expected", SCANS, ids=[c[0] for c in SCANS])
def test_scan(run_kernel, op, x, axis, exclusive, reverse, expected):
    check(run_kernel(op, x, axis, exclusive=exclusive, reverse=reverse)[0], expected)


@pytest.mark.parametrize("t, expected", [(a([[1, 2], [3, 4]], f32), a(15, f32)), (a([3, 4], f16), a(12.5, f16))])
def test_l2_loss(run_kernel, t, expected):
    check(run_kernel("L2Loss", t)[0], expected)


def test_reductions_leave_input_alone(run_kernel):
    x = M.copy()
    for op in ("Sum", "Mean", "Max", "Prod", "EuclideanNorm", "Cumsum"):
        run_kernel(op, x, a(0, i32))
    np.testing.assert_array_equal(x, M)
