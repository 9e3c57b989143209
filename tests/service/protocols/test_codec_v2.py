"""The Open Inference Protocol infer codec: bodies that tritonclient builds decode to the arrays it
was given, bodies we build parse in tritonclient to the arrays we sent, and every malformed body is
a 400 that names the tensor at fault."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from service.errors import BadRequest
from service.protocols.codecs.v2 import InferRequest, RequestedOutput, decode_infer_request, encode_infer_response
from service.protocols.codecs.v2_tensors import DATATYPES, datatype_of

try:
    import tritonclient.http as triton
    from tritonclient.http import _utils as triton_utils
except ImportError:  # not part of the dev extras yet
    triton = None

needs_tritonclient = pytest.mark.skipif(triton is None, reason="tritonclient[http] not installed")

UTF8_TEXTS = [b"hello", "h\u00e9llo w\u00f6rld".encode(), b"", "\u65e5\u672c\u8a9e \U0001f600".encode(),
              b"a\x00b", b" "]
NOT_UTF8_TEXTS = [b"\xff\xfe", b"", b"ok", b"\x80", b"x" * 300, b"\x00"]


def sample(datatype: str, *, utf8: bool = True) -> np.ndarray:
    """A 2x3 array of `datatype` with the values most likely to go wrong on the wire."""
    if datatype == "BOOL":
        values = [True, False, True, False, False, True]
    elif datatype.startswith(("INT", "UINT")):
        info = np.iinfo(DATATYPES[datatype])
        values = [info.min, info.max, 0, 1, 42, info.max - 1]
    elif datatype == "BYTES":
        values = UTF8_TEXTS if utf8 else NOT_UTF8_TEXTS
        array = np.empty(6, dtype=object)
        array[:] = values
        return array.reshape(2, 3)
    else:
        values = [0.1, -1.5, np.nan, np.inf, -np.inf, 1e-3]
    return np.array(values, dtype=DATATYPES[datatype]).reshape(2, 3)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    if expected.dtype == object:
        assert actual.dtype == object
        assert actual.tolist() == expected.tolist()
        return
    assert actual.dtype == expected.dtype
    # Compare bit patterns, so NaN matches NaN and -0.0 does not match 0.0.
    width = np.dtype(f"u{expected.dtype.itemsize}")
    np.testing.assert_array_equal(actual.view(width), expected.view(width))


def json_body(inputs: list, **request) -> bytes:
    return json.dumps({"inputs": inputs, **request}).encode()


def framed(header: dict, *blobs: bytes) -> tuple[bytes, int]:
    """A body in Triton's binary framing, with its Inference-Header-Content-Length."""
    text = json.dumps(header).encode()
    return text + b"".join(blobs), len(text)


