"""The compiled walk over a batch of serialized tf.Examples: their protobuf wire format read directly, in
one compiled pass per batch, for the features a parse op asks for (the compiled path of
kernels.parsing.example_parser, whose per-Example Python code is its numpy twin).

The batch is one buffer (the serialized Examples joined once) and their offsets. `_walk` reads each
Example's map entries (Example.features = 1, Features.feature = 1, an entry's key = 1 and value = 2),
finds the requested keys in a small hash table, keeps each feature's winning entry by TensorFlow's rules
(the last entry; a dense feature skips empty Features) and checks and counts the values of its list
(bytes_list = 1, float_list = 2, int64_list = 3; packed or unpacked). `_fill` then copies the values out,
feature after feature: float32s as they lie (little-endian), int64 varints decoded, bytes as spans of the
buffer that become Python bytes once per value.

Only the usual shape of the wire format is taken. Anything else stops the walk at that Example and the
caller parses the whole batch with the twin, whose errors are TensorFlow's words: bytes that are not a
well-formed Example, a Feature starting with another tag, a type mismatch, a count a dense feature does
not allow, a missing required feature, and also what protobuf reads but TensorFlow's parser reads its own
way (unknown fields, an entry with its key or value twice, a list followed by more bytes, a ragged packed
float run, a varint with bits past 64).

    walked = walk_batch(serialized, keys, dtypes, kinds, strides, required)   # None: use the twin
    found, values = walked[0]   # value counts per Example (-1 where missing), the values in order
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from kernels.jit import compiled

__all__ = ["AVAILABLE", "FIXED", "LIST", "VARLEN", "request", "sparse_indices", "walk_batch", "walk_requested"]

# How a requested feature takes its entries: a fixed-length dense feature (exactly `stride` values), a
# variable-length dense one (a multiple of `stride`), a sparse or ragged one (any count; an empty
# Feature is a present, empty list).
FIXED, VARLEN, LIST = 0, 1, 2

# The value types, in a Feature's oneof order.
_BYTES, _FLOAT, _INT64 = 0, 1, 2
_TYPE_CODES = {np.dtype(object): _BYTES, np.dtype(np.float32): _FLOAT, np.dtype(np.int64): _INT64}

# Tags (field number << 3 | wire type) of the only fields the walk takes.
_FIELD1_BYTES = 0x0A  # Example.features, Features.feature, entry key, BytesList.value, packed runs
_FIELD2_BYTES = 0x12  # entry value
_FIELD3_BYTES = 0x1A  # Feature.int64_list
_UNPACKED_FLOAT = 0x0D  # FloatList.value, one fixed32
_UNPACKED_INT64 = 0x08  # Int64List.value, one varint

# float32 values are copied byte for byte; a big-endian host would need them swapped.
AVAILABLE = sys.byteorder == "little"

_BUFFER = "Array(uint8, 1, 'C', readonly=True)"
_INT64S = "Array(int64, 1, 'C', readonly=True)"
_INT8S = "Array(int8, 1, 'C', readonly=True)"

# Error code of `_walk`: every Example took the usual path.
_ALL_USUAL = -1
_MISSING, _FOUND = -1, -2  # counts before a feature's winning entry is read


@compiled(f"int64({_BUFFER}, int64[::1], {_BUFFER}, {_INT64S}, {_INT8S}, {_INT8S}, {_INT64S}, {_INT8S}, "
          "int64[:, ::1], int64[:, ::1], int8[:, ::1], int64[::1])", ops=("ParseExampleV2", "ParseExample"))
def _walk(buf, starts, keys, key_starts, key_types, key_kinds, key_strides, key_required,
          begins, counts, packed, totals):  # pragma: no cover - compiled
    """For each Example i and requested key k: counts[i, k] values (-1 where missing), from begins[i, k]
    (a packed run's payload when packed[i, k], else the list's fields); totals[k] (zeros on entry): the
    values of key k in the batch. Returns -1, or the index of the first Example that is not on the usual
    path."""

    def varint(pos, end):
        """The varint at buf[pos:end] and the position after it; position -1 when it is cut short, longer
        than 10 bytes, or has bits past 64."""
        value = 0
        shift = 0
        while pos < end:
            byte = buf[pos]
            pos += 1
            if shift == 63 and byte > 1:
                return 0, -1
            value |= np.int64(byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                return 0, -1
        return 0, -1

    num_keys = key_types.shape[0]
    size = 8
    while size < 2 * num_keys:
        size *= 2
    mask = size - 1
    table = np.full(size, -1, np.int64)
    for k in range(num_keys):
        h = 0
        for p in range(key_starts[k], key_starts[k + 1]):
            h = (h * 31 + keys[p]) & 0xFFFFFF
        slot = h & mask
        while table[slot] >= 0:
            slot = (slot + 1) & mask
        table[slot] = k

    def lookup(begin, end):
        """The requested key whose bytes are buf[begin:end], or -1."""
        h = 0
        for p in range(begin, end):
            h = (h * 31 + buf[p]) & 0xFFFFFF
        slot = h & mask
        while table[slot] >= 0:
            k = table[slot]
            kb = key_starts[k]
            if key_starts[k + 1] - kb == end - begin:
                same = True
                for j in range(end - begin):
                    if keys[kb + j] != buf[begin + j]:
                        same = False
                        break
                if same:
                    return k
            slot = (slot + 1) & mask
        return -1

    ends = np.empty(num_keys, np.int64)  # where the winning entry's Feature ends, in the current Example
    n = starts.shape[0] - 1
    for i in range(n):
        for k in range(num_keys):
            counts[i, k] = _MISSING
        pos = starts[i]
        end = starts[i + 1]
        while pos < end:  # Example: features = 1 (more than one occurrence merges their entries)
            if buf[pos] != _FIELD1_BYTES:
                return i
            length, pos = varint(pos + 1, end)
            if pos < 0 or length > end - pos:
                return i
            features_end = pos + length
            while pos < features_end:  # Features: feature = 1, the map's entries
                if buf[pos] != _FIELD1_BYTES:
                    return i
                length, pos = varint(pos + 1, features_end)
                if pos < 0 or length > features_end - pos:
                    return i
                entry_end = pos + length
                key_begin = key_end = value_begin = value_end = -1
                while pos < entry_end:
                    tag = buf[pos]
                    length, pos = varint(pos + 1, entry_end)
                    if pos < 0 or length > entry_end - pos:
                        return i
                    if tag == _FIELD1_BYTES and key_begin < 0:
                        key_begin, key_end = pos, pos + length
                    elif tag == _FIELD2_BYTES and value_begin < 0:
                        value_begin, value_end = pos, pos + length
                    else:
                        return i
                    pos += length
                if key_begin < 0:
                    key_begin = key_end = 0
                k = lookup(key_begin, key_end)
                if k < 0:
                    continue
                if value_begin == value_end:  # an empty Feature
                    if key_kinds[k] == LIST:
                        counts[i, k] = 0
                    continue
                tag = buf[value_begin]
                if tag != _FIELD1_BYTES and tag != _FIELD2_BYTES and tag != _FIELD3_BYTES:
                    return i
                counts[i, k] = _FOUND
                begins[i, k] = value_begin
                ends[k] = value_end
        for k in range(num_keys):  # the winning entries
            if counts[i, k] == _MISSING:
                if key_kinds[k] == FIXED and key_required[k]:
                    return i
                continue
            if counts[i, k] != _FOUND:
                continue
            feature = begins[i, k]
            list_end = ends[k]
            tag = buf[feature]
            dtype = _BYTES if tag == _FIELD1_BYTES else (_FLOAT if tag == _FIELD2_BYTES else _INT64)
            if dtype != key_types[k]:
                return i
            length, pos = varint(feature + 1, list_end)
            if pos < 0 or pos + length != list_end:
                return i
            count = 0
            is_packed = 0
            if pos == list_end:
                is_packed = 1
            elif dtype == _FLOAT and buf[pos] == _FIELD1_BYTES:
                length, pos = varint(pos + 1, list_end)
                if pos < 0 or pos + length != list_end or length % 4:
                    return i
                count = length // 4
                is_packed = 1
            elif dtype == _FLOAT and buf[pos] == _UNPACKED_FLOAT:
                if (list_end - pos) % 5:
                    return i
                for p in range(pos, list_end, 5):
                    if buf[p] != _UNPACKED_FLOAT:
                        return i
                count = (list_end - pos) // 5
            elif dtype == _INT64 and buf[pos] == _FIELD1_BYTES:
                length, pos = varint(pos + 1, list_end)
                if pos < 0 or pos + length != list_end:
                    return i
                p = pos
                while p < list_end:
                    _, p = varint(p, list_end)
                    if p < 0:
                        return i
                    count += 1
                is_packed = 1
            elif dtype == _INT64 and buf[pos] == _UNPACKED_INT64:
                p = pos
                while p < list_end:
                    if buf[p] != _UNPACKED_INT64:
                        return i
                    _, p = varint(p + 1, list_end)
                    if p < 0:
                        return i
                    count += 1
            elif dtype == _BYTES:
                p = pos
                while p < list_end:
                    if buf[p] != _FIELD1_BYTES:
                        return i
                    length, p = varint(p + 1, list_end)
                    if p < 0 or length > list_end - p:
                        return i
                    p += length
                    count += 1
            else:
                return i
            stride = key_strides[k]
            if key_kinds[k] == FIXED and count != stride:
                return i
            if key_kinds[k] == VARLEN and stride > 0 and count % stride:
                return i
            counts[i, k] = count
            begins[i, k] = pos
            packed[i, k] = is_packed
            totals[k] += count
    return _ALL_USUAL


@compiled(f"void({_BUFFER}, int64[:, ::1], int64[:, ::1], int8[:, ::1], {_INT8S}, int64[::1], uint8[::1], "
          "int64[::1], int64[:, ::1])", ops=("ParseExampleV2", "ParseExample"))
def _fill(buf, begins, counts, packed, key_types, bases, floats, ints, spans):  # pragma: no cover - compiled
    """The values `_walk` counted, each feature's in Example order from bases[k] of its type's output:
    float32 bytes into `floats`, int64s into `ints`, (begin, end) of each bytes value into `spans`."""

    def varint(pos):
        value = 0
        shift = 0
        while True:
            byte = buf[pos]
            pos += 1
            value |= np.int64(byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7

    n, num_keys = counts.shape
    for k in range(num_keys):
        dtype = key_types[k]
        out = bases[k]
        for i in range(n):
            count = counts[i, k]
            if count <= 0:
                continue
            pos = begins[i, k]
            if dtype == _FLOAT:
                if packed[i, k]:
                    for j in range(4 * count):
                        floats[4 * out + j] = buf[pos + j]
                else:
                    for j in range(count):
                        for b in range(4):
                            floats[4 * (out + j) + b] = buf[pos + 5 * j + 1 + b]
            elif dtype == _INT64:
                for j in range(count):
                    if not packed[i, k]:
                        pos += 1  # the value's tag
                    value, pos = varint(pos)
                    ints[out + j] = value
            else:
                for j in range(count):
                    length, pos = varint(pos + 1)
                    spans[out + j, 0] = pos
                    spans[out + j, 1] = pos + length
                    pos += length
            out += count


@compiled("int64(Array(int64, 1, 'A', readonly=True), int64[:, ::1])", ops=("ParseExampleV2", "ParseExample"))
def _sparse_indices(found, indices):  # pragma: no cover - compiled
    """indices[:, 0] the Example and [:, 1] the position of each value of a sparse feature with `found` values
    per Example (-1: missing, none); returns the most values one Example has."""
    at = 0
    widest = 0
    for row in range(found.shape[0]):
        count = found[row]
        for c in range(count):
            indices[at, 0] = row
            indices[at, 1] = c
            at += 1
        widest = max(widest, count)
    return widest


def sparse_indices(found: np.ndarray, total: int) -> tuple[np.ndarray, int]:
    """A sparse feature's indices [total, 2] (Example, position) from its value counts per Example (-1 where
    missing) totalling `total`, and the most values one Example has: the compiled twin of
    kernels.parsing.example_parser's numpy construction."""
    indices = np.empty((total, 2), np.int64)
    return indices, int(_sparse_indices(found, indices))


