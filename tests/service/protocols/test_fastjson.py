"""fastjson: orjson's speed with the json module's answers. What it reads equals what `json.loads`
reads (bare NaN and Infinity included, the same errors for malformed bodies); what it writes is
compact JSON that `json.loads` reads back to the same numbers, NaN and infinities as bare literals."""

import json
import math
import struct

import ml_dtypes
import numpy as np
import pytest

from service.errors import BadRequest
from service.protocols.codecs import fastjson
from service.protocols.codecs.tfserving_response import encode_predict_response
from service.protocols.codecs.v2 import decode_infer_request, encode_infer_response

COMPACT = {"separators": (",", ":")}


def bits(values) -> list[int]:
    """float64 values as their bit patterns, so -0.0 differs from 0.0 and NaN equals NaN."""
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


# --- loads -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    b'{"a": 1, "b": [1, 2.5, -3e-7, true, false, null], "c": {"d": "e"}}',
    b'[]',
    b'{}',
    b'"h\\u00e9llo \\ud83d\\ude00 \\n"',
    "\u65e5\u672c\u8a9e \U0001f600".join(['["', '"]']).encode(),
    b'  [1.0, -0.0, 0, -0, 1E3, 1e-320, 1.7976931348623157e308]  ',
    b'12345678901234567',
    b'[[[[[[[[[[1]]]]]]]]]]',
    b'{"a": 1, "a": 2}',
])
def test_loads_equals_json(text):
    assert fastjson.loads(text) == json.loads(text)
    assert repr(fastjson.loads(text)) == repr(json.loads(text))  # int stays int, -0.0 stays -0.0


def test_loads_takes_str_too():
    assert fastjson.loads('{"x": [1, 2]}') == {"x": [1, 2]}


def test_loads_moderate_nesting_equals_json():
    text = b"[" * 500 + b"1" + b"]" * 500
    assert fastjson.loads(text) == json.loads(text)


def test_loads_bare_nan_and_infinities():
    nan, inf, minus_inf = fastjson.loads(b"[NaN, Infinity, -Infinity]")
    assert math.isnan(nan)
    assert inf == math.inf
    assert minus_inf == -math.inf
    doc = fastjson.loads(b'{"inputs": [{"data": [1.5, NaN]}]}')
    assert doc["inputs"][0]["data"][0] == 1.5
    assert math.isnan(doc["inputs"][0]["data"][1])
    assert math.isnan(fastjson.loads(b"NaN"))


@pytest.mark.parametrize("text", [
    b'{"a": 1',  # truncated object
    b'{"a":',
    b'[1, 2',
    b'{"a": 1,}',  # trailing comma
    b'[1, 2,]',
    b'"\xff"',  # invalid UTF-8
    b'{"a": "\xc3("}',
    "\ufeff{}",  # a BOM in a str (bytes with a BOM are decoded as utf-8-sig by both)
    b"",
    b"[1] x",  # extra data
    b"{'a': 1}",
    b"tru",
    b"nan",
], ids=repr)
def test_malformed_bodies_raise_what_json_raises(text):
    with pytest.raises(Exception) as expected:
        json.loads(text)
    with pytest.raises(Exception) as got:
        fastjson.loads(text)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)
    assert isinstance(got.value, ValueError)


def test_bom_bytes_read_as_json_reads_them():
    text = b'\xef\xbb\xbf{"a": 1}'
    assert fastjson.loads(text) == json.loads(text) == {"a": 1}


def test_absurd_nesting_raises_not_crashes():
    with pytest.raises((RecursionError, ValueError)) as got:
        fastjson.loads(b"[" * 100_000)
    with pytest.raises((RecursionError, ValueError)) as expected:
        json.loads(b"[" * 100_000)
    assert type(got.value) is type(expected.value)
    with pytest.raises((RecursionError, ValueError)):
        fastjson.loads(b'{"a":' * 100_000)


def test_integers_within_64_bits_are_exact():
    for value in (2**64 - 1, 2**63, 2**63 - 1, -(2**63), 0, -1):
        got = fastjson.loads(str(value).encode())
        assert type(got) is int and got == value
    assert fastjson.loads(b"[18446744073709551615, -9223372036854775808]") == [2**64 - 1, -(2**63)]


