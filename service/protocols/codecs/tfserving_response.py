"""TensorFlow Serving's REST replies: a Predict response body from a signature's outputs, and the error
body, as TF Serving's `util/json_tensor.cc` writes them (the request side is `tfserving`).

The reply mirrors the request's format: `{"predictions": [...]}`, one entry per batch row, for a
row-format request (`instances`), `{"outputs": ...}` for a columnar one. Floats no wider than float32
are written with TensorFlow's float32 digits; strings as UTF-8, or as `{"b64": ...}` when not valid
UTF-8 or when the output's alias ends in `_bytes`. Ragged and sparse outputs are objects of their
component tensors (see `tfserving`'s docstring).

    >>> encode_predict_response({"y": np.array([[0.5]], np.float32)}, row_format=True)
    b'{"predictions":[[0.5]]}'
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import numpy as np

from service.errors import BadRequest
from service.protocols.codecs import fastjson
from service.protocols.codecs.float_digits import tf_float32_digits
from service.protocols.codecs.tfserving import NARROW_FLOATS
from service.repository.signatures import OutputValue, RaggedValue, SparseValue

__all__ = ["encode_predict_response", "encode_error"]

_BYTES_SUFFIX = "_bytes"  # TF Serving's rule: string outputs named so are written as base64


def encode_predict_response(outputs: Mapping[str, OutputValue], row_format: bool) -> bytes:
    """The JSON body answering a Predict request: `{"predictions": [...]}` with one entry per batch
    row in row format, else `{"outputs": ...}`; an object by alias whenever there are several, or
    when one is ragged or sparse."""
    if not outputs:
        raise BadRequest("Cannot convert empty tensor map to JSON")
    values = {alias: v if isinstance(v, (RaggedValue, SparseValue)) else np.asarray(v) for alias, v in outputs.items()}
    if row_format:
        _check_batch_sizes(values)
    columns = {alias: _json_output(alias, value, row_format) for alias, value in values.items()}
    composite = any(isinstance(v, (RaggedValue, SparseValue)) for v in values.values())
    if len(columns) == 1 and not composite:
        (only,) = columns.values()
        return _dumps({"predictions" if row_format else "outputs": only})
    if not row_format:
        return _dumps({"outputs": columns})
    aliases = list(columns)
    return _dumps({"predictions": [dict(zip(aliases, row)) for row in zip(*columns.values())]})


def encode_error(message: str) -> bytes:
    """TF Serving's error body, `{"error": "..."}`."""
    # ASCII escapes keep the body valid even when the message quotes a client's unpaired surrogate.
    return json.dumps({"error": message}, separators=(",", ":")).encode("ascii")


# -- response -------------------------------------------------------------------------------------


def _rows(value: OutputValue) -> int | None:
    """How many instances an output splits into (None for a scalar)."""
    if isinstance(value, RaggedValue):
        return value.nrows
    if isinstance(value, SparseValue):
        return int(value.dense_shape[0]) if value.dense_shape.size else None
    return value.shape[0] if value.ndim else None


def _check_batch_sizes(values: Mapping[str, OutputValue]) -> None:
    # Row format splits every output along its 0th dimension, so all must have one, of one size.
    batch_size = None
    for alias, value in values.items():
        rows = _rows(value)
        if rows is None:
            raise BadRequest(
                f"Tensor name: {alias} has no shape information (a scalar cannot be split into instances)"
            )
        if batch_size is not None and rows != batch_size:
            raise BadRequest(
                f"Tensor name: {alias} has inconsistent batch size: {rows} expecting: {batch_size}"
            )
        batch_size = rows


def _json_output(alias: str, value: OutputValue, row_format: bool) -> Any:
    """An output as JSON-ready values: in row format, a list with one entry per instance."""
    if isinstance(value, RaggedValue):
        return _ragged_rows(alias, value) if row_format else _ragged_json(alias, value)
    if isinstance(value, SparseValue):
        return _sparse_rows(alias, value) if row_format else _sparse_json(alias, value)
    return _json_value(alias, value)


