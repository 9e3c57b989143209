"""Kernels of the SequenceExample parsing ops: ParseSequenceExampleV2, ParseSequenceExample (v1) and
ParseSingleSequenceExample, which turn serialized `SequenceExample` protos (a context of features and
feature lists, one Feature per step) into context tensors and per-step tensors.

ParseSequenceExampleV2 and ParseSequenceExample follow TensorFlow's FastParseSequenceExample
(core/util/example_proto_fast_parsing.cc): each SequenceExample is decoded once with its features left
serialized (engine/proto/example_wire.proto), a key given twice keeps its last entry (even an empty
one), and then

* a context dense feature must have exactly its shape's number of values; a missing one takes its
  default or is required; an empty Feature is not missing but has no values;
* a feature-list dense feature has `shape` values per step; examples are padded with zeros (empty
  strings) to the batch's longest list, and `feature_list_dense_lengths` gives each example's steps; a
  missing list is an error unless `feature_list_dense_missing_assumed_empty` says it may be missing;
* sparse features give indices (example, [step,] position); ragged feature lists give values, inner
  splits (steps) and outer splits (examples).

ParseSingleSequenceExample, TensorFlow's older kernel, is in kernels.parsing.single_sequence_example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from engine.graph.dtypes import tf_name_of_numpy
from engine.proto import example_wire_pb2
from kernels.host import format_dims
from kernels.limits import STRING_ELEMENT_BYTES, check_bytes
from kernels.parsing.example_parser import DenseSpec, ExampleConfig, ListSpec, as_text, list_specs
from kernels.parsing.feature_wire import FLOAT, INT64, STRING, Unparsable, concat_values, read_values, tf_type_name
from kernels.registry import kernel

__all__ = ["SequenceConfig", "parse_sequence_examples", "parse_sequence_example_v2", "parse_sequence_example"]

_TAGS = {STRING: 0x0A, FLOAT: 0x12, INT64: 0x1A}


@dataclass(frozen=True)
class SequenceConfig:
    """The context features and feature lists one op asks for. A feature-list DenseSpec's shape is one
    step's; its `variable_length` says the list may be missing."""

    context: ExampleConfig
    feature_lists: ExampleConfig


def _context_dense(keys: list, types: tuple, shapes: tuple, defaults: tuple) -> tuple[DenseSpec, ...]:
    if len(defaults) != len(keys):
        raise ValueError(f"Expected len(context_dense_defaults) == len(context_dense_keys) but got: {len(defaults)} "
                         f"vs. {len(keys)}")
    specs = []
    for d, (key, dtype, shape, default) in enumerate(zip(keys, types, shapes, defaults)):
        if default.size > 0:
            if shape is None or tuple(default.shape) != tuple(shape):
                raise ValueError(f"default_value[{d}].shape() == {format_dims(default.shape)} != "
                                 f"context_dense_shapes[{d}] == {_shape_text(shape)}")
            if default.dtype != dtype:
                raise ValueError(f"context_dense_defaults[{d}].dtype() == {tf_name_of_numpy(default.dtype)} != "
                                 f"context_dense_types[{d}] == {tf_name_of_numpy(dtype)}")
        specs.append(DenseSpec(_key(key), dtype, _known(shape), default, False, _size(shape)))
    return tuple(specs)


def _feature_list_dense(keys: list, types: tuple, shapes: tuple, missing_ok: list[bool]) -> tuple[DenseSpec, ...]:
    return tuple(DenseSpec(_key(k), t, _known(s), np.zeros((), t), bool(m), _size(s))
                 for k, t, s, m in zip(keys, types, shapes, missing_ok))