def walk_batch(serialized: Sequence[Any], keys: Sequence[bytes], dtypes: Sequence[np.dtype], kinds: Sequence[int],
               strides: Sequence[int], required: Sequence[bool]) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Each requested feature's value counts per Example (int64 [n], -1 where it is missing) and its values
    in Example order (float32, int64, or bytes objects), for keys given with their dtypes, kinds (FIXED,
    VARLEN, LIST), strides (values per Example or per row) and whether a FIXED one is required. None when
    an Example is not on the usual path (see the module docstring): the caller then parses the batch with
    the twin. The keys must be distinct."""
    return walk_requested(serialized, request(keys, dtypes, kinds, strides, required))


def request(keys: Sequence[bytes], dtypes: Sequence[np.dtype], kinds: Sequence[int], strides: Sequence[int],
            required: Sequence[bool]) -> _Requested:
    """The requested features (as walk_batch takes them) prepared for `walk_requested`: a parse op's are
    the same for every batch, so its caller can prepare them once."""
    return _requested(tuple(keys), tuple(dtypes), tuple(kinds), tuple(strides), tuple(required))


def walk_requested(serialized: Sequence[Any], requested: _Requested) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """walk_batch for features prepared by `request`."""
    n = len(serialized)
    try:
        joined = b"".join(serialized)
    except TypeError:  # not all bytes: the twin says what is wrong
        return None
    starts = np.array([0, *itertools.accumulate(map(len, serialized))], np.int64)
    buf = np.frombuffer(joined, np.uint8)
    num_keys = len(requested.codes)
    counts = np.empty((n, num_keys), np.int64)
    begins = np.empty((n, num_keys), np.int64)
    packed = np.zeros((n, num_keys), np.int8)
    totals = np.zeros(num_keys, np.int64)
    if _walk(buf, starts, *requested.arrays, begins, counts, packed, totals) != _ALL_USUAL:
        return None
    # Each type's values in one array, feature after feature from bases[k].
    sizes, bases = [0, 0, 0], []
    for code, total in zip(requested.codes, totals.tolist()):
        bases.append(sizes[code])
        sizes[code] += total
    floats = np.empty(sizes[_FLOAT], np.float32)
    ints = np.empty(sizes[_INT64], np.int64)
    spans = np.empty((sizes[_BYTES], 2), np.int64)
    _fill(buf, begins, counts, packed, requested.arrays[2], np.array(bases, np.int64), floats.view(np.uint8), ints,
          spans)
    strings = np.empty(sizes[_BYTES], object)
    if sizes[_BYTES]:
        strings[:] = [joined[b:e] for b, e in spans.tolist()]
    by_type = [strings, floats, ints]  # by type code
    return [(counts[:, k], by_type[code][base:base + total])
            for k, (code, base, total) in enumerate(zip(requested.codes, bases, totals.tolist()))]


class _Requested(NamedTuple):
    codes: tuple[int, ...]  # each key's type code
    arrays: tuple[np.ndarray, ...]  # _walk's key arguments, read-only: shared by every batch of a parse op


@functools.lru_cache(maxsize=64)
def _requested(keys: tuple[bytes, ...], dtypes: tuple[np.dtype, ...], kinds: tuple[int, ...], strides: tuple[int, ...],
               required: tuple[bool, ...]) -> _Requested:
    """The requested features as `_walk` takes them, built once per parse op's config."""
    codes = tuple(_TYPE_CODES[np.dtype(d)] for d in dtypes)
    key_starts = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(k) for k in keys], out=key_starts[1:])
    arrays = (np.frombuffer(b"".join(keys), np.uint8), key_starts, np.array(codes, np.int8), np.array(kinds, np.int8),
              np.array(strides, np.int64), np.array(required, np.int8))
    for array in arrays:
        array.setflags(write=False)
    return _Requested(codes, arrays)
