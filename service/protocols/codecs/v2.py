"""The Open Inference Protocol's infer body (KServe v2 over HTTP, as Triton speaks it), with
Triton's binary tensor data extension.

An infer body is a JSON header, optionally followed by raw tensor bytes. When the HTTP header
`Inference-Header-Content-Length` is present, it gives the length of the JSON part, and the bytes
after it are the binary tensors, concatenated in the order of the tensors that declare
`parameters.binary_data_size`. Responses are framed the same way. This module turns request bodies
into numpy arrays and arrays back into response bodies; it knows nothing of models or routes.

    >>> body = b'{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,2]}]}'
    >>> decode_infer_request(body, None).inputs[0].array
    array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import ml_dtypes
import numpy as np

from service.errors import BadRequest
from service.protocols.codecs import fastjson

__all__ = [
    "DATATYPES",
    "datatype_of",
    "InferInput",
    "RequestedOutput",
    "InferRequest",
    "decode_infer_request",
    "encode_infer_response",
    "tensor_from_raw",
    "tensor_to_raw",
    "reject_duplicates",
    "check_shape",
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


# eq=False: dataclass equality would compare arrays with ==, whose truth value is ambiguous.
@dataclass(frozen=True, eq=False)
class InferInput:
    """One input tensor of a request, already shaped and typed.

    Arrays decoded from binary data are read-only views on the request body (no copy); BYTES
    arrays hold `bytes` objects.

        InferInput("x", np.zeros((2, 3), np.float32), {})
    """

    name: str
    array: np.ndarray
    parameters: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RequestedOutput:
    """An output the client asked for; `binary` is its `binary_data` parameter, None when not given
    (the request-level `binary_data_output` parameter then decides).

        RequestedOutput("probs", True, {"binary_data": True})
    """

    name: str
    binary: bool | None
    parameters: dict = field(default_factory=dict)


@dataclass(frozen=True)
class InferRequest:
    """A decoded infer request; `outputs` is None when the request names none (meaning all).

        InferRequest(id="42", inputs=(InferInput("x", np.ones(2, np.float32)),), outputs=None)
    """

    id: str | None
    inputs: tuple[InferInput, ...]
    outputs: tuple[RequestedOutput, ...] | None
    parameters: dict = field(default_factory=dict)


# --- requests --------------------------------------------------------------------------------


class _BinarySection:
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


def decode_infer_request(body: bytes, header_length: int | None) -> InferRequest:
    """Parse an infer request body; `header_length` is `Inference-Header-Content-Length` (None when
    absent, so the whole body is JSON). Every malformed body raises BadRequest."""
    view = memoryview(body)
    if header_length is None:
        header_length = len(view)
    elif not 0 <= header_length <= len(view):
        raise BadRequest(
            f"Inference-Header-Content-Length is {header_length} but the body is {len(view)} bytes"
        )
    try:
        request = fastjson.loads(bytes(view[:header_length]))
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; deep nesting
        raise BadRequest(f"the request header is not valid JSON: {e}") from None
    if not isinstance(request, dict):
        raise BadRequest("the request header must be a JSON object")

    request_id = request.get("id")  # tritonclient writes "id": null when given request_id=None
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest(f"request 'id' must be a string, not {request_id!r}")
    parameters = _parameters(request, "request")
    if not isinstance(parameters.get("binary_data_output", False), bool):
        raise BadRequest("request parameter 'binary_data_output' must be true or false")

    specs = request.get("inputs")
    if not isinstance(specs, list):
        raise BadRequest("the request must have an 'inputs' list")
    binary = _BinarySection(view[header_length:])
    inputs = tuple(_decode_input(spec, index, binary) for index, spec in enumerate(specs))
    binary.check_consumed()
    reject_duplicates("input", [tensor.name for tensor in inputs])

    outputs = request.get("outputs")
    if outputs is not None:
        if not isinstance(outputs, list):
            raise BadRequest("request 'outputs' must be a list")
        # An empty list names no outputs, which is what an absent one means too: all of them.
        outputs = tuple(_decode_output(spec, index) for index, spec in enumerate(outputs)) or None
        if outputs:
            reject_duplicates("output", [output.name for output in outputs])
    return InferRequest(request_id, inputs, outputs, parameters)


def _parameters(obj: dict, owner: str) -> dict:
    parameters = obj.get("parameters", {})
    if not isinstance(parameters, dict):
        raise BadRequest(f"{owner} 'parameters' must be a JSON object")
    return parameters


def _tensor_name(spec: object, kind: str, index: int) -> str:
    """The name of an input or output spec, after checking the spec is an object at all."""
    if not isinstance(spec, dict):
        raise BadRequest(f"{kind}s[{index}] must be a JSON object")
    name = spec.get("name")
    if not isinstance(name, str):
        raise BadRequest(f"{kind}s[{index}] needs a string 'name'")
    if "shared_memory_region" in _parameters(spec, f"{kind} {name!r}:"):
        raise BadRequest(f"{kind} {name!r}: this server does not support shared memory tensors")
    return name


def tensor_from_raw(name: str, datatype: str, shape: list[int], data: bytes) -> np.ndarray:
    """One input from its raw bytes alone (gRPC's `raw_input_contents`): the binary extension's layout
    (little-endian elements; BYTES as length-prefixed elements), every byte of `data` used."""
    check_shape(name, shape)
    flat = _from_binary(name, datatype, math.prod(shape), len(data), _BinarySection(memoryview(data)))
    try:
        return flat.reshape(shape)
    except ValueError as e:
        raise BadRequest(f"input {name!r}: shape {shape} cannot be represented: {e}") from None


def tensor_to_raw(name: str, array: np.ndarray) -> tuple[str, bytes]:
    """An output's datatype and raw bytes (gRPC's `raw_output_contents`), laid out as binary data."""
    datatype = datatype_of(array.dtype)
    return datatype, _to_binary(name, datatype, array)


def reject_duplicates(kind: str, names: list[str]) -> None:
    """BadRequest when a tensor name appears twice among the request's inputs (or outputs)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise BadRequest(f"{kind} {name!r} appears more than once in the request")
        seen.add(name)


