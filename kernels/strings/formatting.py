"""The kernel of AsString: each element of a tensor written as a string, the way TensorFlow's
`as_string_op.cc` writes it with C's printf.

The attrs build one printf format: `%`, then `fill` (a printf flag: "0" pads with zeros, "-"
left-justifies, "+" and " " sign positives, "#" is the alternate form), then `width` when it is > -1, then
`.precision` when `precision` > -1, then `d` for integers and `f`, `e` (`scientific`) or `g` (`shortest`)
for floats; complex numbers are written "(real,imag)", each part in that format. Booleans are "true" and
"false" whatever the attrs say; strings pass through unless `width` > 0, and are then cut to `precision`
bytes (when > -1) and right-justified to `width` (left with fill "-"), as printf's %s does.
As glibc does, infinities and NaNs are "inf", "-inf", "nan" and "-nan" (a NaN keeps its sign), padded
with spaces even under fill "0". TensorFlow runs with denormals flushed to zero, so a subnormal float
reads (and prints) as a zero of its sign.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.registry import kernel

__all__ = ["as_string"]

# The fills TensorFlow accepts: no flag, or one of printf's flags.
_FILLS = ("", "0", " ", "-", "+", "#")
_FLOAT32_BASED = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)})
_INTEGERS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                              np.uint8, np.uint16, np.uint32, np.uint64))


def _category(dtype: np.dtype) -> str | None:
    if dtype == object:
        return "string"
    if dtype == np.bool_:
        return "bool"
    if dtype in _INTEGERS:
        return "int"
    if dtype in _FLOAT32_BASED or dtype == np.float64:
        return "float"
    if dtype in (np.complex64, np.complex128):
        return "complex"
    return None


def _check_attrs(dtype: np.dtype, precision: int, scientific: bool, shortest: bool, fill: str | bytes) -> str:
    """The fill as text; ValueError in TensorFlow's words, checked in TensorFlow's order, for bad attrs."""
    category = _category(dtype)
    if category not in ("float", "complex", "string"):
        if scientific or shortest:
            raise ValueError(f"scientific and shortest format not supported for datatype {tf_name_of_numpy(dtype)}")
        if precision >= 0:
            raise ValueError(f"precision not supported for datatype {tf_name_of_numpy(dtype)}")
    raw = fill.encode("utf-8") if isinstance(fill, str) else bytes(fill)
    if len(raw) > 1:
        raise ValueError("Fill string must be one or fewer characters")
    if scientific and shortest:
        raise ValueError("Cannot select both scientific and shortest notation")
    text = raw.decode("latin-1")
    if text not in _FILLS:
        raise ValueError(f'Fill argument not supported: "{text}"')
    if category is None:
        raise TypeError(f"Type not supported: {tf_name_of_numpy(dtype)}")
    return text


def _format(flags: str, width: int, precision: int, conversion: str) -> str:
    """The printf format TensorFlow builds: %[flags][width][.precision]conversion."""
    spec = flags + (str(width) if width > -1 else "")
    if precision > -1:
        spec += f".{precision}"
    return f"%{spec}{conversion}"


def _read_floats(values: np.ndarray) -> list[float]:
    """The values as Python floats, with subnormals flushed to zero as TensorFlow's threads read them."""
    base = np.float64 if values.dtype == np.float64 else np.float32
    x = values.astype(base)
    x = np.where(np.abs(x) < np.finfo(base).tiny, np.copysign(np.zeros_like(x), x), x)
    return x.astype(np.float64).reshape(-1).tolist()


def _float_writer(fill: str, width: int, precision: int, conversion: str):
    finite = _format(fill, width, precision, conversion)
    # NOTE: glibc pads inf/nan with spaces under the 0 flag (Python would pad with zeros), and prints a
    # NaN's sign; so non-finite values are written as infinities of their sign with "inf" renamed.
    non_finite = _format("" if fill == "0" else fill, width, precision, conversion)

    def write(v: float) -> bytes:
        if math.isfinite(v):
            return (finite % v).encode("ascii")
        if math.isnan(v):
            return (non_finite % math.copysign(math.inf, v)).replace("inf", "nan").encode("ascii")
        return (non_finite % v).encode("ascii")

    return write


def _ints(values: np.ndarray, fill: str, width: int) -> list[bytes]:
    if width < 0 and fill == "":  # the common case (Keras Hashing of integer ids): numpy writes decimals in C
        return values.reshape(-1).astype(np.bytes_).tolist()
    # NOTE: unsigned types print with %u-like rules: "+" and " " only apply to signed conversions.
    flags = fill if values.dtype.kind == "i" or fill not in "+ " else ""
    fmt = _format(flags, width, -1, "d")
    return [(fmt % v).encode("ascii") for v in values.reshape(-1).tolist()]


def _strings(values: np.ndarray, fill: str, width: int, precision: int) -> list[bytes]:
    flat = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values.reshape(-1).tolist()]
    if width <= 0:  # TensorFlow passes strings through unless a width is given
        return flat
    # As printf's %s: `precision` bytes at most (a UTF-8 character may be cut), then padded to `width`.
    if precision > -1:
        flat = [v[:precision] for v in flat]
    return [v.ljust(width) if fill == "-" else v.rjust(width) for v in flat]


# Strings are Python objects: AsString runs on the host only (so `xp` is numpy).
@kernel("AsString", devices=("cpu",))
def as_string(xp: Any, input: Any, *, precision: int = -1, scientific: bool = False, shortest: bool = False,
              width: int = -1, fill: str = "") -> tuple:
    """Each element as a string, formatted as TensorFlow's printf format from the attrs says."""
    values = np.asarray(input)
    fill = _check_attrs(values.dtype, precision, scientific, shortest, fill)
    category = _category(values.dtype)
    conversion = "g" if shortest else "e" if scientific else "f"
    if category == "bool":
        flat = np.where(values.reshape(-1), b"true", b"false").tolist()
    elif category == "int":
        flat = _ints(values, fill, width)
    elif category == "string":
        flat = _strings(values, fill, width, precision)
    elif category == "float":
        write = _float_writer(fill, width, precision, conversion)
        flat = [write(v) for v in _read_floats(values)]
    else:
        write = _float_writer(fill, width, precision, conversion)
        parts = zip(_read_floats(values.real), _read_floats(values.imag))
        flat = [b"(" + write(re) + b"," + write(im) + b")" for re, im in parts]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return (out.reshape(values.shape),)