def _key(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def _shape_text(shape: tuple | None) -> str:
    return "<unknown>" if shape is None else format_dims(shape)


def _known(shape: tuple | None) -> tuple:
    return () if shape is None else tuple(-1 if d is None else d for d in shape)


def _size(shape: tuple | None) -> int:
    if shape is None or any(d is None for d in shape):
        return -1
    return int(np.prod(shape, dtype=np.int64))


def _check_kinds(config: ExampleConfig, what: str) -> None:
    """TensorFlow keeps one entry per key: a key may not be asked for as two kinds."""
    kinds: dict[bytes, str] = {s.key: "sparse" for s in config.sparse}
    for spec in config.ragged:
        if kinds.get(spec.key) == "sparse":
            raise ValueError(f"{what} feature {as_text(spec.key)} cannot be both ragged and sparse")
        kinds[spec.key] = "ragged"
    for spec in config.dense:
        if spec.key in kinds:
            raise ValueError(f"{what} feature {as_text(spec.key)} cannot be both dense and sparse")


# --- reading one feature, or one feature list -------------------------------------------------------------


def _read_typed(feature: bytes, dtype: np.dtype) -> tuple[int, Any] | None:
    """(count, payload) of a serialized Feature of `dtype`; None when it holds another type or cannot be
    read (TensorFlow reports both as a type mismatch)."""
    if feature[0] != _TAGS[dtype]:
        return None
    try:
        return read_values(feature, dtype)
    except Unparsable:
        return None


def _read_steps(feature_list: bytes, dtype: np.dtype, key: str, name: str) -> list[tuple[int, Any]]:
    """(count, payload) per step of a serialized FeatureList; an empty Feature is a step with no values."""
    broken = f"Error in sequence feature {key} in example {name}"
    try:
        features = example_wire_pb2.RawFeatureList.FromString(feature_list).feature
    except DecodeError:
        raise ValueError(broken) from None
    empty_payload = [] if dtype == STRING else b""
    steps = []
    for step, feature in enumerate(features):
        read = None
        if len(feature) > 2:
            read = _read_typed(feature, dtype)
        elif len(feature) == 2:
            read = (0, empty_payload) if feature == bytes((_TAGS[dtype], 0)) else None
        elif len(feature) == 1:
            raise ValueError(broken)
        else:
            read = (0, empty_payload)
        if read is None:
            raise ValueError(f"Name: {name}, Feature list: {key}, Index: {step}.  Data types don't match. Expected "
                             f"type: {tf_type_name(dtype)}")
        steps.append(read)
    return steps


# --- a batch --------------------------------------------------------------------------------------------


def _check_dense_outputs(config: SequenceConfig, list_reads: dict, n: int, memory_limit: int | None) -> None:
    """The dense outputs must fit in the memory limit: a missing context feature takes its default in every
    one of many tiny records, and every feature list is padded to the longest one of the batch."""
    if memory_limit is None:
        return
    widths = [(spec, max(spec.stride, 0)) for spec in config.context.dense]
    widths += [(spec, max((sum(c for c, _ in steps) for steps in list_reads[spec.key] if steps), default=0))
               for spec in config.feature_lists.dense]
    total = sum(n * width * (STRING_ELEMENT_BYTES if spec.dtype == STRING else spec.dtype.itemsize)
                for spec, width in widths)
    check_bytes(total, memory_limit, f"dense outputs of {n} SequenceExamples")


def parse_sequence_examples(config: SequenceConfig, serialized: list[bytes], names: list, batch: bool,
                            memory_limit: int | None = None) -> tuple:
    """The outputs of ParseSequenceExampleV2 (ragged ones included) for serialized SequenceExamples; without
    `batch` (a scalar input, one example) the outputs have no batch dim. AllocationTooLarge when the dense
    outputs would pass `memory_limit` (checked once the records are read, before the outputs are built)."""
    n = len(serialized)
    if names and len(names) != n:
        raise ValueError("example_names must be empty or have the correct number of elements")
    _check_kinds(config.context, "Context")
    _check_kinds(config.feature_lists, "Sequence")
    ctx, fls = config.context, config.feature_lists
    context = {s.key: [None] * n for s in (*ctx.sparse, *ctx.ragged, *ctx.dense)}
    lists = {s.key: [None] * n for s in (*fls.sparse, *fls.ragged, *fls.dense)}
    name = [as_text(names[e]) if names else "<unknown>" for e in range(n)]
    for e, example in enumerate(serialized):
        try:
            parsed = example_wire_pb2.RawSequenceExampleEntries.FromString(example)
        except DecodeError:
            raise ValueError(f"Invalid protocol message input, example id: {name[e]}") from None
        for protos, entries in ((context, parsed.context.entry), (lists, parsed.feature_lists.entry)):
            for entry in entries:
                if entry.key in protos:
                    protos[entry.key][e] = entry.value  # the last entry wins, even an empty one

    # Read every present feature first, as TensorFlow sizes its outputs before it fills them.
    context_reads = {}
    for spec in (*ctx.sparse, *ctx.ragged, *ctx.dense):
        reads = context_reads[spec.key] = [None] * n
        for e, feature in enumerate(context[spec.key]):
            if feature:
                reads[e] = _read_typed(feature, spec.dtype)
                if reads[e] is None:
                    raise ValueError(f"Name: {name[e]}, Context feature: {as_text(spec.key)}.  Data types don't "
                                     f"match. Expected type: {tf_type_name(spec.dtype)}")
    list_reads = {}
    for spec in (*fls.sparse, *fls.ragged, *fls.dense):
        list_reads[spec.key] = [_read_steps(f, spec.dtype, as_text(spec.key), name[e]) if f else None
                                for e, f in enumerate(lists[spec.key])]

    _check_dense_outputs(config, list_reads, n, memory_limit)
    outputs = []
    dense = [_context_dense_values(s, context[s.key], context_reads[s.key], name, batch) for s in ctx.dense]
    sparse = [_context_sparse(s, context_reads[s.key], batch) for s in ctx.sparse]
    ragged = [_context_ragged(s, context_reads[s.key], batch) for s in ctx.ragged]
    outputs += [*[s[0] for s in sparse], *[s[1] for s in sparse], *[s[2] for s in sparse], *dense]
    outputs += [*[r[0] for r in ragged], *[r[1] for r in ragged]]
    dense = [_list_dense(s, lists[s.key], list_reads[s.key], name, batch) for s in fls.dense]
    sparse = [_list_sparse(s, list_reads[s.key], batch) for s in fls.sparse]
    ragged = [_list_ragged(s, list_reads[s.key], batch) for s in fls.ragged]
    outputs += [*[s[0] for s in sparse], *[s[1] for s in sparse], *[s[2] for s in sparse]]
    outputs += [*[d[0] for d in dense], *[d[1] for d in dense]]
    outputs += [*[r[0] for r in ragged], *[r[1] for r in ragged], *[r[2] for r in ragged]]
    return tuple(outputs)


def _context_dense_values(spec: DenseSpec, protos: list, reads: list, name: list[str], batch: bool) -> np.ndarray:
    longest = max([spec.default.size] + [r[0] for r in reads if r is not None])
    if spec.stride < 0 or longest != spec.stride:
        raise ValueError(f"Inconsistent max number of elements for feature {as_text(spec.key)}: expected "
                         f"{max(spec.stride, 0)}, but found {longest}")
    payloads = []
    for e, (proto, read) in enumerate(zip(protos, reads)):
        if proto is None:
            if spec.default.size == 0:
                raise ValueError(f"Feature: {as_text(spec.key)} (data type: {tf_type_name(spec.dtype)}) is required "
                                 "but could not be found.")
            payloads.append(spec.default.reshape(-1))
            continue
        count = read[0] if read is not None else 0
        if count != longest:
            raise ValueError(f"Unexpected number of elements in example {name[e]}")
        payloads.append(concat_values(spec.dtype, [read[1]]))
    values = np.concatenate(payloads) if payloads else np.zeros(0, spec.dtype)
    return values.astype(spec.dtype).reshape(((len(protos),) if batch else ()) + spec.shape)


def _counts(reads: list) -> np.ndarray:
    return np.array([r[0] if r is not None else 0 for r in reads], np.int64)


def _values(dtype: np.dtype, payloads: list) -> np.ndarray:
    return concat_values(dtype, payloads)


def _context_sparse(spec: ListSpec, reads: list, batch: bool) -> tuple:
    counts = _counts(reads)
    values = _values(spec.dtype, [r[1] for r in reads if r is not None])
    position = np.arange(values.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    longest = int(counts.max()) if counts.size else 0
    if not batch:
        return position.reshape(-1, 1), values, np.array([longest], np.int64)
    example = np.repeat(np.arange(len(reads), dtype=np.int64), counts)
    return np.stack([example, position], axis=1), values, np.array([len(reads), longest], np.int64)


def _context_ragged(spec: ListSpec, reads: list, batch: bool) -> tuple:
    values = _values(spec.dtype, [r[1] for r in reads if r is not None])
    if not batch:  # NOTE: TensorFlow leaves a scalar split, never written; it is 0 here
        return values, np.zeros((), spec.splits_dtype)
    splits = np.zeros(len(reads) + 1, spec.splits_dtype)
    np.cumsum(_counts(reads), out=splits[1:])
    return values, splits


def _list_dense(spec: DenseSpec, protos: list, reads: list, name: list[str], batch: bool) -> tuple:
    key = as_text(spec.key)
    totals = [sum(c for c, _ in steps) for steps in reads if steps]
    longest = max(totals, default=0)
    step = spec.stride
    if step < 0 or (step and longest % step):
        raise ValueError(f"Feature list '{key}' has an unexpected number of values.  Total values size: {longest} is "
                         f"not consistent with output shape: {format_dims((None, *spec.shape))}")
    n = len(protos)
    width = longest // step if step else 0
    out = np.zeros((n, width * step), spec.dtype)
    if spec.dtype == STRING:
        out[...] = b""
    lengths = np.zeros(n, np.int64)
    for e, (proto, steps) in enumerate(zip(protos, reads)):
        if proto is None and not spec.variable_length:
            raise ValueError(f"Name: {name[e]}, Feature list '{key}' is required but could not be found.  Did you "
                             "mean to include it in feature_list_dense_missing_assumed_empty or "
                             "feature_list_dense_defaults?")
        for row, (count, _) in enumerate(steps or ()):
            if count != step:
                raise ValueError(f"Name: {name[e]}, Key: {key}, Index: {row}.  Number of values != expected.  values "
                                 f"size: {count} but output shape: {format_dims(spec.shape)}")
        if steps:
            lengths[e] = len(steps)
            values = _values(spec.dtype, [p for _, p in steps])
            out[e, :values.size] = values
    out = out.reshape((n, width, *spec.shape))
    return (out, lengths) if batch else (out[0], lengths.reshape(()))


def _list_sparse(spec: ListSpec, reads: list, batch: bool) -> tuple:
    steps = [(e, s, c, p) for e, example in enumerate(reads) for s, (c, p) in enumerate(example or ())]
    counts = np.array([c for _, _, c, _ in steps], np.int64)
    values = _values(spec.dtype, [p for *_, p in steps])
    index = [np.repeat(np.array([e for e, *_ in steps], np.int64), counts),
             np.repeat(np.array([s for _, s, *_ in steps], np.int64), counts),
             np.arange(values.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)]
    longest_list = max((len(example) for example in reads if example), default=0)
    longest_step = int(counts.max()) if counts.size else 0
    shape = [len(reads), longest_list, longest_step]
    if not batch:
        index, shape = index[1:], shape[1:]
    return np.stack(index, axis=1).reshape(-1, len(index)), values, np.array(shape, np.int64)


def _list_ragged(spec: ListSpec, reads: list, batch: bool) -> tuple:
    steps = [step for example in reads for step in (example or ())]
    inner = np.zeros(len(steps) + 1, spec.splits_dtype)
    np.cumsum(np.array([c for c, _ in steps], np.int64), out=inner[1:])
    values = _values(spec.dtype, [p for _, p in steps])
    if not batch:  # NOTE: TensorFlow leaves a scalar outer split, never written; it is 0 here
        return values, np.zeros((), spec.splits_dtype), inner
    outer = np.zeros(len(reads) + 1, spec.splits_dtype)
    np.cumsum(np.array([len(example or ()) for example in reads], np.int64), out=outer[1:])
    return values, outer, inner


# --- the fast ops --------------------------------------------------------------------------------------


def _v2_outputs(attrs: dict) -> int:
    return (3 * attrs.get("Ncontext_sparse", 0) + len(attrs.get("Tcontext_dense", ()))
            + 2 * len(attrs.get("context_ragged_value_types", ())) + 3 * attrs.get("Nfeature_list_sparse", 0)
            + 2 * attrs.get("Nfeature_list_dense", 0) + 3 * len(attrs.get("feature_list_ragged_value_types", ())))


def _serialized_and_names(serialized: Any, debug_name: Any) -> tuple[list, list, bool]:
    if serialized.ndim > 1:
        raise ValueError(f"Expected serialized to be a scalar or vector, got shape: {format_dims(serialized.shape)}")
    return list(serialized.reshape(-1)), list(debug_name.reshape(-1)), serialized.ndim == 1


@kernel("ParseSequenceExampleV2", devices=("cpu",), outputs=_v2_outputs)
def parse_sequence_example_v2(
    xp: Any, serialized: Any, debug_name: Any, context_sparse_keys: Any, context_dense_keys: Any,
    context_ragged_keys: Any, feature_list_sparse_keys: Any, feature_list_dense_keys: Any,
    feature_list_ragged_keys: Any, feature_list_dense_missing_assumed_empty: Any, *context_dense_defaults: Any,
    Ncontext_sparse: int = 0, Tcontext_dense: tuple = (), context_sparse_types: tuple = (),
    context_ragged_value_types: tuple = (), context_ragged_split_types: tuple = (), context_dense_shapes: tuple = (),
    Nfeature_list_sparse: int = 0, Nfeature_list_dense: int = 0, feature_list_dense_types: tuple = (),
    feature_list_sparse_types: tuple = (), feature_list_ragged_value_types: tuple = (),
    feature_list_ragged_split_types: tuple = (), feature_list_dense_shapes: tuple = (),
    memory_limit: int | None = None,
) -> tuple:
    """Parse a vector (or a scalar) of serialized SequenceExamples; keys come as 1-D string tensors."""
    records, names, batch = _serialized_and_names(serialized, debug_name)
    keys = {name: list(t.reshape(-1)) for name, t in (
        ("context_dense_keys", context_dense_keys), ("context_sparse_keys", context_sparse_keys),
        ("context_ragged_keys", context_ragged_keys), ("feature_list_dense_keys", feature_list_dense_keys),
        ("feature_list_sparse_keys", feature_list_sparse_keys), ("feature_list_ragged_keys", feature_list_ragged_keys))}
    missing_ok = list(feature_list_dense_missing_assumed_empty.reshape(-1))
    expected = [("context_dense_keys", len(Tcontext_dense), "len(Tcontext_dense)"),
                ("context_sparse_keys", Ncontext_sparse, "Ncontext_sparse"),
                ("context_ragged_keys", len(context_ragged_value_types), "len(context_ragged_value_types)"),
                ("feature_list_dense_keys", Nfeature_list_dense, "Nfeature_list_dense"),
                ("feature_list_dense_missing_assumed_empty", Nfeature_list_dense, "Nfeature_list_dense"),
                ("feature_list_sparse_keys", Nfeature_list_sparse, "Nfeature_list_sparse"),
                ("feature_list_ragged_keys", len(feature_list_ragged_value_types),
                 "len(feature_list_ragged_value_types)")]
    for name, count, what in expected:
        got = len(missing_ok) if name == "feature_list_dense_missing_assumed_empty" else len(keys[name])
        if got != count:
            # NOTE: TensorFlow's message for this input lacks its closing parenthesis.
            label = "len(feature_list_dense_missing_assumed_empty" if name.endswith("empty") else f"len({name})"
            raise ValueError(f"Expected {label} to match {what}")
    config = SequenceConfig(
        ExampleConfig(_context_dense(keys["context_dense_keys"], Tcontext_dense, context_dense_shapes,
                                     context_dense_defaults),
                      list_specs(keys["context_sparse_keys"], context_sparse_types),
                      list_specs(keys["context_ragged_keys"], context_ragged_value_types, context_ragged_split_types)),
        ExampleConfig(_feature_list_dense(keys["feature_list_dense_keys"], feature_list_dense_types,
                                          feature_list_dense_shapes, missing_ok),
                      list_specs(keys["feature_list_sparse_keys"], feature_list_sparse_types),
                      list_specs(keys["feature_list_ragged_keys"], feature_list_ragged_value_types,
                                 feature_list_ragged_split_types)))
    return parse_sequence_examples(config, records, names, batch, memory_limit)


def _v1_outputs(attrs: dict) -> int:
    return (3 * attrs.get("Ncontext_sparse", 0) + attrs.get("Ncontext_dense", 0)
            + 3 * attrs.get("Nfeature_list_sparse", 0) + 2 * attrs.get("Nfeature_list_dense", 0))


@kernel("ParseSequenceExample", devices=("cpu",), outputs=_v1_outputs)
def parse_sequence_example(
    xp: Any, serialized: Any, debug_name: Any, *context_dense_defaults: Any,
    feature_list_dense_missing_assumed_empty: tuple, context_sparse_keys: tuple, context_dense_keys: tuple,
    feature_list_sparse_keys: tuple, feature_list_dense_keys: tuple, Ncontext_sparse: int = 0,
    Ncontext_dense: int = 0, Nfeature_list_sparse: int = 0, Nfeature_list_dense: int = 0,
    context_sparse_types: tuple = (), Tcontext_dense: tuple = (), feature_list_dense_types: tuple = (),
    context_dense_shapes: tuple = (), feature_list_sparse_types: tuple = (), feature_list_dense_shapes: tuple = (),
    memory_limit: int | None = None,
) -> tuple:
    """ParseSequenceExampleV2 without ragged features, keys given as attrs."""
    records, names, batch = _serialized_and_names(serialized, debug_name)
    missing = {_key(k) for k in feature_list_dense_missing_assumed_empty}
    config = SequenceConfig(
        ExampleConfig(_context_dense(list(context_dense_keys), Tcontext_dense, context_dense_shapes,
                                     context_dense_defaults),
                      list_specs(list(context_sparse_keys), context_sparse_types)),
        ExampleConfig(_feature_list_dense(list(feature_list_dense_keys), feature_list_dense_types,
                                          feature_list_dense_shapes,
                                          [_key(k) in missing for k in feature_list_dense_keys]),
                      list_specs(list(feature_list_sparse_keys), feature_list_sparse_types)))
    return parse_sequence_examples(config, records, names, batch, memory_limit)
