"""The kernel of DecodeJSONExample: tf.Example protos written in protobuf's JSON mapping, as serialized
Examples.

Each string is checked by protobuf's own JSON parser (json_format) against tensorgate's copy of the
Example schema (engine/proto/example.proto), then written as TensorFlow's JSON-to-binary stream writes
it: fields in the order the JSON gives them (map entries included), repeated numbers unpacked, an empty
`"features": {}` or Feature `{}` written as an empty message and a null feature as a key without a
value. Errors read "Error while parsing JSON: " and protobuf's message, which is Python protobuf's here.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
from google.protobuf import json_format

from engine.proto import example_pb2
from kernels.registry import kernel

__all__ = ["decode_json_example", "json_to_example_bytes"]

_LISTS = {"bytesList": ("bytes_list", 1), "bytes_list": ("bytes_list", 1), "floatList": ("float_list", 2),
          "float_list": ("float_list", 2), "int64List": ("int64_list", 3), "int64_list": ("int64_list", 3)}


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature_bytes(feature: Any, doc: list[tuple[str, Any]]) -> bytes:
    """A Feature in the order of its JSON object `doc` (pairs), its values from the parsed `feature`."""
    out = b""
    for name, value in doc:
        if value is None or name not in _LISTS:
            continue
        kind, number = _LISTS[name]
        values = getattr(feature, kind).value
        if kind == "bytes_list":
            body = b"".join(_field(1, v) for v in values)
        elif kind == "float_list":
            body = b"".join(b"\x0d" + struct.pack("<f", v) for v in values)
        else:
            body = b"".join(b"\x08" + _varint(v) for v in values)
        out += _field(number, body)
    return out


class _Object(list):
    """A JSON object as the (name, value) pairs it was written with, in order."""


def _pairs(value: Any) -> list[tuple[str, Any]]:
    return value if isinstance(value, _Object) else []


def _to_dict(value: Any) -> Any:
    """Parsed JSON with objects as dicts, for json_format; a name given twice is refused, as TensorFlow's
    parser refuses a repeated map key."""
    if isinstance(value, _Object):
        out = {}
        for name, item in value:
            if name in out:
                raise ValueError(f"Error while parsing JSON: duplicate key {name!r}")
            out[name] = _to_dict(item)
        return out
    if isinstance(value, list):
        return [_to_dict(v) for v in value]
    return value


def json_to_example_bytes(text: str | bytes) -> bytes:
    """One JSON Example as serialized bytes; ValueError when protobuf's JSON parser refuses it."""
    try:
        doc = json.loads(text, object_pairs_hook=_Object)
        checked = _to_dict(doc)
    except RecursionError:
        raise ValueError("Error while parsing JSON: nested too deeply") from None
    except ValueError as e:
        raise ValueError(f"Error while parsing JSON: {e}") from None
    if not isinstance(checked, dict):  # json_format takes a dict; anything else is a TypeError inside it
        raise ValueError(f"Error while parsing JSON: an Example is a JSON object, not {type(checked).__name__}")
    features = checked.get("features") if isinstance(checked, dict) else None
    if isinstance(features, dict) and isinstance(features.get("feature"), dict):
        # NOTE: TensorFlow takes a null feature as a key without a value; json_format refuses null map values.
        features["feature"] = {k: {} if v is None else v for k, v in features["feature"].items()}
    example = example_pb2.Example()
    try:
        json_format.ParseDict(checked, example)
    except json_format.ParseError as e:
        raise ValueError(f"Error while parsing JSON: {e}") from None
    out = b""
    for name, features in _pairs(doc):
        if name != "features" or features is None:
            continue
        body = b""
        for field_name, entries in _pairs(features):
            if field_name != "feature" or entries is None:
                continue
            for key, feature in _pairs(entries):
                entry = _field(1, key.encode("utf-8"))
                if feature is not None:
                    entry += _field(2, _feature_bytes(example.features.feature[key], _pairs(feature)))
                body += _field(1, entry)
        out += _field(1, body)
    return out


@kernel("DecodeJSONExample", devices=("cpu",))
def decode_json_example(xp: Any, json_examples: Any) -> tuple:
    """Each JSON string as a serialized Example, in the input's shape."""
    out = np.empty(json_examples.shape, object)
    flat = out.reshape(-1)
    for i, text in enumerate(json_examples.reshape(-1).tolist()):
        flat[i] = json_to_example_bytes(text)
    return (out,)
