"""Kernels of the elementwise math ops: one output element from the matching input elements.

Unary math (Abs, Exp, Sigmoid, Floor, IsNan, Cast, ...) and binary math with numpy broadcasting
(Add, Div, FloorMod, Pow, comparisons, logic, bit ops, Select, BiasAdd, ...). Most are a single ufunc
of the array module, kept in tables; the rest spell out where TensorFlow differs from numpy:
integer Div truncates, integer division by zero is an error, float FloorDiv is floor(x / y), shifts
clamp their shift count, Maximum/Minimum propagate NaN. Outputs keep the inputs' dtype (NEP 50: a
Python scalar in a formula never widens an array). IEEE results (x/0, log(0)) come out as inf/NaN, as
in TensorFlow; numpy may warn about them, never raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import ml_dtypes
import numpy as np

from kernels.limits import check_broadcast
from kernels.pool import run_tasks
from kernels.registry import kernel, register

__all__ = [
    "UNARY_UFUNCS",
    "BINARY_UFUNCS",
    "cast",
    "check_numerics",
    "check_numerics_v2",
    "div",
    "floor_div",
    "floor_mod",
    "truncate_mod",
    "select",
    "select_v2",
    "bias_add",
    "clip_by_value",
    "add_n",
]

# TF op -> name of the ufunc that computes it, the same name in numpy and cupy.
UNARY_UFUNCS = {
    "Abs": "absolute",
    "Neg": "negative",
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Expm1": "expm1",
    "Log": "log",
    "Log1p": "log1p",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "arcsin",
    "Acos": "arccos",
    "Atan": "arctan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "arcsinh",
    "Acosh": "arccosh",
    "Atanh": "arctanh",
    "Tanh": "tanh",
    "Square": "square",
    "Reciprocal": "reciprocal",
    "Inv": "reciprocal",
    "Sign": "sign",
    "Floor": "floor",
    "Ceil": "ceil",
    "Rint": "rint",
    "IsNan": "isnan",
    "IsInf": "isinf",
    "IsFinite": "isfinite",
    "LogicalNot": "logical_not",
    "Invert": "invert",
}

BINARY_UFUNCS = {
    "Add": "add",  # Add (unlike AddV2) also takes strings: object arrays of bytes concatenate
    "AddV2": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Maximum": "maximum",  # numpy's maximum/minimum propagate NaN, as TensorFlow's do
    "Minimum": "minimum",
    "Pow": "power",  # integer to a negative power: ValueError with TF's own wording
    "Atan2": "arctan2",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
    "Less": "less",
    "LessEqual": "less_equal",
    "Greater": "greater",
    "GreaterEqual": "greater_equal",
    "LogicalAnd": "logical_and",
    "LogicalOr": "logical_or",
}


def _unary(name: str) -> Callable[..., tuple]:
    def run(xp: Any, x: Any) -> tuple[Any]:
        return (xp.asarray(getattr(xp, name)(x)),)

    run.__name__ = run.__qualname__ = name
    return run


def _check_broadcast(x: Any, y: Any, memory_limit: int | None) -> None:
    """Broadcasting [N,1] against [1,N] makes N*N elements from 2N: refuse a result over the memory limit.
    NOTE: every binary op of every plan calls this, so the cheap bound (the sizes' product times the
    largest itemsize) is tested inline first: 0.1 us, where the general check_broadcast takes 1.7."""
    if memory_limit is not None and x.size * y.size * 16 > memory_limit:
        check_broadcast((x, y), memory_limit, "broadcast result")


def _binary(name: str) -> Callable[..., tuple]:
    def run(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
        _check_broadcast(x, y, memory_limit)
        return (xp.asarray(getattr(xp, name)(x, y)),)

    run.__name__ = run.__qualname__ = name
    return run


for _op, _name in UNARY_UFUNCS.items():
    register(_op, _unary(_name))
for _op, _name in BINARY_UFUNCS.items():
    register(_op, _binary(_name))


def _into(ufunc: Any, a: Any, *args: Any) -> Any:
    """`ufunc(a, *args)` written over `a`, a temporary the kernel owns (0-d results are numpy scalars, so no `out`)."""
    return ufunc(a, *args, out=a) if getattr(a, "ndim", 0) else ufunc(a, *args)


def _const(x: Any, value: float) -> Any:
    """`value` as a scalar of x's dtype: a bare Python number would widen bfloat16 arrays to float32."""
    return x.dtype.type(value)


