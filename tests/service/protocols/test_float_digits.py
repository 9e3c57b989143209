"""TensorFlow Serving's digits for float32 values: "%g" when it reads back as the same float32, else
"%.9g". The vectorised path (arrays of more than 8 values) must agree with the per-value twin,
which goes through printf's own rounding, on every float32."""

import math

import numpy as np
import pytest

from service.protocols.codecs.float_digits import tf_float32_digits, tf_float32_digits_of

PER_VALUE_MAX = 8  # arrays up to this size take the per-value path

F32 = np.float32
EDGES = [
    0.0, -0.0,
    float(np.finfo(F32).smallest_subnormal),  # 1e-45 as float32
    float(np.nextafter(F32(np.finfo(F32).tiny), F32(0))),  # largest subnormal
    float(np.finfo(F32).tiny),  # smallest normal
    float(np.finfo(F32).max), -float(np.finfo(F32).max), 3.4028235e38,
    0.1, -0.1, 1 / 3, 1e-45, 9.999999e-5, 1e-4, 1e22, 1e28, 1e-16, 1e-5, 1e-38, 1e38,
    100000.0, 999999.0, 1e6, 123456.7, 16777216.0, 16777217.0, 0.3, 2.5, 65504.0, -7.25e-30, 1.0, -1.0,
]
# TF Serving's text for some of them: "%g" where it reads back as the same float32, else "%.9g".
EXPECTED_REPR = {
    0.1: "0.1",
    1 / 3: "0.333333343",
    1e-45: "1.4013e-45",
    3.4028235e38: "3.40282347e+38",
    9.999999e-5: "9.99999902e-05",
    1e22: "1e+22",
    1e28: "1e+28",
    1e-16: "1e-16",
    1e-5: "1e-05",
    0.3: "0.3",
    123456.7: "123456.703",
    16777216.0: "16777216.0",
    -7.25e-30: "-7.25e-30",
    float(np.finfo(F32).tiny): "1.17549435e-38",
}


def as_bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


def twin(values: np.ndarray) -> list[float]:
    return [tf_float32_digits_of(x) for x in values.astype(np.float64).reshape(-1).tolist()]


def vectorised(values: np.ndarray) -> np.ndarray:
    """Through the vectorised path whatever the size: padded past the per-value limit."""
    values = np.asarray(values, dtype=F32).reshape(-1)
    padded = np.concatenate([values, np.ones(PER_VALUE_MAX + 1, F32)])
    return tf_float32_digits(padded)[: values.size]


def per_value(values: np.ndarray) -> np.ndarray:
    """Through the per-value path: one value per call."""
    values = np.asarray(values, dtype=F32).reshape(-1)
    return np.array([tf_float32_digits(values[i : i + 1])[0] for i in range(values.size)], dtype=np.float64)


def test_vectorised_path_equals_twin_on_random_bit_patterns():
    rng = np.random.default_rng(20240601)
    values = rng.integers(0, 2**32, size=220_000, dtype=np.uint64).astype(np.uint32).view(F32)
    values = values[np.isfinite(values)]
    assert values.size >= 200_000
    got = tf_float32_digits(values)
    assert got.dtype == np.float64 and got.shape == values.shape
    assert as_bits(got) == as_bits(twin(values))


def test_vectorised_path_equals_twin_around_powers_of_ten():
    # log10 lands one off next to powers of ten, and 10.0**k is inexact beyond k = 22: every float32
    # within a few ulps of each power of ten (and of 9.5 * 10**k, where %g's rounding carries).
    centres = []
    for k in range(-45, 39):
        for mantissa in (1.0, 9.5, 9.9999995, 5.0):
            with np.errstate(over="ignore"):
                centre = F32(mantissa * 10.0**k)
            if np.isfinite(centre) and centre != 0:
                centres.append(centre)
    near = [F32(c) for c in centres]
    for step in range(8):
        near = [np.nextafter(x, F32(np.inf)) for x in near] + [np.nextafter(x, F32(0)) for x in near[: len(centres)]]
    values = np.unique(np.array(centres + near, dtype=F32))
    values = np.concatenate([values, -values])
    assert as_bits(tf_float32_digits(values)) == as_bits(twin(values))


