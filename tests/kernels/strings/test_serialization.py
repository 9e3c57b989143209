"""DecodeCompressed, ParseTensor and SerializeTensor: what TensorFlow 2.21 does with compressed streams and
serialized TensorProtos (tests/fixtures/ops/strings_sweep/ holds its outputs), and its errors."""

from __future__ import annotations

import gzip
import zlib

import ml_dtypes
import numpy as np
import pytest

import kernels
from engine.proto import tensor_pb2, types_pb2
from kernels.limits import AllocationTooLarge


def s(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def run(op, *inputs, memory_limit=None, **attrs):
    return kernels.lookup(op, "cpu").bind(np, attrs, {"memory_limit": memory_limit})(*inputs)


def decode(strings, compression_type, memory_limit=None):
    return run("DecodeCompressed", strings, compression_type=compression_type, memory_limit=memory_limit)[0]


def test_zlib_reads_one_stream_and_ignores_what_follows():
    z = zlib.compress(b"hello" * 4)
    assert decode(s(z, z + z, z + b"junk", b""), "ZLIB").tolist() == [b"hello" * 4] * 3 + [b""]


def test_gzip_reads_member_after_member():
    g = gzip.compress(b"one ") + gzip.compress(b"two")
    assert decode(s(g).reshape(1, 1), "GZIP").tolist() == [[b"one two"]]


def test_a_stream_cut_short_gives_what_it_decoded():
    z = zlib.compress(b"abcdefgh" * 100, 0)  # stored: the bytes are there to read
    assert decode(s(z[:20]), "ZLIB")[0] == (b"abcdefgh" * 100)[:13]


def test_no_compression_copies():
    assert decode(s(b"\x00raw", b""), "").tolist() == [b"\x00raw", b""]


@pytest.mark.parametrize("data, kind, message", [
    (b"not compressed", "ZLIB", "inflate\\(\\) failed with error -3: incorrect header check"),
    (gzip.compress(b"x") + b"junk", "GZIP", "inflate\\(\\) failed with error -3: incorrect header check"),
    (zlib.compress(b"x"), "GZIP", "inflate\\(\\) failed with error -3: incorrect header check"),
    (b"", "BZIP2", "Only ZLIB, ZSTD, GZIP or NONE are supported compressions"),
    (b"", "ZSTD", "ZSTD streams cannot be read here"),
])
def test_decode_errors(data, kind, message):
    with pytest.raises(ValueError, match=message):
        decode(s(data), kind)


def test_a_decompression_bomb_is_refused():
    bomb = zlib.compress(b"\0" * (8 << 20))
    with pytest.raises(AllocationTooLarge):
        decode(s(bomb), "ZLIB", memory_limit=1 << 20)


@pytest.mark.parametrize("value", [
    np.array([[1.5, -2], [0, 3]], np.float32), np.float64(-0.25), np.array([1, -2, 3], np.int32),
    np.array([True, False]), np.array([1 + 2j], np.complex128), np.array([1.5, 2], ml_dtypes.bfloat16),
    np.zeros((2, 0, 3), np.int64), s(b"", b"caf\xc3\xa9", b"\xff"),
])
def test_serialize_then_parse_gives_the_tensor_back(value):
    (serialized,) = run("SerializeTensor", value)
    assert serialized.shape == () and isinstance(serialized.item(), bytes)
    (back,) = run("ParseTensor", serialized, out_type=np.asarray(value).dtype)
    assert back.dtype == np.asarray(value).dtype and back.shape == np.shape(value)
    np.testing.assert_array_equal(back, value)


def test_serialized_bytes_are_tensorflows():
    # TensorFlow 2.21's SerializeTensor of float32 [1.5, -2]: dtype, shape {dim {size: 2}}, tensor_content
    (out,) = run("SerializeTensor", np.array([1.5, -2], np.float32))
    assert out.item() == bytes.fromhex("0801120412020802220800" "00c03f000000c0")


@pytest.mark.parametrize("serialized, out_type, message", [
    (s(b"x", b"y"), np.float32, r"Expected `serialized` to be a scalar, got shape: \[2\]"),
    (np.array(b"\xff\xff", dtype=object), np.float32, "Could not parse `serialized` as TensorProto"),
    (np.array(bytes.fromhex("08031200"), dtype=object), np.float32,
     r"Type mismatch between parsed tensor \(int32\) and dtype \(float\)"),
])
def test_parse_errors_are_tensorflows(serialized, out_type, message):
    with pytest.raises(ValueError, match=message):
        run("ParseTensor", serialized, out_type=np.dtype(out_type))


def test_parse_refuses_a_huge_claimed_shape_before_allocating():
    # float32 of shape [10**9] with one value: TensorFlow would repeat it a billion times
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0])
    proto.tensor_shape.dim.add().size = 10**9
    with pytest.raises(AllocationTooLarge):
        run("ParseTensor", np.array(proto.SerializeToString(), dtype=object), out_type=np.dtype(np.float32),
            memory_limit=1 << 20)
