"""Kernels of the ops that turn strings into other things and back: StringToNumber, base64
(EncodeBase64, DecodeBase64) and StringFormat.

StringToNumber reads numbers as TensorFlow 2.21 does, through Abseil's SimpleAtof/SimpleAtod/SimpleAtoi:
ASCII whitespace around the number is ignored and one leading "+" is allowed. Floats take decimals
(".5", "5.", "1e-3"), hexadecimal ("0x1A", "0x1.8p1"), and "inf", "infinity", "nan" and "nan(...)" in
any case; they are rounded once, to nearest-even, to float or double; past the largest finite value they
are infinite. Integers take decimal digits only and must fit the type (unsigned ones take no "-").

Base64 is the web-safe alphabet (- and _ for + and /). Encoding pads with "=" only with `pad`. Decoding
takes "=" padding only at the end of the last group of four, and ignores bits left over in the last
character, as TensorFlow's decoder does.

StringFormat writes its inputs into `template` where `placeholder` stands, each as tf.print writes a tensor
(numpy-like brackets, at most `summarize` entries at each end of each dim, floats in 6 significant digits
unless that changes their value, strings quoted and C-escaped).
"""

from __future__ import annotations

import base64
import math
import re
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, message_text, string_array

__all__ = ["string_to_number", "encode_base64", "decode_base64", "string_format"]

# --- StringToNumber --------------------------------------------------------------------------------------

_WHITESPACE = b" \t\n\v\f\r"  # absl::ascii_isspace
_DECIMAL = re.compile(rb"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_HEX = re.compile(rb"0[xX](?P<int>[0-9a-fA-F]*)(?:\.(?P<frac>[0-9a-fA-F]*))?(?:[pP](?P<exp>[+-]?[0-9]+))?\Z")
_SPECIAL = re.compile(rb"(?i:(?P<inf>inf|infinity)|nan(?:\([0-9A-Za-z_]*\))?)\Z")
_INTEGER = re.compile(rb"[+-]?[0-9]+\Z")
_FLOAT32_OVERFLOW = 2.0**128  # where float32 rounding would go, one step past the largest float32


def _hex_value(match: re.Match) -> tuple[float, Fraction] | None:
    """A hex float's value rounded to double, and a function of its exact value; None when not a number."""
    digits, frac = match["int"], match["frac"] or b""
    if not digits and not frac:
        return None
    exponent = int(match["exp"] or 0) - 4 * len(frac)
    mantissa = int(digits + frac, 16)
    text = f"0x{(digits + frac).decode()}p{exponent}"
    try:
        rounded = float.fromhex(text)
    except OverflowError:  # Python refuses what Abseil calls out of range: an infinity
        return math.inf, None
    return rounded, (lambda: Fraction(mantissa) * Fraction(2) ** exponent)


def _parse_real(text: bytes) -> tuple[float, Any] | None:
    """The number in `text` as Abseil's from_chars reads it: (value rounded to double, a function giving the
    exact value, for rounding to float32 exactly), or None when `text` is not one."""
    t = text.strip(_WHITESPACE)
    if t.startswith(b"+"):
        t = t[1:]
        if t.startswith(b"-"):
            return None
    negative = t.startswith(b"-")
    if negative:
        t = t[1:]
    if (special := _SPECIAL.match(t)) is not None:
        value, exact = (math.inf if special["inf"] else math.nan), None
    elif t[:2] in (b"0x", b"0X"):
        hex_match = _HEX.match(t)
        parsed = _hex_value(hex_match) if hex_match else None
        if parsed is None:
            return None
        value, exact = parsed
    elif _DECIMAL.match(t):
        value, exact = float(t), (lambda: Fraction(t.decode()))
    else:
        return None
    if negative:
        return -value, (None if exact is None else (lambda: -exact()))
    return value, exact


def _round_to_float32(value: float, exact: Any) -> np.float32:
    """The float32 nearest the exact number whose nearest double is `value` (no double rounding)."""
    with np.errstate(over="ignore"):
        nearest = np.float32(value)
    if exact is None or not math.isfinite(value) or float(nearest) == value:
        return nearest
    toward = np.float32(math.copysign(math.inf, value - float(nearest)) if math.isfinite(nearest) else 0.0)
    with np.errstate(over="ignore"):
        other = np.nextafter(nearest, toward)

    def as_real(f: np.float32) -> float:
        return float(f) if math.isfinite(f) else math.copysign(_FLOAT32_OVERFLOW, float(f))

    if (as_real(nearest) + as_real(other)) / 2 != value:
        return nearest
    # `value` is halfway between two floats: the exact number decides, and only a true tie stays even.
    truth = exact()
    if truth == Fraction(value):
        return nearest
    above = truth > Fraction(value)
    return max(nearest, other) if above else min(nearest, other)


def _parse(text: bytes, dtype: np.dtype) -> Any:
    """`text` as a number of `dtype`; None when TensorFlow would refuse it."""
    if dtype.kind == "f":
        parsed = _parse_real(text)
        if parsed is None:
            return None
        value, exact = parsed
        return _round_to_float32(value, exact) if dtype == np.float32 else np.float64(value)
    t = text.strip(_WHITESPACE)
    if not _INTEGER.match(t) or (dtype.kind == "u" and t.startswith(b"-")):
        return None
    number, info = int(t), np.iinfo(dtype)
    return number if info.min <= number <= info.max else None


_NUMBER_TYPES = tuple(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64))


