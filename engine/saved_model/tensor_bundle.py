"""Tensor bundles: TensorFlow's checkpoint format, which holds a SavedModel's variables.

A bundle is a prefix (`model/variables/variables`) naming an index, `<prefix>.index`, and data shards,
`<prefix>.data-00000-of-00001`. The index is a LevelDB-style sorted table (engine.saved_model.sstable), checksums
verified. It maps each tensor's key to a BundleEntryProto (dtype, shape, shard, offset, size, masked
CRC-32C of the bytes); the empty key holds the BundleHeaderProto (shard count, endianness, version).

A partitioned tensor (TF1's partitioned variables; TensorFlow's checkpoint sharding policies split big
tensors so too) has an entry listing its slices and no data; each slice is stored under a key of its
own, `\x00` + the name and the slice's extents in OrderedCode, and reading the tensor assembles them.

In a shard, a numeric tensor is its little-endian, row-major bytes. A string tensor is the varint64
length of each element, a masked CRC-32C over those lengths (each as a little-endian uint32, or
uint64 past 4 GiB), then the elements' bytes; its entry's checksum covers the lengths in that fixed
width, the length checksum and the bytes. Every checksum is verified; any problem raises
SavedModelError naming the key and the file.

    >>> bundle = TensorBundle("model/variables/variables")
    >>> bundle.keys()[:2]
    ('_CHECKPOINTABLE_OBJECT_GRAPH', 'dense/bias/.ATTRIBUTES/VARIABLE_VALUE')
    >>> bundle.read("dense/bias/.ATTRIBUTES/VARIABLE_VALUE")
    array([0.1, 0.2], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import google_crc32c
import numpy as np
from google.protobuf import message as _message

from engine.errors import SavedModelError
from engine.graph import dtypes
from engine.graph.tensors import from_array
from engine.proto import tensor_bundle_pb2, tensor_pb2, types_pb2
from engine.saved_model.sstable import TableError, mask_crc32c, masked_crc32c, read_table, read_varint

__all__ = ["BundleEntry", "TensorBundle", "data_file", "extent_slices", "read_bundle", "slice_key"]

_HEADER_KEY = b""
_STRING = types_pb2.DT_STRING


def data_file(prefix: str | os.PathLike, shard: int, num_shards: int) -> Path:
    """The path of one data shard: `<prefix>.data-00000-of-00002`."""
    return Path(f"{os.fspath(prefix)}.data-{shard:05d}-of-{num_shards:05d}")


def extent_slices(extents: Iterable[tuple[int, int]]) -> tuple[slice, ...]:
    """A slice's (start, length) per dimension (length -1 for all of it) as a numpy index."""
    return tuple(slice(None) if length < 0 else slice(start, start + length) for start, length in extents)


# --- slice keys: TensorFlow's EncodeTensorNameSlice, in OrderedCode ---------------------------------------

# OrderedCode's header bits for a signed number of 1..10 bytes.
_SIGNED_HEADER = [(0, 0), (0x80, 0), (0xC0, 0), (0xE0, 0), (0xF0, 0), (0xF8, 0), (0xFC, 0), (0xFE, 0), (0xFF, 0),
                  (0xFF, 0x80), (0xFF, 0xC0)]


def _ordered_string(text: bytes) -> bytes:
    escapes = {0x00: b"\x00\xff", 0xFF: b"\xff\x00"}
    return b"".join(escapes.get(byte, bytes([byte])) for byte in text) + b"\x00\x01"


