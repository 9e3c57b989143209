"""TensorFlow Serving's REST JSON rules, case by case: each TEST of its `util/json_tensor_test.cc` pins a
behaviour (request formats, dtypes, b64, errors, reply formatting, tf.Example parsing), ported here as
data of our own. Each case id starts with the TF Serving TEST it comes from.

Where we deliberately differ, the case says so in a NOTE and pins our behaviour instead."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from service.errors import BadRequest
from service.inference.examples import Classification, Regression
from service.protocols.codecs.tfserving import decode_predict_inputs, parse_predict_body
from service.protocols.codecs.tfserving_examples import encode_classification, encode_regression, parse_examples_body
from service.protocols.codecs.tfserving_response import encode_error, encode_predict_response
from service.protocols.proto import classification_pb2, regression_pb2
from service.repository.signatures import TensorSpec

F32, F64, I32, I64, STR = np.float32, np.float64, np.int32, np.int64, object
NAN = ("NaN",)  # what a NaN becomes before comparing (NaN != NaN); json never builds a tuple


def decode(body: bytes, signature: dict):
    specs = [TensorSpec(alias, f"{alias}:0", np.dtype(dtype), None) for alias, dtype in signature.items()]
    return decode_predict_inputs(parse_predict_body(body), specs)


def tensor(values, dtype) -> np.ndarray:
    return np.array(values, dtype=dtype)


def comparable(value):
    """JSON-ready data with NaN made equal to itself."""
    if isinstance(value, float) and math.isnan(value):
        return NAN
    if isinstance(value, list):
        return [comparable(v) for v in value]
    if isinstance(value, tuple):
        return tuple(comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value


# -- Predict requests that decode -------------------------------------------------------------------

# (id, body, signature alias -> dtype, expected alias -> array, row_format)
DECODED = [
    ("SingleUnnamedTensor/int32-rows",
     b'{"instances": [[7, 8], [9, 10], [11, 12]]}', {"ids": I32},
     {"ids": tensor([[7, 8], [9, 10], [11, 12]], I32)}, True),
    ("DeeplyNestedWellFormed/unknown-top-level-key-ignored",
     b'{"instances": [4], "extra": ' + b"[" * 500 + b"]" * 500 + b"}", {"ids": I32}, {"ids": tensor([4], I32)}, True),
    ("MixedInputForFloatTensor/ints-and-floats",
     b'{"instances": [2, 3.5, 0, 0.25, 7, 1.125]}', {"x": F32}, {"x": tensor([2, 3.5, 0, 0.25, 7, 1.125], F32)}, True),
    ("MixedInputForDoubleTensor/ints-and-floats",
     b'{"instances": [0.1, 5, 0, 2.75]}', {"x": F64}, {"x": tensor([0.1, 5, 0, 2.75], F64)}, True),
    # 2**24 + 1 has no float32; integer and float literals round alike, to 2**24
    ("FloatTensorWithPrecisionLoss/int-literal",
     b'{"instances": [16777217]}', {"x": F32}, {"x": tensor([16777216.0], F32)}, True),
    ("FloatTensorWithPrecisionLoss/float-literal",
     b'{"instances": [16777217.0]}', {"x": F32}, {"x": tensor([16777216.0], F32)}, True),
    ("FloatTensorThatExceedsMinReturnsZero/underflow-keeps-sign",
     b'{"instances": [1e-310, -1e-310]}', {"x": F32}, {"x": tensor([0.0, -0.0], F32)}, True),
    ("SingleUnnamedTensorWithSignature/rows",
     b'{"signature_name": "score_rows", "instances": [[3, 4]]}', {"ids": I32}, {"ids": tensor([[3, 4]], I32)}, True),
    # the body ends where its bytes end: trailing whitespace is fine
    ("TensorFromNonNullTerminatedBuffer/trailing-newline",
     b'{"instances": [[1, 2]]}\r\n', {"ids": I32}, {"ids": tensor([[1, 2]], I32)}, True),
    ("SingleUnnamedTensorBase64Scalars/rows",
     b'{"instances": [{"b64": "Y2F0"}, {"b64": "AP8="}]}', {"blob": STR}, {"blob": tensor([b"cat", b"\x00\xff"], STR)}, True),
    ("SingleUnnamedTensorBase64Lists/rows",
     b'{"instances": [[{"b64": "Y2F0"}], [{"b64": "ZG9n"}]]}', {"blob": STR},
     {"blob": tensor([[b"cat"], [b"dog"]], STR)}, True),
    ("SingleUnnamedTensorBase64Lists/unpadded-b64",
     b'{"instances": [[{"b64": "ZG9nZw"}]]}', {"blob": STR}, {"blob": tensor([[b"dogg"]], STR)}, True),
    ("SingleNamedTensorBase64/one-named-instance",
     b'{"instances": [{"blob": [[{"b64": "Y2F0"}], [{"b64": "ZG9n"}]]}]}', {"blob": STR},
     {"blob": tensor([[[b"cat"], [b"dog"]]], STR)}, True),
    ("MultipleNamedTensor/four-dtypes-with-nan-and-infinity",
     b'{"instances": ['
     b'{"ids": [[1, 2], [3, 4]], "words": ["sun", "sea"], "f": [0.5, NaN], "d": [Infinity]},'
     b'{"ids": [[5, 6], [7, 8]], "words": ["sky", ""], "f": [-Infinity, 4], "d": [1.5]}]}',
     {"ids": I32, "words": STR, "f": F32, "d": F64},
     {"ids": tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], I32),
      "words": tensor([[b"sun", b"sea"], [b"sky", b""]], STR),
      "f": tensor([[0.5, np.nan], [-np.inf, 4]], F32),
      "d": tensor([[np.inf], [1.5]], F64)}, True),
    ("SingleUnnamedTensorColumnarFormat/named",
     b'{"inputs": {"ids": [[[1, 2], [3, 4]]]}}', {"ids": I32}, {"ids": tensor([[[1, 2], [3, 4]]], I32)}, False),
    ("SingleUnnamedTensorColumnarFormat/unnamed",
     b'{"inputs": [[[1, 2], [3, 4]]]}', {"ids": I32}, {"ids": tensor([[[1, 2], [3, 4]]], I32)}, False),
    ("MultipleNamedTensorColumnarFormat/own-shapes-and-b64-scalar",
     b'{"inputs": {"ids": [[9, 8, 7]], "words": ["ab", "cd"], "blob": {"b64": "AP8="}}}',
     {"ids": I32, "words": STR, "blob": STR},
     {"ids": tensor([[9, 8, 7]], I32), "words": tensor([b"ab", b"cd"], STR), "blob": tensor(b"\x00\xff", STR)}, False),
    ("MultipleNamedTensorColumnarFormat/empty-lists",
     b'{"inputs": {"ids": [], "words": [[], []]}}', {"ids": I32, "words": STR},
     {"ids": tensor([], I32), "words": tensor(np.empty((2, 0)), STR)}, False),
    # integer dtypes take the whole of their range, as rapidjson's IsInt64 / IsUint / IsUint64 do
    ("AddValueToTensor/int64-and-unsigned-extremes",
     b'{"inputs": {"i": [-9223372036854775808, 9223372036854775807], "u": [0, 4294967295], "w": [18446744073709551615]}}',
     {"i": I64, "u": np.uint32, "w": np.uint64},
     {"i": tensor([-(2**63), 2**63 - 1], I64), "u": tensor([0, 2**32 - 1], np.uint32),
      "w": tensor([2**64 - 1], np.uint64)}, False),
    ("AddValueToTensor/bools",
     b'{"instances": [[true], [false]]}', {"mask": np.bool_}, {"mask": tensor([[True], [False]], np.bool_)}, True),
    # NOTE: TF Serving refuses 4.0 for an integer input (rapidjson's IsInt); we take integral floats.
    ("AddValueToTensor/integral-float-into-int32",
     b'{"inputs": [4.0, -2]}', {"ids": I32}, {"ids": tensor([4, -2], I32)}, False),
]


@pytest.mark.parametrize(("body", "signature", "expected", "row_format"),
                         [pytest.param(*case[1:], id=case[0]) for case in DECODED])
def test_requests_decode_as_tensorflow_serving_decodes_them(body, signature, expected, row_format):
    request = decode(body, signature)
    assert request.row_format is row_format
    assert list(request.inputs) == list(expected)
    for alias, want in expected.items():
        got = request.inputs[alias]
        assert (got.dtype, got.shape) == (want.dtype, want.shape), alias
        if want.dtype.kind == "f":
            np.testing.assert_array_equal(got, want)  # NaN matches NaN
            assert np.array_equal(np.signbit(got), np.signbit(want)), alias
        else:
            assert got.tolist() == want.tolist(), alias


def test_the_signature_name_is_reported():
    # SingleUnnamedTensorWithSignature
    assert decode(b'{"signature_name": "score_rows", "instances": [1]}', {"x": F32}).signature_name == "score_rows"
    assert decode(b'{"instances": [1]}', {"x": F32}).signature_name is None


# -- Predict requests that are refused ---------------------------------------------------------------

# (id, body, signature alias -> dtype, words the message holds)
REFUSED = [
    ("SingleUnnamedTensorErrors/empty-document", b"", {"x": I32}, ["JSON Parse error", "The document is empty"]),
    ("SingleUnnamedTensorErrors/whitespace-document", b" \n", {"x": I32}, ["JSON Parse error", "The document is empty"]),
    ("SingleUnnamedTensorErrors/signature-name-not-a-string",
     b'{"signature_name": 7, "instances": [[1]]}', {"x": I32}, ["'signature_name' must be a string"]),
    ("SingleUnnamedTensorErrors/both-formats",
     b'{"instances": [[1]], "inputs": [[1]]}', {"x": I32}, ["Not formatted correctly", "only one of 'inputs' or 'instances'"]),
    ("SingleUnnamedTensorErrors/no-format-key", b'{"signature_name": "s"}', {"x": I32}, ["Missing 'inputs' or 'instances' key"]),
    ("SingleUnnamedTensorErrors/not-an-object", b"[[1, 2]]", {"x": I32}, ["is not an object"]),
    ("SingleUnnamedTensorErrors/empty-instances", b'{"instances": []}', {"x": I32}, ["No values in 'instances' array"]),
    ("SingleUnnamedTensorErrors/instances-not-a-list", b'{"instances": 3}', {"x": I32}, ["'instances' to be a list"]),
    # NOTE: TF Serving says "Expecting tensor size" / "Expecting shape"; we name the instance and say why.
    ("SingleUnnamedTensorErrors/instance-of-other-size",
     b'{"instances": [[1, 2], [3, 4, 5]]}', {"x": I32}, ["instances[1] has 3 values, but instances[0] has 2", "ragged"]),
    ("SingleUnnamedTensorErrors/instance-nested-deeper",
     b'{"instances": [[1, 2], [[3, 4]]]}', {"x": I32}, ["instances[1] has 1 value, but instances[0] has 2", "ragged"]),
    ("SingleUnnamedTensorErrors/list-after-scalar",
     b'{"instances": [1, [2]]}', {"x": I32}, ["instances[1] is a list, but instances[0] is a number 1", "ragged"]),
    # NOTE: TF Serving says "is not of expected type: int32"; we point at the element.
    ("SingleUnnamedTensorErrors/string-in-int-tensor",
     b'{"instances": [[1, 2], ["p", "q"]]}', {"x": I32}, ["instances[1][0] is a string \"p\"", "dtype int32"]),
    ("MultipleNamedTensorErrors/shape-differs-across-instances",
     b'{"instances": [{"a": [[1, 2]], "s": ["p"]}, {"a": [[[1, 2]]], "s": ["q"]}]}', {"a": I32, "s": STR},
     ["input 'a'", "instances[1]['a'][0] has 1 value, but instances[0]['a'][0] has 2"]),
    ("MultipleNamedTensorErrors/size-differs-across-instances",
     b'{"instances": [{"a": [1, 2, 3], "s": ["p"]}, {"a": [4, 5], "s": ["q"]}]}', {"a": I32, "s": STR},
     ["input 'a'", "instances[1]['a'] has 2 values, but instances[0]['a'] has 3"]),
    # NOTE: TF Serving's words: "Expecting object but got list" / "Expecting value/list but got object".
    ("MultipleNamedTensorErrors/list-after-object",
     b'{"instances": [{"a": [1], "s": ["p"]}, [1, 2]]}', {"a": I32, "s": STR},
     ["instances[1] is a list of 2 values, but instances[0] is an object by alias"]),
    ("MultipleNamedTensorErrors/object-after-list",
     b'{"instances": [["p"], {"s": ["q"]}]}', {"s": STR}, ["instances[1] is an object by alias, but instances[0] is a plain value"]),
    ("MultipleNamedTensorErrors/plain-instances-for-several-inputs",
     b'{"instances": [[1], [2]]}', {"a": I32, "s": STR}, ["'instances' is a plain list", "several inputs"]),
    ("MultipleNamedTensorErrors/plain-inputs-for-several-inputs",
     b'{"inputs": [1, 2]}', {"a": I32, "s": STR}, ["'inputs' is a plain value", "several inputs"]),
    ("MultipleNamedTensorErrors/instance-missing-an-input",
     b'{"instances": [{"a": [1], "s": ["p"]}, {"a": [2]}]}', {"a": I32, "s": STR}, ["instances[1] is missing input(s) 's'"]),
    # NOTE: TF Serving ignores names a columnar object has beyond the signature's; we refuse them.
    ("MultipleNamedTensorErrors/columnar-missing-and-unknown-input",
     b'{"inputs": {"a": [1], "t": ["p"]}}', {"a": I32, "s": STR}, ["unknown input(s) 't'"]),
    ("MultipleNamedTensorErrors/columnar-missing-input",
     b'{"inputs": {"a": [1]}}', {"a": I32, "s": STR}, ["'inputs' is missing input(s) 's'"]),
    # NOTE: TF Serving reads 500,000 levels (rapidjson's iterative parser); Python's parsers stop near 1,000.
    ("DeeplyNestedWellFormed/past-the-parser-depth",
     b'{"instances": [1], "extra": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", {"x": I32}, ["nested too deeply"]),
    # the signature name is checked before the format keys
    ("DeeplyNestedMalformed/nested-signature-name",
     b'{"signature_name": ' + b"[" * 500 + b"]" * 500 + b"}", {"x": I32}, ["'signature_name' must be a string"]),
    # NOTE: rapidjson's kParseStopWhenDoneFlag lets TF Serving ignore bytes after the document; we refuse them.
    ("TensorFromNonNullTerminatedBuffer/trailing-bytes", b'{"instances": [[1, 2]]}X', {"x": I32}, ["JSON Parse error"]),
    # NOTE: TF Serving lets a finite double overflow float32 to Infinity; we refuse it as out of range.
    ("FloatTensorThatExceedsMaxReturnsInf/refused",
     b'{"instances": [1e300, -1e300]}', {"x": F32}, ["instances[0] is a number 1e+300", "out of range for dtype float32"]),
    ("AddValueToTensor/int32-too-large", b'{"inputs": [2147483647, 2147483648]}', {"x": I32},
     ["inputs[1] is a number 2147483648", "out of range for dtype int32"]),
    ("AddValueToTensor/int64-too-large", b'{"inputs": [9223372036854775808]}', {"x": I64}, ["out of range for dtype int64"]),
    ("AddValueToTensor/uint32-negative", b'{"inputs": [1, -1]}', {"x": np.uint32}, ["inputs[1] is a number -1", "uint32"]),
    ("AddValueToTensor/uint64-too-large", b'{"inputs": [18446744073709551616]}', {"x": np.uint64}, ["out of range for dtype uint64"]),
    # NOTE: TF Serving puts 300 into an int8 tensor unchecked (IsInt); we refuse it.
    ("AddValueToTensor/int8-too-large", b'{"inputs": [300]}', {"x": np.int8}, ["out of range for dtype int8"]),
    ("AddValueToTensor/fraction-into-int", b'{"inputs": [1, 2.5]}', {"x": I32}, ["inputs[1] is a number 2.5", "expected an integer"]),
    ("AddValueToTensor/nan-into-int", b'{"inputs": [NaN]}', {"x": I64}, ["expected an integer for dtype int64"]),
    ("AddValueToTensor/bool-into-int", b'{"inputs": [false]}', {"x": I32}, ["is a boolean false", "expected an integer"]),
    ("AddValueToTensor/number-into-bool", b'{"inputs": [true, 0]}', {"x": np.bool_}, ["inputs[1] is a number 0", "true or false"]),
    ("AddValueToTensor/bool-into-float", b'{"inputs": [true]}', {"x": F32}, ["is a boolean true", "expected a number"]),
    ("AddValueToTensor/string-into-double", b'{"inputs": ["1.5"]}', {"x": F64}, ["is a string \"1.5\"", "float64"]),
    ("AddValueToTensor/null-into-float", b'{"inputs": [[1.5, null]]}', {"x": F32}, ["inputs[0][1] is null"]),
    ("AddValueToTensor/number-into-string", b'{"inputs": ["p", 3]}', {"x": STR}, ["inputs[1] is a number 3", '{"b64": "..."}']),
    # NOTE: TF Serving says "not formatted correctly for base64 data" / "Unable to base64 decode".
    ("JsonDecodeBase64Object/object-with-other-keys",
     b'{"inputs": [{"b64": "Y2F0", "mime": "x"}]}', {"x": STR}, ["inputs[0] is an object"]),
    ("JsonDecodeBase64Object/b64-not-a-string", b'{"inputs": [{"b64": 5}]}', {"x": STR}, ["inputs[0] is an object"]),
    ("JsonDecodeBase64Object/bad-base64", b'{"inputs": [{"b64": "Y2F0*"}]}', {"x": STR}, ["not valid base64"]),
    ("AddValueToTensor/complex-has-no-json-form", b'{"inputs": [1]}', {"x": np.complex64}, ["complex64 cannot be fed from JSON"]),
]


@pytest.mark.parametrize(("body", "signature", "words"), [pytest.param(*case[1:], id=case[0]) for case in REFUSED])
def test_requests_tensorflow_serving_refuses_are_bad_requests(body, signature, words):
    with pytest.raises(BadRequest) as info:
        decode(body, signature)
    for word in words:
        assert word in info.value.message, info.value.message


# -- Predict replies --------------------------------------------------------------------------------

INTS = np.arange(1, 13, dtype=I32).reshape(2, 3, 2)
WORDS = tensor([[b"sun", b"sea"], [b"sky", b"\xc3\xa9t\xc3\xa9"]], STR)

# (id, outputs, row_format, the reply as parsed JSON). Floats are compared as float64s, so a written
# float32 with noise digits (0.000699999975) fails where TF Serving's digits (0.0007) pass.
REPLIES = [
    ("FromJsonSingleTensor/rows", {"ids": INTS}, True,
     {"predictions": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]]}),
    ("FromJsonSingleTensor/columns", {"ids": INTS}, False,
     {"outputs": [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]]}),
    ("FromJsonSingleScalarTensor/rows", {"n": tensor([4, 3, 2, 1], I64)}, True, {"predictions": [4, 3, 2, 1]}),
    ("FromJsonSingleScalarTensor/columns", {"n": tensor([4, 3, 2, 1], I64)}, False, {"outputs": [4, 3, 2, 1]}),
    ("FromJsonSingleBytesTensor/rows", {"thumb_bytes": tensor([[b"cat", b"\x00\xff"], [b"dog", b""]], STR)}, True,
     {"predictions": [[{"b64": "Y2F0"}, {"b64": "AP8="}], [{"b64": "ZG9n"}, {"b64": ""}]]}),
    ("FromJsonSingleBytesTensor/name-without-suffix-is-text", {"thumb": WORDS}, False,
     {"outputs": [["sun", "sea"], ["sky", "été"]]}),
    # the suffix is for strings only: numbers stay numbers
    ("FromJsonSingleBytesTensor/suffix-on-numbers", {"n_bytes": tensor([1, 2], I32)}, False, {"outputs": [1, 2]}),
    ("FromJsonSingleFloatTensorSixDigitPrecision/rows",
     {"f": tensor([[7000000, 123456, 0.25], [0.0007, 0.00007, 123457.5]], F32)}, True,
     {"predictions": [[7e6, 123456.0, 0.25], [0.0007, 7e-05, 123457.5]]}),
    # "%g" does not read back as the same float32 here, so nine digits are written
    ("FromJsonSingleFloatTensorSixDigitPrecision/nine-digits", {"f": tensor([16777217, 0.1, 1 / 3], F32)}, False,
     {"outputs": [16777216.0, 0.1, 0.333333343]}),
    ("FromJsonSingleFloatTensorNonFinite/float32", {"f": tensor([[np.inf, np.nan], [-np.inf, 2]], F32)}, True,
     {"predictions": [[math.inf, math.nan], [-math.inf, 2.0]]}),
    ("FromJsonSingleFloatTensorNonFinite/float64", {"d": tensor([np.nan, -np.inf, 0.1], F64)}, False,
     {"outputs": [math.nan, -math.inf, 0.1]}),
    ("FromJsonMultipleNamedTensors/rows",
     {"ids": INTS, "words": WORDS, "f": tensor([[0.5], [1.5]], F32), "d_scalar": tensor([3.0, 4.0], F64),
      "raw_bytes": tensor([[b"cat"], [b"\x00\xff"]], STR), "ok": tensor([True, False], np.bool_)}, True,
     {"predictions": [
         {"ids": [[1, 2], [3, 4], [5, 6]], "words": ["sun", "sea"], "f": [0.5], "d_scalar": 3.0,
          "raw_bytes": [{"b64": "Y2F0"}], "ok": True},
         {"ids": [[7, 8], [9, 10], [11, 12]], "words": ["sky", "été"], "f": [1.5], "d_scalar": 4.0,
          "raw_bytes": [{"b64": "AP8="}], "ok": False}]}),
    ("FromJsonMultipleNamedTensors/columns",
     {"ids": INTS, "words": WORDS, "d_scalar": tensor([3.0, 4.0], F64), "raw_bytes": tensor([[b"cat"], [b"\x00\xff"]], STR)},
     False,
     {"outputs": {"ids": INTS.tolist(), "words": [["sun", "sea"], ["sky", "été"]], "d_scalar": [3.0, 4.0],
                  "raw_bytes": [[{"b64": "Y2F0"}], [{"b64": "AP8="}]]}}),
    # columnar outputs need not share a batch size, and may be scalars
    ("FromJsonMultipleNamedTensors/columns-of-own-sizes",
     {"a": tensor([1, 2, 3], np.uint8), "s": tensor(b"one", STR), "w": tensor([2**64 - 1], np.uint64)}, False,
     {"outputs": {"a": [1, 2, 3], "s": "one", "w": [2**64 - 1]}}),
    ("FromJsonSingleZeroBatchTensor/rows", {"ids": np.zeros((0, 4), I32)}, True, {"predictions": []}),
    ("FromJsonMultipleZeroBatchTensors/rows",
     {"words": tensor(np.empty((0, 2, 1)), STR), "f": np.zeros((0, 5, 2), F32)}, True, {"predictions": []}),
]


@pytest.mark.parametrize(("outputs", "row_format", "expected"), [pytest.param(*case[1:], id=case[0]) for case in REPLIES])
def test_replies_are_written_as_tensorflow_serving_writes_them(outputs, row_format, expected):
    body = encode_predict_response(outputs, row_format)
    assert comparable(json.loads(body)) == comparable(expected)


def test_non_finite_floats_are_bare_literals():
    # FromJsonSingleFloatTensorNonFinite: NaN and Infinity, not null or strings
    body = encode_predict_response({"f": tensor([np.nan, np.inf, -np.inf, 3], F32)}, True)
    assert body == b'{"predictions":[NaN,Infinity,-Infinity,3.0]}'


# (id, outputs, row_format, words the message holds)
REPLY_ERRORS = [
    ("FromJsonSingleTensorErrors/empty-map", {}, True, ["Cannot convert empty tensor map to JSON"]),
    # NOTE: TF Serving says "Failed to write JSON value for tensor type: complex64"; we name the output too.
    ("FromJsonSingleTensorErrors/complex", {"z": tensor([1j, 2j], np.complex128)}, False, ["output 'z'", "complex128"]),
    ("FromJsonSingleTensorErrors/scalar-in-rows", {"s": tensor(5, I32)}, True, ["Tensor name: s has no shape information"]),
    ("FromJsonMultipleNamedTensorsErrors/batch-sizes", {"a": np.zeros((2, 3), I32), "b": tensor([[b"p", b"q", b"r"]], STR)},
     True, ["Tensor name: b has inconsistent batch size: 1 expecting: 2"]),
    ("FromJsonMultipleZeroBatchTensorsErrors/zero-and-one", {"a": np.zeros((0, 2), I32), "b": tensor([[b"p", b"q"]], STR)},
     True, ["Tensor name: b has inconsistent batch size: 1 expecting: 0"]),
]


@pytest.mark.parametrize(("outputs", "row_format", "words"), [pytest.param(*case[1:], id=case[0]) for case in REPLY_ERRORS])
def test_outputs_tensorflow_serving_cannot_write_are_bad_requests(outputs, row_format, words):
    with pytest.raises(BadRequest) as info:
        encode_predict_response(outputs, row_format)
    for word in words:
        assert word in info.value.message, info.value.message


@pytest.mark.parametrize("message", [pytest.param('Bad name: "q"', id="StatusError/double-quotes"),
                                     pytest.param("Bad name: 'q'", id="StatusError/single-quotes")])
def test_errors_are_an_object_holding_the_message(message):
    # MakeJsonFromTensors.StatusError (StatusOK has no twin: a success writes no error body)
    assert json.loads(encode_error(message)) == {"error": message}


# -- Classify and Regress requests --------------------------------------------------------------------

REQUESTS = [classification_pb2.ClassificationRequest, regression_pb2.RegressionRequest]


def features_of(example) -> dict:
    """An Example's features as {name: (kind, values)}; kind None for a feature with no values."""
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = (kind, comparable(list(getattr(feature, kind).value)) if kind else [])
    return out


