"""Activation kernels: the ReLU family, soft curves and softmax, with TensorFlow's formulas and dtypes.
Expected values are hand-computed or math-module references; "TF" marks values read off TF 2.21."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tests.kernels.checks import a, check

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 in LeakyRelu(alpha=0) is TF's NaN too

nan, inf = math.nan, math.inf
f32, f64, f16, bf16, i32 = np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32

SELU_SCALE, SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717




X = [nan, 1.0, -2.0, 0.0, -0.0, inf, -inf]

CASES = [
    ("Relu", {}, X, [nan, 1, 0, 0, -0.0, inf, 0], 0),  # TF
    ("Relu6", {}, X + [7.0], [nan, 1, 0, 0, -0.0, 6, 0, 6], 0),  # TF
    ("Elu", {}, X, [nan, 1, math.expm1(-2), 0, -0.0, inf, -1], 1e-6),  # TF
    ("Selu", {}, [1.0, -1.0, -0.0], [SELU_SCALE, SELU_SCALE * SELU_ALPHA * math.expm1(-1), -0.0], 1e-6),
    ("LeakyRelu", {}, X, [nan, 1, -0.4, 0, -0.0, inf, -inf], 1e-7),  # TF, alpha defaults to 0.2
    ("LeakyRelu", {"alpha": 0.5}, [-4.0, 4.0], [-2, 4], 0),
    ("LeakyRelu", {"alpha": 2.0}, [-4.0, 4.0], [-8, 4], 0),
    ("LeakyRelu", {"alpha": 0.0}, [-4.0, 4.0, inf], [-0.0, 4, inf], 0),
    ("LeakyRelu", {"alpha": -0.5}, [-4.0, 4.0], [2, 4], 0),
    ("Softsign", {}, [3.0, -1.0, 0.0], [0.75, -0.5, 0], 0),
    # TF switches to exp(x) below log(eps) + 2 (about -13.94 in float32) and to x above 13.94.
    ("Softplus", {}, [-100.0, -20.0, -14.0, -1.0, 0.0, 1.0, 14.0, 100.0, nan],
     [math.exp(-100), math.exp(-20), math.exp(-14), math.log1p(math.exp(-1)), math.log(2), math.log1p(math.e), 14, 100, nan], 2e-7),
]


@pytest.mark.parametrize("op, attrs, x, expected, rtol", CASES, ids=[c[0] for c in CASES])
def test_activation_float32(run_kernel, op, attrs, x, expected, rtol):
    check(run_kernel(op, a(x, f32), **attrs)[0], a(expected, f32), rtol=rtol)


@pytest.mark.parametrize("dtype", [f16, bf16, f64], ids=["f16", "bf16", "f64"])
@pytest.mark.parametrize("op", ["Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softplus", "Softsign", "Softmax", "LogSoftmax"])
def test_activation_keeps_dtype(run_kernel, op, dtype):
    assert run_kernel(op, a([[-1.5, 0.5, 3.0]], dtype))[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("op", ["Relu", "Relu6"])
def test_integer_relu(run_kernel, op):
    check(run_kernel(op, a([-3, 2, 9], i32))[0], a([0, 2, 9 if op == "Relu" else 6], i32))


def test_leaky_relu_alpha_is_a_float32_attr(run_kernel):
    # The attr is float32 in the graph; TF casts that float32 to double for double features.
    check(run_kernel("LeakyRelu", a([-1.0], f64), alpha=0.2)[0], a([float(f32(0.2)) * -1.0], f64))


def _softmax_reference(rows):
    out = []
    for row in rows:
        m = max(row)
        e = [math.exp(v - m) for v in row]
        out.append([v / sum(e) for v in e])
    return out


LOGITS = [[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0], [-5.0, 0.0, 5.0]]


def test_softmax_is_stable(run_kernel):
    check(run_kernel("Softmax", a(LOGITS, f32))[0], a(_softmax_reference(LOGITS), f32), rtol=3e-7)


def test_log_softmax_is_stable(run_kernel):
    expected = [[v - max(row) - math.log(sum(math.exp(w - max(row)) for w in row)) for v in row] for row in LOGITS]
    # log(sum) near 1 carries float32's absolute error ~6e-8, relatively large on a small result (TF too)
    check(run_kernel("LogSoftmax", a(LOGITS, f32))[0], a(expected, f32), rtol=5e-6)


def test_softmax_over_last_axis_of_rank_3(run_kernel):
    x = np.arange(24, dtype=f64).reshape(2, 3, 4) / 7
    e = np.exp(x - x.max(-1, keepdims=True))
    check(run_kernel("Softmax", x)[0], e / e.sum(-1, keepdims=True), rtol=1e-15)


def test_softmax_float16_matches_tensorflow(run_kernel):
    tf_values = a([0.09002685546875, 0.24462890625, 0.6650390625], f16)  # TF
    check(run_kernel("Softmax", a([1, 2, 3], f16))[0], tf_values, rtol=1e-3)