def serialized(*elements: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def triton_request(inputs, outputs=None, request_id="", **kwargs) -> tuple[bytes, int | None]:
    options = dict(sequence_id=0, sequence_start=False, sequence_end=False, priority=0,
                   timeout=None, custom_parameters=None)
    options.update(kwargs)
    return triton_utils._get_inference_request(
        inputs=inputs, request_id=request_id, outputs=outputs, **options
    )


def triton_input(name: str, array: np.ndarray, binary: bool):
    tensor = triton.InferInput(name, list(array.shape), datatype_of(array.dtype))
    return tensor.set_data_from_numpy(array, binary_data=binary)


def triton_result(body: bytes, header_length: int | None):
    return triton.InferResult.from_response_body(
        body, verbose=False, header_length=header_length, content_encoding=None
    )


# --- datatypes -----------------------------------------------------------------------------------


def test_datatypes_table_covers_the_protocol():
    assert set(DATATYPES) == {"BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                              "UINT32", "UINT64", "FP16", "FP32", "FP64", "BF16", "BYTES"}
    assert DATATYPES["BF16"] == np.dtype(ml_dtypes.bfloat16)
    assert DATATYPES["BYTES"] == np.dtype(object)


@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_datatype_of_inverts_the_table(datatype):
    assert datatype_of(DATATYPES[datatype]) == datatype


def test_datatype_of_text_and_foreign_byte_order():
    assert datatype_of(np.dtype("S5")) == "BYTES"
    assert datatype_of(np.dtype("U3")) == "BYTES"
    assert datatype_of(np.dtype(">i4")) == "INT32"
    assert datatype_of(np.dtype(np.longlong)) == "INT64"


def test_datatype_of_rejects_dtypes_without_a_datatype():
    with pytest.raises(BadRequest, match="complex64"):
        datatype_of(np.dtype(np.complex64))


# --- requests: every datatype, JSON and binary ---------------------------------------------------


@needs_tritonclient
@pytest.mark.parametrize("datatype", sorted(set(DATATYPES) - {"BF16"}))
def test_tritonclient_json_request_decodes(datatype):
    expected = sample(datatype)
    body, header_length = triton_request([triton_input("x", expected, binary=False)])
    assert header_length is None
    (decoded,) = decode_infer_request(body, header_length).inputs
    assert decoded.name == "x"
    assert_same(decoded.array, expected)


def test_bf16_json_request_decodes():
    # tritonclient refuses to send BF16 as JSON, but the protocol allows numbers for it.
    body = json_body([{"name": "x", "shape": [2, 3], "datatype": "BF16",
                       "data": [0.1, -1.5, float("nan"), float("inf"), float("-inf"), 1e-3]}])
    assert_same(decode_infer_request(body, None).inputs[0].array, sample("BF16"))


@needs_tritonclient
@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_tritonclient_binary_request_decodes(datatype):
    expected = sample(datatype, utf8=False)
    body, header_length = triton_request([triton_input("x", expected, binary=True)])
    (decoded,) = decode_infer_request(body, header_length).inputs
    assert_same(decoded.array, expected)
    assert decoded.parameters["binary_data_size"] == len(body) - header_length


@needs_tritonclient
def test_tritonclient_request_with_mixed_binary_and_json_inputs():
    arrays = {
        "a": (sample("FP32"), True),
        "b": (sample("INT64"), False),
        "c": (sample("BYTES", utf8=False), True),
        "d": (sample("BYTES"), False),
        "e": (sample("BOOL"), True),
        "f": (sample("FP16"), False),
    }
    inputs = [triton_input(name, array, binary) for name, (array, binary) in arrays.items()]
    outputs = [triton.InferRequestedOutput("y", binary_data=False),
               triton.InferRequestedOutput("z", binary_data=True, class_count=3)]
    body, header_length = triton_request(inputs, outputs, request_id="req-7", timeout=1000,
                                         custom_parameters={"tenant": "blue"})
    request = decode_infer_request(body, header_length)
    assert request.id == "req-7"
    assert request.parameters == {"timeout": 1000, "tenant": "blue"}
    assert [tensor.name for tensor in request.inputs] == list(arrays)
    for tensor in request.inputs:
        assert_same(tensor.array, arrays[tensor.name][0])
    assert request.outputs == (
        RequestedOutput("y", False, {"binary_data": False}),
        RequestedOutput("z", True, {"binary_data": True, "classification": 3}),
    )


@needs_tritonclient
def test_tritonclient_request_without_outputs_asks_for_all_in_binary():
    body, header_length = triton_request([triton_input("x", sample("INT8"), True)], request_id=None)
    request = decode_infer_request(body, header_length)
    assert request.id is None  # tritonclient writes "id": null for request_id=None
    assert request.outputs is None
    assert request.parameters == {"binary_data_output": True}


def test_bytes_json_request_keeps_non_ascii_and_empty_strings():
    body = json_body([{"name": "t", "shape": [3], "datatype": "BYTES",
                       "data": ["caf\u00e9", "", "\U0001f600"]}])
    (decoded,) = decode_infer_request(body, None).inputs
    assert decoded.array.tolist() == ["caf\u00e9".encode(), b"", "\U0001f600".encode()]


def test_nested_json_data_is_row_major():
    body = json_body([
        {"name": "m", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]},
        {"name": "s", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]},
        # Nesting need not mirror the shape: Triton flattens it, so do we.
        {"name": "f", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2, 3, 4]]},
    ])
    m, s, f = decode_infer_request(body, None).inputs
    assert m.array.tolist() == [[1, 2], [3, 4]]
    assert s.array.tolist() == [[b"a"], [b"b"]]
    assert f.array.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_float_tensors_take_integers_and_json_nan_literals():
    body = (b'{"inputs":[{"name":"x","shape":[4],"datatype":"FP64",'
            b'"data":[1,NaN,Infinity,-Infinity]}]}')
    array = decode_infer_request(body, None).inputs[0].array
    assert array.dtype == np.float64
    assert array[0] == 1 and np.isnan(array[1]) and array[2] == np.inf and array[3] == -np.inf