def test_vectorised_path_equals_twin_over_every_exponent():
    rng = np.random.default_rng(5)
    exponents = np.repeat(np.arange(256, dtype=np.uint32), 200)  # every float32 exponent, subnormals too
    mantissas = rng.integers(0, 2**23, size=exponents.size, dtype=np.uint32)
    signs = rng.integers(0, 2, size=exponents.size, dtype=np.uint32)
    values = ((signs << 31) | (exponents << 23) | mantissas).view(F32)
    values = values[np.isfinite(values)]
    assert as_bits(tf_float32_digits(values)) == as_bits(twin(values))


@pytest.mark.parametrize("path", [per_value, vectorised])
def test_edge_values(path):
    values = np.array(EDGES, dtype=F32)
    got = path(values)
    assert as_bits(got) == as_bits(twin(values))
    # reads back as the same float32, sign of zero included
    assert got.astype(F32).view(np.uint32).tolist() == values.view(np.uint32).tolist()


@pytest.mark.parametrize("path", [per_value, vectorised])
def test_text_is_percent_g_when_it_round_trips_else_nine_digits(path):
    values = np.array(EDGES, dtype=F32)
    for value, got in zip(values.astype(np.float64).tolist(), path(values).tolist(), strict=True):
        if value == 0:
            assert as_bits([got]) == as_bits([value])
            continue
        with np.errstate(over="ignore"):
            short_round_trips = F32(float("%g" % value)) == F32(value)
        expected = float("%g" % value) if short_round_trips else float("%.9g" % value)
        assert got == expected, (value, got, expected)


@pytest.mark.parametrize("path", [per_value, vectorised])
@pytest.mark.parametrize("value,text", list(EXPECTED_REPR.items()))
def test_repr_is_tf_servings_text(path, value, text):
    (got,) = path(np.array([value], F32)).tolist()
    assert repr(got) == text


def test_percent_g_that_does_not_round_trip_takes_nine_digits():
    third = F32(1 / 3)
    assert F32(float("%g" % third)) != third  # 0.333333 is another float32
    assert repr(float(tf_float32_digits(np.array([third]))[0])) == "%.9g" % third == "0.333333343"
    assert repr(float(vectorised(np.array([third]))[0])) == "0.333333343"


@pytest.mark.parametrize("path", [per_value, vectorised])
def test_nan_and_infinities_pass_through(path):
    values = np.array([np.nan, np.inf, -np.inf, 0.1], F32)
    got = path(values)
    assert math.isnan(got[0]) and got[1] == math.inf and got[2] == -math.inf and got[3] == 0.1
    assert tf_float32_digits_of(math.inf) == math.inf
    assert tf_float32_digits_of(-math.inf) == -math.inf
    assert math.isnan(tf_float32_digits_of(math.nan))


def test_nan_with_payload_passes_through_vectorised():
    values = np.concatenate([np.array([0x7FC00001, 0xFFFFFFFF], np.uint32).view(F32), np.full(9, 0.5, F32)])
    got = tf_float32_digits(values)
    assert np.isnan(got[:2]).all()
    assert got[2:].tolist() == [0.5] * 9


@pytest.mark.parametrize("shape", [(2, 3), (0,), (3, 0, 2), (), (1,), (4, 4), (2, 2, 3)])
def test_shape_is_preserved(shape):
    rng = np.random.default_rng(3)
    values = rng.normal(size=shape).astype(F32)
    got = tf_float32_digits(values)
    assert got.shape == shape
    assert got.dtype == np.float64
    assert as_bits(got.reshape(-1)) == as_bits(twin(values))


def test_input_is_not_modified():
    values = np.array([0.1, 1 / 3] * 10, F32)
    before = values.copy()
    tf_float32_digits(values)
    tf_float32_digits(values[:2])
    assert values.view(np.uint32).tolist() == before.view(np.uint32).tolist()
