"""Kernels of the XLA ops that compute, as TensorFlow runs them on a CPU outside any jit-compiled cluster
(each op compiled on its own; see kernels.array.xla for the data-movement ones).

XlaDot and XlaDotV2 are XLA's DotGeneral: contracting and batch dims named by a serialized
xla.DotDimensionNumbers, output dims in the order batch, lhs free, rhs free. They are lowered to the
Einsum kernel's batched matmul. The precision_config attr only selects faster, less exact algorithms on
TPUs and GPUs. A CPU computes every product at full precision, and so does this kernel.

XlaReducePrecision rounds to a float format with fewer exponent and mantissa bits, bit for bit as XLA
does: round to nearest even in the mantissa, overflow to infinity, and underflow (denormals included)
to a signed zero; NaNs pass through unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernels.array.xla import read_int_fields
from kernels.host import format_dims
from kernels.limits import check_elements
from kernels.math.einsum import einsum
from kernels.registry import kernel

__all__ = ["reduce_precision", "xla_dot", "xla_dot_v2", "xla_einsum"]


def _dot_equation(lhs: Any, rhs: Any, dimension_numbers: str | bytes) -> str:
    """The einsum equation of DotGeneral with these dimension numbers, after XLA's shape checks."""
    fields = read_int_fields(dimension_numbers, "dimension_numbers")
    lhs_contract, rhs_contract = fields.get(1, []), fields.get(2, [])
    lhs_batch, rhs_batch = fields.get(3, []), fields.get(4, [])
    for name, dims, x in (("lhs_contracting_dimensions", lhs_contract, lhs),
                          ("rhs_contracting_dimensions", rhs_contract, rhs),
                          ("lhs_batch_dimensions", lhs_batch, lhs), ("rhs_batch_dimensions", rhs_batch, rhs)):
        if any(not 0 <= d < x.ndim for d in dims):
            raise ValueError(f"{name} {dims} names a dim outside an operand of rank {x.ndim}")
    if len(set(lhs_contract + lhs_batch)) != len(lhs_contract + lhs_batch) or \
            len(set(rhs_contract + rhs_batch)) != len(rhs_contract + rhs_batch):
        raise ValueError("a dim is named twice among an operand's contracting and batch dimensions")
    for kind, ls, rs in (("contracting", lhs_contract, rhs_contract), ("batch", lhs_batch, rhs_batch)):
        if len(ls) != len(rs):
            raise ValueError(f"lhs and rhs name {len(ls)} and {len(rs)} {kind} dimensions")
        for a, b in zip(ls, rs):
            if lhs.shape[a] != rhs.shape[b]:
                raise ValueError(f"{kind} dimension sizes differ: lhs {format_dims(lhs.shape)} dim {a}, "
                                 f"rhs {format_dims(rhs.shape)} dim {b}")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lhs_labels, rhs_labels = [""] * lhs.ndim, [""] * rhs.ndim
    for a, b in zip(lhs_batch + lhs_contract, rhs_batch + rhs_contract):
        lhs_labels[a] = rhs_labels[b] = next(letters)
    for labels in (lhs_labels, rhs_labels):
        for i, c in enumerate(labels):
            labels[i] = c or next(letters)
    free_lhs = "".join(c for i, c in enumerate(lhs_labels) if i not in lhs_batch + lhs_contract)
    free_rhs = "".join(c for i, c in enumerate(rhs_labels) if i not in rhs_batch + rhs_contract)
    batch = "".join(lhs_labels[a] for a in lhs_batch)
    return f"{''.join(lhs_labels)},{''.join(rhs_labels)}->{batch}{free_lhs}{free_rhs}"


def _check_output(lhs: Any, rhs: Any, equation: str, dtype: Any, memory_limit: int | None, op: str) -> None:
    """An outer product of two vectors is as large as their sizes multiplied: refuse one over the limit."""
    if memory_limit is None:
        return
    terms, out = equation.split("->")
    size = dict(zip(terms.split(",")[0], lhs.shape)) | dict(zip(terms.split(",")[1], rhs.shape))
    shape = [size[c] for c in out]
    check_elements(math.prod(shape), dtype, memory_limit, f"{op} output", shape)