# (id, body, signature name, context features or None, each example's features)
EXAMPLES = [
    ("RequestNoContext/kinds-by-json-type",
     b'{"examples": [{"tags": ["red", "blue"], "weights": [0.5, 2.25], "count": 3}, {"tags": ["green"], "weights": 6.5}]}',
     "", None,
     [{"tags": ("bytes_list", [b"red", b"blue"]), "weights": ("float_list", [0.5, 2.25]), "count": ("int64_list", [3])},
      {"tags": ("bytes_list", [b"green"]), "weights": ("float_list", [6.5])}]),
    ("RequestWithContextAndSignature/context-b64-bools-non-finite",
     b'{"signature_name": "rank", "context": {"city": "oslo", "zones": ["n1"]}, "examples": ['
     b'{"tags": ["a", {"b64": "AP8="}], "weights": [1.5, NaN, Infinity], "flags": [2, true, false]},'
     b'{"tags": "b", "weights": -Infinity}]}',
     "rank", {"city": ("bytes_list", [b"oslo"]), "zones": ("bytes_list", [b"n1"])},
     [{"tags": ("bytes_list", [b"a", b"\x00\xff"]), "weights": ("float_list", [1.5, math.nan, math.inf]),
       "flags": ("int64_list", [2, 1, 0])},
      {"tags": ("bytes_list", [b"b"]), "weights": ("float_list", [-math.inf])}]),
    # a fraction or an exponent makes a float; [] an empty feature; rapidjson reads integers past
    # uint64 as doubles; 10.0 is a float though integral
    ("RequestNoContext/number-spellings-and-empty-lists",
     b'{"examples": [{"e": 1e2, "whole": [10.0], "none": [], "huge": 36893488147419103232, "low": -9223372036854775808}]}',
     "", None,
     [{"e": ("float_list", [100.0]), "whole": ("float_list", [10.0]), "none": (None, []),
       "huge": ("float_list", [2.0**65]), "low": ("int64_list", [-(2**63)])}]),
]