# Strings are Python objects: these run on the host only (so `xp` is numpy).
@kernel("StringToNumber", devices=("cpu",))
def string_to_number(xp: Any, string_tensor: Any, *, out_type: Any = np.float32) -> tuple:
    """Each string read as a number of `out_type` (float, double, int32, int64, uint32 or uint64)."""
    dtype = np.dtype(out_type)
    if dtype not in _NUMBER_TYPES:
        raise TypeError(f"StringToNumber has no kernel for out_type {dtype.name}")
    out = []
    for s in flat_strings(string_tensor):
        value = _parse(s, dtype)
        if value is None:
            # NOTE: TensorFlow writes the string as a C string: up to its first NUL.
            shown = message_text(s.split(b"\0", 1)[0])
            raise ValueError(f"StringToNumberOp could not correctly convert string: {shown}")
        out.append(value)
    return (np.array(out, dtype=dtype).reshape(np.shape(string_tensor)),)


# --- base64 ----------------------------------------------------------------------------------------------

_BASE64_CHARS = re.compile(rb"[A-Za-z0-9_-]*\Z")


def _decode_base64(data: bytes) -> bytes:
    """TensorFlow's Base64Decode, error for error."""
    if not data:
        return b""
    body = (len(data) - 1) // 4 * 4  # whole groups of four before the last 1 to 4 characters
    if not _BASE64_CHARS.match(data[:body]):
        raise ValueError("Invalid character found in base64.")
    end = len(data)
    if end - body == 4 and data[-1:] == b"=":
        end -= 2 if data[-2:-1] == b"=" else 1
    if end - body == 1:
        raise ValueError("Base64 string length cannot be 1 modulo 4.")
    if not _BASE64_CHARS.match(data[body:end]):
        raise ValueError("Invalid character found in base64.")
    text = data[:end]
    # Python ignores the bits the last character has left over, as TensorFlow does.
    decoded = base64.urlsafe_b64decode(text + b"=" * (-len(text) % 4))
    return decoded[:len(text) * 3 // 4]


@kernel("EncodeBase64", devices=("cpu",))
def encode_base64(xp: Any, input: Any, *, pad: bool = False) -> tuple:
    """Each string in web-safe base64, "="-padded to a multiple of four only with `pad`."""
    encoded = [base64.urlsafe_b64encode(s) for s in flat_strings(input)]
    return (string_array(encoded if pad else [e.rstrip(b"=") for e in encoded], np.shape(input)),)


@kernel("DecodeBase64", devices=("cpu",))
def decode_base64(xp: Any, input: Any) -> tuple:
    """Each web-safe base64 string decoded; ValueError in TensorFlow's words for bad characters or length."""
    return (string_array([_decode_base64(s) for s in flat_strings(input)], np.shape(input)),)


# --- StringFormat ----------------------------------------------------------------------------------------


def _flush_subnormal(value: float, smallest_normal: float) -> float:
    # NOTE: TensorFlow's threads flush subnormals to zero: such a value prints as a zero of its sign.
    return math.copysign(0.0, value) if abs(value) < smallest_normal else value


def _float_text(value: float) -> str:
    """A float as TensorFlow's FloatToBuffer writes it: %.6g, or %.9g when %.6g reads back as another float."""
    value = _flush_subnormal(value, float(np.finfo(np.float32).tiny))
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    short = "%.6g" % value
    parsed = _parse_real(short.encode())
    if parsed is not None and _round_to_float32(*parsed) == np.float32(value):
        return short
    return "%.9g" % value


def _double_text(value: float) -> str:
    """A double as TensorFlow's DoubleToBuffer writes it: %.15g, or %.17g when that does not read back."""
    value = _flush_subnormal(value, float(np.finfo(np.float64).tiny))
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if abs(value) <= np.finfo(np.float64).max / 1.000000000000001:
        short = "%.15g" % value
        if float(short) == value:
            return short
    return "%.17g" % value


def _c_escape(s: bytes) -> str:
    """absl::Utf8SafeCEscape: C escapes for quotes, backslash, \\n \\r \\t, octal for other control bytes;
    bytes from 0x80 up are kept (as text, decoded where they are UTF-8)."""
    out = bytearray()
    for c in s:
        named = {0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t", 0x22: b'\\"', 0x27: b"\\'", 0x5C: b"\\\\"}.get(c)
        if named is not None:
            out += named
        elif c < 0x20 or c == 0x7F:
            out += b"\\%03o" % c
        else:
            out.append(c)
    return bytes(out).decode("utf-8", "surrogateescape")


def _element_writer(dtype: np.dtype):
    """How one element of `dtype` is written, or None for dtypes TensorFlow writes as "?"."""
    if dtype == object or dtype.kind in "SU":
        return lambda v: '"' + _c_escape(as_bytes(v)) + '"'
    if dtype == np.bool_:
        return lambda v: "1" if v else "0"
    if dtype.kind in "iu":
        return lambda v: str(int(v))
    if dtype == np.float64:
        return lambda v: _double_text(float(v))
    if dtype in (np.float32, np.float16) or dtype == ml_dtypes.bfloat16:
        return lambda v: _float_text(float(np.float32(v)))
    return None


def _dim_spacing(dim: int, rank: int) -> str:
    if dim == rank - 1:
        return " "
    return "\n" * (rank - dim - 1) + " " * (dim + 1)


def _summarize_dims(flat: list, shape: tuple[int, ...], dim: int, start: int, ends: int, write) -> str:
    """TensorFlow's PrintOneDimV2 on the block of `flat` (the tensor's elements) from `start` at depth `dim`:
    `ends` entries at each end of each dim, with "..." between them when there are more."""
    if dim == len(shape):
        return write(flat[start])
    count, spacing = shape[dim], _dim_spacing(dim, len(shape))
    block = math.prod(shape[dim + 1:])
    text = "["
    for i in range(min(ends, count)):
        text += (spacing if i > 0 else "") + _summarize_dims(flat, shape, dim + 1, start + i * block, ends, write)
    if count > 2 * ends:
        text += spacing + "..."
    for i in range(max(ends, count - ends), count):
        text += spacing + _summarize_dims(flat, shape, dim + 1, start + i * block, ends, write)
    return text + "]"


def _summarize(tensor: Any, summarize: int) -> str:
    """Tensor::SummarizeValue(summarize, print_v2=true), as tf.print and StringFormat write a tensor."""
    array = np.asarray(tensor)
    size = array.size
    entries = size if summarize < 0 else summarize
    limit = min(entries, size)
    write = _element_writer(array.dtype)
    if write is None:
        text = " ".join(["?"] * limit) + ("..." if entries < size else "")
        return f"[{text}]" if array.ndim else text
    if array.ndim == 0:
        return (write(array.item()) if limit else "") + ("..." if size > limit else "")
    return _summarize_dims(array.reshape(-1).tolist(), array.shape, 0, 0, limit, write)


def _template_pieces(template: bytes, placeholder: bytes) -> list[bytes]:
    """absl::StrSplit(template, placeholder): an empty placeholder splits into single characters."""
    if placeholder:
        return template.split(placeholder)
    return [template[i:i + 1] for i in range(len(template))] or [b""]


@kernel("StringFormat", devices=("cpu",))
def string_format(xp: Any, *inputs: Any, template: str | bytes = "%s", placeholder: str | bytes = "%s",
                  summarize: int = 3) -> tuple:
    """`template` with each `placeholder` replaced by the next input, summarized as tf.print writes it."""
    pieces = _template_pieces(as_bytes(template), as_bytes(placeholder))
    if len(pieces) - 1 != len(inputs):
        raise ValueError(f"num placeholders in template and num inputs must match: {len(pieces) - 1} vs. "
                         f"{len(inputs)}")
    out = bytearray(pieces[0])
    for tensor, piece in zip(inputs, pieces[1:]):
        out += _summarize(tensor, summarize).encode("utf-8", "surrogateescape")
        out += piece
    return (string_array([bytes(out)], ()),)