def test_integers_beyond_64_bits_come_back_as_floats():
    # A documented quirk (rapidjson does the same): the codecs refuse such values as out of range anyway.
    got = fastjson.loads(str(2**64).encode())
    assert type(got) is float and got == float(2**64)
    got = fastjson.loads(str(-(2**63) - 1).encode())
    assert type(got) is float and got == float(-(2**63))
    assert fastjson.loads(str(10**30).encode()) == 1e30


def test_integers_beyond_64_bits_stay_exact_when_json_reads_the_body():
    # The quirk's other side: a body orjson refuses (a bare NaN) is read by json, whose ints are exact.
    nan, big = fastjson.loads(b"[NaN, 18446744073709551616]")
    assert math.isnan(nan)
    assert type(big) is int and big == 2**64


# --- dumps -----------------------------------------------------------------------------------


def test_dumps_is_compact():
    assert fastjson.dumps({"a": [1, 2.5, "x"], "b": {"c": True}}) == b'{"a":[1,2.5,"x"],"b":{"c":true}}'
    assert fastjson.dumps([]) == b"[]"
    assert fastjson.dumps({"a": [1, 2.5, "x"]}, ascii_only=True) == b'{"a":[1,2.5,"x"]}'


def _arrays():
    rng = np.random.default_rng(7)
    floats = rng.normal(size=(4, 5)) * 10.0 ** rng.integers(-30, 30, size=(4, 5))
    ints = rng.integers(-(2**62), 2**62, size=(3, 4))
    return {
        "float64 1-d": floats[0],
        "float64 2-d": floats,
        "float64 0-d": np.array(2.75),
        "float64 strided": floats[:, ::2],
        "float64 transposed": floats.T,
        "float64 reversed": floats[0, ::-1],
        "float64 (2,0)": np.zeros((2, 0)),
        "float64 (0,)": np.zeros((0,)),
        "float64 (0,3)": np.zeros((0, 3)),
        "int64 2-d": ints,
        "int64 0-d": np.array(-5),
        "int64 strided": ints[::2, 1::2],
        "int32": ints.astype(np.int32),
        "uint64": np.array([0, 2**64 - 1, 2**63], dtype=np.uint64),
        "uint8 3-d": rng.integers(0, 256, size=(2, 3, 2)).astype(np.uint8),
        "bool 2-d": rng.integers(0, 2, size=(3, 3)).astype(bool),
        "bool 0-d": np.array(True),
        "bool strided": rng.integers(0, 2, size=(6,)).astype(bool)[::3],
    }


@pytest.mark.parametrize("name", list(_arrays()))
@pytest.mark.parametrize("ascii_only", [False, True])
def test_arrays_as_nested_lists(name, ascii_only):
    array = _arrays()[name]
    text = fastjson.dumps({"y": array}, ascii_only=ascii_only)
    expected = json.loads(json.dumps({"y": array.tolist()}, **COMPACT))
    got = json.loads(text)
    assert got == expected
    assert repr(got) == repr(expected)  # ints as ints, bools as bools, floats as floats
    assert b" " not in text
    assert json.loads(fastjson.dumps(array, ascii_only=ascii_only)) == array.tolist()


def test_nan_and_infinities_are_bare_literals():
    array = np.array([np.nan, np.inf, -np.inf, 1.5])
    assert fastjson.dumps(array) == b"[NaN,Infinity,-Infinity,1.5]"
    assert fastjson.dumps({"y": array}) == b'{"y":[NaN,Infinity,-Infinity,1.5]}'
    assert fastjson.dumps({"y": array.reshape(2, 2)}) == b'{"y":[[NaN,Infinity],[-Infinity,1.5]]}'
    assert fastjson.dumps([math.nan, math.inf, -math.inf]) == b"[NaN,Infinity,-Infinity]"
    assert fastjson.dumps(math.nan) == b"NaN"
    assert fastjson.dumps({"y": array}, ascii_only=True) == b'{"y":[NaN,Infinity,-Infinity,1.5]}'
    assert b"null" not in fastjson.dumps({"y": np.array([[1.0, np.nan]])[:, ::-1]})
    assert b"null" not in fastjson.dumps(np.array(np.inf))


