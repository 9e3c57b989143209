"""DecodeRaw, DecodePaddedRaw, DecodeCSV and DecodeJSONExample: results and TensorFlow's errors word for
word (core/kernels/decode_raw_op.cc, decode_padded_raw_op.cc, decode_csv_op.cc, example_parsing_ops.cc;
each also read off TensorFlow 2.21). tests/fixtures/ops/example_parsing/decode_*/ hold TensorFlow's
outputs for more inputs."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

from engine.proto import example_pb2
from tests.kernels.checks import assert_outputs, f32, i32, i64
from tests.kernels.example_protos import string, strings


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as e:
        fn(*args, **kwargs)
    return str(e.value)


# --- DecodeRaw ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.float16, ml_dtypes.bfloat16, np.int32,
                                   np.float32, np.int64, np.float64, np.complex64, np.complex128])
def test_decode_raw_reads_the_bytes_of_every_type(run_kernel, dtype):
    values = (np.arange(8) - 3).astype(dtype)
    (out,) = run_kernel("DecodeRaw", strings(values[:4].tobytes(), values[4:].tobytes()), out_type=np.dtype(dtype))
    assert out.dtype == np.dtype(dtype) and out.tobytes() == values.tobytes() and out.shape == (2, 4)


def test_decode_raw_big_endian_reverses_each_value(run_kernel):
    (ints16,) = run_kernel("DecodeRaw", strings(b"\x01\x00\x02\x00"), out_type=np.dtype(np.int16), little_endian=False)
    (complex64,) = run_kernel("DecodeRaw", strings(struct.pack(">2f", 1.5, -2)), out_type=np.dtype(np.complex64),
                              little_endian=False)
    assert_outputs((ints16, complex64), [np.array([[256, 512]], np.int16), np.array([[1.5 - 2j]], np.complex64)])


def test_decode_raw_shapes(run_kernel):
    (scalar,) = run_kernel("DecodeRaw", string(b"\x01\x02"), out_type=np.dtype(np.uint8))
    (empty,) = run_kernel("DecodeRaw", strings(b"", b""), out_type=np.dtype(np.float32))
    (none,) = run_kernel("DecodeRaw", strings(), out_type=np.dtype(np.int64))
    (flags,) = run_kernel("DecodeRaw", strings(b"\x00\x02"), out_type=np.dtype(np.bool_))
    assert_outputs((scalar, empty, none, flags), [np.array([1, 2], np.uint8), np.zeros((2, 0), np.float32),
                                                  np.zeros((0, 0), np.int64), np.array([[False, True]])])


def test_decode_raw_errors(run_kernel):
    assert error_of(run_kernel, "DecodeRaw", strings(b"\x01\x00\x02"), out_type=np.dtype(np.int16)) == \
        "Input to DecodeRaw has length 3 that is not a multiple of 2, the size of int16"
    assert error_of(run_kernel, "DecodeRaw", strings(b"\x01\x00", b"\x01\x00\x02\x00"), out_type=np.dtype(np.int16)) \
        == "DecodeRaw requires input strings to all be the same size, but element 1 has size 2 != 4"


def test_decode_padded_raw_cuts_and_pads(run_kernel):
    (out,) = run_kernel("DecodePaddedRaw", strings(b"\x01\x00\x02", b"\x05\x00\x06\x00\x07\x00"), np.int32(4),
                        out_type=np.dtype(np.int16))
    (big,) = run_kernel("DecodePaddedRaw", strings(b"\x00\x01\x00\x02\x09"), np.int32(4), out_type=np.dtype(np.int16),
                        little_endian=False)
    assert_outputs((out, big), [np.array([[1, 2], [5, 6]], np.int16), np.array([[1, 2]], np.int16)])


@pytest.mark.parametrize("length, message", [
    (np.int32(3), "fixed_length (3) must be a multiple of the size of out_type (2)"),
    (np.int32(0), "fixed_length (0) must be greater than zero."),
    (i32(4), "k must be scalar, got shape [1]"),
])
def test_decode_padded_raw_errors(run_kernel, length, message):
    assert error_of(run_kernel, "DecodePaddedRaw", strings(b"\x01"), length, out_type=np.dtype(np.int16)) == message


# --- DecodeCSV ----------------------------------------------------------------------------------------


def decode_csv(run_kernel, records, *defaults, **attrs):
    return run_kernel("DecodeCSV", records, *defaults, OUT_TYPE=tuple(d.dtype for d in defaults), **attrs)


def test_decode_csv_columns_defaults_and_quotes(run_kernel):
    outs = decode_csv(run_kernel, strings(b'1,2.5,abc,7', b'4,,"q,""x""",', b'"5",.5,"",-9'),
                      i32(0), f32([9]), strings("dflt"), i64(-1))
    assert_outputs(outs, [i32(1, 4, 5), f32([2.5, 9, 0.5]), strings("abc", 'q,"x"', "dflt"), i64(7, -1, -9)])


def test_decode_csv_options(run_kernel):
    outs = decode_csv(run_kernel, strings(b"a|1|x|2.5", b"b|NA|y|NA"), i32(-1), f32([0.5]), field_delim="|",
                      na_value="NA", select_cols=(1, 3))
    unquoted = decode_csv(run_kernel, strings(b'"a"b,c"'), strings(""), strings(""), use_quote_delim=False)
    assert_outputs((*outs, *unquoted), [i32(1, -1), f32([2.5, 0.5]), strings('"a"b'), strings('c"')])


