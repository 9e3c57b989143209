"""Kernels of DecodeRaw and DecodePaddedRaw: strings reinterpreted as the bytes of numbers.

DecodeRaw reads every string of a tensor as a run of `out_type` values: all strings must have the same
length, a multiple of the type's size, and the output gains a last dim of that many values (0 when the
strings are empty). DecodePaddedRaw reads each string into `fixed_length` bytes, cut or padded with zeros.
With `little_endian` false, each value's bytes are reversed (a complex value's real and imaginary parts
each).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.host import format_dims
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["decode_raw", "decode_padded_raw"]


def _from_bytes(data: bytes, dtype: np.dtype, little_endian: bool) -> np.ndarray:
    """The values `data` holds, in the host's byte order."""
    raw = np.frombuffer(data, np.uint8)
    # A complex value is two numbers: TensorFlow reverses the bytes of each.
    width = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    if not little_endian and width > 1:
        raw = raw.reshape(-1, width)[:, ::-1]
    if dtype == np.bool_:  # TensorFlow copies the bytes; any non-zero byte reads as true
        return raw.reshape(-1) != 0
    return np.ascontiguousarray(raw).reshape(-1).view(dtype)


@kernel("DecodeRaw", devices=("cpu",))
def decode_raw(xp: Any, strings: Any, *, out_type: np.dtype, little_endian: bool = True) -> tuple:
    """Each string as a vector of `out_type` values: [..., length / size]."""
    flat = strings.reshape(-1).tolist()
    size = len(flat[0]) if flat else 0
    for i, s in enumerate(flat):
        if len(s) != size:
            raise ValueError(f"DecodeRaw requires input strings to all be the same size, but element {i} has size "
                             f"{size} != {len(s)}")
    if size == 0:
        return (np.zeros((*strings.shape, 0), out_type),)
    if size % out_type.itemsize:
        raise ValueError(f"Input to DecodeRaw has length {size} that is not a multiple of {out_type.itemsize}, the "
                         f"size of {tf_name_of_numpy(out_type)}")
    values = _from_bytes(b"".join(flat), out_type, little_endian)
    return (values.reshape((*strings.shape, size // out_type.itemsize)),)


@kernel("DecodePaddedRaw", devices=("cpu",))
def decode_padded_raw(xp: Any, input_bytes: Any, fixed_length: Any, *, out_type: np.dtype,
                      little_endian: bool = True, memory_limit: int | None = None) -> tuple:
    """Each string's first `fixed_length` bytes (zero-padded) as a vector of `out_type` values."""
    if fixed_length.ndim != 0:
        raise ValueError(f"k must be scalar, got shape {format_dims(fixed_length.shape)}")
    length = int(fixed_length)
    if length % out_type.itemsize:
        raise ValueError(f"fixed_length ({length}) must be a multiple of the size of out_type ({out_type.itemsize})")
    if length <= 0:
        raise ValueError(f"fixed_length ({length}) must be greater than zero.")
    # fixed_length is a value a client may send: the padded bytes are built, then viewed as the output.
    check_elements(2 * input_bytes.size * length, np.uint8, memory_limit, "DecodePaddedRaw output",
                   (*input_bytes.shape, length // out_type.itemsize))
    flat = input_bytes.reshape(-1).tolist()
    data = b"".join(s[:length].ljust(length, b"\0") for s in flat)
    values = _from_bytes(data, out_type, little_endian)
    return (values.reshape((*input_bytes.shape, length // out_type.itemsize)),)
