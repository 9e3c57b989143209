"""The Open Inference Protocol's infer messages over gRPC (KServe v2's `ModelInferRequest` and
`ModelInferResponse`, as Triton and `tritonclient.grpc` use them) <-> the arrays of `v2.InferRequest`.

An input's data comes either in its typed `contents` (`fp32_contents`, `int_contents`, ...) or, for
every input at once, in `raw_input_contents` (one bytes entry per input, laid out as the binary tensor
extension lays out tensors). Outputs go back raw (`raw_output_contents`, as Triton sends them and
tritonclient reads them), or in typed `contents` when the request asks for `binary_data_output: false`;
FP16 and BF16 have no typed field and always go raw. Parameters become plain values.

    >>> request = decode_infer_request(grpc_service_pb2.ModelInferRequest.FromString(raw))
    >>> request.inputs[0].array.shape
    (1, 4)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from service.errors import BadRequest
from service.protocols.codecs import v2, v2_tensors
from service.protocols.proto import grpc_service_pb2 as pb

__all__ = ["decode_infer_request", "encode_infer_response", "parameters_of"]

# Datatype -> the InferTensorContents field its typed values travel in.
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_CONTENT_FIELDS = tuple(sorted(set(_CONTENTS.values())))


def parameters_of(parameters: Mapping[str, pb.InferParameter]) -> dict:
    """InferParameters as plain values (bool, int, str, float)."""
    values = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        values[key] = None if choice is None else getattr(parameter, choice)
    return values


def decode_infer_request(message: pb.ModelInferRequest) -> v2.InferRequest:
    """The request's inputs as arrays; BadRequest naming the input for anything malformed."""
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise BadRequest(f"raw_input_contents has {len(raw)} entries but the request has {len(message.inputs)} inputs: "
                         "send every input's data raw, one entry per input in order, or none of them")
    inputs = []
    for index, tensor in enumerate(message.inputs):
        inputs.append(_decode_input(tensor, index, raw[index] if raw else None))
    v2.reject_duplicates("input", [i.name for i in inputs])
    outputs = []
    for index, tensor in enumerate(message.outputs):
        if not tensor.name:
            raise BadRequest(f"outputs[{index}] has no name")
        parameters = parameters_of(tensor.parameters)
        binary = parameters.get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise BadRequest(f"output {tensor.name!r}: parameter 'binary_data' must be a bool")
        if "shared_memory_region" in parameters:
            raise BadRequest(f"output {tensor.name!r}: this server does not support shared memory tensors")
        outputs.append(v2.RequestedOutput(tensor.name, binary, parameters))
    if outputs:
        v2.reject_duplicates("output", [o.name for o in outputs])
    parameters = parameters_of(message.parameters)
    if not isinstance(parameters.get("binary_data_output", False), bool):
        raise BadRequest("request parameter 'binary_data_output' must be a bool")
    return v2.InferRequest(message.id or None, tuple(inputs), tuple(outputs) or None, parameters)


def _decode_input(tensor: pb.ModelInferRequest.InferInputTensor, index: int, raw: bytes | None) -> v2.InferInput:
    name = tensor.name
    if not name:
        raise BadRequest(f"inputs[{index}] has no name")
    datatype = tensor.datatype
    if datatype not in v2_tensors.DATATYPES:
        raise BadRequest(f"input {name!r}: unknown datatype {datatype!r}; expected one of {', '.join(v2_tensors.DATATYPES)}")
    shape = list(tensor.shape)
    parameters = parameters_of(tensor.parameters)
    if "shared_memory_region" in parameters:
        raise BadRequest(f"input {name!r}: this server does not support shared memory tensors")
    typed = tensor.HasField("contents") and any(len(getattr(tensor.contents, f)) for f in _CONTENT_FIELDS)
    if raw is not None:
        if typed:
            raise BadRequest(f"input {name!r} has both typed contents and raw_input_contents: send one")
        return v2.InferInput(name, v2_tensors.tensor_from_raw(name, datatype, shape, raw), parameters)
    v2_tensors.check_shape(name, shape)
    count = math.prod(shape)
    field = _CONTENTS.get(datatype)
    if field is None:
        raise BadRequest(f"input {name!r}: {datatype} has no typed contents field; send its data in raw_input_contents")
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise BadRequest(f"input {name!r}: shape {shape} holds {count} elements but {field} has {len(values)}")
    for other in _CONTENT_FIELDS:
        if other != field and len(getattr(tensor.contents, other)):
            raise BadRequest(f"input {name!r}: a {datatype} tensor's values go in {field}, not {other}")
    dtype = v2_tensors.DATATYPES[datatype]
    if datatype == "BYTES":
        flat = np.empty(count, dtype=object)
        flat[:] = list(values)
    else:
        wide = np.array(values, dtype=np.float64 if dtype.kind == "f" else np.int64 if field != "uint64_contents"
                        else np.uint64)
        flat = wide.astype(dtype)
        if dtype.kind in "iu" and count and not np.array_equal(flat.astype(wide.dtype), wide):
            raise BadRequest(f"input {name!r}: a value in {field} is out of range for {datatype}")
    try:
        array = flat.reshape(shape)
    except ValueError as e:  # a zero-sized shape whose other dimensions overflow numpy's limits
        raise BadRequest(f"input {name!r}: shape {shape} cannot be represented: {e}") from None
    return v2.InferInput(name, array, parameters)


def encode_infer_response(model: str, version: str, request_id: str | None,
                          outputs: Sequence[tuple[str, np.ndarray, bool]]) -> bytes:
    """A serialized ModelInferResponse of `outputs` (name, array, raw). If any output goes raw, all
    do: `raw_output_contents` is indexed like `outputs`, so clients cannot mix the two."""
    response = pb.ModelInferResponse(model_name=model, model_version=version, id=request_id or "")
    all_raw = any(raw or _CONTENTS.get(v2_tensors.datatype_of(np.asarray(a).dtype)) is None for _, a, raw in outputs)
    for name, array, _ in outputs:
        array = np.asarray(array)
        tensor = response.outputs.add(name=name, shape=array.shape)
        if all_raw:
            tensor.datatype, data = v2_tensors.tensor_to_raw(name, array)
            response.raw_output_contents.append(data)
            continue
        tensor.datatype = v2_tensors.datatype_of(array.dtype)
        values = getattr(tensor.contents, _CONTENTS[tensor.datatype])
        flat = array.ravel()
        if tensor.datatype == "BYTES":
            values.extend(v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat.tolist())
        else:
            values.extend(flat.tolist())
    return response.SerializeToString()
