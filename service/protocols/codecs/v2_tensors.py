"""One Open Inference Protocol tensor's data, to and from numpy: the datatypes, the binary tensor data
extension's layout (little-endian elements; BYTES as length-prefixed elements) and JSON `data` (flat or
nested, row-major), each checked as it is read so that a malformed tensor is a BadRequest naming it.

The infer bodies built of these tensors are service.protocols.codecs.v2's (REST) and v2_grpc's (gRPC,
whose raw contents use the binary layout: `tensor_from_raw`, `tensor_to_raw`).

    >>> tensor_from_raw("x", "FP32", [2], b"\\x00\\x00\\x80?\\x00\\x00\\x00@")
    array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import math
import struct
import sys
from typing import NoReturn

import ml_dtypes
import numpy as np

from service.errors import BadRequest

__all__ = [
    "DATATYPES",
    "BinarySection",
    "check_shape",
    "datatype_of",
    "from_binary",
    "from_json",
    "tensor_from_raw",
    "tensor_to_raw",
    "to_binary",
    "to_json",
]

DATATYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    # Elements are Python `bytes`; on the wire, UTF-8 strings in JSON or length-prefixed in binary.
    "BYTES": np.dtype(object),
}

_INTEGER = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})
_FLOAT = frozenset({"FP16", "FP32", "FP64", "BF16"})
# Tensor bytes are little-endian on the wire; arrays here are always native, so a big-endian host
# swaps once at the edge. (ml_dtypes.bfloat16 has no non-native form, so `byteswap` is the one
# operation that works for every datatype.)
_SWAP_BYTES = sys.byteorder == "big"
_MAX_DIM = np.iinfo(np.int64).max
_LENGTH_PREFIX = struct.Struct("<I")


def datatype_of(dtype: np.dtype) -> str:
    """The v2 datatype name of a numpy dtype; any object, bytes or str dtype is "BYTES".

    >>> datatype_of(np.dtype(np.float32))
    'FP32'
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "BYTES"
    if not dtype.isnative:
        dtype = dtype.newbyteorder("=")
    # A scan with ==, not a dict lookup: equal dtypes (int64 'l' and 'q') need not hash alike.
    for name, candidate in DATATYPES.items():
        if name != "BYTES" and candidate == dtype:
            return name
    raise BadRequest(f"dtype {dtype} has no Open Inference Protocol datatype")


class BinarySection:
    """The bytes after the JSON header, handed out in order to the inputs that declare them."""

    def __init__(self, view: memoryview):
        self.view = view
        self.offset = 0
        self.last_taker: str | None = None

    def take(self, name: str, size: int) -> memoryview:
        remaining = len(self.view) - self.offset
        if size > remaining:
            raise BadRequest(
                f"input {name!r}: binary_data_size is {size} but only {remaining} bytes of binary "
                "data remain in the body (is Inference-Header-Content-Length set and right?)"
            )
        chunk = self.view[self.offset : self.offset + size]
        self.offset += size
        self.last_taker = name
        return chunk

    def check_consumed(self) -> None:
        leftover = len(self.view) - self.offset
        if leftover:
            if self.last_taker is None:
                raise BadRequest(
                    f"the body has {leftover} bytes after the JSON header but no input declares "
                    "parameters.binary_data_size"
                )
            raise BadRequest(
                f"the body has {leftover} bytes of binary data left over after input "
                f"{self.last_taker!r}, the last one with parameters.binary_data_size"
            )


def tensor_from_raw(name: str, datatype: str, shape: list[int], data: bytes) -> np.ndarray:
    """One input from its raw bytes alone (gRPC's `raw_input_contents`): the binary extension's layout
    (little-endian elements; BYTES as length-prefixed elements), every byte of `data` used."""
    check_shape(name, shape)
    flat = from_binary(name, datatype, math.prod(shape), len(data), BinarySection(memoryview(data)))
    try:
        return flat.reshape(shape)
    except ValueError as e:
        raise BadRequest(f"input {name!r}: shape {shape} cannot be represented: {e}") from None


def tensor_to_raw(name: str, array: np.ndarray) -> tuple[str, bytes]:
    """An output's datatype and raw bytes (gRPC's `raw_output_contents`), laid out as binary data."""
    datatype = datatype_of(array.dtype)
    return datatype, to_binary(name, datatype, array)


