"""JSON in and out of the protocols, through orjson, with the standard library where orjson says no.

orjson parses and writes 10-25x faster than the `json` module and writes numpy arrays itself, which
matters for tensors of thousands of numbers. It is stricter in two ways that the protocols are not:

- TensorFlow Serving and Triton accept (and write) bare `NaN`, `Infinity` and `-Infinity`, which orjson
  refuses to read: any body orjson refuses is read again by `json`, which reads those, and words the
  error for a body that is malformed indeed (with the messages clients saw before).
- orjson writes NaN and infinities as `null` and refuses unpaired surrogates in strings: a document whose
  orjson text holds `null` (no tensor data is ever null) or that orjson refuses is written by `json`
  instead, with the bare literals.

Integers beyond 64 bits parse as floats (as in rapidjson, TensorFlow Serving's and Triton's parser):
no tensor holds them, so the codecs refuse them as out of range either way.

Floats must reach `dumps` as float64 (Python floats, or float64 arrays): orjson would write a float32
with float32's shortest digits, a different number to a reader that parses float64.

    >>> dumps({"y": np.array([0.5, np.nan])})
    b'{"y":[0.5,NaN]}'
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson

__all__ = ["loads", "dumps"]

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def loads(text: bytes) -> Any:
    """Parse JSON, bare NaN and Infinity included; raises what `json.loads` raises for malformed text
    (ValueError subclasses, RecursionError for absurd nesting)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _default(value: Any) -> Any:
    # Arrays orjson does not take whole (0-d, non-contiguous, bfloat16 and other dtypes) become lists.
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} has no JSON form")


def dumps(doc: Any, *, ascii_only: bool = False) -> bytes:
    """`doc` as compact JSON bytes, numpy arrays as nested lists, NaN and infinities as bare literals;
    `ascii_only` escapes every non-ASCII character (else strings are written as UTF-8)."""
    if not ascii_only:
        try:
            text = orjson.dumps(doc, default=_default, option=_OPTIONS)
        except orjson.JSONEncodeError:
            text = None  # an unpaired surrogate, or a number beyond 64 bits: json copes
        if text is not None and b"null" not in text:
            return text
    try:
        return json.dumps(doc, default=_default, allow_nan=True, ensure_ascii=ascii_only, separators=(",", ":")).encode()
    except UnicodeEncodeError:  # a str holding an unpaired surrogate: escape it instead
        return json.dumps(doc, default=_default, allow_nan=True, separators=(",", ":")).encode()
