"""TensorFlow's fast tf.Example parser (core/util/example_proto_fast_parsing.cc), in numpy: what the
Example parsing ops of kernels.parsing.example ask for (`ExampleConfig`) and how a batch, or a single
Example, becomes dense, sparse and ragged tensors (`parse_example_batch`, `parse_single_example`).

Each Example is decoded once (engine/proto/example_wire.proto: every map entry in order, feature values
left serialized); the entries of requested keys are read (kernels.parsing.feature_wire) into one `_Column` per
feature, last entry first, and the columns become tensors at the end. That per-Example walk is the twin
of a compiled one (kernels.parsing.example_wire_walk, `compiled=True`), which reads a whole batch's wire
bytes in one pass and hands any batch it does not take (malformed, unusual or erroneous Examples) back to
the twin; both give each feature's value counts per example and its values, which become the same
tensors. TensorFlow's rules, kept on both paths:

* a key given twice in one Example: the last entry wins, except that an empty `Feature{}` is skipped by
  a dense feature, and by every feature of a single Example;
* an empty Feature counts as missing; a missing dense feature takes its default, or is an error when
  the default is empty (required);
* a variable-length dense feature (first dim unknown) must fill whole rows and is padded with its
  default to the batch's longest;
* errors name the example (its name, or "<unknown>") and its index, and come from the first example
  that has one, as TensorFlow's minibatches report them.

    config = ExampleConfig(dense=dense_specs(keys, types, shapes, defaults), sparse=list_specs(...))
    parsed = parse_example_batch(config, serialized, names, compiled=True)   # .dense, .sparse, .ragged, .outputs()
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from engine.graph.dtypes import tf_name_of_numpy
from engine.proto import example_wire_pb2
from kernels.host import format_dims
from kernels.limits import STRING_ELEMENT_BYTES, check_bytes
from kernels.parsing import example_wire_walk
from kernels.parsing.feature_wire import (
    FLOAT,
    INT64,
    STRING,
    Unparsable,
    concat_values,
    list_type_name,
    read_values,
    tf_type_name,
    wire_dtype,
)

__all__ = [
    "DenseSpec",
    "ListSpec",
    "ExampleConfig",
    "ParsedExamples",
    "as_text",
    "check_feature_dtype",
    "dense_specs",
    "list_specs",
    "parse_example_batch",
    "parse_single_example",
]

_FEATURE_DTYPES = (FLOAT, INT64, STRING)


def as_text(value: Any) -> str:
    """A key, name or serialized proto as TensorFlow pastes it into a message (bytes kept as they are)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def _as_key(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


@dataclass(frozen=True)
class DenseSpec:
    """A requested dense feature: fixed length, or variable length when its first dim is unknown."""

    key: bytes
    dtype: np.dtype
    shape: tuple[int | None, ...]
    default: np.ndarray
    variable_length: bool
    stride: int  # values per example (fixed length) or per row (variable length)

    @property
    def shape_text(self) -> str:
        return format_dims(self.shape)


@dataclass(frozen=True)
class ListSpec:
    """A requested sparse or ragged feature (`splits_dtype` only for ragged ones)."""

    key: bytes
    dtype: np.dtype
    splits_dtype: np.dtype | None = None


@dataclass(frozen=True)
class ExampleConfig:
    """Every feature one parse op asks for."""

    dense: tuple[DenseSpec, ...] = ()
    sparse: tuple[ListSpec, ...] = ()
    ragged: tuple[ListSpec, ...] = ()

    @functools.cached_property
    def walk_request(self) -> Any:
        """The features as the compiled walk takes them (example_wire_walk.request), prepared once per config;
        None where the walk cannot take them (duplicate keys: see _columns; a big-endian host)."""
        specs = (*self.dense, *self.sparse, *self.ragged)
        keys = [s.key for s in specs]
        if not example_wire_walk.AVAILABLE or len(set(keys)) < len(keys):
            return None
        lists = len(self.sparse) + len(self.ragged)
        kinds = [example_wire_walk.VARLEN if s.variable_length else example_wire_walk.FIXED for s in self.dense]
        return example_wire_walk.request(
            keys, [s.dtype for s in specs], kinds + [example_wire_walk.LIST] * lists,
            [s.stride for s in self.dense] + [0] * lists, [s.default.size == 0 for s in self.dense] + [False] * lists)


def check_feature_dtype(dtype: np.dtype) -> None:
    if dtype not in _FEATURE_DTYPES:
        raise ValueError(f"Received input dtype: {tf_name_of_numpy(dtype)}")


def dense_specs(keys: list[bytes], types: tuple, shapes: tuple, defaults: tuple) -> tuple[DenseSpec, ...]:
    """The dense features of a parse op, its attrs and defaults checked as TensorFlow checks them."""
    if len(defaults) != len(keys):
        raise ValueError(f"Expected len(dense_defaults) == len(dense_keys) but got: {len(defaults)} vs. {len(keys)}")
    if len(types) != len(keys):
        raise ValueError("len(dense_keys) != len(dense_types)")
    if len(shapes) != len(keys):
        raise ValueError("len(dense_keys) != len(dense_shapes)")
    specs = []
    for d, (key, dtype, shape, default) in enumerate(zip(keys, types, shapes, defaults)):
        if shape is None or any(dim is None for dim in shape[1:]):
            raise ValueError(f"dense_shapes[{d}] has unknown rank or unknown inner dimensions: "
                             f"{'<unknown>' if shape is None else format_dims(shape)}")
        check_feature_dtype(dtype)
        variable_length = len(shape) > 0 and shape[0] is None
        stride = math.prod(int(dim) for dim in (shape[1:] if variable_length else shape))
        if variable_length:
            if default.size != 1:
                raise ValueError(f"dense_shape[{d}] is a variable length shape: {format_dims(shape)}, therefore "
                                 f"def_value[{d}] must contain a single element (the padding element).  But its "
                                 f"shape is: {format_dims(default.shape)}")
        elif default.size > 0 and tuple(default.shape) != tuple(shape):
            raise ValueError(f"def_value[{d}].shape() == {format_dims(default.shape)} is not compatible with "
                             f"dense_shapes_[{d}] == {format_dims(shape)}")
        if default.dtype != dtype:
            raise ValueError(f"dense_defaults[{d}].dtype() == {tf_name_of_numpy(default.dtype)} != dense_types_[{d}] "
                             f"== {tf_name_of_numpy(dtype)}")
        specs.append(DenseSpec(_as_key(key), dtype, tuple(shape), default, variable_length, stride))
    return tuple(specs)


def list_specs(keys: list[bytes], types: tuple, splits: tuple | None = None) -> tuple[ListSpec, ...]:
    for dtype in types:
        check_feature_dtype(dtype)
    for dtype in splits or ():
        if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError(f"Invalid ragged_split_type: {tf_name_of_numpy(dtype)}")
    if splits is None:
        return tuple(ListSpec(_as_key(k), t) for k, t in zip(keys, types))
    return tuple(ListSpec(_as_key(k), t, s) for k, t, s in zip(keys, types, splits))


# --- collecting one column per feature ----------------------------------------------------------------


class _Column:
    """What one requested feature collected: the examples it was found in, its value counts there and
    the payloads to concatenate."""

    __slots__ = ("spec", "kind", "is_dense", "last", "rows", "counts", "payloads")

    def __init__(self, spec: DenseSpec | ListSpec, kind: str):
        self.spec, self.kind = spec, kind
        self.is_dense = kind in ("dense", "varlen")
        self.last = -1  # the last example the feature was taken from (entries are walked last first)
        self.rows: list[int] = []
        self.counts: list[int] = []
        self.payloads: list[Any] = []

    def take(self, row: int, count: int, payload: Any) -> None:
        self.rows.append(row)
        self.counts.append(count)
        self.payloads.append(payload)

    def values(self) -> np.ndarray:
        return concat_values(self.spec.dtype, self.payloads)

    def found(self, batch: int) -> np.ndarray:
        """Value counts per example, -1 where the feature was not taken."""
        found = np.full(batch, -1, np.int64)
        found[self.rows] = self.counts
        return found


def _columns(config: ExampleConfig) -> tuple[list[_Column], dict[bytes, _Column]]:
    columns = [_Column(s, "varlen" if s.variable_length else "dense") for s in config.dense]
    columns += [_Column(s, "sparse") for s in config.sparse]
    columns += [_Column(s, "ragged") for s in config.ragged]
    index = {c.spec.key: c for c in columns}
    if len(index) < len(columns):
        # NOTE: a key asked for twice defeats TensorFlow's feature index, which then gives up and stays
        # empty: no feature is found in any Example (dense ones take their defaults).
        index = {}
    return columns, index


def _entries(serialized: bytes) -> Any:
    try:
        return example_wire_pb2.RawExampleEntries.FromString(serialized).features.entry
    except DecodeError:
        raise ValueError(f"Could not parse example input, value: '{as_text(serialized)}'") from None


def _minibatch_start(serialized: list[bytes], index: int) -> int:
    """The first example of the minibatch TensorFlow parses example `index` in: its messages count values
    from there (about 50 kB of input per minibatch, at least min(8, batch) and at most 64 minibatches)."""
    chunks, size = 0, 0
    for s in serialized:
        chunks += size == 0
        size += len(s) + 1
        if size > 50000:
            size = 0
    n = len(serialized)
    num = max(min(8, n), min(64, chunks))
    starts = [n * m // num for m in range(num + 1)]
    return max(s for s in starts if s <= index)


# --- a batch ------------------------------------------------------------------------------------------


@dataclass
class ParsedExamples:
    """The outputs of a parse, per kind, in the config's order."""

    dense: list[np.ndarray]
    sparse: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    ragged: list[tuple[np.ndarray, np.ndarray]]

    def outputs(self) -> tuple:
        """In the order of the ops' output lists: sparse indices, values, shapes, dense, ragged values,
        ragged splits."""
        return (*[s[0] for s in self.sparse], *[s[1] for s in self.sparse], *[s[2] for s in self.sparse],
                *self.dense, *[r[0] for r in self.ragged], *[r[1] for r in self.ragged])


class _EntryError(Exception):
    """What is wrong with one entry; the batch parser says where (name, key, index)."""


def _check_dense_outputs(config: ExampleConfig, n: int, found: list[np.ndarray], memory_limit: int | None) -> None:
    """The dense outputs of a batch of `n` Examples must fit in the memory limit: a missing feature takes
    its default, so many tiny Examples make [n, *shape] outputs of defaults, and a variable-length feature
    pads every row to the longest one."""
    if memory_limit is None:
        return
    total = 0
    for spec, counts in zip(config.dense, found):
        per = STRING_ELEMENT_BYTES if spec.dtype == STRING else spec.dtype.itemsize
        width = int(counts.max(initial=0)) if spec.variable_length else spec.stride
        total += n * width * per
    check_bytes(total, memory_limit, f"dense outputs of {n} Examples")


def parse_example_batch(config: ExampleConfig, serialized: list[bytes], names: list[bytes],
                        memory_limit: int | None = None, *, compiled: bool = False) -> ParsedExamples:
    """Parse a batch of serialized Examples as TensorFlow's FastParseExample does; AllocationTooLarge when
    the dense outputs would pass `memory_limit` (checked before they are built). `compiled`: walk the
    batch with kernels.parsing.example_wire_walk, whose twin is the per-Example code here (which parses
    any batch the walk does not take, and words every error)."""
    n = len(serialized)
    features = _walk_compiled(config, serialized) if compiled and n else None
    if features is None:
        compiled = False
        features = _walk_twin(config, serialized, names)
    found = [counts for counts, _ in features]
    _check_dense_outputs(config, n, found[:len(config.dense)], memory_limit)
    dense = [(_varlen_batch if s.variable_length else _dense_batch)(s, n, *f) for s, f in zip(config.dense, features)]
    lists = features[len(config.dense):]
    return ParsedExamples(
        dense=dense,
        sparse=[_sparse_batch(n, *f, compiled=compiled) for f in lists[:len(config.sparse)]],
        ragged=[_ragged_batch(s, n, *f) for s, f in zip(config.ragged, lists[len(config.sparse):])],
    )


def _walk_compiled(config: ExampleConfig, serialized: list[bytes]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Each feature's (value counts per example, -1 where missing; values) from the compiled walk, None
    where it does not take the batch."""
    requested = config.walk_request
    return None if requested is None else example_wire_walk.walk_requested(serialized, requested)


def _walk_twin(config: ExampleConfig, serialized: list[bytes],
               names: list[bytes]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each feature's (value counts per example, -1 where missing; values), Example by Example: the twin
    of the compiled walk, and what raises TensorFlow's errors."""
    columns, index = _columns(config)
    fixed = [c for c in columns if c.kind == "dense"]
    for i, example in enumerate(serialized):
        for entry in reversed(_entries(example)):
            column = index.get(entry.key)
            if column is None:
                continue
            try:
                _take_batch(column, i, entry.value, serialized)
            except _EntryError as e:
                name = as_text(names[i]) if names else "<unknown>"
                raise ValueError(f"Name: {name}, Key: {as_text(column.spec.key)}, Index: {i}.  {e}") from None
        for column in fixed:
            if column.last != i and column.spec.default.size == 0:
                name = as_text(names[i]) if names else "<unknown>"
                raise ValueError(f"Name: {name}, Feature: {as_text(column.spec.key)} (data type: "
                                 f"{tf_type_name(column.spec.dtype)}) is required but could not be found.")
    n = len(serialized)
    return [(c.found(n), c.values()) for c in columns]


def _take_batch(column: _Column, i: int, feature: bytes, serialized: list[bytes]) -> None:
    """One entry of example `i` for `column`, by FastParseSerializedExample's rules; _EntryError if bad."""
    spec = column.spec
    dtype = wire_dtype(feature)
    if column.is_dense:
        if dtype is None or column.last == i:  # empty, or shadowed by a later entry with the same key
            return
        column.last = i
        if dtype != spec.dtype:
            raise _EntryError(f"Data types don't match. Data type: {tf_type_name(dtype)} but expected type: "
                              f"{tf_type_name(spec.dtype)}")
    else:
        if column.last == i:
            return
        column.last = i
        if dtype is None:
            column.take(i, 0, [] if spec.dtype == STRING else b"")
            return
        if dtype != spec.dtype:
            raise _EntryError(f"Data types don't match. Expected type: {tf_type_name(spec.dtype)}, Actual type: "
                              f"{tf_type_name(dtype)}")
    try:
        count, payload = read_values(feature, dtype)
    except Unparsable:
        raise _EntryError("Can't parse serialized Example.") from None
    if column.kind == "dense":
        if count != spec.stride:
            if dtype == STRING and count > spec.stride:
                # NOTE: TensorFlow reads bytes into the output's slots and fails to parse past the last one.
                raise _EntryError("Can't parse serialized Example.")
            raise _EntryError(f"Number of {list_type_name(dtype)} values != expected.  Values size: {count} but "
                              f"output shape: {spec.shape_text}")
    elif column.kind == "varlen" and spec.stride and count % spec.stride:
        # NOTE: TensorFlow counts the values of the feature in the whole minibatch so far.
        start = _minibatch_start(serialized, i)
        seen = count + sum(c for r, c in zip(column.rows, column.counts) if r >= start)
        raise _EntryError(f"Number of {list_type_name(dtype)} values is not a multiple of stride length. Saw {seen} "
                          f"values but output shape is: {spec.shape_text}")
    column.rows.append(i)
    column.counts.append(count)
    column.payloads.append(payload)


def _dense_batch(spec: DenseSpec, n: int, found: np.ndarray, values: np.ndarray) -> np.ndarray:
    # Each Example that has the feature gives exactly `stride` values: all of them have it when there are n times
    # as many (a stride of 0 says nothing).
    if spec.stride and values.shape[0] == n * spec.stride:
        return values.reshape((n, *spec.shape))
    present = found >= 0
    if present.all():
        return values.reshape((n, *spec.shape))
    out = np.empty((n, *spec.shape), spec.dtype)
    out[...] = spec.default.reshape(spec.shape)
    rows = np.flatnonzero(present)
    out[rows] = values.reshape((rows.size, *spec.shape))
    return out


def _varlen_batch(spec: DenseSpec, n: int, found: np.ndarray, values: np.ndarray) -> np.ndarray:
    counts = np.maximum(found, 0)
    width = int(counts.max()) if n else 0
    out = np.full((n, width), spec.default.reshape(-1)[0], spec.dtype)
    if counts.any():
        rows, starts = np.repeat(np.arange(n), counts), np.cumsum(counts) - counts
        out[rows, np.arange(rows.size) - np.repeat(starts, counts)] = values
    return out.reshape((n, width // spec.stride if spec.stride else 0, *spec.shape[1:]))


def _sparse_batch(n: int, found: np.ndarray, values: np.ndarray, *,
                  compiled: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if compiled:
        indices, widest = example_wire_walk.sparse_indices(found, values.shape[0])
        return indices, values, np.array([n, widest], np.int64)
    counts = np.maximum(found, 0)
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    cols = np.arange(rows.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    shape = np.array([n, int(counts.max()) if n else 0], np.int64)
    return np.stack([rows, cols], axis=1), values, shape


def _ragged_batch(spec: ListSpec, n: int, found: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    splits = np.zeros(n + 1, spec.splits_dtype)
    np.cumsum(np.maximum(found, 0), out=splits[1:])
    return values, splits


# --- one Example ------------------------------------------------------------------------------------


def parse_single_example(config: ExampleConfig, serialized: bytes) -> ParsedExamples:
    """Parse one serialized Example as TensorFlow's FastParseSingleExample does: no batch dim."""
    columns, index = _columns(config)
    for entry in reversed(_entries(serialized)):
        column = index.get(entry.key)
        if column is not None:
            _take_single(column, entry.value)
    dense = []
    for column in columns[:len(config.dense)]:
        spec = column.spec
        if column.rows:
            values = column.values()
            dense.append(values.reshape(spec.shape if column.kind == "dense" else (-1, *spec.shape[1:])))
        elif column.kind == "varlen":
            dense.append(np.zeros((0, *spec.shape[1:]), spec.dtype))
        elif spec.default.size == 0:
            raise ValueError(f"Feature: {as_text(spec.key)} (data type: {tf_type_name(spec.dtype)}) is required but "
                             "could not be found.")
        else:
            dense.append(spec.default.reshape(spec.shape))
    sparse = []
    for column in (c for c in columns if c.kind == "sparse"):
        values = column.values()
        sparse.append((np.arange(values.size, dtype=np.int64).reshape(-1, 1), values,
                       np.array([values.size], np.int64)))
    ragged = [(c.values(), np.zeros(0, c.spec.splits_dtype)) for c in columns if c.kind == "ragged"]
    return ParsedExamples(dense, sparse, ragged)


def _take_single(column: _Column, feature: bytes) -> None:
    spec = column.spec
    key = as_text(spec.key)
    dtype = wire_dtype(feature)
    if dtype is None or column.last == 0:  # a scalar input skips empty Features whatever their kind
        return
    column.last = 0
    if dtype != spec.dtype:
        if column.kind in ("dense", "varlen"):
            raise ValueError(f"Key: {key}.  Data types don't match. Data type: {tf_type_name(dtype)} but expected "
                             f"type: {tf_type_name(spec.dtype)}")
        raise ValueError(f"Key: {key}.  Data types don't match. Expected type: {tf_type_name(spec.dtype)}, Actual "
                         f"type: {tf_type_name(dtype)}")
    list_name = f"{list_type_name(dtype)}_list"
    try:
        count, payload = read_values(feature, dtype)
    except Unparsable:
        what = "Could not get num elements in bytes_list" if dtype == STRING and column.kind != "dense" \
            else f"Parsing {list_name} failed"
        raise ValueError(f"Key: {key}.  Can't parse serialized Example: {what}.") from None
    if column.kind == "dense":
        if count != spec.stride:
            # NOTE: TensorFlow's bytes reader fails on a value past the output's end.
            what = f"Parsing {list_name} failed" if dtype == STRING and count > spec.stride \
                else f"Some {list_name} slice was not parsed"
            raise ValueError(f"Key: {key}.  Can't parse serialized Example: {what}.")
    else:
        divisor = spec.stride if column.kind == "varlen" else 1
        if divisor and count % divisor:
            raise ValueError(f"Error while parsing feature with key {key}: number of elements should be divisible "
                             f"by {divisor}, found {count} instead")
    column.take(0, count, payload)
