"""Feature values read from their serialized bytes, as TensorFlow's fast Example parser reads them.

A serialized `Feature` (engine/proto/feature.proto) starts with the tag of its list: 0x0A bytes_list,
0x12 float_list, 0x1A int64_list; no bytes at all is an empty Feature, which counts as missing. Its
list's values are read here without a Python object per number: packed float32s are copied as they lie
(little-endian) and packed int64 varints are decoded for a whole batch at once with numpy. Unpacked
lists, which protobuf also writes and reads, are accepted too.

Each reader returns the number of values and a payload to hand, with the payloads of the other examples,
to `concat_values`; bytes that cannot be read raise `Unparsable`, which the parsers turn into
TensorFlow's "Can't parse serialized Example" for the feature.

    count, payload = read_values(serialized_feature, FLOAT)
    values = concat_values(FLOAT, [payload, ...])   # float32 [total]
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from engine.proto import feature_pb2

__all__ = [
    "FLOAT",
    "INT64",
    "STRING",
    "Unparsable",
    "wire_dtype",
    "read_values",
    "concat_values",
    "decode_varints",
    "tf_type_name",
    "list_type_name",
]

FLOAT, INT64, STRING = np.dtype(np.float32), np.dtype(np.int64), np.dtype(object)

# The first byte of a Feature: the tag of its oneof list (field number << 3 | length-delimited).
_TAG_DTYPES = {0x0A: STRING, 0x12: FLOAT, 0x1A: INT64}
_TF_NAMES = {FLOAT: "float", INT64: "int64", STRING: "string"}
_LIST_NAMES = {FLOAT: "float", INT64: "int64", STRING: "bytes"}

_PACKED_TAG = 0x0A  # value = 1, length-delimited: a packed list
_UNPACKED_FLOAT_TAG = 0x0D  # value = 1, fixed32
_UNPACKED_INT64_TAG = 0x08  # value = 1, varint
_LOW_BYTES = bytes(range(0x80))  # the last byte of a varint, and only that, is below 0x80
_OVERLONG_VARINT = re.compile(rb"[\x80-\xff]{10}")  # a varint of more than 10 bytes: no int64


class Unparsable(Exception):
    """The bytes of a feature's list are not a list of its type."""


def tf_type_name(dtype: np.dtype) -> str:
    """TensorFlow's DataTypeString of a feature dtype: float, int64, string."""
    return _TF_NAMES[dtype]


def list_type_name(dtype: np.dtype) -> str:
    """How TensorFlow's count errors name a list's values: float, int64, bytes."""
    return _LIST_NAMES[dtype]