def check_shape(name: str, shape: object) -> list[int]:
    """The shape of input `name`: a list of dimensions in [0, 2**63); BadRequest otherwise."""
    # bools are ints; JSON integers beyond 64 bits reach us as floats (see fastjson)
    if not isinstance(shape, list) or not all(type(dim) is int or _beyond_64_bits(dim) for dim in shape):
        raise BadRequest(f"input {name!r}: 'shape' must be a list of integers, not {shape!r}")
    if any(type(dim) is not int or not 0 <= dim <= _MAX_DIM for dim in shape):
        raise BadRequest(f"input {name!r}: shape {shape} has a negative or oversized dimension")
    return shape


def from_binary(
    name: str, datatype: str, count: int, size: int, binary: BinarySection
) -> np.ndarray:
    """The flat array of one binary input: raw little-endian elements, or for BYTES, each element
    as a little-endian uint32 length followed by its bytes."""
    if datatype == "BYTES":
        return _deserialize_bytes(name, count, binary.take(name, size))
    dtype = DATATYPES[datatype]
    expected = count * dtype.itemsize
    if size != expected:
        raise BadRequest(
            f"input {name!r}: binary_data_size is {size} but {count} {datatype} elements take "
            f"{expected} bytes"
        )
    chunk = binary.take(name, size)
    if count == 0:
        return np.empty(0, dtype)
    array = np.frombuffer(chunk, dtype)  # a view on the body: no copy, read-only
    if datatype == "BOOL" and (array.view(np.uint8) > 1).any():
        # numpy bools must be 0 or 1; other bytes make values that are neither True nor False.
        raise BadRequest(f"input {name!r}: binary BOOL data must be bytes 0 or 1")
    return array.byteswap() if _SWAP_BYTES else array


def _deserialize_bytes(name: str, count: int, chunk: memoryview) -> np.ndarray:
    offset, end = 0, len(chunk)
    # Every element takes at least its 4-byte length: a shape too big for the data fails here,
    # before it can allocate.
    if count * 4 > end:
        raise BadRequest(
            f"input {name!r}: {end} bytes of binary BYTES data cannot hold the {count} elements "
            "of its shape"
        )
    # One copy of the whole chunk, then slices of it: a third faster than a bytes() per element.
    data = bytes(chunk)
    unpack_length = _LENGTH_PREFIX.unpack_from
    values = []
    for i in range(count):
        if offset + 4 > end:
            raise BadRequest(f"input {name!r}: binary BYTES data ends at element {i} of {count}")
        (length,) = unpack_length(data, offset)
        offset += 4
        if offset + length > end:
            raise BadRequest(
                f"input {name!r}: BYTES element {i} declares {length} bytes but only "
                f"{end - offset} remain"
            )
        values.append(data[offset : offset + length])
        offset += length
    if offset != end:
        raise BadRequest(
            f"input {name!r}: binary BYTES data holds more than the {count} elements of its shape"
        )
    elements = np.empty(count, dtype=object)
    elements[:] = values
    return elements


def from_json(name: str, datatype: str, count: int, data: object) -> np.ndarray:
    """The flat array of one JSON input; data may be flat or nested, row-major either way."""
    if not isinstance(data, list):
        raise BadRequest(f"input {name!r}: 'data' must be a list, not {type(data).__name__}")
    ragged = BadRequest(
        f"input {name!r}: 'data' is ragged or nested too deeply; nested lists must be rectangular"
    )
    try:
        # Object dtype for BYTES keeps strings as Python objects (numpy would make them '<U').
        parsed = np.array(data, dtype=object if datatype == "BYTES" else None).reshape(-1)
    except (ValueError, TypeError, OverflowError):  # ragged nesting, or more than 64 levels
        raise ragged from None
    # With dtype=object numpy keeps ragged rows as list elements instead of refusing them.
    if parsed.dtype == object and any(isinstance(value, list) for value in parsed.tolist()):
        raise ragged
    if parsed.size != count:
        raise BadRequest(
            f"input {name!r}: 'data' has {parsed.size} elements but its shape needs {count}"
        )
    if count == 0:
        return np.empty(0, DATATYPES[datatype])
    if datatype == "BYTES":
        return _strings_to_bytes(name, parsed)
    return _numbers(name, datatype, parsed, data)


def _strings_to_bytes(name: str, parsed: np.ndarray) -> np.ndarray:
    elements = np.empty(parsed.size, dtype=object)
    for i, text in enumerate(parsed.tolist()):
        if not isinstance(text, str):
            raise BadRequest(f"input {name!r}: BYTES data must be strings, got {text!r}")
        try:
            elements[i] = text.encode("utf-8")
        except UnicodeEncodeError:  # JSON can spell lone surrogates ("\ud800"); UTF-8 cannot
            raise BadRequest(f"input {name!r}: {text!r} cannot be encoded as UTF-8") from None
    return elements