def test_none_still_writes_null():
    assert fastjson.dumps(None) == b"null"
    assert fastjson.dumps({"id": None, "y": [1.0, math.nan]}) == b'{"id":null,"y":[1.0,NaN]}'
    assert fastjson.dumps({"a": "null", "b": [None]}) == b'{"a":"null","b":[null]}'


def test_unpaired_surrogate_is_escaped():
    text = fastjson.dumps({"s": "a\ud800b"})
    assert text == b'{"s":"a\\ud800b"}'
    assert json.loads(text) == {"s": "a\ud800b"}
    text = fastjson.dumps(["\udfff"])
    assert text == b'["\\udfff"]'


def test_unpaired_surrogate_beside_other_text():
    # With a lone surrogate the whole document is written ASCII-escaped: still the same strings.
    doc = {"s": "\u00e9\ud800", "t": "\u65e5"}
    text = fastjson.dumps(doc)
    assert b"\\ud800" in text
    text.decode("ascii")  # nothing raw that a strict UTF-8 reader could choke on
    assert json.loads(text) == doc


def test_non_ascii_is_raw_utf8_unless_ascii_only():
    doc = {"s": "h\u00e9llo \u65e5\u672c \U0001f600"}
    assert fastjson.dumps(doc) == '{"s":"h\u00e9llo \u65e5\u672c \U0001f600"}'.encode()
    text = fastjson.dumps(doc, ascii_only=True)
    assert text == b'{"s":"h\\u00e9llo \\u65e5\\u672c \\ud83d\\ude00"}'
    assert json.loads(text) == doc


def test_python_ints_beyond_64_bits_are_written_exactly():
    assert fastjson.dumps([2**64, -(2**63) - 1]) == b"[18446744073709551616,-9223372036854775809]"


def test_float64_round_trips_bit_for_bit():
    rng = np.random.default_rng(2024)
    patterns = rng.integers(0, 2**64, size=12_000, dtype=np.uint64)
    values = patterns.view(np.float64)
    values = values[np.isfinite(values)][:10_000]
    extremes = np.array([
        0.0, -0.0, 5e-324, -5e-324, 2.2250738585072009e-308, 2.2250738585072014e-308,
        1.7976931348623157e308, -1.7976931348623157e308, 0.1, 1 / 3, 1e16, 1e-5, 1e22, 1e23, 9007199254740993.0,
    ])
    exponents = rng.uniform(-1074 / 3.33, 308, size=2000)
    values = np.concatenate([values, extremes, rng.uniform(-1, 1, 2000) * 10.0**exponents])
    assert len(values) >= 10_000
    assert bits(json.loads(fastjson.dumps(values))) == bits(values)
    assert bits(json.loads(fastjson.dumps(values.tolist()))) == bits(values)  # Python floats
    assert bits(json.loads(fastjson.dumps({"v": values[::-3]}))["v"]) == bits(values[::-3])  # via the default
    assert bits(json.loads(fastjson.dumps(values, ascii_only=True))) == bits(values)
    assert bits(fastjson.loads(fastjson.dumps(values))) == bits(values)


def test_bfloat16_array_is_written_as_its_float_values():
    array = np.array([[1.5, -0.25, 0.1], [3e38, 1e-38, -7.0]]).astype(ml_dtypes.bfloat16)
    got = json.loads(fastjson.dumps({"y": array}))["y"]
    assert got == array.astype(np.float64).tolist()
    assert got[0][2] == 0.10009765625  # bfloat16's 0.1, exactly
    special = np.array([np.nan, np.inf, -np.inf, 0.5]).astype(ml_dtypes.bfloat16)
    assert fastjson.dumps(special) == b"[NaN,Infinity,-Infinity,0.5]"


@pytest.mark.parametrize("doc", [object(), {"a": object()}, [1, {2, 3}], {"x": b"bytes"}], ids=repr)
@pytest.mark.parametrize("ascii_only", [False, True])
def test_unsupported_objects_raise_type_error(doc, ascii_only):
    with pytest.raises(TypeError):
        fastjson.dumps(doc, ascii_only=ascii_only)