def wire_dtype(feature: bytes) -> np.dtype | None:
    """The dtype of a serialized Feature's list; None for an empty Feature. ValueError (TensorFlow's
    "Unsupported datatype.") when it starts with anything but one of the three lists."""
    if not feature:
        return None
    dtype = _TAG_DTYPES.get(feature[0])
    if dtype is None:
        raise ValueError("Unsupported datatype.")
    return dtype


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at buf[pos:] and the position after it; Unparsable when it is cut short or too long."""
    result = shift = 0
    size = len(buf)
    while pos < size and shift < 70:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise Unparsable


def _list_body(feature: bytes) -> tuple[int, int]:
    """The span of the list message inside a serialized Feature, after its tag and length."""
    length, start = read_varint(feature, 1)
    end = start + length
    if end > len(feature):
        raise Unparsable
    return start, end


def _packed_payload(feature: bytes, start: int, end: int) -> bytes:
    length, pos = read_varint(feature, start + 1)
    if pos + length > end:
        raise Unparsable
    return feature[pos:pos + length]


def _short_packed(feature: bytes) -> bool:
    """Whether `feature` is a list holding one packed run, both lengths one byte (the usual case): its
    payload is then feature[4:]."""
    size = len(feature)
    return 4 <= size < 0x82 and feature[1] == size - 2 and feature[2] == _PACKED_TAG and feature[3] == size - 4


def _read_floats(feature: bytes) -> tuple[int, Any]:
    if _short_packed(feature):
        count = (len(feature) - 4) // 4
        return count, feature[4:4 + 4 * count]
    start, end = _list_body(feature)
    if start == end:
        return 0, b""
    if feature[start] == _PACKED_TAG:
        payload = _packed_payload(feature, start, end)
        # NOTE: TensorFlow reads length // 4 floats from a packed run and ignores a ragged tail.
        count = len(payload) // 4
        return count, payload[:4 * count]
    if feature[start] == _UNPACKED_FLOAT_TAG:
        body = feature[start:end]
        count, rest = divmod(len(body), 5)
        if rest or body[::5].count(_UNPACKED_FLOAT_TAG) != count:
            raise Unparsable
        return count, np.frombuffer(body, np.uint8).reshape(count, 5)[:, 1:].tobytes()
    raise Unparsable


def _read_int64s(feature: bytes) -> tuple[int, Any]:
    if _short_packed(feature):
        payload = feature[4:]
    else:
        start, end = _list_body(feature)
        if start == end:
            return 0, b""
        if feature[start] == _UNPACKED_INT64_TAG:
            try:
                values = feature_pb2.Int64List.FromString(feature[start:end]).value
            except DecodeError:
                raise Unparsable from None
            return len(values), np.array(values, np.int64)
        if feature[start] != _PACKED_TAG:
            raise Unparsable
        payload = _packed_payload(feature, start, end)
    if payload and payload[-1] >= 0x80:
        raise Unparsable
    if _OVERLONG_VARINT.search(payload):  # caught here, where the caller words the error, not in decode_varints
        raise Unparsable
    return len(payload) - len(payload.translate(None, _LOW_BYTES)), payload


def _read_bytes(feature: bytes) -> tuple[int, Any]:
    if 2 <= len(feature) < 0x82 and feature[1] == len(feature) - 2:
        body = feature[2:]
    else:
        start, end = _list_body(feature)
        body = feature[start:end]
    try:
        values = feature_pb2.BytesList.FromString(body).value
    except DecodeError:
        raise Unparsable from None
    return len(values), list(values)


_READERS = {FLOAT: _read_floats, INT64: _read_int64s, STRING: _read_bytes}


def read_values(feature: bytes, dtype: np.dtype) -> tuple[int, Any]:
    """(count, payload) of a serialized Feature whose list is of `dtype` (see `wire_dtype`)."""
    return _READERS[dtype](feature)


def decode_varints(buf: bytes) -> np.ndarray:
    """Packed varints (each ending in a byte below 0x80) as int64, two's complement as protobuf writes
    negative int64s; Unparsable for a varint longer than 10 bytes."""
    data = np.frombuffer(buf, np.uint8)
    if data.size == 0:
        return np.zeros(0, np.int64)
    last = np.flatnonzero(data < 0x80)
    first = np.empty_like(last)
    first[0] = 0
    first[1:] = last[:-1] + 1
    position = np.arange(data.size) - np.repeat(first, last - first + 1)
    if int(position.max()) >= 10:
        raise Unparsable
    parts = (data & 0x7F).astype(np.uint64) << (7 * position).astype(np.uint64)
    return np.bitwise_or.reduceat(parts, first).view(np.int64)


def concat_values(dtype: np.dtype, payloads: list[Any]) -> np.ndarray:
    """The values of several `read_values` payloads, in order, as one flat array of `dtype`."""
    if dtype == FLOAT:
        return np.frombuffer(b"".join(payloads), "<f4").astype(np.float32)
    if dtype == INT64:
        if all(isinstance(p, bytes) for p in payloads):
            return decode_varints(b"".join(payloads))
        parts = [p if isinstance(p, np.ndarray) else decode_varints(p) for p in payloads]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    out = np.empty(sum(len(p) for p in payloads), dtype=object)
    out[:] = [v for p in payloads for v in p]
    return out