def _is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu"


def _check_divisor(xp: Any, y: Any) -> None:
    if not xp.all(y):
        raise ValueError("Integer division by zero")


def _truncate_div_int(xp: Any, x: Any, y: Any) -> Any:
    """Integer x / y rounded toward zero, as C does; x - fmod(x, y) is an exact multiple of y."""
    if x.dtype.kind == "u":
        return xp.floor_divide(x, y)
    return xp.floor_divide(x - xp.fmod(x, y), y)


# ---- unary ops that are not one ufunc ----


@kernel("Rsqrt")
def rsqrt(xp: Any, x: Any) -> tuple[Any]:
    return (xp.asarray(_into(xp.reciprocal, xp.sqrt(x))),)


@kernel("Round")
def round_half_to_even(xp: Any, x: Any) -> tuple[Any]:
    """Round half to even; integers are returned as they are (tf.round does not emit Round for them)."""
    if _is_integer(x.dtype):
        return (x,)
    return (xp.asarray(xp.rint(x)),)


def _sigmoid(xp: Any, x: Any) -> Any:
    """sigmoid(x): with e = exp(-|x|), 1/(1+e) for x >= 0, else e/(1+e)."""
    e = _into(xp.exp, _into(xp.negative, xp.abs(x)))
    r = xp.reciprocal(e + _const(x, 1))
    # e/(1+e) keeps full relative precision for very negative x, where 1 - 1/(1+e) would cancel to 0.
    return xp.where(x >= 0, r, _into(xp.multiply, e, r))


# Elements per chunk when a large Sigmoid runs chunk by chunk on the kernel pool: its five passes then
# stay in L2 instead of streaming the tensor through memory five times (EfficientNet's swish activations,
# 65 Sigmoids, were over half of its time as whole-tensor passes).
_SIGMOID_CHUNK = 64 << 10


@kernel("Sigmoid")
def sigmoid(xp: Any, x: Any) -> tuple[Any]:
    """1 / (1 + exp(-x)) without overflow: with e = exp(-|x|), sigmoid is 1/(1+e) for x >= 0, else e/(1+e)."""
    if xp is not np or x.size < 2 * _SIGMOID_CHUNK:
        return (xp.asarray(_sigmoid(xp, x)),)
    flat_in = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(x.shape, dtype=x.dtype)
    flat_out = out.reshape(-1)

    def chunk(bounds: tuple[int, int]) -> None:
        flat_out[bounds[0] : bounds[1]] = _sigmoid(np, flat_in[bounds[0] : bounds[1]])

    run_tasks(chunk, [(i, min(i + _SIGMOID_CHUNK, flat_in.size)) for i in range(0, flat_in.size, _SIGMOID_CHUNK)])
    return (out,)


_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_FLOAT16, _FLOAT32, _FLOAT64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# Cast with Truncate=True zeroes the source mantissa bits the target cannot hold (rounding toward zero)
# before converting. TensorFlow 2.21 does this for these (source, target) pairs only; checked.
_TRUNCATION: dict[tuple[np.dtype, np.dtype], tuple[np.dtype, int]] = {
    (_FLOAT32, _BFLOAT16): (np.dtype(np.uint32), 0xFFFF0000),
    (_FLOAT32, _FLOAT16): (np.dtype(np.uint32), ~((1 << 13) - 1) & 0xFFFFFFFF),
    (_FLOAT64, _FLOAT32): (np.dtype(np.uint64), ~((1 << 29) - 1) & 0xFFFFFFFFFFFFFFFF),
    (_FLOAT64, _FLOAT16): (np.dtype(np.uint64), ~((1 << 42) - 1) & 0xFFFFFFFFFFFFFFFF),
}


@kernel("Cast")
def cast(xp: Any, x: Any, *, DstT: np.dtype, Truncate: bool = False) -> tuple[Any]:
    """Convert to DstT: floats to integers truncate toward zero (NaN and out-of-range give what x86
    gives, as in TensorFlow), anything to bool is x != 0, complex to real keeps the real part."""
    dst = np.dtype(DstT)
    if dst.kind == "b" and x.dtype.kind != "b":
        return (xp.asarray(x != 0),)
    if x.dtype.kind == "c" and dst.kind != "c":
        x = x.real
    truncation = _TRUNCATION.get((x.dtype, dst)) if Truncate else None
    if truncation is not None:
        bits, mask = truncation
        zeroed = (x.view(bits) & bits.type(mask)).view(x.dtype)
        # NaN keeps its payload: masking it could leave an infinity.
        x = xp.where(xp.isnan(x), x, zeroed)
    return (xp.asarray(x.astype(dst, copy=False)),)


