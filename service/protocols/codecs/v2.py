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
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from service.errors import BadRequest
from service.protocols.codecs import fastjson
from service.protocols.codecs.v2_tensors import (
    DATATYPES,
    BinarySection,
    check_shape,
    datatype_of,
    from_binary,
    from_json,
    to_binary,
    to_json,
)

__all__ = [
    "InferInput",
    "RequestedOutput",
    "InferRequest",
    "decode_infer_request",
    "encode_infer_response",
    "reject_duplicates",
]

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
    binary = BinarySection(view[header_length:])
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


def _decode_input(spec: dict, index: int, binary: BinarySection) -> InferInput:
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
        flat = from_json(name, datatype, math.prod(shape), spec["data"])
    else:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadRequest(
                f"input {name!r}: binary_data_size must be a non-negative integer, not {size!r}"
            )
        flat = from_binary(name, datatype, math.prod(shape), size, binary)
    try:
        array = flat.reshape(shape)
    except ValueError as e:  # a zero-sized shape whose other dimensions overflow numpy's limits
        raise BadRequest(f"input {name!r}: shape {shape} cannot be represented: {e}") from None
    return InferInput(name, array, parameters)


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
            blob = to_binary(name, datatype, array)
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = to_json(name, datatype, array)
        tensors.append(tensor)
    header["outputs"] = tensors
    # NaN and Infinity go out as bare literals, as Triton writes them and json.loads reads them.
    text = fastjson.dumps(header)
    if not blobs:
        return text, None
    return b"".join([text, *blobs]), len(text)