def test_bool_json_accepts_zero_and_one():
    body = json_body([{"name": "b", "shape": [3], "datatype": "BOOL", "data": [1, 0, True]}])
    assert decode_infer_request(body, None).inputs[0].array.tolist() == [True, False, True]


def test_integer_extremes_survive_json():
    body = json_body([
        {"name": "u", "shape": [2], "datatype": "UINT64", "data": [0, 2**64 - 1]},
        {"name": "i", "shape": [2], "datatype": "INT64", "data": [-(2**63), 2**63 - 1]},
    ])
    u, i = decode_infer_request(body, None).inputs
    assert u.array.tolist() == [0, 2**64 - 1] and u.array.dtype == np.uint64
    assert i.array.tolist() == [-(2**63), 2**63 - 1] and i.array.dtype == np.int64


def test_scalars_and_empty_tensors():
    header = {"inputs": [
        {"name": "s", "shape": [], "datatype": "INT16", "data": [7]},
        {"name": "sb", "shape": [], "datatype": "FP32", "parameters": {"binary_data_size": 4}},
        {"name": "e", "shape": [0, 3], "datatype": "FP32", "data": []},
        {"name": "eb", "shape": [3, 0], "datatype": "INT8", "parameters": {"binary_data_size": 0}},
        {"name": "es", "shape": [0], "datatype": "BYTES", "parameters": {"binary_data_size": 0}},
    ]}
    body, header_length = framed(header, np.float32(2.5).tobytes())
    s, sb, e, eb, es = decode_infer_request(body, header_length).inputs
    assert s.array.shape == () and s.array == 7 and s.array.dtype == np.int16
    assert sb.array.shape == () and sb.array == 2.5
    assert e.array.shape == (0, 3) and e.array.dtype == np.float32
    assert eb.array.shape == (3, 0) and eb.array.dtype == np.int8
    assert es.array.shape == (0,) and es.array.dtype == object


def test_binary_inputs_are_read_only_views_on_the_body():
    body, header_length = framed(
        {"inputs": [{"name": "x", "shape": [2], "datatype": "INT32",
                     "parameters": {"binary_data_size": 8}}]},
        np.array([1, -2], "<i4").tobytes(),
    )
    array = decode_infer_request(body, header_length).inputs[0].array
    assert array.tolist() == [1, -2]
    assert not array.flags.writeable


def test_request_without_header_length_is_all_json_and_empty_outputs_mean_all():
    body = json_body([{"name": "x", "shape": [1], "datatype": "INT8", "data": [1]}], outputs=[])
    request = decode_infer_request(body, None)
    assert isinstance(request, InferRequest)
    assert request.id is None and request.outputs is None and request.parameters == {}


# --- responses -----------------------------------------------------------------------------------


@needs_tritonclient
@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("datatype", sorted(DATATYPES))
def test_response_parses_in_tritonclient(datatype, binary):
    array = sample(datatype, utf8=not binary)
    scalar = np.array(3, DATATYPES[datatype]) if datatype != "BYTES" else np.array(b"s", object)
    empty = np.empty((0, 2), DATATYPES[datatype])
    outputs = [("y", array, binary), ("scalar", scalar, binary), ("empty", empty, binary)]
    body, header_length = encode_infer_response("m", "1", "r1", outputs)
    assert (header_length is None) == (not binary)
    result = triton_result(body, header_length)
    assert result.get_response()["id"] == "r1"
    for name, expected, _ in outputs:
        actual = result.as_numpy(name)
        if datatype == "BYTES" and not binary:
            # tritonclient hands JSON BYTES back as str, not bytes.
            expected = np.vectorize(bytes.decode, otypes=[object])(expected)
        assert_same(actual, expected)


