"""TensorFlow Serving's request codecs: REST Predict bodies (`instances` / `inputs`, b64 strings) for
signatures of every dtype and shape, REST Classify/Regress bodies (`examples`, `context`), and gRPC
PredictRequests' TensorProtos give decoded inputs or BadRequest, never another exception, and never
allocate what a TensorProto's shape claims beyond what its values can fill."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from engine.graph.tensors import from_array, to_array
from service.errors import BadRequest
from service.protocols.codecs.tfserving import decode_predict_inputs, parse_predict_body
from service.protocols.codecs.tfserving_examples import parse_examples_body
from service.protocols.grpc.rpc import parse_message
from service.protocols.proto import classification_pb2, predict_pb2, regression_pb2
from service.repository.signatures import TensorSpec
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.json_values import json_bytes, json_values
from tests.fuzz.mutations import mutated

_DTYPES = [None, np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int32, np.int64,
           np.uint64, np.bool_, object, np.complex64]
specs = st.lists(
    st.builds(lambda alias, dtype, shape: TensorSpec(alias, f"{alias}:0", None if dtype is None else np.dtype(dtype),
                                                     shape),
              st.sampled_from(["x", "y", "b64"]), st.sampled_from(_DTYPES),
              st.none() | st.lists(st.none() | st.integers(0, 3), max_size=3).map(tuple)),
    min_size=1, max_size=3, unique_by=lambda s: s.alias)
_ROWS = st.lists(json_values, max_size=4)
predict_docs = st.fixed_dictionaries(
    {}, optional={"instances": _ROWS | json_values, "inputs": st.dictionaries(st.sampled_from(["x", "y", "b64"]),
                                                                               json_values, max_size=3) | json_values,
                  "signature_name": st.sampled_from(["serving_default", ""]) | json_values})
PREDICT_BODIES = (b'{"instances": [[1.0, 2.0], [3.0, 4.0]]}', b'{"instances": [{"x": [1, 2], "b64": {"b64": "aGk="}}]}',
                  b'{"signature_name": "s", "inputs": {"x": [[1, 2]], "y": ["a", "b"]}}')


def decode_predict(body: bytes, signature: list[TensorSpec]) -> None:
    def parse_and_decode() -> None:
        decode_predict_inputs(parse_predict_body(body), signature)

    call_parser(parse_and_decode, allowed=(BadRequest,), memory_limit=64 * len(body) + 4 * MiB)


@fuzz_settings()
@given(predict_docs, specs)
@example({"instances": [[[[[[[[[[1]]]]]]]]]] * 2}, [TensorSpec("x", "x:0", np.dtype(np.float32), None)])
def test_predict_bodies_decode_or_raise_bad_request(doc: dict, signature: list[TensorSpec]) -> None:
    decode_predict(json_bytes(doc), signature)


@fuzz_settings()
@given(mutated(PREDICT_BODIES), specs)
@example(b"[" * 100_000, [TensorSpec("x", "x:0", None, None)])  # nesting past the recursion limit
def test_mutated_predict_bodies_decode_or_raise_bad_request(body: bytes, signature: list[TensorSpec]) -> None:
    decode_predict(body, signature)


# --- Classify / Regress ------------------------------------------------------------------------------

_FEATURES = st.dictionaries(st.sampled_from(["x", "tag", "b"]) | st.text(max_size=3), json_values, max_size=3)
example_docs = st.fixed_dictionaries({}, optional={"examples": st.lists(_FEATURES, max_size=3) | json_values,
                                                   "context": _FEATURES | json_values,
                                                   "signature_name": json_values})
EXAMPLE_BODIES = (b'{"examples": [{"x": 1.5, "tag": "a", "b": {"b64": "aGk="}}, {"x": [1, 2]}]}',
                  b'{"signature_name": "s", "context": {"c": [1.0]}, "examples": [{"x": true}]}')


@fuzz_settings()
@given(example_docs.map(json_bytes) | mutated(EXAMPLE_BODIES), st.booleans())
@example(b'{"examples": [{"x": 18446744073709551616}]}', True)  # beyond uint64
@example(b'{"signature_name": "\\ud800", "examples": [{}]}', True)  # unpaired surrogates, which protobuf refuses
@example(b'{"context": {"\\ud800": 1}, "examples": [{"\\udfff": 1}]}', False)
def test_classify_and_regress_bodies_parse_or_raise_bad_request(body: bytes, classify: bool) -> None:
    request = classification_pb2.ClassificationRequest() if classify else regression_pb2.RegressionRequest()
    call_parser(parse_examples_body, body, request, allowed=(BadRequest,), memory_limit=256 * len(body) + 4 * MiB)


# --- gRPC Predict: TensorProtos ---------------------------------------------------------------------------


def _predict_seed() -> tuple[bytes, ...]:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "m"
    request.inputs["x"].CopyFrom(from_array(np.arange(6, dtype=np.float32).reshape(2, 3)))
    request.inputs["s"].CopyFrom(from_array(np.array([b"a", b"bc"], dtype=object)))
    typed = predict_pb2.PredictRequest()
    typed.inputs["y"].CopyFrom(from_array(np.array([[1, 2]], dtype=np.int64), typed_fields=True))
    typed.inputs["h"].CopyFrom(from_array(np.array([0.5], dtype=np.float16), typed_fields=True))
    return request.SerializeToString(), typed.SerializeToString()


def _claimed(shape: list[int], **values) -> bytes:
    request = predict_pb2.PredictRequest()
    proto = request.inputs["x"]
    proto.dtype = 1  # DT_FLOAT
    for size in shape:
        proto.tensor_shape.dim.add().size = size
    for name, value in values.items():
        getattr(proto, name).extend(value)
    return request.SerializeToString()


@fuzz_settings()
@given(mutated(_predict_seed()) | st.binary(max_size=96))
@example(_claimed([10**9, 10**9]))  # 10**18 zeros claimed by an empty TensorProto
@example(_claimed([1 << 31], float_val=[1.0]))  # 2**31 copies of its one value
def test_grpc_predict_tensor_protos_decode_or_raise_bad_request(data: bytes) -> None:
    def parse_and_decode() -> None:
        for alias, proto in parse_message(predict_pb2.PredictRequest, data).inputs.items():
            try:
                to_array(proto, max_bytes=MiB)
            except ValueError as e:  # what predict_inputs answers with BadRequest, naming the alias
                raise BadRequest(f"input '{alias}': {e}") from None

    call_parser(parse_and_decode, allowed=(BadRequest,), memory_limit=64 * len(data) + 4 * MiB)
