"""Assertions shared by the kernel tests."""

import ml_dtypes
import numpy as np


def i32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def f32(values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def assert_outputs(outs: tuple, expected: list) -> None:
    """Every output equals its expected array in dtype, shape and value (NaN equals NaN)."""
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        want = np.asarray(want)
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def a(values, dtype) -> np.ndarray:
    return np.array(values, dtype=dtype)


def check(out, expected, rtol=0.0) -> None:
    """Same dtype and shape; values equal exactly (NaN equals NaN), or within `rtol` when it is given."""
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    if rtol:
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=0)
    elif expected.dtype == ml_dtypes.bfloat16:  # numpy's NaN-aware comparison does not know bfloat16
        np.testing.assert_array_equal(out.astype(np.float32), expected.astype(np.float32))
    else:
        np.testing.assert_array_equal(out, expected)


def to_format(data_format: str, x: np.ndarray) -> np.ndarray:
    """An NHWC test array in `data_format` (NCHW: channels moved to axis 1)."""
    return x if data_format == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def from_format(data_format: str, y: np.ndarray) -> np.ndarray:
    """A result in `data_format` back in NHWC, for comparing with an NHWC reference."""
    return y if data_format == "NHWC" else y.transpose(0, 2, 3, 1)