def _decode_output(spec: dict, index: int) -> RequestedOutput:
    name = _tensor_name(spec, "output", index)
    parameters = _parameters(spec, f"output {name!r}:")
    binary = parameters.get("binary_data")
    if binary is not None and not isinstance(binary, bool):
        raise BadRequest(f"output {name!r}: parameter 'binary_data' must be true or false")
    return RequestedOutput(name, binary, parameters)


def _decode_input(spec: dict, index: int, binary: _BinarySection) -> InferInput:
    name = _tensor_name(spec, "input", index)
    shape = check_shape(name, spec.get("shape"))
    datatype = spec.get("datatype")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise BadRequest(
            f"input {name!r}: unknown datatype {datatype!r}; expected one of {', '.join(DATATYPES)}"
        )
    parameters = _parameters(spec, f"input {name!r}:")
    size = parameters.get("binary_data_size")
    has_data = "data" in spec
    if has_data == (size is not None):
        raise BadRequest(
            f"input {name!r} needs exactly one of 'data' and parameters.binary_data_size"
        )
    if has_data:
        flat = _from_json(name, datatype, math.prod(shape), spec["data"])
    else:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadRequest(
                f"input {name!r}: binary_data_size must be a non-negative integer, not {size!r}"
            )
        flat = _from_binary(name, datatype, math.prod(shape), size, binary)
    try:
        array = flat.reshape(shape)
    except ValueError as e:  # a zero-sized shape whose other dimensions overflow numpy's limits
        raise BadRequest(f"input {name!r}: shape {shape} cannot be represented: {e}") from None
    return InferInput(name, array, parameters)


def check_shape(name: str, shape: object) -> list[int]:
    """The shape of input `name`: a list of dimensions in [0, 2**63); BadRequest otherwise."""
    # bools are ints; JSON integers beyond 64 bits reach us as floats (see fastjson)
    if not isinstance(shape, list) or not all(type(dim) is int or _beyond_64_bits(dim) for dim in shape):
        raise BadRequest(f"input {name!r}: 'shape' must be a list of integers, not {shape!r}")
    if any(type(dim) is not int or not 0 <= dim <= _MAX_DIM for dim in shape):
        raise BadRequest(f"input {name!r}: shape {shape} has a negative or oversized dimension")
    return shape


def _from_binary(
    name: str, datatype: str, count: int, size: int, binary: _BinarySection
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


def _from_json(name: str, datatype: str, count: int, data: object) -> np.ndarray:
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


# --- responses -------------------------------------------------------------------------------


def encode_infer_response(
    model_name: str,
    model_version: str,
    request_id: str | None,
    outputs: Sequence[tuple[str, np.ndarray, bool]],
    parameters: dict | None = None,
) -> tuple[bytes, int | None]:
    """The body of an infer response and its JSON header length, to send as
    `Inference-Header-Content-Length`; that length is None when no output is binary (pure JSON).

    `outputs` are (name, array, binary); binary outputs' bytes follow the header in output order.
    """
    header: dict = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        header["id"] = request_id
    if parameters is not None:
        header["parameters"] = parameters
    tensors, blobs = [], []
    for name, array, binary in outputs:
        array = np.asarray(array)
        try:
            datatype = datatype_of(array.dtype)
        except BadRequest as e:
            raise BadRequest(f"output {name!r}: {e.message}") from None
        tensor = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            blob = _to_binary(name, datatype, array)
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = _to_json(name, datatype, array)
        tensors.append(tensor)
    header["outputs"] = tensors
    # NaN and Infinity go out as bare literals, as Triton writes them and json.loads reads them.
    text = fastjson.dumps(header)
    if not blobs:
        return text, None
    return b"".join([text, *blobs]), len(text)


def _to_json(name: str, datatype: str, array: np.ndarray) -> np.ndarray | list:
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


def _to_binary(name: str, datatype: str, array: np.ndarray) -> bytes:
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