@needs_tritonclient
def test_response_mixes_json_and_binary_outputs_in_order():
    outputs = [("a", sample("FP32"), True), ("b", sample("INT8"), False),
               ("c", sample("BYTES", utf8=False), True), ("d", sample("BF16"), True)]
    body, header_length = encode_infer_response("m", "2", None, outputs)
    result = triton_result(body, header_length)
    for name, expected, _ in outputs:
        assert_same(result.as_numpy(name), expected)
    assert body[header_length:] == b"".join(
        [sample("FP32").tobytes(), serialized(*sample("BYTES", utf8=False).ravel()),
         sample("BF16").tobytes()]
    )


def test_response_header_fields():
    body, header_length = encode_infer_response(
        "net", "3", None, [("y", np.array([np.nan, np.inf, -np.inf, 0.5]), False)]
    )
    assert header_length is None
    assert b" " not in body  # compact separators
    assert body == (b'{"model_name":"net","model_version":"3","outputs":[{"name":"y",'
                    b'"datatype":"FP64","shape":[4],"data":[NaN,Infinity,-Infinity,0.5]}]}')
    body, _ = encode_infer_response("net", "3", "abc", [], parameters={"sequence_id": 4})
    assert json.loads(body) == {"model_name": "net", "model_version": "3", "id": "abc",
                                "parameters": {"sequence_id": 4}, "outputs": []}


def test_response_fp16_and_bytes_json_data():
    body, _ = encode_infer_response("m", "1", None, [
        ("h", np.array([0.5, -2], np.float16), False),
        ("t", np.array(["caf\u00e9".encode(), b""], object), False),
        ("u", np.array(["x", "y\u00e9"]), False),
    ])
    h, t, u = json.loads(body)["outputs"]
    assert h["data"] == [0.5, -2.0]
    assert t == {"name": "t", "datatype": "BYTES", "shape": [2], "data": ["caf\u00e9", ""]}
    assert u["data"] == ["x", "y\u00e9"]


def test_response_bytes_that_are_not_utf8_need_binary():
    outputs = [("blob", np.array([b"\xff"], object), False)]
    with pytest.raises(BadRequest, match="'blob'.*binary_data") as caught:
        encode_infer_response("m", "1", None, outputs)
    assert caught.value.status == 400


def test_response_rejects_outputs_without_a_datatype():
    with pytest.raises(BadRequest, match="'z'.*complex64"):
        encode_infer_response("m", "1", None, [("z", np.zeros(2, np.complex64), True)])


def test_response_normalizes_foreign_byte_order():
    outputs = [("y", np.array([1, 2], ">i4"), True)]
    body, header_length = encode_infer_response("m", "1", None, outputs)
    assert body[header_length:] == np.array([1, 2], "<i4").tobytes()


# --- malformed requests --------------------------------------------------------------------------


def one_input(**fields) -> bytes:
    return json_body([{"name": "bad_in", "shape": [2], "datatype": "FP32", **fields}])


def binary_input(shape, datatype, size, blob: bytes) -> tuple[bytes, int]:
    spec = {"name": "bad_in", "shape": shape, "datatype": datatype,
            "parameters": {"binary_data_size": size}}
    return framed({"inputs": [spec]}, blob)


def data_of(datatype, data, shape=None) -> bytes:
    shape = [len(data)] if shape is None else shape
    return json_body([{"name": "bad_in", "shape": shape, "datatype": datatype, "data": data}])


def output_of(parameters) -> bytes:
    return json_body([], outputs=[{"name": "bad_in", "parameters": parameters}])


