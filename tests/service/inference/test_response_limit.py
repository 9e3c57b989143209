"""The response size estimate is a lower bound of what the codecs write: a response that fits is never
refused by the estimate, whatever the dtype and the encoding."""

from __future__ import annotations

import numpy as np
import pytest

from service.errors import PayloadTooLarge
from service.inference.response_limit import ANY, BINARY, JSON, PROTO_FIELDS, ResponseLimit, lower_bound
from service.protocols.codecs import tfserving_response, v2, v2_grpc
from service.protocols.proto import grpc_service_pb2 as pb


def strings(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


ARRAYS = [
    np.zeros(50, np.float32),
    np.full(50, np.nan, np.float32),
    np.arange(50, dtype=np.float64) / 3,
    np.zeros(50, np.int64),
    np.arange(-25, 25, dtype=np.int32),
    np.zeros(50, np.uint8),
    np.zeros(50, np.float16),
    np.array([True, False] * 25),
    strings(b"", b"a", "é".encode(), b"x" * 100),
]


@pytest.mark.parametrize("array", ARRAYS, ids=lambda a: str(a.dtype) + ("-nan" if a.dtype.kind == "f" and np.isnan(a).any() else ""))
def test_the_estimate_never_exceeds_what_the_codecs_write(array):
    json_v2, _ = v2.encode_infer_response("m", "1", "", [("y", array, False)])
    assert lower_bound(array, JSON) <= len(json_v2)
    json_tfs = tfserving_response.encode_predict_response({"y": array}, False)
    assert lower_bound(array, JSON) <= len(json_tfs)
    binary, header_length = v2.encode_infer_response("m", "1", "", [("y", array, True)])
    assert lower_bound(array, BINARY) <= len(binary) - header_length
    grpc_raw = v2_grpc.encode_infer_response("m", "1", "", [("y", array, True)])
    assert lower_bound(array, BINARY) <= len(grpc_raw)
    grpc_typed = v2_grpc.encode_infer_response("m", "1", "", [("y", array, False)])
    assert lower_bound(array, PROTO_FIELDS) <= len(pb.ModelInferResponse.FromString(grpc_typed).SerializeToString())
    assert lower_bound(array, ANY) <= min(len(json_v2), len(json_tfs), len(binary) - header_length, len(grpc_typed))


def test_bytes_sent_as_base64_are_counted_by_their_bytes():
    array = strings(b"\xff\xfe", b"", b"\x00" * 30)
    assert lower_bound(array, JSON) <= len(tfserving_response.encode_predict_response({"y": array}, False))


def test_the_limit_names_the_largest_outputs_and_the_setting():
    limit = ResponseLimit(1000)
    limit.check_outputs([("small", np.zeros(10, np.float32), JSON)])
    with pytest.raises(PayloadTooLarge) as info:
        limit.check_outputs([("small", np.zeros(10, np.float32), JSON), ("big", np.zeros(1000, np.float64), BINARY)])
    message = info.value.message
    assert "'big' (8000 bytes)" in message and "'small' (40 bytes)" in message
    assert "at least 8040 bytes" in message and "limit of 1000 bytes (TENSORGATE_MAX_RESPONSE_BYTES)" in message
    with pytest.raises(PayloadTooLarge, match="response of 1001 bytes"):
        limit.check_encoded(1001)
    ResponseLimit(None).check_outputs([("big", np.zeros(10**6), BINARY)])
