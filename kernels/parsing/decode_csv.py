"""The kernel of DecodeCSV: each string of a tensor as one CSV record, split into one output per column.

Fields are split as TensorFlow's kernel splits them (core/kernels/decode_csv_op.cc): on a one-byte
`field_delim`; with `use_quote_delim`, a field starting with '"' is quoted, runs to a '"' followed by the
delimiter or the end, and holds '""' for a quote; an unquoted field may hold no quote, CR or LF; CRs and
LFs between fields are skipped; a record ending in the delimiter has an empty last field. `select_cols`
keeps only those columns. An empty field, or one equal to `na_value`, takes its column's default (a
column without one is required). Numbers are read as absl's SimpleAtoi/SimpleAtof read them: ASCII
whitespace around them is allowed, and so is one leading '+'; floats take 0x-hexadecimal, inf, infinity and
nan in any case, round straight to float32 and turn to +-inf past their range.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.registry import kernel

__all__ = ["decode_csv", "split_record"]

_QUOTE, _CR, _LF = 0x22, 0x0D, 0x0A
_WHITESPACE = b" \t\n\v\f\r"
_INTEGER = re.compile(rb"[+-]?[0-9]+")
_DECIMAL = re.compile(rb"-?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan(?:\([0-9A-Za-z_]*\))?)",
                      re.IGNORECASE)
_HEX = re.compile(rb"-?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?")
_INT_RANGES = {np.dtype(np.int32): (-2**31, 2**31 - 1), np.dtype(np.int64): (-2**63, 2**63 - 1)}


def split_record(record: bytes, delim: int, use_quote: bool, select: list[int] | None) -> list[bytes]:
    """The fields of one record (only the `select`ed columns when given); ValueError for a malformed one."""
    if not record:
        return []
    if (not use_quote or _QUOTE not in record) and _CR not in record and _LF not in record:
        fields = record.split(bytes((delim,)))
        return fields if select is None else [fields[c] for c in select if c < len(fields)]
    fields: list[bytes] = []
    i, n, parsed, chosen = 0, len(record), 0, 0
    while i < n:
        if record[i] in (_CR, _LF):
            i += 1
            continue
        include = select is None or select[chosen] == parsed
        field = bytearray()
        if not (use_quote and record[i] == _QUOTE):
            while i < n and record[i] != delim:
                if (use_quote and record[i] == _QUOTE) or record[i] in (_CR, _LF):
                    raise ValueError("Unquoted fields cannot have quotes/CRLFs inside")
                if include:
                    field.append(record[i])
                i += 1
            i += 1
        else:
            i += 1
            while i < n - 1 and (record[i] != _QUOTE or record[i + 1] != delim):
                if record[i] != _QUOTE:
                    if include:
                        field.append(record[i])
                    i += 1
                    continue
                if record[i + 1] != _QUOTE:
                    raise ValueError("Quote inside a string has to be escaped by another quote")
                if include:
                    field.append(_QUOTE)
                i += 2
            if not (i < n and record[i] == _QUOTE and (i == n - 1 or record[i + 1] == delim)):
                raise ValueError("Quoted field has to end with quote followed by delim or end")
            i += 2
        parsed += 1
        if include:
            fields.append(bytes(field))
            chosen += 1
            if select is not None and chosen == len(select):
                return fields
    if (select is None or select[chosen] == parsed) and record[-1] == delim:
        fields.append(b"")
    return fields


def _nearest_float32(text: bytes, value: float) -> np.float32:
    """The float32 nearest the decimal `text`, whose nearest double is `value`: rounding twice goes wrong
    only when `value` lands exactly between two float32s, where the decimal itself decides."""
    with np.errstate(over="ignore"):
        single = np.float32(value)
        if not np.isfinite(single) or float(single) == value:
            return single
        other = np.nextafter(single, np.float32(np.inf if value > float(single) else -np.inf), dtype=np.float32)
    middle = (float(single) + float(other)) / 2
    if value != middle or not np.isfinite(other):
        return single
    exact = Fraction(text.decode("ascii"))
    if exact == Fraction(middle):
        return single  # a true tie: to even, as numpy rounded it
    return other if (exact > Fraction(middle)) == (float(other) > float(single)) else single


def _number(text: bytes, dtype: np.dtype) -> Any:
    """`text` as a number of `dtype`, or None where absl would refuse it (SimpleAtoi; SimpleAtof and
    SimpleAtod, which take decimal and 0x-hexadecimal floats, inf, infinity and nan)."""
    text = text.strip(_WHITESPACE)
    if dtype in _INT_RANGES:
        if not _INTEGER.fullmatch(text):
            return None
        value = int(text)
        low, high = _INT_RANGES[dtype]
        return value if low <= value <= high else None
    if text.startswith(b"+"):
        text = text[1:]
        if text.startswith(b"-"):
            return None
    if _HEX.fullmatch(text):
        try:
            value = float.fromhex(text.decode("ascii"))
        except OverflowError:  # absl's SimpleAtod gives an infinity for a value out of range, as float() does
            value = float("-inf") if text.startswith(b"-") else float("inf")
    elif _DECIMAL.fullmatch(text):
        value = float(text.split(b"(")[0])
    else:
        return None
    if dtype == np.float32 and not _HEX.fullmatch(text) and np.isfinite(value):
        return _nearest_float32(text, value)
    with np.errstate(over="ignore"):
        return dtype.type(value)


@kernel("DecodeCSV", devices=("cpu",), outputs=lambda attrs: len(attrs["OUT_TYPE"]))
def decode_csv(xp: Any, records: Any, *record_defaults: Any, OUT_TYPE: tuple, field_delim: str = ",",
               use_quote_delim: bool = True, na_value: str = "", select_cols: tuple = ()) -> tuple:
    """One output per column, each of the records' shape."""
    if select_cols and len(select_cols) != len(OUT_TYPE):
        raise ValueError("select_cols should match output size")
    if any(a >= b for a, b in zip(select_cols, select_cols[1:])):
        raise ValueError("select_cols should be strictly increasing indices")
    if select_cols and select_cols[0] < 0:
        raise ValueError("select_cols should be non-negative indices")
    delim = field_delim if isinstance(field_delim, bytes) else field_delim.encode("utf-8")
    if len(delim) != 1:
        raise ValueError("field_delim should be only 1 char")
    na = na_value if isinstance(na_value, bytes) else na_value.encode("utf-8")
    for i, default in enumerate(record_defaults):
        if default.ndim > 1:
            raise ValueError("Each record default should be at most rank 1")
        if default.size > 1:
            raise ValueError(f"There should only be 1 default per field but field {i} has {default.size}")
    outputs = [np.empty(records.shape, dtype) for dtype in OUT_TYPE]
    flats = [out.reshape(-1) for out in outputs]
    select = list(select_cols) or None
    for r, record in enumerate(records.reshape(-1).tolist()):
        fields = split_record(record, delim[0], use_quote_delim, select)
        if len(fields) != len(OUT_TYPE):
            raise ValueError(f"Expect {len(OUT_TYPE)} fields but have {len(fields)} in record {r}")
        for f, (text, dtype) in enumerate(zip(fields, OUT_TYPE)):
            if not text or text == na:
                if record_defaults[f].size != 1:
                    raise ValueError(f"Field {f} is required but missing in record {r}!")
                flats[f][r] = record_defaults[f].reshape(-1)[0]
            elif dtype == object:
                flats[f][r] = text
            else:
                value = _number(text, dtype)
                if value is None:
                    raise ValueError(f"Field {f} in record {r} is not a valid {tf_name_of_numpy(dtype)}: "
                                     f"{text.decode('utf-8', 'backslashreplace')}")
                flats[f][r] = value
    return tuple(outputs)
