"""TensorFlow Serving's text for float32 numbers: the shortest of 6 or 9 significant digits that
reads back as the same float32 (0.1f prints as 0.1, not 0.10000000149011612).

`tf_float32_digits` turns float32 values into the float64s whose shortest repr is that text, so that
the standard json module prints what TensorFlow Serving prints, vectorised over whole tensors.
"""

from __future__ import annotations

import math
import struct

import numpy as np

__all__ = ["tf_float32_digits", "tf_float32_digits_of"]

_EXACT_POWERS_OF_TEN = 22  # 10.0**k is exact in float64 for |k| <= 22
# Up to this many values a Python loop beats numpy's cost per call (a 3-value reply took ~25 us).
_PER_VALUE_MAX = 8
_FLOAT32 = struct.Struct("f")


def tf_float32_digits(values: np.ndarray) -> np.ndarray:
    """float32 values as the float64s whose shortest repr is what TF Serving prints for them.

    NOTE: TF Serving prints a float32 with "%g" (6 significant digits) when that reads back as the
    same float32, else with "%.9g": 0.1f is written 0.1, not 0.10000000149011612. Each value here
    becomes the float64 nearest those decimal digits, which json's repr then prints."""
    if values.size <= _PER_VALUE_MAX:
        flat = [tf_float32_digits_of(x) for x in values.astype(np.float64).reshape(-1).tolist()]
        return np.array(flat, dtype=np.float64).reshape(values.shape)
    with np.errstate(invalid="ignore"):  # NaN payloads
        wide = values.astype(np.float64).reshape(-1)
    narrow = values.reshape(-1)
    todo = np.flatnonzero(np.isfinite(wide) & (wide != 0))
    for digits in (6, 9):
        if not todo.size:
            break
        mantissa, shift = _round_significant(wide[todo], digits)
        scale = 10.0 ** np.abs(shift)
        # An integer divided or multiplied by an exact power of ten rounds to the nearest float64...
        decimal = np.where(shift >= 0, mantissa / scale, mantissa * scale)
        exact = decimal.astype(np.float32) == narrow[todo]
        # ...but 10.0**k is inexact beyond k = 22 (values below 1e-16 or above 1e28), leaving an ulp
        # or so of noise in the repr: Python's parser builds those few from their digits instead.
        rebuild = np.flatnonzero(exact & (np.abs(shift) > _EXACT_POWERS_OF_TEN))
        if rebuild.size:
            pairs = zip(mantissa[rebuild].astype(np.int64).tolist(), (-shift[rebuild]).astype(np.int64).tolist())
            decimal[rebuild] = list(map(float, map("%de%d".__mod__, pairs)))
        wide[todo[exact]] = decimal[exact]
        todo = todo[~exact]
    return wide.reshape(values.shape)  # the rest keep their exact value, which reads back too


def _round_significant(x: np.ndarray, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """Each value rounded to `digits` significant decimal digits, as `mantissa * 10**-shift` with
    an integral mantissa (both float64 arrays)."""
    magnitude = np.abs(x)
    exponent = np.floor(np.log10(magnitude))
    power = 10.0**exponent
    # log10 may land one off next to a power of ten; float32 values are never that close otherwise
    exponent -= magnitude < power
    exponent += magnitude >= power * 10
    shift = digits - 1 - exponent
    scale = 10.0 ** np.abs(shift)
    return np.round(np.where(shift >= 0, x * scale, x / scale)), shift


def tf_float32_digits_of(x: float) -> float:
    """One float32 value (as a Python float), as `tf_float32_digits` makes it, through printf's own
    rounding: the twin of the vectorised path, which tests hold to it."""
    if not math.isfinite(x) or x == 0:
        return x
    short = float("%.6g" % x)
    try:
        if _FLOAT32.unpack(_FLOAT32.pack(short))[0] == x:
            return short
    except OverflowError:  # rounded past float32's largest value
        pass
    return float("%.9g" % x)
