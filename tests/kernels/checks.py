"""Assertions shared by the kernel tests."""

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