# --- the codecs ------------------------------------------------------------------------------


def test_v2_response_writes_float32_as_its_float64_value():
    values = np.array([0.1, np.nan, -np.inf, 1e-45, 3.4028235e38, 1 / 3, -0.0], np.float32)
    body, header_length = encode_infer_response("m", "1", None, [("y", values, False)])
    assert header_length is None
    doc = json.loads(body)
    (output,) = doc["outputs"]
    assert output["name"] == "y" and output["datatype"] == "FP32" and output["shape"] == [7]
    assert output["data"][0] == float(np.float32(0.1)) == 0.10000000149011612
    back = np.array(output["data"], dtype=np.float64)
    assert bits(back) == bits(values.astype(np.float64))
    assert back.astype(np.float32).view(np.uint32).tolist() == values.view(np.uint32).tolist()


def test_v2_response_small_example():
    body, _ = encode_infer_response("m", "1", None, [("y", np.array([0.1, np.nan], np.float32), False)])
    assert body == (b'{"model_name":"m","model_version":"1","outputs":[{"name":"y","datatype":"FP32","shape":[2],'
                    b'"data":[0.10000000149011612,NaN]}]}')
    data = json.loads(body)["outputs"][0]["data"]
    np.testing.assert_array_equal(np.array(data).astype(np.float32), np.array([0.1, np.nan], np.float32))


def _v2_body(datatype: str, literal: str, extra: str = "") -> bytes:
    return ('{"inputs":[%s{"name":"x","datatype":"%s","shape":[1],"data":[%s]}]}' % (extra, datatype, literal)).encode()


@pytest.mark.parametrize("extra", ["", '{"name":"f","datatype":"FP32","shape":[1],"data":[NaN]},'],
                         ids=["orjson reads it", "json reads it"])
@pytest.mark.parametrize("datatype,literal", [("INT64", str(2**64)), ("INT64", str(2**63)), ("UINT64", str(2**64)),
                                              ("INT64", str(-(2**63) - 2048)), ("INT64", str(10**30))])
def test_v2_integers_beyond_range_are_refused(datatype, literal, extra):
    with pytest.raises(BadRequest) as excinfo:
        decode_infer_request(_v2_body(datatype, literal, extra), None)
    assert "out of range" in excinfo.value.message
    assert "'x'" in excinfo.value.message


def test_v2_int64_just_below_range_is_refused_as_out_of_range():
    with pytest.raises(BadRequest) as excinfo:
        decode_infer_request(_v2_body("INT64", str(-(2**63) - 1)), None)
    assert "out of range" in excinfo.value.message


@pytest.mark.parametrize("datatype,value", [("UINT64", 2**64 - 1), ("UINT64", 2**63), ("INT64", -(2**63)),
                                            ("INT64", 2**63 - 1)])
def test_v2_64_bit_extremes_decode_exactly(datatype, value):
    request = decode_infer_request(_v2_body(datatype, str(value)), None)
    (tensor,) = request.inputs
    assert tensor.array.dtype == (np.uint64 if datatype == "UINT64" else np.int64)
    assert tensor.array.tolist() == [value]


def test_tfserving_row_format_writes_tf_float32_digits():
    body = encode_predict_response({"y": np.array([[0.1, 1e-5, np.inf]], np.float32)}, row_format=True)
    assert json.loads(body) == {"predictions": [[0.1, 1e-05, math.inf]]}
    assert b"Infinity" in body
    assert b"null" not in body
    assert body == b'{"predictions":[[0.1,1e-05,Infinity]]}'


def test_tfserving_column_format_float32_digits():
    values = np.array([0.3, 1 / 3, -np.inf, np.nan, 16777216.0], np.float32)
    body = encode_predict_response({"y": values}, row_format=False)
    got = json.loads(body)["outputs"]
    assert got[:3] == [0.3, 0.333333343, -math.inf]
    assert math.isnan(got[3]) and got[4] == 16777216.0
    assert [struct.unpack("f", struct.pack("f", x))[0] for x in got[:3]] == values[:3].astype(np.float64).tolist()