# (body, header length, a fragment the message must hold besides the tensor's name)
TENSOR_ERRORS = {
    "shape missing": (json_body([{"name": "bad_in", "datatype": "FP32", "data": []}]), None, "shape"),
    "shape not a list": (one_input(shape=3, data=[1]), None, "shape"),
    "shape of strings": (one_input(shape=["2"], data=[1, 2]), None, "shape"),
    "shape of floats": (one_input(shape=[2.0], data=[1, 2]), None, "shape"),
    "shape of bools": (one_input(shape=[True], data=[1]), None, "shape"),
    "negative dim": (one_input(shape=[-1], data=[1]), None, "negative"),
    "huge dim": (one_input(shape=[2**64], data=[1]), None, "oversized"),
    "zero-size shape beyond numpy": (one_input(shape=[0, 2**62, 2**62], data=[]), None, "shape"),
    "datatype missing": (json_body([{"name": "bad_in", "shape": [1], "data": [1]}]), None, "datatype"),
    "unknown datatype": (one_input(datatype="FP8", data=[1, 2]), None, "FP8"),
    "datatype not a string": (one_input(datatype=["FP32"], data=[1, 2]), None, "datatype"),
    "input parameters not an object": (one_input(parameters=[], data=[1, 2]), None, "parameters"),
    "both data and binary": (one_input(data=[1, 2], parameters={"binary_data_size": 8}), None,
                             "exactly one"),
    "neither data nor binary": (one_input(), None, "exactly one"),
    "shared memory": (one_input(parameters={"shared_memory_region": "r"}), None, "shared memory"),
    "data not a list": (one_input(data=1.5), None, "list"),
    "too few elements": (one_input(data=[1]), None, "1 elements"),
    "too many elements": (one_input(data=[1, 2, 3]), None, "3 elements"),
    "nested count mismatch": (data_of("INT32", [[1, 2], [3, 4]], [2, 3]), None, "4 elements"),
    "ragged": (data_of("INT32", [[1, 2], [3]], [3]), None, "ragged"),
    "ragged bytes": (data_of("BYTES", [["a"], ["b", "c"]], [3]), None, "ragged"),
    "too deep": (data_of("INT32", json.loads("[" * 70 + "1" + "]" * 70), [1]), None, "ragged"),
    "INT8 too big": (data_of("INT8", [1, 128]), None, "128"),
    "INT8 too small": (data_of("INT8", [-129]), None, "-129"),
    "UINT8 negative": (data_of("UINT8", [-1]), None, "-1"),
    "UINT64 beyond 64 bits": (data_of("UINT64", [1, 2**64]), None, str(2**64)),
    "INT64 beyond int64": (data_of("INT64", [2**63]), None, str(2**63)),
    "INT64 mixed signs beyond int64": (data_of("INT64", [-1, 2**63]), None, str(2**63)),
    "float for int": (data_of("INT32", [1, 1.5]), None, "1.5"),
    "integral float for int": (data_of("INT32", [2.0]), None, "integers"),
    "NaN for int": (data_of("INT16", [float("nan")]), None, "nan"),
    "bool for int": (data_of("INT32", [True, False]), None, "True"),
    "string for int": (data_of("INT32", [1, "2"]), None, "'2'"),
    "string for float": (data_of("FP32", ["1.5"]), None, "'1.5'"),
    "null for float": (data_of("FP64", [1.0, None]), None, "None"),
    "object for float": (data_of("FP64", [{"v": 1}]), None, "numbers"),
    "bool for float": (data_of("FP32", [True]), None, "True"),
    "FP16 overflow": (data_of("FP16", [1.0, 70000]), None, "70000"),
    "FP32 overflow": (data_of("FP32", [1e39]), None, "out of range"),
    "BF16 overflow": (data_of("BF16", [1e39]), None, "out of range"),
    "int beyond float64": (data_of("FP64", [10**400]), None, "out of range"),
    "string for bool": (data_of("BOOL", ["true"]), None, "true or false"),
    "two for bool": (data_of("BOOL", [1, 2]), None, "2"),
    "float for bool": (data_of("BOOL", [1.0]), None, "true or false"),
    "number for bytes": (data_of("BYTES", ["a", 1]), None, "strings"),
    "lone surrogate for bytes": (data_of("BYTES", ["\ud800"]), None, "UTF-8"),
    "binary size not an int": (*binary_input([1], "FP32", "4", b"\0" * 4), "binary_data_size"),
    "binary size a bool": (*binary_input([1], "INT8", True, b"\0"), "binary_data_size"),
    "binary size negative": (*binary_input([0], "INT8", -1, b""), "binary_data_size"),
    "binary size not matching shape": (*binary_input([3], "FP32", 8, b"\0" * 8), "12 bytes"),
    "binary shorter than declared": (*binary_input([3], "FP32", 12, b"\0" * 8), "8 bytes"),
    "binary without header length": (binary_input([2], "INT8", 2, b"")[0], None, "0 bytes"),
    "binary leftover": (*binary_input([2], "INT8", 2, b"\1\2\3"), "left over"),
    "binary bool not 0 or 1": (*binary_input([2], "BOOL", 2, b"\1\2"), "0 or 1"),
    "bytes prefix cut": (*binary_input([2], "BYTES", 10, serialized(b"abcd") + b"\1\0"), "element 1"),
    "bytes element overruns": (*binary_input([1], "BYTES", 6, b"\5\0\0\0ab"), "only 2 remain"),
    "bytes extra elements": (*binary_input([1], "BYTES", 10, serialized(b"a", b"b")), "more than"),
    "bytes fewer elements": (*binary_input([3], "BYTES", 15, serialized(b"abcdef", b"b")), "element 2"),
    "bytes shape too big for data": (*binary_input([2**40], "BYTES", 5, serialized(b"a")),
                                     "cannot hold"),
    "duplicate input": (json_body([json.loads(data_of("INT8", [1]))["inputs"][0]] * 2), None,
                        "more than once"),
    "output binary_data not bool": (output_of({"binary_data": 1}), None, "binary_data"),
    "output parameters not an object": (output_of(1), None, "parameters"),
    "output shared memory": (output_of({"shared_memory_region": "r"}), None, "shared memory"),
    "duplicate output": (json_body([], outputs=[{"name": "bad_in"}] * 2), None, "more than once"),
}


