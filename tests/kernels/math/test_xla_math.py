"""XLA arithmetic kernels (kernels.math.xla_math): XlaDot(V2) with serialized DotDimensionNumbers,
XlaEinsum, and XlaReducePrecision bit for bit.

Expected values were checked against TensorFlow 2.21 running each op on a CPU in a plain Session.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32


def _packed(field: int, values) -> bytes:
    body = bytes(values)  # small non-negative dims: one byte each
    return bytes([field << 3 | 2, len(body)]) + body if values else b""


def dot_numbers(lhs_contract, rhs_contract, lhs_batch=(), rhs_batch=()) -> bytes:
    return _packed(1, lhs_contract) + _packed(2, rhs_contract) + _packed(3, lhs_batch) + _packed(4, rhs_batch)


A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(12, dtype=np.float32).reshape(3, 4)


def bits(values, dtype=np.float32) -> np.ndarray:
    return np.array(values, dtype=np.uint32 if np.dtype(dtype).itemsize == 4 else np.uint16).view(dtype)


CASES = [
    pytest.param("XlaDot", [A, B], {"dimension_numbers": dot_numbers([1], [0]), "precision_config": ""}, [A @ B],
                 id="dot-matmul"),
    pytest.param("XlaDot", [A, B.T.copy()], {"dimension_numbers": dot_numbers([1], [1]), "precision_config": b""},
                 [A @ B], id="dot-contract-rhs-last"),
    pytest.param("XlaDot", [A, f32([1, 2])], {"dimension_numbers": dot_numbers([], []), "precision_config": ""},
                 [np.multiply.outer(A, f32([1, 2]))], id="dot-outer"),
    # Batch dims come first in the output, then lhs free dims, then rhs free dims.
    pytest.param("XlaDot", [np.ones((3, 2, 4), np.float32), np.ones((4, 2, 5), np.float32)],
                 {"dimension_numbers": dot_numbers([2], [0], [1], [1]), "precision_config": ""},
                 [np.full((2, 3, 5), 4, np.float32)], id="dot-batch-first"),
    pytest.param("XlaDot", [np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32).reshape(3, 2)],
                 {"dimension_numbers": dot_numbers([1], [0]), "precision_config": ""},
                 [np.array([[10, 13], [28, 40]], np.int32)], id="dot-int32"),
    # int8 products accumulate in the preferred type: no wrap-around at 127.
    pytest.param("XlaDotV2", [np.array([[100, -100], [3, 4]], np.int8), np.array([[100, 2], [100, 1]], np.int8)],
                 {"dimension_numbers": dot_numbers([1], [0]), "precision_config": "",
                  "preferred_element_type": np.dtype(np.int32)},
                 [np.array([[0, 100], [700, 10]], np.int32)], id="dot-v2-int8-to-int32"),
    pytest.param("XlaEinsum", [A, B], {"equation": "ij,jk->ik"}, [A @ B], id="einsum"),
    # float32 -> e5m10: 1 + 2^-11 ties to even (1), 1 + 3*2^-11 ties up, 65520 overflows, 1e-30 underflows.
    pytest.param("XlaReducePrecision", [f32([1 + 2**-11, 1 + 3 * 2**-11, 65504, 65520, 1e-30, -1e-30, -np.inf])],
                 {"exponent_bits": 5, "mantissa_bits": 10},
                 [f32([1, 1 + 2**-9, 65504, np.inf, 0, -0.0, -np.inf])], id="reduce-precision-half"),
    pytest.param("XlaReducePrecision", [np.float64(3.3)], {"exponent_bits": 3, "mantissa_bits": 2},
                 [np.float64(3.5)], id="reduce-precision-double-scalar"),
    pytest.param("XlaReducePrecision", [np.array([1.7, -3, 2.5, 100], np.float16)], {"exponent_bits": 3, "mantissa_bits": 0},
                 [np.array([2, -2, 2, np.inf], np.float16)], id="reduce-precision-half-input"),
    pytest.param("XlaReducePrecision", [np.array([1.0078125, 3], ml_dtypes.bfloat16)], {"exponent_bits": 8, "mantissa_bits": 4},
                 [np.array([1, 3], ml_dtypes.bfloat16)], id="reduce-precision-bfloat16"),
]

ERRORS = [
    pytest.param("XlaDot", [A, A], {"dimension_numbers": dot_numbers([1], [0]), "precision_config": ""}, ValueError,
                 "contracting dimension sizes differ", id="dot-size-mismatch"),
    pytest.param("XlaDot", [A, B], {"dimension_numbers": dot_numbers([2], [0]), "precision_config": ""}, ValueError,
                 "outside an operand of rank 2", id="dot-dim-out-of-range"),
    pytest.param("XlaDot", [A, B], {"dimension_numbers": dot_numbers([1], [0], [0], []), "precision_config": ""},
                 ValueError, "name 1 and 0 batch dimensions", id="dot-batch-count"),
    pytest.param("XlaDot", [A, B.astype(np.float64)], {"dimension_numbers": dot_numbers([1], [0]), "precision_config": ""},
                 TypeError, "one dtype", id="dot-mixed-dtypes"),
    pytest.param("XlaEinsum", [A, B], {"equation": "ij,jk"}, ValueError, "explicit output", id="einsum-implicit"),
    pytest.param("XlaReducePrecision", [f32([1])], {"exponent_bits": 0, "mantissa_bits": 2}, ValueError,
                 "exponent_bits must be >= 1", id="reduce-precision-no-exponent"),
    pytest.param("XlaReducePrecision", [np.int32(1)], {"exponent_bits": 5, "mantissa_bits": 2}, TypeError, "float",
                 id="reduce-precision-int"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_xla_math_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_xla_math_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_reduce_precision_keeps_nan_payloads(run_kernel):
    """A NaN passes through bit for bit, even with no mantissa bits left (TensorFlow 2.21 does this)."""
    nans = bits([0x7F800001, 0xFFFFFFFF, 0x7FC00000])
    for mantissa in (0, 2, 22):
        (out,) = run_kernel("XlaReducePrecision", nans, exponent_bits=5, mantissa_bits=mantissa)
        np.testing.assert_array_equal(out.view(np.uint32), nans.view(np.uint32))


def test_an_outer_product_over_the_memory_limit_is_refused():
    import kernels
    from kernels.limits import AllocationTooLarge

    bound = kernels.lookup("XlaDot", "cpu").bind(np, {"dimension_numbers": dot_numbers([], []), "precision_config": ""},
                                                 {"memory_limit": 1 << 20})
    with pytest.raises(AllocationTooLarge, match=r"XlaDot output of shape \[50000,50000\]"):
        bound(np.zeros(50000, np.float32), np.zeros(50000, np.float32))
    assert bound(np.ones(3, np.float32), np.ones(2, np.float32))[0].shape == (3, 2)