@pytest.mark.parametrize("request_type", REQUESTS, ids=["classify", "regress"])
@pytest.mark.parametrize(("body", "signature", "context", "examples"), [pytest.param(*case[1:], id=case[0]) for case in EXAMPLES])
def test_examples_parse_as_tensorflow_serving_parses_them(request_type, body, signature, context, examples):
    request = parse_examples_body(body, request_type())
    assert request.model_spec.signature_name == signature
    if context is None:
        assert request.input.WhichOneof("kind") == "example_list"
        parsed = request.input.example_list.examples
    else:
        assert request.input.WhichOneof("kind") == "example_list_with_context"
        assert features_of(request.input.example_list_with_context.context) == comparable(context)
        parsed = request.input.example_list_with_context.examples
    assert [features_of(example) for example in parsed] == comparable(examples)


# (id, body, words the message holds): TF Serving's own texts, which this codec keeps
EXAMPLE_ERRORS = [
    ("JsonErrors/signature-name-a-list", b'{"signature_name": ["rank"], "examples": [{"t": ["a"]}]}',
     "'signature_name' key must be a string"),
    ("JsonErrors/context-a-list", b'{"context": [{"t": ["a"]}]}', "Example must be JSON object but got JSON Array"),
    ("JsonErrors/examples-an-object", b'{"examples": {"t": ["a"]}}', "Expecting 'examples' value to be an list/array"),
    ("JsonErrors/example-a-list", b'{"examples": [[{"t": ["a"]}]]}', "Example must be JSON object but got JSON Array"),
    ("JsonErrors/null-element", b'{"examples": [{"t": [4, null]}]}', "Feature: t has element with unexpected JSON type: Null"),
    ("JsonErrors/int-then-float", b'{"examples": [{"t": [4, 4.5]}]}', "Unexpected element type in feature: t expecting type: int64"),
    ("JsonErrors/float-then-string", b'{"examples": [{"t": [4.5, "a"]}]}', "feature: t expecting type: float"),
    ("JsonErrors/string-then-bool", b'{"examples": [{"t": ["a", true]}]}', "feature: t expecting type: bytes"),
    ("JsonErrors/object-element", b'{"examples": [{"t": [4, {"n": 4}]}]}', "Feature: t has element with unexpected JSON type: Object"),
    ("JsonErrors/nested-list", b'{"examples": [{"t": [[4], 5]}]}', "Feature: t has element with unexpected JSON type: Array"),
    ("JsonErrors/uint64-element", b'{"examples": [{"t": [1, 9223372036854775808]}]}', "Only int64_t is supported"),
    ("JsonErrors/bad-base64", b'{"examples": [{"t": {"b64": "Y2F0*"}}]}', "Unable to base64 decode"),
    ("JsonErrors/no-examples", b'{"context": {"t": 1}}', "key 'examples' is expected and was not found"),
    ("JsonErrors/empty-examples", b'{"examples": []}', "'examples' value is an empty array"),
    ("JsonErrors/empty-document", b"", "JSON Parse error: The document is empty"),
    ("JsonErrors/not-an-object", b'"examples"', "Is not object"),
]


