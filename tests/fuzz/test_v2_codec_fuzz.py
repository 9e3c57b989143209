"""The Open Inference Protocol (KServe v2) request codecs: REST bodies with and without
`Inference-Header-Content-Length` (JSON, then binary tensor data), and gRPC ModelInferRequests, give
a decoded request or BadRequest, never another exception, and never allocate what a shape claims
beyond what the body holds."""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from service.errors import BadRequest
from service.protocols.codecs import v2, v2_grpc, v2_tensors
from service.protocols.grpc.rpc import parse_message
from service.protocols.proto import grpc_service_pb2 as pb
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.json_values import json_bytes, json_values, numbers, shapes
from tests.fuzz.mutations import mutated

_DATATYPES = st.sampled_from([*v2_tensors.DATATYPES, "FP8", "", "fp32"]) | json_values
_SIZES = st.integers(-1, 64) | st.sampled_from([2**32, 2**63]) | json_values

input_specs = st.fixed_dictionaries(
    {"name": st.sampled_from(["x", "y", ""]) | json_values, "shape": shapes, "datatype": _DATATYPES},
    optional={"data": st.lists(numbers | st.booleans() | st.text(max_size=3), max_size=8) | json_values,
              "parameters": st.fixed_dictionaries({}, optional={"binary_data_size": _SIZES,
                                                                "shared_memory_region": st.just("r")}) | json_values},
)
requests = st.fixed_dictionaries(
    {"inputs": st.lists(input_specs, max_size=3) | json_values},
    optional={"id": st.text(max_size=3) | json_values,
              "outputs": st.lists(st.fixed_dictionaries({"name": st.text(max_size=2) | json_values},
                                                        optional={"parameters": json_values}), max_size=2) | json_values,
              "parameters": st.fixed_dictionaries({}, optional={"binary_data_output": json_values}) | json_values},
)

# Real bodies: what tritonclient sends, JSON and binary.
_FLOATS = struct.pack("<4f", 1, 2, 3, 4)
_STRINGS = struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)
_BINARY_HEADER = json_bytes({"inputs": [
    {"name": "x", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
    {"name": "s", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(_STRINGS)}}],
    "outputs": [{"name": "y", "parameters": {"binary_data": True}}]})
BODIES = (
    json_bytes({"id": "1", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]},
                                      {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}),
    _BINARY_HEADER + _FLOATS + _STRINGS,
)


def decode(body: bytes, header_length: int | None) -> None:
    call_parser(v2.decode_infer_request, body, header_length, allowed=(BadRequest,),
                memory_limit=64 * len(body) + 4 * MiB)


@fuzz_settings()
@given(requests, st.binary(max_size=64), st.booleans())
@example({"inputs": [{"name": "x", "shape": [0, 2**63 - 1, 2**63 - 1], "datatype": "FP32", "data": []}]}, b"", False)
@example({"inputs": [{"name": "s", "shape": [2**62], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}]},
         b"\xff\xff\xff\xff\x00\x00\x00\x00", True)
def test_json_and_binary_bodies_decode_or_raise_bad_request(request: dict, tail: bytes, framed: bool) -> None:
    header = json_bytes(request)
    decode(header + tail if framed else header, len(header) if framed else None)


@fuzz_settings()
@given(mutated(BODIES), st.none() | st.integers(-1, 400) | st.just(len(_BINARY_HEADER)))
def test_mutated_bodies_decode_or_raise_bad_request(body: bytes, header_length: int | None) -> None:
    decode(body, header_length)


# --- gRPC ----------------------------------------------------------------------------------------


def _grpc_seed() -> bytes:
    request = pb.ModelInferRequest(model_name="m", id="1")
    x = request.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    x.contents.fp32_contents.extend([1, 2, 3, 4])
    s = request.inputs.add(name="s", datatype="BYTES", shape=[1])
    s.contents.bytes_contents.append(b"hi")
    request.outputs.add(name="y").parameters["binary_data"].bool_param = True
    raw = pb.ModelInferRequest(model_name="m")
    raw.inputs.add(name="x", datatype="INT64", shape=[2])
    raw.raw_input_contents.append(struct.pack("<2q", 1, 2))
    return request.SerializeToString(), raw.SerializeToString()


GRPC_SEEDS = _grpc_seed()


def decode_grpc(data: bytes) -> None:
    def parse_and_decode() -> None:
        v2_grpc.decode_infer_request(parse_message(pb.ModelInferRequest, data))

    call_parser(parse_and_decode, allowed=(BadRequest,), memory_limit=64 * len(data) + 4 * MiB)


@fuzz_settings()
@given(mutated(GRPC_SEEDS) | st.binary(max_size=128))
@example(pb.ModelInferRequest(inputs=[pb.ModelInferRequest.InferInputTensor(
    name="x", datatype="FP32", shape=[0, 2**62, 2**62])]).SerializeToString())  # no elements, yet too big a shape
@example(pb.ModelInferRequest(inputs=[pb.ModelInferRequest.InferInputTensor(
    name="x", datatype="FP32", shape=[-1])]).SerializeToString())
def test_mutated_grpc_requests_decode_or_raise_bad_request(data: bytes) -> None:
    decode_grpc(data)


def test_parse_message_rejects_garbage_with_bad_request() -> None:
    # The precondition of the property above: bytes that are no message are BadRequest, not DecodeError.
    try:
        parse_message(pb.ModelInferRequest, b"\xff\xff\xff")
    except BadRequest as e:
        assert "ModelInferRequest" in e.message
    except DecodeError:  # pragma: no cover - the property test reports this path
        raise
