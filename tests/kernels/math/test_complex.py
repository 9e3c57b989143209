"""Complex-number kernels: construction, parts, magnitude, conjugate."""

import numpy as np
import pytest

Z = np.array([3 + 4j, -1 - 2j, 0j], np.complex64)


@pytest.mark.parametrize(
    "op, inputs, attrs, expected",
    [
        ("Complex", (np.array([1.0, 2.0], np.float32), np.array([-1.0, 0.5], np.float32)), {}, np.array([1 - 1j, 2 + 0.5j], np.complex64)),
        ("Complex", (np.array([1.0]), np.array([2.0])), {"Tout": np.dtype(np.complex128)}, np.array([1 + 2j], np.complex128)),
        ("Real", (Z,), {}, np.array([3, -1, 0], np.float32)),
        ("Imag", (Z,), {}, np.array([4, -2, 0], np.float32)),
        ("ComplexAbs", (Z,), {}, np.array([5, np.sqrt(5), 0], np.float32)),
        ("Conj", (Z,), {}, np.array([3 - 4j, -1 + 2j, 0j], np.complex64)),
        ("Conj", (np.array([1.5], np.float32),), {}, np.array([1.5], np.float32)),
        ("Angle", (np.array([1j, -1 + 0j], np.complex128),), {}, np.array([np.pi / 2, np.pi])),
    ],
)
def test_complex_ops(run_kernel, op, inputs, attrs, expected):
    (out,) = run_kernel(op, *inputs, **attrs)
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, rtol=1e-6)