def _ragged_json(alias: str, value: RaggedValue) -> dict[str, Any]:
    splits = [_json_value(alias, s) for s in value.row_splits]
    return {"values": _json_value(alias, value.values), "row_splits": splits[0] if len(splits) == 1 else splits}


def _ragged_rows(alias: str, value: RaggedValue) -> list:
    """Each row as nested lists, innermost dimension first: the values, then each row_splits outward."""
    level = _json_value(alias, value.values)
    for splits in reversed(value.row_splits):
        bounds = splits.tolist()
        level = [level[start:end] for start, end in pairwise(bounds)]
    return level


def _sparse_json(alias: str, value: SparseValue) -> dict[str, Any]:
    return {"indices": _json_value(alias, value.indices), "values": _json_value(alias, value.values),
            "dense_shape": _json_value(alias, value.dense_shape)}


def _sparse_rows(alias: str, value: SparseValue) -> list[dict[str, Any]]:
    """Row i as a sparse tensor of one dimension less: the entries whose first index is i, in order."""
    indices, values = np.asarray(value.indices), np.asarray(value.values)
    nrows = int(value.dense_shape[0])
    rows = indices[:, 0] if indices.size else np.zeros(0, np.int64)
    order = np.argsort(rows, kind="stable")
    bounds = np.searchsorted(rows[order], np.arange(nrows + 1))
    shape = _json_value(alias, value.dense_shape[1:])
    return [{"indices": _json_value(alias, indices[order[start:end], 1:]),
             "values": _json_value(alias, values[order[start:end]]), "dense_shape": shape}
            for start, end in pairwise(bounds.tolist())]


def _json_value(alias: str, array: np.ndarray) -> Any:
    """An output as what `fastjson.dumps` writes: numbers as arrays (floats as float64 whose shortest
    digits are TensorFlow Serving's), strings as nested lists."""
    dtype = array.dtype
    if dtype.kind in "biu" or dtype == np.float64:
        return array
    if dtype in NARROW_FLOATS:  # TF Serving writes float16 through float32 too
        return tf_float32_digits(array.astype(np.float32))
    if dtype.kind == "f":  # long double: float64 is as close as JSON readers get
        return array.astype(np.float64)
    if dtype.kind in "OSU":
        return _json_strings(alias, array)
    raise BadRequest(f"output {alias!r} has dtype {dtype}, which has no JSON form")


def _json_strings(alias: str, array: np.ndarray) -> Any:
    flat = array.reshape(-1).tolist()
    as_b64 = alias.endswith(_BYTES_SUFFIX)
    strings = None
    if not as_b64 and set(map(type, flat)) <= {bytes}:
        strings = _utf8_or_none(flat)  # the common case, without a call per item
    if strings is None:
        strings = [_json_string(alias, item, as_b64) for item in flat]
    if array.ndim == 0:
        return strings[0]
    nested = np.empty(len(strings), dtype=object)
    nested[:] = strings
    return nested.reshape(array.shape).tolist()


def _utf8_or_none(items: list[bytes]) -> list[str] | None:
    try:
        return [item.decode() for item in items]
    except UnicodeDecodeError:
        return None


def _json_string(alias: str, item: Any, as_b64: bool) -> str | dict[str, str]:
    if isinstance(item, str):
        if not as_b64:
            return item
        item = item.encode()
    elif not isinstance(item, bytes):
        raise BadRequest(f"output {alias!r} holds {type(item).__name__}, not a string, so it has no JSON form")
    if not as_b64:
        try:
            return item.decode()
        except UnicodeDecodeError:
            pass  # NOTE: TF Serving would write the raw bytes, making invalid JSON; base64 keeps them
    return {"b64": base64.b64encode(item).decode("ascii")}


def _dumps(doc: dict) -> bytes:
    # NaN and +/-Infinity as bare literals, as TF Serving writes them; UTF-8 unescaped, as it does (an
    # unpaired surrogate escaped).
    return fastjson.dumps(doc)
