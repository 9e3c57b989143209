"""The JSON codec of TensorFlow Serving's REST Predict API.

A Predict body feeds a signature's inputs either row by row (`{"instances": [...]}`: one entry per
batch item, stacked along a new axis 0) or column by column (`{"inputs": ...}`: each input's whole
tensor); the reply mirrors the request's format (`{"predictions": [...]}` or `{"outputs": ...}`).
This module turns request bodies into arrays, as TF Serving's `util/json_tensor.cc` does;
`tfserving_response` turns outputs into reply bodies. Neither knows of models, shapes or routes.

Ragged and sparse outputs, which TF Serving cannot return (DT_INVALID), are objects of their component
tensors: `{"values": [...], "row_splits": [...]}` (row_splits a list of vectors, outermost first, for
more than one ragged dimension) and `{"indices": [...], "values": [...], "dense_shape": [...]}`. In row
format each instance gets its own row: a ragged row as nested lists, a sparse row as a sparse object of
one dimension less. When an output is ragged or sparse, outputs are always named by alias, even alone.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, NoReturn

import ml_dtypes
import numpy as np

from service.errors import BadRequest
from service.protocols.codecs import fastjson
from service.repository.signatures import TensorSpec

__all__ = [
    "PredictRequest",
    "load_json",
    "parse_predict_body",
    "decode_predict_inputs",
    "NARROW_FLOATS",
]

_MAX_RANK = 64  # numpy's limit on the number of dimensions
# Floats no wider than float32, written as TF Serving writes float32 (numpy's and TensorFlow's).
NARROW_FLOATS = frozenset(
    np.dtype(t)
    for t in (np.float16, np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
)
_JSON_TYPE_NAMES = {
    bool: "a boolean",
    int: "a number",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


@dataclass(frozen=True)
class PredictRequest:
    """A decoded Predict body: the arrays to feed, by input alias, and the format to answer in.

    >>> doc = parse_predict_body(b'{"instances": [[1, 2], [3, 4]]}')
    >>> spec = TensorSpec("x", "x:0", np.dtype("float32"), (None, 2))
    >>> decode_predict_inputs(doc, [spec]).inputs["x"].shape
    (2, 2)
    """

    signature_name: str | None  # None when the body names none
    inputs: dict[str, np.ndarray]  # alias -> array, in the order the body gives them
    row_format: bool  # True for "instances", False for "inputs"


def load_json(body: bytes) -> Any:
    """A request body's JSON (NaN, Infinity and -Infinity accepted, as TensorFlow Serving's parser does);
    BadRequest with TensorFlow Serving's "JSON Parse error" for anything else."""
    try:
        return fastjson.loads(body)
    except RecursionError as e:
        raise BadRequest("JSON Parse error: the document is nested too deeply") from e
    except ValueError as e:  # malformed JSON and undecodable bytes alike
        if not body.strip(b" \t\r\n"):  # rapidjson's words for a body of nothing but whitespace
            raise BadRequest("JSON Parse error: The document is empty") from e
        raise BadRequest(f"JSON Parse error: {e}") from e


def parse_predict_body(body: bytes) -> dict:
    """Parse a Predict body, checking its top level: an object with exactly one of `instances` and
    `inputs`, and a string `signature_name` if any. NaN, Infinity and -Infinity are accepted."""
    doc = load_json(body)
    if not isinstance(doc, dict):
        raise BadRequest(f"JSON Value: {_describe(doc)} is not an object")
    # NOTE: TF Serving checks the signature name first, so a bad one is named even without a format key.
    _signature_name(doc)
    _format_key(doc)
    return doc


def decode_predict_inputs(doc: dict, specs: Sequence[TensorSpec]) -> PredictRequest:
    """Turn a parsed Predict body into one array per input of the signature `specs` describes.

    Values take each spec's dtype (inferred from the JSON when unknown); shapes are left for the
    caller to check against the signature."""
    if not specs:
        raise BadRequest("the signature has no inputs, so it cannot be fed from JSON")
    signature_name = _signature_name(doc)
    if _format_key(doc) == "instances":
        return PredictRequest(signature_name, _decode_instances(doc["instances"], specs), True)
    return PredictRequest(signature_name, _decode_inputs(doc["inputs"], specs), False)


# -- request: the top level ----------------------------------------------------------------------