def _numbers(name: str, datatype: str, parsed: np.ndarray, data: list) -> np.ndarray:
    """Numeric JSON data, checked in bulk on numpy's inferred dtype; anything unusual (mixed types,
    integers beyond 64 bits) goes to the per-element check, which also words the error."""
    dtype = DATATYPES[datatype]
    kind = parsed.dtype.kind
    # NOTE: numpy promotes [true, 2] to [1, 2], so a bool among numbers slips through; all-bool data
    # for a numeric tensor (and numbers for a BOOL one, other than 0 and 1) are still rejected.
    if datatype == "BOOL":
        if kind == "b" or (kind in "iu" and ((parsed == 0) | (parsed == 1)).all()):
            return parsed.astype(dtype)
    elif datatype in _INTEGER:
        if kind in "iu":
            info = np.iinfo(dtype)
            outside = (parsed < info.min) | (parsed > info.max)
            if outside.any():
                _out_of_range(name, datatype, parsed[outside][0].item())
            return parsed.astype(dtype)
    elif kind in "iuf":
        return _narrow_floats(name, datatype, parsed)
    # From the JSON values themselves: numpy turns [1, "a"] into the strings ["1", "a"].
    return _numbers_one_by_one(name, datatype, np.array(data, dtype=object).reshape(-1).tolist())


def _narrow_floats(name: str, datatype: str, parsed: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        array = parsed.astype(DATATYPES[datatype])
    if not np.isfinite(array).all():
        # A finite number that became infinite did not fit; NaN and Infinity sent as such are fine.
        overflowed = np.isinf(array) & np.isfinite(parsed)
        if overflowed.any():
            _out_of_range(name, datatype, parsed[overflowed][0].item())
    return array


def _numbers_one_by_one(name: str, datatype: str, values: list) -> np.ndarray:
    for value in values:
        if datatype == "BOOL":
            if not (isinstance(value, bool) or (type(value) is int and value in (0, 1))):
                raise BadRequest(f"input {name!r}: BOOL data must be true or false, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(f"input {name!r}: {datatype} data must be numbers, got {value!r}")
        elif datatype in _INTEGER:
            if _beyond_64_bits(value):
                _out_of_range(name, datatype, int(value))
            if isinstance(value, float):
                raise BadRequest(f"input {name!r}: {datatype} data must be integers, got {value!r}")
            info = np.iinfo(DATATYPES[datatype])
            if not info.min <= value <= info.max:
                _out_of_range(name, datatype, value)
    if datatype in _FLOAT:
        try:
            floats = np.array([float(value) for value in values])
        except OverflowError:  # an integer beyond float64
            raise BadRequest(f"input {name!r}: a value is out of range for {datatype}") from None
        return _narrow_floats(name, datatype, floats)
    return np.array(values, dtype=DATATYPES[datatype])


def _beyond_64_bits(value: object) -> bool:
    """Whether `value` is how an integer literal beyond 64 bits parses: a float (see fastjson)."""
    # -2**63 itself parses as an int: as a float it stands for a literal below it, rounded up to it.
    return isinstance(value, float) and value.is_integer() and not -(2**63) < value < 2**64


def _out_of_range(name: str, datatype: str, value: object) -> NoReturn:
    raise BadRequest(f"input {name!r}: value {value!r} is out of range for {datatype}")


def to_json(name: str, datatype: str, array: np.ndarray) -> np.ndarray | list:
    if datatype != "BYTES":
        # Flat, and floats as float64: fastjson writes a float32 with float32's shortest digits, which
        # a reader parsing float64 would take for another number.
        return array.reshape(-1).astype(np.float64 if array.dtype.kind == "f" else array.dtype, copy=False)
    texts = []
    for value in array.ravel().tolist():
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(
                    f"output {name!r} holds bytes that are not UTF-8 and cannot be sent as JSON; "
                    "request it with parameters.binary_data=true"
                ) from None
        texts.append(_text_element(name, value))
    return texts


def to_binary(name: str, datatype: str, array: np.ndarray) -> bytes:
    if datatype == "BYTES":
        parts = []
        for value in array.ravel().tolist():
            # NOTE: a fixed-width 'S' array has lost trailing NULs by now; object arrays keep them.
            raw = value if isinstance(value, bytes) else _text_element(name, value).encode("utf-8")
            parts += (_LENGTH_PREFIX.pack(len(raw)), raw)
        return b"".join(parts)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return (array.byteswap() if _SWAP_BYTES else array).tobytes()


def _text_element(name: str, value: object) -> str:
    if not isinstance(value, str):
        # A fault of the model or the engine, not of the client: let it be a 500.
        raise TypeError(f"output {name!r}: BYTES element {value!r} is neither bytes nor str")
    return value