@kernel("XlaDot")
def xla_dot(xp: Any, lhs: Any, rhs: Any, *, dimension_numbers: str | bytes, precision_config: str | bytes,
            memory_limit: int | None = None) -> tuple:
    """XLA's DotGeneral: the sum of products over the contracting dims, per batch position."""
    if lhs.dtype != rhs.dtype:
        raise TypeError(f"lhs and rhs must have one dtype, got {lhs.dtype} and {rhs.dtype}")
    read_int_fields(precision_config, "precision_config")  # checked, not needed: see the module docstring
    equation = _dot_equation(lhs, rhs, dimension_numbers)
    _check_output(lhs, rhs, equation, lhs.dtype, memory_limit, "XlaDot")
    return (xp.asarray(einsum(xp, lhs, rhs, equation=equation)[0]),)


@kernel("XlaDotV2")
def xla_dot_v2(xp: Any, lhs: Any, rhs: Any, *, dimension_numbers: str | bytes, precision_config: str | bytes,
               preferred_element_type: Any, memory_limit: int | None = None) -> tuple:
    """XlaDot over operands of possibly different dtypes (int8 x int8 -> int32, say), both converted to
    `preferred_element_type` first, which the product then has."""
    read_int_fields(precision_config, "precision_config")
    equation = _dot_equation(lhs, rhs, dimension_numbers)
    _check_output(lhs, rhs, equation, preferred_element_type, memory_limit, "XlaDotV2")
    lhs, rhs = lhs.astype(preferred_element_type, copy=False), rhs.astype(preferred_element_type, copy=False)
    return (xp.asarray(einsum(xp, lhs, rhs, equation=equation)[0]),)


@kernel("XlaEinsum")
def xla_einsum(xp: Any, a: Any, b: Any, *, equation: str) -> tuple:
    """The two-operand contraction `equation` describes, as Einsum computes it."""
    if "..." in equation or "->" not in equation:
        raise ValueError(f"XlaEinsum needs an explicit output and no ellipsis, got equation '{equation}'")
    return einsum(xp, a, b, equation=equation)


# Per float format: (unsigned type of its width, exponent bits, mantissa bits).
_FORMATS = {2: (np.uint16, 5, 10), 4: (np.uint32, 8, 23), 8: (np.uint64, 11, 52)}


def _format(dtype: np.dtype) -> tuple[Any, int, int]:
    if dtype.kind != "f" and dtype.name != "bfloat16":
        raise TypeError(f"XlaReducePrecision needs a float operand, got {dtype}")
    if dtype.name == "bfloat16":
        return np.uint16, 8, 7
    return _FORMATS[dtype.itemsize]


@kernel("XlaReducePrecision")
def reduce_precision(xp: Any, operand: Any, *, exponent_bits: int, mantissa_bits: int) -> tuple:
    """`operand` rounded to a float with `exponent_bits` exponent and `mantissa_bits` mantissa bits, kept
    in its own dtype (XLA's ReducePrecision, bit for bit)."""
    if exponent_bits < 1 or mantissa_bits < 0:
        raise ValueError(f"exponent_bits must be >= 1 and mantissa_bits >= 0, got {exponent_bits} and {mantissa_bits}")
    uint, src_exponent, src_mantissa = _format(operand.dtype)
    nbits = operand.dtype.itemsize * 8
    sign_mask = 1 << (nbits - 1)
    exp_mask = ((1 << src_exponent) - 1) << src_mantissa
    bits = operand.view(uint)
    x = bits
    is_nan = (bits & uint(sign_mask - 1)) > uint(exp_mask)
    if mantissa_bits < src_mantissa:
        shift = src_mantissa - mantissa_bits
        last_bit = 1 << shift
        # Round to nearest, ties to even: a bias of 0111... plus the last kept mantissa bit. A carry into
        # the exponent is right: the kept mantissa bits become zero and the exponent grows by one.
        bias = ((x & uint(last_bit)) >> uint(shift)) + uint((last_bit >> 1) - 1)
        x = (x + bias) & uint(~(last_bit - 1) & ((1 << nbits) - 1))
    if exponent_bits < src_exponent:
        exponent_bias = (1 << (src_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = x & uint(exp_mask)
        signed_zero = x & uint(sign_mask)
        signed_inf = signed_zero | uint(exp_mask)
        x = xp.where(exponent > uint((exponent_bias + reduced_bias) << src_mantissa), signed_inf, x)
        x = xp.where(exponent <= uint((exponent_bias - reduced_bias) << src_mantissa), signed_zero, x)
    result = xp.asarray(x).astype(uint, copy=False).view(operand.dtype)
    # A NaN passes through bit for bit, even with no mantissa bits left (TensorFlow 2.21's XLA does so;
    # the rounding above could have turned it into an infinity).
    return (xp.asarray(xp.where(is_nan, operand, result)),)