def _format_key(doc: dict) -> str:
    has_instances, has_inputs = "instances" in doc, "inputs" in doc
    if has_instances and has_inputs:
        raise BadRequest("Not formatted correctly: expecting only one of 'inputs' or 'instances' keys to exist, not both")
    if not (has_instances or has_inputs):
        raise BadRequest("Missing 'inputs' or 'instances' key")
    return "instances" if has_instances else "inputs"


def _signature_name(doc: dict) -> str | None:
    if "signature_name" not in doc:
        return None
    name = doc["signature_name"]
    if not isinstance(name, str):
        raise BadRequest(f"'signature_name' must be a string, not {_describe(name)}")
    return name


def _is_b64(value: Any) -> bool:
    # The one object that is a value, not a map of inputs: {"b64": "<base64 string>"}.
    return type(value) is dict and len(value) == 1 and type(value.get("b64")) is str


def _is_named(value: Any) -> bool:
    return type(value) is dict and not _is_b64(value)


def _check_aliases(keys: Sequence[str], specs: Sequence[TensorSpec], where: str) -> None:
    known = [spec.alias for spec in specs]
    unknown = [key for key in keys if key not in known]
    if unknown:
        raise BadRequest(
            f"{where} names unknown input(s) {_quoted(unknown)}; the signature's inputs are {_quoted(known)}"
        )
    missing = [alias for alias in known if alias not in keys]
    if missing:
        raise BadRequest(f"{where} is missing input(s) {_quoted(missing)}")