def _ordered_unsigned(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return bytes([len(body)]) + body


def _ordered_signed(value: int) -> bytes:
    x = ~value if value < 0 else value
    if x < 64:
        return bytes([(0x80 ^ value) & 0xFF])
    length = x.bit_length() // 7 + 1
    out = bytearray(value.to_bytes(10, "big", signed=True)[10 - length :])
    out[0] ^= _SIGNED_HEADER[length][0]
    out[1] ^= _SIGNED_HEADER[length][1]
    return bytes(out)


def slice_key(name: str, extents: list[tuple[int, int]]) -> bytes:
    """The key of one slice of tensor `name`: (start, length) per dimension, length -1 for all of it."""
    key = _ordered_unsigned(0) + _ordered_string(name.encode("utf-8")) + _ordered_unsigned(len(extents))
    for start, length in extents:
        key += _ordered_signed(start) + _ordered_signed(length)
    return key


@dataclass(frozen=True)
class BundleEntry:
    """Where one tensor lies: `dtype` is TensorFlow's DataType enum, `crc32c` masked as stored."""

    key: str
    dtype: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int
    # For a partitioned tensor: each slice's (start, length) per dimension, length -1 for all of it.
    slices: tuple[tuple[tuple[int, int], ...], ...] = ()

    @property
    def sliced(self) -> bool:
        return bool(self.slices)

    @property
    def numpy_dtype(self) -> np.dtype:
        return dtypes.to_numpy(self.dtype)


class TensorBundle:
    """One tensor bundle, its index read and verified when opened; tensors are read on demand, each
    checked against its checksum.

    >>> bundle = TensorBundle("saved_model/variables/variables")
    >>> "dense/kernel/.ATTRIBUTES/VARIABLE_VALUE" in bundle
    True
    >>> kernel = bundle.read("dense/kernel/.ATTRIBUTES/VARIABLE_VALUE")
    """

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = Path(prefix)
        self.index_path = Path(f"{os.fspath(prefix)}.index")
        try:
            index = self.index_path.read_bytes()
        except OSError as e:
            raise SavedModelError(f"cannot read the variables index '{self.index_path}': {e.strerror or e}") from e
        self._entries: dict[str, BundleEntry] = {}
        self._slices: dict[bytes, BundleEntry] = {}  # slice key -> the slice's entry
        header = None
        try:
            for key, value in read_table(index):
                if key == _HEADER_KEY:
                    header = tensor_bundle_pb2.BundleHeaderProto.FromString(bytes(value))
                elif key.startswith(b"\x00"):
                    self._slices[key] = self._entry(repr(key), bytes(value))
                else:
                    name = key.decode("utf-8")
                    self._entries[name] = self._entry(name, bytes(value))
        except (TableError, UnicodeDecodeError) as e:
            raise SavedModelError(f"the variables index '{self.index_path}' is corrupt: {e}") from None
        except (_message.DecodeError, ValueError) as e:  # an entry that is not a proto: corrupt all the same
            raise SavedModelError(f"the variables index '{self.index_path}' holds an unreadable entry: {e}") from None
        if header is None:
            raise SavedModelError(f"the variables index '{self.index_path}' has no bundle header (empty key)")
        if header.endianness != tensor_bundle_pb2.BundleHeaderProto.LITTLE:
            raise SavedModelError(f"the bundle '{self.index_path}' was written big-endian; only little-endian "
                                  "bundles are supported")
        if header.version.min_consumer > 1:
            raise SavedModelError(f"the bundle '{self.index_path}' needs a reader of version "
                                  f"{header.version.min_consumer}; this one reads version 1")
        self.num_shards = int(header.num_shards)
        for entry in [*self._entries.values(), *self._slices.values()]:
            if not entry.sliced and not 0 <= entry.shard_id < max(self.num_shards, 1):
                raise SavedModelError(f"tensor '{entry.key}' in '{self.index_path}' names shard {entry.shard_id}; "
                                      f"the bundle has {self.num_shards}")

    @staticmethod
    def _entry(key: str, value: bytes) -> BundleEntry:
        proto = tensor_bundle_pb2.BundleEntryProto.FromString(value)
        shape = [int(d.size) for d in proto.shape.dim]
        # ValueErrors: reported as an unreadable entry of the index (TensorBundle.__init__).
        if any(size < 0 for size in shape):
            raise ValueError(f"tensor '{key}' has shape {shape}, with a negative dimension")
        if proto.offset < 0 or proto.size < 0:
            raise ValueError(f"tensor '{key}' has a negative offset ({proto.offset}) or size ({proto.size})")
        slices = tuple(
            tuple((int(e.start), int(e.length) if e.HasField("length") else -1) for e in s.extent) for s in proto.slices
        )
        return BundleEntry(
            key=key,
            dtype=int(proto.dtype),
            shape=tuple(int(d.size) for d in proto.shape.dim),
            shard_id=int(proto.shard_id),
            offset=int(proto.offset),
            size=int(proto.size),
            crc32c=int(proto.crc32c),
            slices=slices,
        )

    # --- the index --------------------------------------------------------------------------------

    def keys(self) -> tuple[str, ...]:
        """The tensors' keys, in the index's (sorted) order."""
        return tuple(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, key: str) -> BundleEntry:
        """The index entry of `key`; SavedModelError when the bundle has none."""
        try:
            return self._entries[key]
        except KeyError:
            raise SavedModelError(f"the variables index '{self.index_path}' has no tensor '{key}'") from None

    # --- the data ---------------------------------------------------------------------------------

    def read_bytes(self, key: str) -> bytes:
        """The stored bytes of `key`, checksum verified (not for a partitioned tensor: see `read`)."""
        return self._read_bytes(self.entry(key))

    def _read_bytes(self, entry: BundleEntry) -> bytes:
        key = entry.key
        if entry.sliced:
            raise SavedModelError(f"tensor '{key}' in '{self.index_path}' is partitioned into slices; read it whole "
                                  "with TensorBundle.read")
        path = self._data_path(entry)
        try:
            with open(path, "rb") as f:
                # The entry's size is a claim: never allocate more than the shard holds.
                available = max(0, os.fstat(f.fileno()).st_size - entry.offset)
                f.seek(entry.offset)
                data = f.read(min(entry.size, available))
        except OSError as e:
            raise SavedModelError(f"cannot read tensor '{key}' from '{path}': {e.strerror or e}") from e
        if len(data) != entry.size:
            raise SavedModelError(f"tensor '{key}' in '{path}' is truncated: {len(data)} of {entry.size} bytes "
                                  f"at offset {entry.offset}")
        if entry.dtype != _STRING and masked_crc32c(data) != entry.crc32c:
            raise SavedModelError(f"tensor '{key}' in '{path}' fails its checksum (the data file is corrupt)")
        return data

    def read(self, key: str) -> np.ndarray:
        """The tensor stored under `key` as a numpy array (strings as an object array of bytes); a
        partitioned tensor is assembled from its slices. Numeric arrays read in one piece are
        read-only views of the bytes read."""
        entry = self.entry(key)
        if entry.sliced:
            return self._assemble(entry)
        return self._decode(entry, self._read_bytes(entry))

    def _decode(self, entry: BundleEntry, data: bytes) -> np.ndarray:
        if entry.dtype == _STRING:
            return self._decode_strings(entry, data)
        return np.frombuffer(self._check_size(entry, data), dtype=self._numeric_dtype(entry)).reshape(entry.shape)

    def _check_size(self, entry: BundleEntry, data: bytes) -> bytes:
        """`data`, when it is as long as the entry's numeric shape and dtype make it."""
        needed = math.prod(entry.shape) * self._numeric_dtype(entry).itemsize
        if needed != len(data):
            raise SavedModelError(f"tensor '{entry.key}' in '{self._data_path(entry)}' has {len(data)} bytes; shape "
                                  f"{list(entry.shape)} of {dtypes.tf_name(entry.dtype)} needs {needed}")
        return data

    def _assemble(self, entry: BundleEntry) -> np.ndarray:
        dtype = np.dtype(object) if entry.dtype == _STRING else self._numeric_dtype(entry)
        parts = []
        for extents in entry.slices:
            if len(extents) != len(entry.shape):
                raise SavedModelError(f"tensor '{entry.key}' in '{self.index_path}' has a slice of rank {len(extents)}; "
                                      f"the tensor has rank {len(entry.shape)}")
            key = slice_key(entry.key, list(extents))
            part_entry = self._slices.get(key)
            where = ", ".join(":" if length < 0 else f"{start}:{start + length}" for start, length in extents)
            if part_entry is None:
                raise SavedModelError(f"the variables index '{self.index_path}' lacks slice [{where}] of tensor "
                                      f"'{entry.key}'")
            if part_entry.dtype != entry.dtype:
                raise SavedModelError(f"slice [{where}] of tensor '{entry.key}' in '{self.index_path}' has dtype "
                                      f"{dtypes.tf_name(part_entry.dtype)}; the tensor has "
                                      f"{dtypes.tf_name(entry.dtype)}")
            if any(start < 0 for start, _ in extents):
                raise SavedModelError(f"slice [{where}] of tensor '{entry.key}' in '{self.index_path}' starts below 0")
            parts.append((extents, key, dataclasses.replace(part_entry, key=f"{entry.key}[{where}]")))
        # The shape is a claim too: the slices' stored bytes must be able to fill it (a string element
        # takes at least its length byte) before the whole tensor is allocated.
        needed = math.prod(entry.shape) * (1 if dtype == np.dtype(object) else dtype.itemsize)
        stored = sum({key: part.size for _, key, part in parts}.values())
        if needed > stored:
            raise SavedModelError(f"tensor '{entry.key}' in '{self.index_path}' has shape {list(entry.shape)} "
                                  f"({needed} bytes or more), but its slices hold {stored} bytes")
        out = np.zeros(entry.shape, dtype=dtype) if dtype != np.dtype(object) else np.full(entry.shape, b"", dtype=object)
        for extents, _key, part_entry in parts:
            region = extent_slices(extents)
            part = self._decode(part_entry, self._read_bytes(part_entry))
            if out[region].shape != part.shape:
                raise SavedModelError(f"slice '{part_entry.key}' in '{self.index_path}' has shape {list(part.shape)}; "
                                      f"its extent is {list(out[region].shape)}")
            out[region] = part
        return out

    def tensor_proto(self, key: str) -> tensor_pb2.TensorProto:
        """The tensor as a TensorProto (numeric bytes in tensor_content as read, without a copy
        through numpy), ready for a Const node."""
        entry = self.entry(key)
        proto = tensor_pb2.TensorProto(dtype=entry.dtype)
        for size in entry.shape:
            proto.tensor_shape.dim.add().size = size
        if entry.dtype == _STRING or entry.sliced:
            value = from_array(self.read(key))
            proto.tensor_content, proto.string_val[:] = value.tensor_content, value.string_val
            return proto
        self._numeric_dtype(entry)  # a dtype bundles cannot hold raises before any data is read
        proto.tensor_content = self._check_size(entry, self._read_bytes(entry))
        return proto

    def _data_path(self, entry: BundleEntry) -> Path:
        return data_file(self.prefix, entry.shard_id, self.num_shards)

    def _numeric_dtype(self, entry: BundleEntry) -> np.dtype:
        try:
            dtype = dtypes.to_numpy(entry.dtype)
        except ValueError:
            dtype = np.dtype(object)
        if dtype == np.dtype(object) or dtypes.is_ref(entry.dtype):
            name = dtypes.tf_name(entry.dtype) if dtype != np.dtype(object) or entry.dtype else f"DataType({entry.dtype})"
            raise SavedModelError(f"tensor '{entry.key}' in '{self.index_path}' has dtype {name}, which bundles "
                                  "cannot be read as")
        return dtype

    def _decode_strings(self, entry: BundleEntry, data: bytes) -> np.ndarray:
        """Varint64 lengths, a masked CRC-32C of the lengths, then the bytes (see the module docstring)."""
        path = self._data_path(entry)
        count = math.prod(entry.shape)
        lengths = []
        pos = 0
        crc = 0
        try:
            for _ in range(count):
                length, pos = read_varint(data, pos, len(data))
                lengths.append(length)
                width = "<I" if length <= 0xFFFFFFFF else "<Q"
                crc = google_crc32c.extend(crc, struct.pack(width, length))
        except TableError:
            raise SavedModelError(f"string tensor '{entry.key}' in '{path}' has truncated element lengths") from None
        if pos + 4 > len(data):
            raise SavedModelError(f"string tensor '{entry.key}' in '{path}' is truncated before its length checksum")
        stored_length_crc = data[pos : pos + 4]
        (length_crc,) = struct.unpack_from("<I", data, pos)
        if length_crc != mask_crc32c(crc):
            raise SavedModelError(f"string tensor '{entry.key}' in '{path}' fails its length checksum (the data file "
                                  "is corrupt)")
        pos += 4
        body = data[pos:]
        if sum(lengths) != len(body):
            raise SavedModelError(f"string tensor '{entry.key}' in '{path}' holds {len(body)} bytes of text; its "
                                  f"lengths add up to {sum(lengths)}")
        crc = google_crc32c.extend(google_crc32c.extend(crc, stored_length_crc), body)
        if mask_crc32c(crc) != entry.crc32c:
            raise SavedModelError(f"tensor '{entry.key}' in '{path}' fails its checksum (the data file is corrupt)")
        out = np.empty(count, dtype=object)
        start = 0
        for i, length in enumerate(lengths):
            out[i] = body[start : start + length]
            start += length
        return out.reshape(entry.shape)


def read_bundle(prefix: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the bundle at `prefix`, by key (partitioned ones assembled from their slices).

    >>> values = read_bundle("model/variables/variables")
    """
    bundle = TensorBundle(prefix)
    return {key: bundle.read(key) for key in bundle}
