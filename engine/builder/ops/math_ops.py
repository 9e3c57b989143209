"""Math op functions: element-wise arithmetic with broadcasting, unary functions, matrix products,
reductions and arg-max/min.

Binary ops take Tensors or Python/numpy values; a value next to a Tensor takes the Tensor's dtype
(`x * 2` with a float32 `x` multiplies by a float32 2), and two Tensors must share one dtype:
nothing is cast silently, except that `divide` on integers divides in floating point, as TensorFlow's
`/` does.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from engine.builder.dtypes import (
    COMPLEX,
    FLOATS,
    INDEX,
    INTEGERS,
    NUMBERS,
    SIGNED,
    UNSIGNED,
    as_dtype,
)
from engine.builder.ops.array_ops import cast
from engine.builder.ops.scope import OpScope, op_scope
from engine.builder.shapes import (
    Shape,
    broadcast,
    format_shape,
    merge_dims,
    normalize_axis,
)
from engine.builder.tensor import Tensor

__all__ = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "floordiv",
    "floormod",
    "maximum",
    "minimum",
    "pow",
    "negative",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "square",
    "sigmoid",
    "tanh",
    "matmul",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    "argmax",
    "argmin",
]

_ORDERED = FLOATS | INTEGERS  # types with an order (max, min, relu, ...)
_MATMUL_TYPES = FLOATS | COMPLEX | {np.dtype(t) for t in (np.int32, np.int64)} | UNSIGNED
_BATCH_MATMUL_TYPES = _MATMUL_TYPES | {np.dtype(np.int16)}


# --- element-wise, two inputs ---------------------------------------------------------------------------


def _operands(scope: OpScope, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Both operands as Tensors; a non-Tensor takes the other operand's dtype when its value fits."""
    hint = x.dtype if isinstance(x, Tensor) else y.dtype if isinstance(y, Tensor) else None
    x = scope.tensor(x, "x", dtype_hint=hint)
    y = scope.tensor(y, "y", dtype_hint=x.dtype)
    return x, y


def _broadcast(scope: OpScope, x: Tensor, y: Tensor) -> Shape:
    try:
        return broadcast(x.shape, y.shape)
    except ValueError as e:
        raise scope.fail(str(e)) from None


def _binary(op_type: str, default_name: str, allowed: Collection[np.dtype], x: Any, y: Any, name: str | None) -> Tensor:
    with op_scope(op_type, name, default_name, [x, y]) as scope:
        x, y = _operands(scope, x, y)
        dtype = scope.check_same_dtype({"x": x, "y": y})
        scope.check_dtype("x", x, allowed)
        return scope.emit_one([x, y], {"T": dtype}, dtype, _broadcast(scope, x, y))