@kernel("CheckNumerics")
def check_numerics(xp: Any, tensor: Any, *, message: str) -> tuple[Any]:
    """The tensor itself; ValueError with TensorFlow's message when it holds a NaN or an infinity."""
    if not xp.isfinite(tensor).all():
        has_nan, has_inf = bool(xp.isnan(tensor).any()), bool(xp.isinf(tensor).any())
        status = "Inf and NaN" if has_nan and has_inf else ("Inf" if has_inf else "NaN")
        raise ValueError(f"{message} : Tensor had {status} values")
    return (tensor,)


@kernel("CheckNumericsV2")
def check_numerics_v2(xp: Any, tensor: Any, *, message: str) -> tuple[Any]:
    """CheckNumerics that tells -Inf from +Inf in its message."""
    if not xp.isfinite(tensor).all():
        found = []
        if bool(xp.isneginf(tensor).any()):
            found.append("-Inf")
        if bool(xp.isposinf(tensor).any()):
            found.append("+Inf")
        if bool(xp.isnan(tensor).any()):
            found.append("NaN")
        status = " and ".join(found) if len(found) < 3 else "-Inf, +Inf, and NaN"
        raise ValueError(f"{message} : Tensor had {status} values")
    return (tensor,)


# ---- division ----


@kernel("Div", "RealDiv")
def div(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """Floats divide exactly; integers round toward zero, and a zero divisor is an error."""
    _check_broadcast(x, y, memory_limit)
    if _is_integer(x.dtype):
        _check_divisor(xp, y)
        return (xp.asarray(_truncate_div_int(xp, x, y)),)
    return (xp.asarray(xp.true_divide(x, y)),)


@kernel("TruncateDiv")
def truncate_div(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x / y rounded toward zero, for integers and floats alike."""
    _check_broadcast(x, y, memory_limit)
    if _is_integer(x.dtype):
        _check_divisor(xp, y)
        return (xp.asarray(_truncate_div_int(xp, x, y)),)
    return (xp.asarray(_into(xp.trunc, xp.true_divide(x, y))),)


@kernel("FloorDiv")
def floor_div(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x / y rounded toward -inf. For floats TensorFlow computes floor(x / y), which is not numpy's
    floor_divide: 1.0 // 0.1 is 9.0 in numpy and 10.0 in TensorFlow."""
    _check_broadcast(x, y, memory_limit)
    if _is_integer(x.dtype):
        _check_divisor(xp, y)
        return (xp.asarray(xp.floor_divide(x, y)),)
    return (xp.asarray(_into(xp.floor, xp.true_divide(x, y))),)


@kernel("FloorMod")
def floor_mod(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """The remainder of floor division: it takes the divisor's sign (numpy's remainder)."""
    _check_broadcast(x, y, memory_limit)
    if _is_integer(x.dtype):
        _check_divisor(xp, y)
    return (xp.asarray(xp.remainder(x, y)),)


@kernel("TruncateMod", "Mod")
def truncate_mod(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """The remainder of truncating division: it takes the dividend's sign (C's fmod)."""
    _check_broadcast(x, y, memory_limit)
    if _is_integer(x.dtype):
        _check_divisor(xp, y)
    return (xp.asarray(xp.fmod(x, y)),)


@kernel("DivNoNan")
def div_no_nan(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x / y, or 0 wherever y is 0 (even for x NaN)."""
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.where(y == 0, _const(x, 0), xp.true_divide(x, y))),)


@kernel("MulNoNan")
def mul_no_nan(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x * y, or 0 wherever y is 0 (even for x NaN or infinite)."""
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.where(y == 0, _const(x, 0), xp.multiply(x, y))),)


@kernel("Xdivy")
def xdivy(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x / y, or 0 wherever x is 0 (even for y 0 or NaN)."""
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.where(x == 0, _const(x, 0), xp.true_divide(x, y))),)


@kernel("Xlogy")
def xlogy(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x * log(y), or 0 wherever x is 0."""
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.where(x == 0, _const(x, 0), _into(xp.multiply, xp.log(y), x))),)


@kernel("Xlog1py")
def xlog1py(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x * log1p(y), or 0 wherever x is 0."""
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.where(x == 0, _const(x, 0), _into(xp.multiply, xp.log1p(y), x))),)


@kernel("SquaredDifference")
def squared_difference(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(_into(xp.square, xp.subtract(x, y))),)


# ---- shifts and comparisons ----


def _clamped_shift(xp: Any, x: Any, y: Any) -> Any:
    """The shift count clamped to [0, bits - 1], as TensorFlow does (C leaves larger shifts undefined)."""
    return xp.clip(y, 0, x.dtype.itemsize * 8 - 1)


@kernel("LeftShift")
def left_shift(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.left_shift(x, _clamped_shift(xp, x, y))),)


@kernel("RightShift")
def right_shift(xp: Any, x: Any, y: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """Arithmetic shift for signed types (the sign bit fills in), logical for unsigned."""
    _check_broadcast(x, y, memory_limit)
    return (xp.asarray(xp.right_shift(x, _clamped_shift(xp, x, y))),)


def _equality(name: str, when_incompatible: bool) -> Callable[..., tuple]:
    def run(xp: Any, x: Any, y: Any, *, incompatible_shape_error: bool = True,
            memory_limit: int | None = None) -> tuple[Any]:
        _check_broadcast(x, y, memory_limit)
        try:
            return (xp.asarray(getattr(xp, name)(x, y)),)
        except ValueError:
            # With incompatible_shape_error=False (what TF2's == emits), shapes that do not broadcast
            # make a scalar answer: not equal.
            if incompatible_shape_error:
                raise
            return (xp.asarray(when_incompatible),)

    run.__name__ = run.__qualname__ = name
    return run


register("Equal", _equality("equal", False))
register("NotEqual", _equality("not_equal", True))


# ---- selection, bias, clipping, sums ----


@kernel("Select")
def select(xp: Any, condition: Any, x: Any, y: Any) -> tuple[Any]:
    """x where condition, else y. Unlike SelectV2, a vector condition with matrix-or-higher x, y
    picks whole rows (it indexes the first dimension)."""
    if condition.ndim == 1 and x.ndim > 1:
        condition = condition.reshape(condition.shape + (1,) * (x.ndim - 1))
    return (xp.asarray(xp.where(condition, x, y)),)


@kernel("SelectV2")
def select_v2(xp: Any, condition: Any, t: Any, e: Any, *, memory_limit: int | None = None) -> tuple[Any]:
    """x where condition, else y, all three broadcast together."""
    check_broadcast((condition, t, e), memory_limit, "SelectV2 output")
    return (xp.asarray(xp.where(condition, t, e)),)


@kernel("BiasAdd")
def bias_add(xp: Any, value: Any, bias: Any, *, data_format: Literal["NHWC", "NCHW"] = "NHWC") -> tuple[Any]:
    """value + bias along the channel dimension: the last (NHWC) or dimension 1 (NCHW), any rank >= 2."""
    channel_dim = 1 if data_format == "NCHW" else value.ndim - 1
    if bias.ndim != 1 or value.ndim < 2 or bias.shape[0] != value.shape[channel_dim]:
        raise ValueError(
            "Must provide as many biases as the channel dimension of the input tensor: "
            f"{list(bias.shape)} vs. {list(value.shape)}"
        )
    if channel_dim != value.ndim - 1:
        bias = bias.reshape(bias.shape + (1,) * (value.ndim - 1 - channel_dim))
    return (xp.asarray(xp.add(value, bias)),)


@kernel("BiasAddV1")
def bias_add_v1(xp: Any, value: Any, bias: Any) -> tuple[Any]:
    return bias_add(xp, value, bias)


@kernel("ClipByValue")
def clip_by_value(xp: Any, t: Any, clip_value_min: Any, clip_value_max: Any) -> tuple[Any]:
    """max(min(t, hi), lo) in TensorFlow's order: where lo > hi every element becomes lo; NaN stays NaN."""
    return (xp.asarray(_into(xp.maximum, xp.minimum(t, clip_value_max), clip_value_min)),)


@kernel("AddN")
def add_n(xp: Any, *inputs: Any) -> tuple[Any]:
    """The sum of N same-shaped tensors, accumulated in one fresh buffer."""
    if len(inputs) == 1:
        return (inputs[0],)
    total = xp.add(inputs[0], inputs[1])
    for t in inputs[2:]:
        total = _into(xp.add, total, t)
    return (xp.asarray(total),)