@pytest.mark.parametrize("body, header_length, fragment", TENSOR_ERRORS.values(), ids=TENSOR_ERRORS)
def test_malformed_tensor_is_a_bad_request_naming_it(body, header_length, fragment):
    with pytest.raises(BadRequest) as caught:
        decode_infer_request(body, header_length)
    assert "'bad_in'" in caught.value.message
    assert fragment in caught.value.message
    assert caught.value.status == 400


# Errors of the body as a whole, before any tensor can be named.
REQUEST_ERRORS = {
    "not JSON": (b'{"inputs": [', None, "not valid JSON"),
    "not UTF-8": (b'{"inputs": ["\xff"]}', None, "not valid JSON"),
    "deeply nested JSON": (b"[" * 100_000 + b"]" * 100_000, None, "not valid JSON"),
    "empty": (b"", None, "not valid JSON"),
    "not an object": (b"[]", None, "JSON object"),
    "inputs missing": (b"{}", None, "'inputs'"),
    "inputs not a list": (b'{"inputs": {}}', None, "'inputs'"),
    "input not an object": (b'{"inputs": [1]}', None, "inputs[0]"),
    "input name missing": (b'{"inputs": [{"shape": [1]}]}', None, "inputs[0]"),
    "input name not a string": (b'{"inputs": [{"name": 5}]}', None, "inputs[0]"),
    "output name missing": (b'{"inputs": [], "outputs": [{}]}', None, "outputs[0]"),
    "outputs not a list": (b'{"inputs": [], "outputs": {}}', None, "'outputs'"),
    "id not a string": (b'{"id": 5, "inputs": []}', None, "'id'"),
    "parameters not an object": (b'{"parameters": [], "inputs": []}', None, "parameters"),
    "binary_data_output not bool": (b'{"parameters": {"binary_data_output": "yes"}, "inputs": []}',
                                    None, "binary_data_output"),
    "header length beyond body": (b'{"inputs": []}', 100, "100"),
    "header length negative": (b'{"inputs": []}', -1, "-1"),
    "header cut short": (b'{"inputs": []}', 5, "not valid JSON"),
    "bytes after header, no binary input": (b'{"inputs": []}xyz', 14, "3 bytes"),
}


@pytest.mark.parametrize("body, header_length, fragment", REQUEST_ERRORS.values(), ids=REQUEST_ERRORS)
def test_malformed_request_is_a_bad_request(body, header_length, fragment):
    with pytest.raises(BadRequest) as caught:
        decode_infer_request(body, header_length)
    assert fragment in caught.value.message