def add(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x + y, element-wise with broadcasting (AddV2)."""
    return _binary("AddV2", "Add", NUMBERS, x, y, name)


def subtract(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x - y (Sub)."""
    return _binary("Sub", "Sub", NUMBERS, x, y, name)


def multiply(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x * y (Mul)."""
    return _binary("Mul", "Mul", NUMBERS, x, y, name)


# NOTE: TensorFlow's `/` on integers divides in floating point: 8- and 16-bit integers as float32,
# wider ones as float64.
_TRUEDIV_FLOAT = {
    **{np.dtype(t): np.dtype(np.float32) for t in (np.int8, np.int16, np.uint8, np.uint16)},
    **{np.dtype(t): np.dtype(np.float64) for t in (np.int32, np.int64, np.uint32, np.uint64)},
}


def divide(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x / y (RealDiv). Integers are cast to floating point first (int32 -> float64), as `/` does in
    TensorFlow; for integer division use `floordiv`."""
    with op_scope("RealDiv", name, "truediv", [x, y]) as scope:
        x, y = _operands(scope, x, y)
        dtype = scope.check_same_dtype({"x": x, "y": y})
        if dtype in _TRUEDIV_FLOAT:
            dtype = _TRUEDIV_FLOAT[dtype]
            x, y = cast(x, dtype), cast(y, dtype)
        scope.check_dtype("x", x, NUMBERS)
        return scope.emit_one([x, y], {"T": dtype}, dtype, _broadcast(scope, x, y))


def floordiv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x // y, rounding toward negative infinity (FloorDiv)."""
    return _binary("FloorDiv", "floordiv", NUMBERS, x, y, name)


def floormod(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x % y with the sign of y, as Python's % (FloorMod)."""
    return _binary("FloorMod", "mod", _ORDERED, x, y, name)


def maximum(x: Any, y: Any, name: str | None = None) -> Tensor:
    """The larger of x and y, element-wise (Maximum)."""
    return _binary("Maximum", "Maximum", _ORDERED, x, y, name)


def minimum(x: Any, y: Any, name: str | None = None) -> Tensor:
    """The smaller of x and y, element-wise (Minimum)."""
    return _binary("Minimum", "Minimum", _ORDERED, x, y, name)


def pow(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x ** y (Pow)."""
    return _binary("Pow", "Pow", FLOATS | SIGNED | COMPLEX, x, y, name)


# --- element-wise, one input ----------------------------------------------------------------------------


def unary(op_type: str, allowed: Collection[np.dtype], x: Any, name: str | None, *, default_name: str | None = None,
          **attrs: Any) -> Tensor:
    """An element-wise op of one input (`T` plus `attrs`): the output has the input's dtype and shape."""
    with op_scope(op_type, name, default_name or op_type, [x]) as scope:
        x = scope.tensor(x, "x")
        scope.check_dtype("x", x, allowed)
        return scope.emit_one([x], {"T": x.dtype, **attrs}, x.dtype, x.shape)


def negative(x: Any, name: str | None = None) -> Tensor:
    """-x (Neg)."""
    return unary("Neg", FLOATS | SIGNED | COMPLEX, x, name)


def abs(x: Any, name: str | None = None) -> Tensor:
    """|x| for real x (Abs)."""
    return unary("Abs", FLOATS | SIGNED, x, name)


def exp(x: Any, name: str | None = None) -> Tensor:
    return unary("Exp", FLOATS | COMPLEX, x, name)


def log(x: Any, name: str | None = None) -> Tensor:
    """The natural logarithm (Log)."""
    return unary("Log", FLOATS | COMPLEX, x, name)


def sqrt(x: Any, name: str | None = None) -> Tensor:
    return unary("Sqrt", FLOATS | COMPLEX, x, name)


def rsqrt(x: Any, name: str | None = None) -> Tensor:
    """1 / sqrt(x) (Rsqrt)."""
    return unary("Rsqrt", FLOATS | COMPLEX, x, name)


def square(x: Any, name: str | None = None) -> Tensor:
    return unary("Square", NUMBERS, x, name)


def sigmoid(x: Any, name: str | None = None) -> Tensor:
    """1 / (1 + exp(-x)) (Sigmoid)."""
    return unary("Sigmoid", FLOATS | COMPLEX, x, name)


def tanh(x: Any, name: str | None = None) -> Tensor:
    return unary("Tanh", FLOATS | COMPLEX, x, name)


# --- matrix products ------------------------------------------------------------------------------------


def _matrix_dims(shape: Shape, transpose: bool) -> tuple[int | None, int | None]:
    """(rows, cols) of the matrices in `shape` after the optional transpose."""
    rows, cols = (None, None) if shape is None else shape[-2:]
    return (cols, rows) if transpose else (rows, cols)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, name: str | None = None) -> Tensor:
    """The matrix product a @ b, optionally of transposes. Rank-2 inputs make a MatMul; higher ranks a
    BatchMatMulV2, whose leading (batch) dimensions broadcast."""
    with op_scope("MatMul", name, "MatMul", [a, b]) as scope:
        a, b = _operands(scope, a, b)
        dtype = scope.check_same_dtype({"a": a, "b": b})
        scope.check_rank("a", a, at_least=2)
        scope.check_rank("b", b, at_least=2)
        batched = (a.ndim or 2) > 2 or (b.ndim or 2) > 2
        if batched:
            scope.op_type = "BatchMatMulV2"
            if dtype in COMPLEX and (transpose_a or transpose_b):
                raise scope.fail("transposing complex batched matrices is not supported (BatchMatMulV2 takes adjoints)")
        scope.check_dtype("a", a, _BATCH_MATMUL_TYPES if batched else _MATMUL_TYPES)
        m, k_a = _matrix_dims(a.shape, transpose_a)
        k_b, n = _matrix_dims(b.shape, transpose_b)
        try:
            merge_dims(k_a, k_b)
        except ValueError as e:
            raise scope.fail(f"{e} (input shapes {format_shape(a.shape)}, {format_shape(b.shape)}; "
                             f"transpose_a={transpose_a}, transpose_b={transpose_b})") from None
        if not batched:
            attrs = {"T": dtype, "transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}
            return scope.emit_one([a, b], attrs, dtype, (m, n))
        if a.shape is None or b.shape is None:
            out_shape = None
        else:
            try:
                batch = broadcast(a.shape[:-2], b.shape[:-2])
            except ValueError as e:
                raise scope.fail(f"batch dimensions: {e}") from None
            out_shape = (*batch, m, n)
        attrs = {"T": dtype, "adj_x": bool(transpose_a), "adj_y": bool(transpose_b)}
        return scope.emit_one([a, b], attrs, dtype, out_shape)


# --- reductions -----------------------------------------------------------------------------------------


def _reduction_axes(scope: OpScope, x: Tensor, axis: int | Sequence[int] | None) -> tuple[Any, list[int] | None]:
    """(the axis value to write, the normalized axes or None when the rank is unknown)."""
    if axis is None:
        if x.ndim is None:
            raise scope.fail("axis is required when the input's rank is unknown")
        return list(range(x.ndim)), list(range(x.ndim))
    given = int(axis) if isinstance(axis, (int, np.integer)) else [int(a) for a in axis]
    listed = [given] if isinstance(given, int) else given
    if x.ndim is None:
        return given, None
    try:
        axes = [normalize_axis(a, x.ndim) for a in listed]
    except ValueError as e:
        raise scope.fail(str(e)) from None
    if len(set(axes)) != len(axes):
        raise scope.fail(f"axis {listed} names a dimension more than once")
    return given, axes


def _reduce(op_type: str, allowed: Collection[np.dtype], input_tensor: Any, axis: Any, keepdims: bool,
            name: str | None) -> Tensor:
    with op_scope(op_type, name, op_type, [input_tensor]) as scope:
        x = scope.tensor(input_tensor, "input")
        scope.check_dtype("input", x, allowed)
        written, axes = _reduction_axes(scope, x, axis)
        indices = scope.tensor(written, "reduction_indices")
        scope.check_dtype("reduction_indices", indices, INDEX)
        if axes is None:
            out_shape = None
        elif keepdims:
            out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        else:
            out_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        attrs = {"T": x.dtype, "Tidx": indices.dtype, "keep_dims": bool(keepdims)}
        return scope.emit_one([x, indices], attrs, x.dtype, out_shape)


def reduce_sum(input_tensor: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """The sum over `axis` (all dimensions when None); `keepdims` keeps them as size 1 (Sum)."""
    return _reduce("Sum", NUMBERS, input_tensor, axis, keepdims, name)


def reduce_mean(input_tensor: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False,
                name: str | None = None) -> Tensor:
    """The mean over `axis` (Mean; integer means round toward zero, as in TensorFlow)."""
    return _reduce("Mean", NUMBERS, input_tensor, axis, keepdims, name)


def reduce_max(input_tensor: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """The maximum over `axis` (Max)."""
    return _reduce("Max", _ORDERED, input_tensor, axis, keepdims, name)


def reduce_min(input_tensor: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """The minimum over `axis` (Min)."""
    return _reduce("Min", _ORDERED, input_tensor, axis, keepdims, name)


def _arg_reduce(op_type: str, input: Any, axis: int, output_type: Any, name: str | None) -> Tensor:
    with op_scope(op_type, name, op_type, [input]) as scope:
        x = scope.tensor(input, "input")
        scope.check_dtype("input", x, _ORDERED | {np.dtype(np.bool_)})
        scope.check_rank("input", x, at_least=1)
        out_type = as_dtype(output_type)
        if out_type not in INDEX:
            raise scope.fail(f"output_type must be int32 or int64, not {out_type}")
        try:
            position = normalize_axis(int(axis), x.ndim)
        except ValueError as e:
            raise scope.fail(str(e)) from None
        dimension = scope.tensor(int(axis), "dimension")
        out_shape = None if x.shape is None else x.shape[:position] + x.shape[position + 1:]
        attrs = {"T": x.dtype, "Tidx": dimension.dtype, "output_type": out_type}
        return scope.emit_one([x, dimension], attrs, out_type, out_shape)


def argmax(input: Any, axis: int, output_type: Any = "int64", name: str | None = None) -> Tensor:
    """The index of the largest value along `axis` (the first, on ties), as int64 by default (ArgMax)."""
    return _arg_reduce("ArgMax", input, axis, output_type, name)


def argmin(input: Any, axis: int, output_type: Any = "int64", name: str | None = None) -> Tensor:
    """The index of the smallest value along `axis` (ArgMin)."""
    return _arg_reduce("ArgMin", input, axis, output_type, name)