@pytest.mark.parametrize("request_type", REQUESTS, ids=["classify", "regress"])
@pytest.mark.parametrize(("body", "words"), [pytest.param(*case[1:], id=case[0]) for case in EXAMPLE_ERRORS])
def test_examples_tensorflow_serving_refuses_are_bad_requests(request_type, body, words):
    with pytest.raises(BadRequest) as info:
        parse_examples_body(body, request_type())
    assert words in info.value.message, info.value.message


# -- Classify and Regress replies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        pytest.param(Classification(tensor([[b"tea", b"milk"], [b"milk", b"tea"]], STR), tensor([[0.6, 0.4], [0.9, 0.1]], F32)),
                     {"results": [[["tea", 0.6], ["milk", 0.4]], [["milk", 0.9], ["tea", 0.1]]]},
                     id="JsonFromClassificationResult/labels-and-scores"),
        pytest.param(Classification(None, tensor([[0.3, 0.7]], F32)), {"results": [[["", 0.3], ["", 0.7]]]},
                     id="JsonFromClassificationResult/scores-only"),
        pytest.param(Classification(tensor([[b"tea"]], STR), None), {"results": [[["tea", 0.0]]]},
                     id="JsonFromClassificationResult/labels-only"),
        pytest.param(Regression(tensor([0.3, 0.8, 2.0], F32)), {"results": [0.3, 0.8, 2.0]},
                     id="JsonFromRegressionResult/values"),
        pytest.param(Regression(tensor([0.3, -np.inf, np.nan, np.inf], F32)), {"results": [0.3, -math.inf, math.nan, math.inf]},
                     id="JsonFromRegressionResultWithNonFinite/values"),
    ],
)
def test_results_are_written_as_tensorflow_serving_writes_them(result, expected):
    encode = encode_classification if isinstance(result, Classification) else encode_regression
    assert comparable(json.loads(encode(result))) == comparable(expected)


def test_non_finite_results_are_bare_literals():
    # JsonFromRegressionResultWithNonFinite
    assert encode_regression(Regression(tensor([np.nan, -np.inf, 1], F32))) == b'{"results":[NaN,-Infinity,1.0]}'


@pytest.mark.parametrize(
    ("encode", "result", "words"),
    [
        pytest.param(encode_classification, Classification(None, np.zeros((0, 2), F32)),
                     "Cannot convert empty ClassificationResults to JSON", id="JsonFromResultErrors/classification"),
        pytest.param(encode_regression, Regression(np.zeros(0, F32)),
                     "Cannot convert empty RegressionResults to JSON", id="JsonFromResultErrors/regression"),
    ],
)
def test_empty_results_are_refused(encode, result, words):
    with pytest.raises(BadRequest, match=words):
        encode(result)