def _decode_instances(instances: Any, specs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    if type(instances) is not list:
        raise BadRequest(f"expecting 'instances' to be a list, not {_describe(instances)}")
    if not instances:
        raise BadRequest("No values in 'instances' array")
    by_alias = {spec.alias: spec for spec in specs}
    # NOTE: like TF Serving, the first instance decides whether instances are objects by alias.
    if not _is_named(instances[0]):
        if len(specs) > 1:
            raise BadRequest(
                f"'instances' is a plain list, but the signature has several inputs ({_quoted(list(by_alias))}): "
                "each instance must be an object naming every input"
            )
        if dict in set(map(type, instances)):  # skip the per-row scan in the common case
            named = [row for row, item in enumerate(instances) if _is_named(item)]
            if named:
                raise BadRequest(f"instances[{named[0]}] is an object by alias, but instances[0] is a plain value")
        (spec,) = specs
        return {spec.alias: _to_array(instances, spec, _Where("instances", spec.alias, named=False, rows=True))}
    columns: dict[str, list] = {alias: [] for alias in instances[0]}
    for row, item in enumerate(instances):
        if not _is_named(item):
            raise BadRequest(f"instances[{row}] is {_describe(item)}, but instances[0] is an object by alias")
        if item.keys() != by_alias.keys():
            _check_aliases(list(item), specs, f"instances[{row}]")
        for alias, value in item.items():
            columns[alias].append(value)
    return {
        alias: _to_array(column, by_alias[alias], _Where("instances", alias, named=True, rows=True))
        for alias, column in columns.items()
    }


def _decode_inputs(inputs: Any, specs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    if _is_named(inputs):
        _check_aliases(list(inputs), specs, "'inputs'")
        by_alias = {spec.alias: spec for spec in specs}
        return {
            alias: _to_array(value, by_alias[alias], _Where("inputs", alias, named=True, rows=False))
            for alias, value in inputs.items()
        }
    if len(specs) > 1:
        names = _quoted([spec.alias for spec in specs])
        raise BadRequest(
            f"'inputs' is a plain value, but the signature has several inputs ({names}): "
            "'inputs' must be an object naming every input"
        )
    (spec,) = specs
    return {spec.alias: _to_array(inputs, spec, _Where("inputs", spec.alias, named=False, rows=False))}


# -- request: one input's value ------------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    """Where an input's value sits in the body, to point at a bad element: instances[3]['x'][0]."""

    root: str
    alias: str
    named: bool  # an object by alias holds the value
    rows: bool  # the value's first index is the instance

    def at(self, path: Sequence[int]) -> str:
        path = list(path)
        text = self.root
        if self.rows and path:
            text += f"[{path.pop(0)}]"
        if self.named:
            text += f"[{self.alias!r}]"
        return text + "".join(f"[{i}]" for i in path)

    def error(self, path: Sequence[int], problem: str) -> BadRequest:
        return BadRequest(f"input {self.alias!r}: {self.at(path)} {problem}")


def _to_array(value: Any, spec: TensorSpec, where: _Where) -> np.ndarray:
    shape, leaves = _flatten(value, where)
    kinds = set(map(type, leaves))
    if list in kinds:  # a list where its siblings hold values: nested deeper in one place
        i = next(i for i, leaf in enumerate(leaves) if type(leaf) is list)
        first = f"{where.at((0,) * len(shape))} is {_describe(_first(value))}"
        raise where.error(_path(i, shape), f"is a list, but {first} (ragged lists)")
    dtype = spec.dtype if spec.dtype is not None else _infer_dtype(kinds, leaves, where)
    if dtype == object:
        flat = _to_strings(leaves, kinds, shape, where)
    elif dtype.kind == "b":
        _check_kinds(leaves, kinds, {bool}, shape, where, f"true or false for dtype {dtype}")
        flat = np.array(leaves, dtype=dtype)
    elif dtype.kind in "iu":
        flat = _to_integers(leaves, kinds, dtype, shape, where)
    elif dtype.kind == "f" or dtype in NARROW_FLOATS:
        flat = _to_floats(leaves, kinds, dtype, shape, where)
    else:
        raise BadRequest(f"input {spec.alias!r}: dtype {dtype} cannot be fed from JSON")
    return flat.reshape(shape)


def _flatten(value: Any, where: _Where) -> tuple[tuple[int, ...], list]:
    """The shape of a nested list, from its first elements, and its leaves in C order; raises
    BadRequest when the lists are ragged. Works level by level so the checks run in C."""
    shape = []
    probe = value
    while type(probe) is list:
        shape.append(len(probe))
        if len(shape) > _MAX_RANK:
            raise where.error((), f"is nested more than {_MAX_RANK} lists deep")
        if not probe:
            break
        probe = probe[0]
    level = [value]
    for depth, size in enumerate(shape):
        if set(map(type, level)) != {list} or set(map(len, level)) != {size}:
            i = next(i for i, node in enumerate(level) if type(node) is not list or len(node) != size)
            node = level[i]
            found = f"has {_count(len(node))}" if type(node) is list else f"is {_describe(node)}"
            raise where.error(
                _path(i, shape[:depth]),
                f"{found}, but {where.at((0,) * depth)} has {size} (ragged lists"
                + ("; every instance must have the same shape)" if where.rows else ")"),
            )
        level = list(chain.from_iterable(level))
    return tuple(shape), level


def _infer_dtype(kinds: set[type], leaves: list, where: _Where) -> np.dtype:
    # TensorFlow's own conventions (tf.constant): floats are float32, ints int32 unless too big.
    if kinds == {bool}:
        return np.dtype(np.bool_)
    if kinds == {int}:
        fits = -(2**31) <= min(leaves) and max(leaves) < 2**31
        return np.dtype(np.int32 if fits else np.int64)
    if not kinds or kinds <= {int, float}:
        return np.dtype(np.float32)
    if kinds <= {str, dict}:
        return np.dtype(object)
    found = ", ".join(sorted({_JSON_TYPE_NAMES[kind] for kind in kinds}))
    raise where.error((), f"mixes {found}, so its dtype cannot be inferred")


def _check_kinds(leaves: list, kinds: set[type], allowed: set[type], shape: tuple, where: _Where, expected: str) -> None:
    if kinds <= allowed:
        return
    i = next(i for i, leaf in enumerate(leaves) if type(leaf) not in allowed)
    raise where.error(_path(i, shape), f"is {_describe(leaves[i])}, expected {expected}")


def _to_integers(leaves: list, kinds: set[type], dtype: np.dtype, shape: tuple, where: _Where) -> np.ndarray:
    _check_kinds(leaves, kinds, {int, float}, shape, where, f"an integer for dtype {dtype}")
    info = np.iinfo(dtype)
    if float in kinds:  # 3.0 for an integer input is fine; 1.5, NaN and Infinity are not
        try:
            wide = np.array(leaves, dtype=np.float64)
        except OverflowError:  # an integer beyond even float64
            _raise_out_of_range(leaves, info, shape, where, dtype)
        with np.errstate(invalid="ignore"):
            fractional = ~np.isfinite(wide) | (wide != np.trunc(wide))
        if fractional.any():
            i = int(np.argmax(fractional))
            raise where.error(_path(i, shape), f"is {_describe(leaves[i])}, expected an integer for dtype {dtype}")
        if kinds == {float}:
            # info.max + 1 is a power of two, so exact in float64 where info.max may not be
            outside = (wide < info.min) | (wide >= info.max + 1)
            if outside.any():
                i = int(np.argmax(outside))
                raise where.error(_path(i, shape), f"is {_describe(leaves[i])}, out of range for dtype {dtype}")
            return wide.astype(dtype)
        # Integers and floats mixed: convert the floats one by one, as float64 would round big ints.
        leaves = [int(leaf) if type(leaf) is float else leaf for leaf in leaves]
    try:
        return np.array(leaves, dtype=dtype)  # numpy refuses Python ints out of the dtype's range
    except OverflowError:
        _raise_out_of_range(leaves, info, shape, where, dtype)


def _raise_out_of_range(leaves: list, info: np.iinfo, shape: tuple, where: _Where, dtype: np.dtype) -> NoReturn:
    i = next(i for i, leaf in enumerate(leaves) if not info.min <= leaf <= info.max)
    raise where.error(_path(i, shape), f"is {_describe(leaves[i])}, out of range for dtype {dtype}")


def _to_floats(leaves: list, kinds: set[type], dtype: np.dtype, shape: tuple, where: _Where) -> np.ndarray:
    _check_kinds(leaves, kinds, {int, float}, shape, where, f"a number for dtype {dtype}")
    try:
        with np.errstate(over="ignore"):  # overflow is reported below, naming the element
            flat = np.array(leaves, dtype=dtype)
    except OverflowError:  # an integer beyond even float64
        i = next(i for i, leaf in enumerate(leaves) if not _fits_float64(leaf))
        raise where.error(_path(i, shape), f"is {_describe(leaves[i])}, out of range for dtype {dtype}") from None
    if flat.size and not np.isfinite(flat).all():
        overflow = np.isfinite(np.array(leaves, dtype=np.float64)) & ~np.isfinite(flat)
        if overflow.any():  # NaN and Infinity literals pass; finite values that overflow do not
            i = int(np.argmax(overflow))
            raise where.error(_path(i, shape), f"is {_describe(leaves[i])}, out of range for dtype {dtype}")
    return flat


def _fits_float64(number: int | float) -> bool:
    try:
        float(number)
    except OverflowError:
        return False
    return True


def _to_strings(leaves: list, kinds: set[type], shape: tuple, where: _Where) -> np.ndarray:
    _check_kinds(leaves, kinds, {str, dict}, shape, where, 'a string or {"b64": "..."} for dtype string')
    flat = np.empty(len(leaves), dtype=object)
    if kinds == {str}:
        try:
            flat[:] = [leaf.encode() for leaf in leaves]
            return flat
        except UnicodeEncodeError:
            pass  # an unpaired surrogate ("\ud800"); the loop below names it
    for i, leaf in enumerate(leaves):
        flat[i] = _string_bytes(leaf, i, shape, where)
    return flat


def _string_bytes(leaf: str | dict, i: int, shape: tuple, where: _Where) -> bytes:
    if type(leaf) is str:
        try:
            return leaf.encode()
        except UnicodeEncodeError:
            raise where.error(_path(i, shape), "is a string with an unpaired surrogate, not valid UTF-8") from None
    if not _is_b64(leaf):
        raise where.error(_path(i, shape), f'is {_describe(leaf)}, expected a string or {{"b64": "..."}}')
    text = leaf["b64"]
    try:
        # NOTE: absl's Base64Unescape, which TF Serving uses, takes unpadded input too.
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:
        raise where.error(_path(i, shape), f"is {_describe(leaf)}, which is not valid base64") from None


def _path(flat_index: int, shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, tuple(shape))) if shape else ()


def _first(value: Any) -> Any:
    while type(value) is list and value:
        value = value[0]
    return value


def _describe(value: Any) -> str:
    """A short description of a JSON value for error messages: `a string "abc"`, `a list of 3 values`."""
    if type(value) is list:
        return f"a list of {_count(len(value))}"
    if value is None:
        return "null"
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{_JSON_TYPE_NAMES.get(type(value), 'a value')} {text}"


def _count(n: int) -> str:
    return "1 value" if n == 1 else f"{n} values"


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(repr(name) for name in names)
