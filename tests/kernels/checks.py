"""Assertions shared by the kernel tests."""

import numpy as np


def assert_outputs(outs: tuple, expected: list) -> None:
    """Every output equals its expected array in dtype, shape and value (NaN equals NaN)."""
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        want = np.asarray(want)
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