def test_decode_csv_numbers_as_absl_reads_them(run_kernel):
    outs = decode_csv(run_kernel, strings(b" +1.5 ,-INF,1e50,5.,0x1.8p1,+7, -8 ,9223372036854775807"),
                      *[f32([0])] * 5, i32(0), i32(0), i64(0))
    assert_outputs(outs, [f32([1.5]), f32([-np.inf]), f32([np.inf]), f32([5]), f32([3]), i32(7), i32(-8),
                          i64(2**63 - 1)])


def test_decode_csv_rounds_straight_to_float32(run_kernel):
    # The nearest double lies exactly between two float32s; the decimal is a hair above it.
    (out,) = decode_csv(run_kernel, strings(b"1.00000005960464477539062500001"), f32([0]))
    assert out.tolist() == [float(np.float32(1) + np.finfo(np.float32).eps)]


def test_decode_csv_line_breaks_between_fields_and_a_last_empty_field(run_kernel):
    outs = decode_csv(run_kernel, strings(b"a,\r\nb,"), strings("x"), strings("y"), strings("z"))
    assert_outputs(outs, [strings("a"), strings("b"), strings("z")])


CSV_ERRORS = [
    (strings(b"1,2"), [i32(0)], {}, "Expect 1 fields but have 2 in record 0"),
    (strings(b"1", b""), [i32(0)], {}, "Expect 1 fields but have 0 in record 1"),
    (strings(b","), [i32(0), np.zeros([0], np.int32)], {}, "Field 1 is required but missing in record 0!"),
    (strings(b"1x"), [i32(0)], {}, "Field 0 in record 0 is not a valid int32: 1x"),
    (strings(b"2147483648"), [i32(0)], {}, "Field 0 in record 0 is not a valid int32: 2147483648"),
    (strings(b"1e"), [f32([0])], {}, "Field 0 in record 0 is not a valid float: 1e"),
    (strings(b"1d5"), [np.zeros(1)], {}, "Field 0 in record 0 is not a valid double: 1d5"),
    (strings(b"0x10"), [i64(0)], {}, "Field 0 in record 0 is not a valid int64: 0x10"),
    (strings(b'a"b,c'), [strings("")] * 2, {}, "Unquoted fields cannot have quotes/CRLFs inside"),
    (strings(b'"a"b",c'), [strings("")] * 2, {}, "Quote inside a string has to be escaped by another quote"),
    (strings(b'"abc'), [strings("")], {}, "Quoted field has to end with quote followed by delim or end"),
    (strings(b"1"), [np.array([[1]], np.int32)], {}, "Each record default should be at most rank 1"),
    (strings(b"1"), [i32(1, 2)], {}, "There should only be 1 default per field but field 0 has 2"),
    (strings(b"1"), [i32(0)], {"field_delim": "||"}, "field_delim should be only 1 char"),
    (strings(b"1,2"), [i32(0), i32(0)], {"select_cols": (1, 0)}, "select_cols should be strictly increasing indices"),
    (strings(b"1,2"), [i32(0)], {"select_cols": (0, 1)}, "select_cols should match output size"),
]


@pytest.mark.parametrize("records, defaults, attrs, message", CSV_ERRORS)
def test_decode_csv_errors(run_kernel, records, defaults, attrs, message):
    assert error_of(decode_csv, run_kernel, records, *defaults, **attrs) == message


# --- DecodeJSONExample --------------------------------------------------------------------------------


def test_decode_json_example_writes_as_tensorflow_does(run_kernel):
    text = ('{"features": {"feature": {"b": {"int64List": {"value": [-1, "5"]}}, "a": {"bytesList": '
            '{"value": ["AAE="]}}, "c": {"float_list": {"value": [1.5, "NaN"]}}, "n": null}}}')
    (out,) = run_kernel("DecodeJSONExample", strings(text, "{}"))
    # Entries in JSON order, numbers unpacked, a null feature as a key without a value (TensorFlow's bytes).
    expected = (b"\n;\n\x14\n\x01b\x12\x0f\x1a\r\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x08\x05"
                b"\n\x0b\n\x01a\x12\x06\n\x04\n\x02\x00\x01\n\x11\n\x01c\x12\x0c\x12\n\r\x00\x00\xc0?\r\x00\x00\xc0\x7f"
                b"\n\x03\n\x01n")
    assert out.tolist() == [expected, b""]
    parsed = example_pb2.Example.FromString(expected).features.feature
    assert list(parsed["b"].int64_list.value) == [-1, 5] and list(parsed["a"].bytes_list.value) == [b"\x00\x01"]


@pytest.mark.parametrize("text", ['{"features": 3}', '{"feat": {}}', "not json", "",
                                  '{"features": {"feature": {"a": {"int64List": {"value": [1.5]}}}}}',
                                  '{"features": {"feature": {"a": {}, "a": {}}}}'])
def test_decode_json_example_errors(run_kernel, text):
    assert error_of(run_kernel, "DecodeJSONExample", strings(text)).startswith("Error while parsing JSON: ")
