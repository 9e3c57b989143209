"""TensorProto <-> numpy: every TensorFlow dtype, from `tensor_content` or the typed `*_val` fields.

TensorFlow's rule for the typed fields: a list shorter than the tensor repeats its last value, an empty
list means zeros (empty strings for DT_STRING). half and bfloat16 values travel as 16-bit patterns in
`half_val`; complex values as interleaved (real, imaginary) pairs.
"""

from __future__ import annotations

import math

import numpy as np

from engine.graph import dtypes
from engine.proto import tensor_pb2, tensor_shape_pb2, types_pb2
from kernels.limits import check_elements

__all__ = ["to_array", "from_array", "shape_proto"]

_INT_VAL_TYPES = {
    types_pb2.DT_INT32,
    types_pb2.DT_INT16,
    types_pb2.DT_INT8,
    types_pb2.DT_UINT8,
    types_pb2.DT_UINT16,
    types_pb2.DT_QINT8,
    types_pb2.DT_QUINT8,
    types_pb2.DT_QINT16,
    types_pb2.DT_QUINT16,
    types_pb2.DT_QINT32,
}

# DataType -> the TensorProto field that holds its typed values.
_VAL_FIELD = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_HALF: "half_val",
    types_pb2.DT_BFLOAT16: "half_val",
    types_pb2.DT_COMPLEX64: "scomplex_val",
    types_pb2.DT_COMPLEX128: "dcomplex_val",
    types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val",
    types_pb2.DT_STRING: "string_val",
    **{t: "int_val" for t in _INT_VAL_TYPES},
}


def _typed_values(proto: tensor_pb2.TensorProto, dtype_enum: int, np_dtype: np.dtype) -> np.ndarray:
    """The typed `*_val` field as a flat array of `np_dtype` (before the repeat-last-value rule)."""
    field = _VAL_FIELD.get(dtype_enum)
    if field is None:
        raise ValueError(f"cannot decode {dtypes.tf_name(dtype_enum)} tensors from typed values")
    raw = getattr(proto, field)
    if dtype_enum == types_pb2.DT_STRING:
        values = np.empty(len(raw), dtype=object)
        values[:] = list(raw)
        return values
    if field == "half_val":
        # Bit patterns stored in int32s: keep the low 16 bits and reinterpret.
        return np.asarray(raw, dtype=np.int32).astype(np.uint16).view(np_dtype)
    if field in ("scomplex_val", "dcomplex_val"):
        parts = np.asarray(raw, dtype=np.float32 if field == "scomplex_val" else np.float64)
        if parts.size % 2:
            raise ValueError("complex values must come in (real, imaginary) pairs")
        return parts.view(np_dtype)
    return np.asarray(raw).astype(np_dtype, copy=False)


def to_array(proto: tensor_pb2.TensorProto, *, max_bytes: int | None = None) -> np.ndarray:
    """Decode a TensorProto into a numpy array; ValueError when it is malformed, or (the subclass
    kernels.limits.AllocationTooLarge) when the array would take more than `max_bytes` (a request's
    TensorProto of a few bytes may claim a shape of 10**18 elements: zeros, or its last value repeated)."""
    dtype_enum = dtypes.base_type(proto.dtype)
    np_dtype = dtypes.to_numpy(dtype_enum)
    if proto.tensor_shape.unknown_rank:
        raise ValueError("a tensor value cannot have an unknown rank")
    shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(s < 0 for s in shape):
        raise ValueError(f"a tensor value cannot have unknown dimensions, got shape {list(shape)}")
    count = math.prod(shape)
    # AllocationTooLarge (a ValueError) lets a server tell an over-budget tensor (413) from a malformed one.
    check_elements(count, np_dtype, max_bytes, f"{dtypes.tf_name(dtype_enum)} tensor", shape)

    if proto.tensor_content:
        if np_dtype == np.dtype(object):
            raise ValueError(f"{dtypes.tf_name(dtype_enum)} tensors cannot use tensor_content")
        expected = count * np_dtype.itemsize
        if len(proto.tensor_content) != expected:
            raise ValueError(
                f"tensor_content has {len(proto.tensor_content)} bytes; shape {list(shape)} of "
                f"{dtypes.tf_name(dtype_enum)} needs {expected}"
            )
        # Copy: frombuffer views the proto's bytes, which are read-only and owned by the message.
        return np.frombuffer(proto.tensor_content, dtype=np_dtype.newbyteorder("<")).astype(np_dtype).reshape(shape)

    values = _typed_values(proto, dtype_enum, np_dtype)
    if values.size == count:
        return values.reshape(shape)
    if values.size > count:
        raise ValueError(f"tensor has {values.size} values but shape {list(shape)} holds {count}")
    if values.size == 0:
        if np_dtype == np.dtype(object):
            out = np.empty(count, dtype=object)
            out[:] = b""
            return out.reshape(shape)
        return np.zeros(shape, dtype=np_dtype)
    # Fewer values than elements: TensorFlow repeats the last one.
    out = np.empty(count, dtype=np_dtype)
    out[: values.size] = values
    out[values.size :] = values[-1]
    return out.reshape(shape)


def shape_proto(shape: tuple[int | None, ...] | None) -> tensor_shape_pb2.TensorShapeProto:
    """A TensorShapeProto for a shape tuple (None dims unknown; None for an unknown rank)."""
    proto = tensor_shape_pb2.TensorShapeProto()
    if shape is None:
        proto.unknown_rank = True
        return proto
    for size in shape:
        proto.dim.add().size = -1 if size is None else int(size)
    return proto


def from_array(value: np.ndarray | object, dtype: np.dtype | None = None, *, typed_fields: bool = False
               ) -> tensor_pb2.TensorProto:
    """Encode an array (or anything np.asarray accepts) as a TensorProto, the way TensorFlow writes it:
    numeric data in `tensor_content`, strings in `string_val`. With `typed_fields`, every value goes in
    its typed `*_val` field instead (TensorFlow's `Tensor::AsProtoField`, which TensorFlow Serving's
    Predict replies use, and which clients reading `outputs["y"].float_val` expect)."""
    arr = np.asarray(value, dtype=dtype)
    proto = tensor_pb2.TensorProto()
    proto.dtype = dtypes.from_numpy(arr.dtype)
    proto.tensor_shape.CopyFrom(shape_proto(arr.shape))
    if proto.dtype == types_pb2.DT_STRING:
        for item in arr.reshape(-1):
            proto.string_val.append(item if isinstance(item, bytes) else str(item).encode("utf-8"))
    elif typed_fields:
        _set_typed_values(proto, arr.reshape(-1))
    else:
        proto.tensor_content = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return proto


def _set_typed_values(proto: tensor_pb2.TensorProto, flat: np.ndarray) -> None:
    field = _VAL_FIELD.get(dtypes.base_type(proto.dtype))
    if field is None:
        raise ValueError(f"cannot encode {dtypes.tf_name(proto.dtype)} tensors as typed values")
    if field == "half_val":
        values = flat.view(np.uint16).astype(np.int32)  # the bit patterns, as TensorFlow stores them
    elif field in ("scomplex_val", "dcomplex_val"):
        values = flat.view(np.float32 if field == "scomplex_val" else np.float64)  # (real, imaginary) pairs
    else:
        values = flat
    getattr(proto, field).extend(values.tolist())
