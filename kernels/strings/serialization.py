"""Kernels of the ops whose strings carry encoded data: DecodeCompressed (zlib and gzip streams),
ParseTensor and SerializeTensor (a TensorProto in a string: tf.io.parse_tensor / serialize_tensor).

DecodeCompressed reads each string as TensorFlow's ZlibInputStream does: a zlib stream ends at its end
(bytes after it are ignored), gzip members follow one another (bytes after the last must be another
member), and a stream cut short gives what it decoded so far. ZSTD, which TensorFlow also reads, is not
available here and is refused.

SerializeTensor writes numbers as `tensor_content` and strings as `string_val`, as TensorFlow does;
ParseTensor reads a TensorProto as Tensor::FromProto does (typed values past the tensor's size are
ignored, a shorter list repeats its last value) and checks its dtype against `out_type`.
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from engine.graph import dtypes
from engine.graph.tensors import from_array, to_array
from engine.proto import tensor_pb2
from kernels.host import format_dims
from kernels.limits import AllocationTooLarge, check_bytes
from kernels.registry import kernel
from kernels.strings.tensors import as_bytes, flat_strings, message_text, string_array

__all__ = ["decode_compressed", "parse_tensor", "serialize_tensor"]

_WINDOW_BITS = {"ZLIB": 15, "GZIP": 15 + 16}
_CHUNK = 1 << 20
_TYPED_FIELDS = ("half_val", "float_val", "double_val", "int_val", "string_val", "scomplex_val", "int64_val",
                 "bool_val", "dcomplex_val", "uint32_val", "uint64_val")


def _zlib_error(error: zlib.error) -> ValueError:
    """zlib's error as TensorFlow words it: "inflate() failed with error -3: incorrect header check"."""
    match = re.match(r"Error (-?\d+) while decompressing data:? ?(.*)", str(error))
    if match is None:
        return ValueError(f"inflate() failed: {error}")
    code, reason = match.groups()
    return ValueError(f"inflate() failed with error {code}" + (f": {reason}" if reason else ""))


def _inflate(data: bytes, window_bits: int, memory_limit: int | None) -> bytes:
    """The decompressed bytes of `data`; gzip members one after another, a zlib stream alone."""
    out: list[bytes] = []
    size = 0
    while True:
        stream = zlib.decompressobj(window_bits)
        pending = data
        try:
            while pending:
                chunk = stream.decompress(pending, _CHUNK)
                size += len(chunk)
                check_bytes(size, memory_limit, "DecodeCompressed output")
                out.append(chunk)
                pending = stream.unconsumed_tail
        except zlib.error as e:
            raise _zlib_error(e) from None
        # NOTE: TensorFlow resets the stream after a gzip member's end, never after a zlib stream's.
        if not (stream.eof and stream.unused_data and window_bits == _WINDOW_BITS["GZIP"]):
            return b"".join(out)
        data = stream.unused_data


@kernel("DecodeCompressed", devices=("cpu",))
def decode_compressed(xp: Any, compressed: Any, *, compression_type: str | bytes = "",
                      memory_limit: int | None = None) -> tuple:
    """Each string of `compressed` (TensorFlow's input `bytes`) decompressed ("" leaves it as it is)."""
    kind = compression_type if isinstance(compression_type, str) else message_text(compression_type)
    if kind == "ZSTD":
        raise ValueError("DecodeCompressed: ZSTD streams cannot be read here (tensorgate reads ZLIB and GZIP)")
    if kind not in ("", "ZLIB", "GZIP"):
        raise ValueError("Only ZLIB, ZSTD, GZIP or NONE are supported compressions")
    strings = flat_strings(compressed)
    if kind:
        strings = [_inflate(s, _WINDOW_BITS[kind], memory_limit) for s in strings]
    return (string_array(strings, np.shape(compressed)),)


def _drop_extra_values(proto: tensor_pb2.TensorProto) -> None:
    """Tensor::FromProto copies at most as many typed values as the tensor holds: drop the rest (and any
    tensor_content of a tensor with no elements, which it never reads)."""
    count = math.prod(d.size for d in proto.tensor_shape.dim) if all(d.size >= 0 for d in proto.tensor_shape.dim) else 0
    if count == 0 and proto.tensor_content:
        proto.tensor_content = b""
    for name in _TYPED_FIELDS:
        values = getattr(proto, name)
        keep = count * 2 if name in ("scomplex_val", "dcomplex_val") else count  # (real, imaginary) pairs
        if len(values) > keep:
            del values[keep:]


@kernel("ParseTensor", devices=("cpu",))
def parse_tensor(xp: Any, serialized: Any, *, out_type: np.dtype, memory_limit: int | None = None) -> tuple:
    """The tensor a scalar string holds as a serialized TensorProto, which must be of `out_type`."""
    array = np.asarray(serialized, dtype=object)
    if array.ndim != 0:
        raise ValueError(f"Expected `serialized` to be a scalar, got shape: {format_dims(array.shape)}")
    data = as_bytes(array.item())
    proto = tensor_pb2.TensorProto()
    try:
        proto.ParseFromString(data)
    except DecodeError:
        raise ValueError(f"Could not parse `serialized` as TensorProto: '{message_text(data)}'") from None
    if dtypes.is_ref(proto.dtype):
        raise ValueError(f"Cannot parse tensor from proto: a {dtypes.tf_name(proto.dtype)} tensor")
    _drop_extra_values(proto)
    try:
        value = to_array(proto, max_bytes=memory_limit)
    except AllocationTooLarge:
        raise
    except ValueError as e:
        raise ValueError(f"Cannot parse tensor from proto: {e}") from None
    if value.dtype != np.dtype(out_type):
        raise ValueError(f"Type mismatch between parsed tensor ({dtypes.tf_name(proto.dtype)}) and dtype "
                         f"({dtypes.tf_name_of_numpy(out_type)})")
    return (value,)


@kernel("SerializeTensor", devices=("cpu",))
def serialize_tensor(xp: Any, tensor: Any) -> tuple:
    """A scalar string: `tensor` as a serialized TensorProto (numbers in tensor_content, strings in
    string_val), byte for byte as TensorFlow writes it."""
    proto = from_array(np.asarray(tensor))
    return (string_array([proto.SerializeToString(deterministic=True)], ()),)
