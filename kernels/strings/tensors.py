"""String tensors as the string kernels hold them: numpy object arrays whose elements are `bytes`, on the
host. A `str` element (a JSON request may bring one) counts as its UTF-8 bytes, as it does for the
hashing kernels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from kernels.host import format_dims

__all__ = ["as_bytes", "flat_strings", "string_array", "scalar_string", "message_text"]


def as_bytes(value: Any) -> bytes:
    """One string element (or string attr, which the engine decodes to `str` when it is UTF-8) as bytes."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def flat_strings(strings: Any) -> list[bytes]:
    """The elements of a string tensor in row-major order, as bytes."""
    flat = np.asarray(strings, dtype=object).reshape(-1).tolist()
    # NOTE: kernels hold bytes, so the list is usually right as it is: one C-level pass checks that, where
    # converting element by element would be a Python call each (a BERT batch's 100k wordpieces).
    return flat if all(type(s) is bytes for s in flat) else [as_bytes(s) for s in flat]


def string_array(values: Iterable[bytes], shape: Sequence[int] | None = None) -> np.ndarray:
    """An object array of `values` (a flat sequence), reshaped to `shape` when given."""
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out if shape is None else out.reshape(tuple(shape))


def scalar_string(tensor: Any, message: str) -> bytes:
    """The one element of a scalar string tensor; ValueError "<message> <shape>" for any other shape."""
    array = np.asarray(tensor, dtype=object)
    if array.ndim != 0:
        raise ValueError(f"{message}{format_dims(array.shape)}")
    return as_bytes(array.item())


def message_text(value: bytes) -> str:
    """Bytes that TensorFlow pastes raw into an error message, as text (bytes that are not UTF-8 escaped)."""
    return value.decode("utf-8", "backslashreplace")
