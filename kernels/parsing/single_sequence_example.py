"""The kernel of ParseSingleSequenceExample: one serialized SequenceExample into its context features and
feature lists, as TensorFlow's older kernel does it (core/kernels/example_parsing_ops.cc, which still
serves this op) rather than the fast parser of kernels.parsing.sequence_example.

The SequenceExample is read as protobuf reads it (a key given twice keeps its last entry), and:

* a context dense feature must have exactly its shape's number of values and its type; a missing one
  takes its default or is required; an empty Feature is a type mismatch, not a missing feature;
* a feature-list dense feature gives [steps, *shape]; every step must have the type and the count; a
  missing list is an error unless its key is in `feature_list_dense_missing_assumed_empty`;
* sparse context features give indices [n, 1] and shape [n]; sparse feature lists give indices
  [n, 2] (step, position) and shape [steps, longest step]; empty Features are skipped by both.

TensorFlow ends its type-mismatch messages with the Feature's protobuf DebugString, whose layout
protobuf randomizes on purpose; the Feature is written here in text format.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf import text_format
from google.protobuf.message import DecodeError

from engine.graph.dtypes import tf_name_of_numpy
from engine.proto import example_pb2, feature_pb2
from kernels.host import format_dims
from kernels.parsing.example_parser import as_text, check_feature_dtype
from kernels.parsing.feature_wire import FLOAT, INT64, STRING, list_type_name, tf_type_name
from kernels.registry import kernel

__all__ = ["parse_single_sequence_example"]

_KINDS = {FLOAT: "float_list", INT64: "int64_list", STRING: "bytes_list"}


def _values(feature: Any, dtype: np.dtype) -> np.ndarray:
    values = getattr(feature, _KINDS[dtype]).value
    if dtype == STRING:
        out = np.empty(len(values), object)
        out[:] = list(values)
        return out
    return np.array(values, dtype)


def _mismatch(prefix: str, dtype: np.dtype, feature: Any) -> ValueError:
    return ValueError(f"{prefix}.  Data types don't match. Expected type: {tf_type_name(dtype)}  Feature is: "
                      f"{text_format.MessageToString(feature)}")


def _dense_copy(name: str, key: str, index: int, dtype: np.dtype, shape: tuple, feature: Any) -> np.ndarray:
    """FeatureDenseCopy: the Feature's values, exactly as many as `shape` holds."""
    values = _values(feature, dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if values.size != size:
        if dtype == STRING:  # NOTE: TensorFlow words its bytes message differently ("Key " and "Values")
            raise ValueError(f"Name: {name}, Key {key}, Index: {index}.  Number of bytes values != expected.  Values "
                             f"size: {values.size} but output shape: {format_dims(shape)}")
        raise ValueError(f"Name: {name}, Key: {key}, Index: {index}.  Number of {list_type_name(dtype)} values != "
                         f"expected.  values size: {values.size} but output shape: {format_dims(shape)}")
    return values.reshape(shape)


def _scalar_keys(keys: tuple, what: str) -> list[bytes]:
    out = []
    for i, key in enumerate(keys):
        if key.ndim != 0:
            raise ValueError(f"Expected {what}[{i}] to be a scalar, got shape: {format_dims(key.shape)}")
        out.append(key.item())
    return out


def _outputs(attrs: dict) -> int:
    return (3 * attrs.get("Ncontext_sparse", 0) + attrs.get("Ncontext_dense", 0)
            + 3 * attrs.get("Nfeature_list_sparse", 0) + attrs.get("Nfeature_list_dense", 0))


@kernel("ParseSingleSequenceExample", devices=("cpu",), outputs=_outputs)
def parse_single_sequence_example(
    xp: Any, serialized: Any, feature_list_dense_missing_assumed_empty: Any, *inputs: Any, Ncontext_sparse: int = 0,
    Ncontext_dense: int = 0, Nfeature_list_sparse: int = 0, Nfeature_list_dense: int = 0,
    context_sparse_types: tuple = (), Tcontext_dense: tuple = (), feature_list_dense_types: tuple = (),
    context_dense_shapes: tuple = (), feature_list_sparse_types: tuple = (), feature_list_dense_shapes: tuple = (),
) -> tuple:
    """Parse one serialized SequenceExample; keys come as scalar string inputs, then the context dense
    defaults, then `debug_name`."""
    ends = np.cumsum([Ncontext_sparse, Ncontext_dense, Nfeature_list_sparse, Nfeature_list_dense])
    context_sparse_keys, context_dense_keys = inputs[:ends[0]], inputs[ends[0]:ends[1]]
    list_sparse_keys, list_dense_keys = inputs[ends[1]:ends[2]], inputs[ends[2]:ends[3]]
    defaults, debug_name = inputs[ends[3]:-1], inputs[-1]
    for dtype in (*context_sparse_types, *Tcontext_dense, *feature_list_dense_types, *feature_list_sparse_types):
        check_feature_dtype(dtype)
    context_dense_keys = _scalar_keys(context_dense_keys, "context_dense_keys")
    context_sparse_keys = _scalar_keys(context_sparse_keys, "context_sparse_keys")
    list_dense_keys = _scalar_keys(list_dense_keys, "feature_list_dense_keys")
    list_sparse_keys = _scalar_keys(list_sparse_keys, "feature_list_sparse_keys")
    if feature_list_dense_missing_assumed_empty.ndim != 1:
        raise ValueError("Expected feature_list_dense_missing_assumed_empty to be a vector, got shape: "
                         f"{format_dims(feature_list_dense_missing_assumed_empty.shape)}")
    missing_ok = set(feature_list_dense_missing_assumed_empty.tolist())
    if debug_name.size > 0 and debug_name.ndim != 0:
        raise ValueError(f"Expected debug_name to be a scalar, got shape: {format_dims(debug_name.shape)}")
    if serialized.ndim != 0:
        raise ValueError(f"Expected serialized to be a scalar, got shape: {format_dims(serialized.shape)}")
    if len(defaults) != Ncontext_dense:
        raise ValueError(f"Expected len(context_dense_defaults) == len(context_dense_keys) but got: {len(defaults)} "
                         f"vs. {Ncontext_dense}")
    for d, (default, dtype, shape) in enumerate(zip(defaults, Tcontext_dense, context_dense_shapes)):
        if default.size > 0:
            if tuple(default.shape) != tuple(shape):
                raise ValueError(f"def_value[{d}].shape() == {format_dims(default.shape)} != context_dense_shapes_[{d}]"
                                 f" == {format_dims(shape)}")
            if default.dtype != dtype:
                raise ValueError(f"context_dense_defaults[{d}].dtype() == {tf_name_of_numpy(default.dtype)} != "
                                 f"context_dense_types_[{d}] == {tf_name_of_numpy(dtype)}")
    record = serialized.item()
    try:
        example = example_pb2.SequenceExample.FromString(record)
    except DecodeError:
        raise ValueError(f"Could not parse example input, value: '{as_text(record)}'") from None
    name = as_text(debug_name.item()) if debug_name.size > 0 else "<unknown>"
    context, lists = example.context.feature, example.feature_lists.feature_list

    dense_out = []
    for key, dtype, shape, default in zip(context_dense_keys, Tcontext_dense, context_dense_shapes, defaults):
        text = as_text(key)
        feature = context.get(text)
        if feature is None:
            if default.size == 0:
                raise ValueError(f"Name: {name}, Context feature '{text}' is required but could not be found.")
            dense_out.append(default)
            continue
        if feature.WhichOneof("kind") != _KINDS[dtype]:
            raise _mismatch(f"Name: {name}, Context feature: {text}", dtype, feature)
        dense_out.append(_dense_copy(name, text, 0, dtype, tuple(shape), feature))

    sparse_out = []
    for key, dtype in zip(context_sparse_keys, context_sparse_types):
        text = as_text(key)
        feature = context.get(text)
        if feature is None or feature.WhichOneof("kind") is None:
            values = _values(feature_pb2.Feature(), dtype)
        elif feature.WhichOneof("kind") != _KINDS[dtype]:
            raise _mismatch(f"Name: {name}, Context feature: {text}", dtype, feature)
        else:
            values = _values(feature, dtype)
        sparse_out.append((np.arange(values.size, dtype=np.int64).reshape(-1, 1), values,
                           np.array([values.size], np.int64)))

    list_dense_out = []
    for key, dtype, shape in zip(list_dense_keys, feature_list_dense_types, feature_list_dense_shapes):
        text = as_text(key)
        feature_list = lists.get(text)
        if feature_list is None and key not in missing_ok:
            raise ValueError(f"Name: {name}, Feature list '{text}' is required but could not be found.  Did you mean to "
                             "include it in feature_list_dense_missing_assumed_empty or feature_list_dense_defaults?")
        steps = []
        for t, feature in enumerate(feature_list.feature if feature_list is not None else ()):
            if feature.WhichOneof("kind") != _KINDS[dtype]:
                raise _mismatch(f"Name: {name}, Feature list: {text}, Index: {t}", dtype, feature)
            steps.append(_dense_copy(name, text, t, dtype, tuple(shape), feature))
        list_dense_out.append(np.stack(steps) if steps else np.zeros((0, *shape), dtype))

    list_sparse_out = []
    for key, dtype in zip(list_sparse_keys, feature_list_sparse_types):
        text = as_text(key)
        feature_list = lists.get(text)
        steps = []
        for t, feature in enumerate(feature_list.feature if feature_list is not None else ()):
            kind = feature.WhichOneof("kind")
            if kind is not None and kind != _KINDS[dtype]:
                raise _mismatch(f"Name: {name}, Feature List: {text}, Index: {t}", dtype, feature)
            steps.append(_values(feature, dtype))
        counts = np.array([s.size for s in steps], np.int64)
        values = np.concatenate(steps) if steps else _values(feature_pb2.Feature(), dtype)
        index = np.stack([np.repeat(np.arange(counts.size, dtype=np.int64), counts),
                          np.arange(values.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)], 1)
        shape = np.array([counts.size, int(counts.max()) if counts.size else 0], np.int64)
        list_sparse_out.append((index, values.astype(dtype), shape))

    return (*[s[0] for s in sparse_out], *[s[1] for s in sparse_out], *[s[2] for s in sparse_out], *dense_out,
            *[s[0] for s in list_sparse_out], *[s[1] for s in list_sparse_out], *[s[2] for s in list_sparse_out],
            *list_dense_out)
