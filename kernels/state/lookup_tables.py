"""Lookup tables: the hash tables behind vocabularies (Keras StringLookup/IntegerLookup, feature columns,
`tf.lookup.StaticHashTable`), as TensorFlow's lookup ops define them.

A table op (HashTableV2, MutableHashTableV2, ...) yields a `LookupTable` from the session's
ResourceManager (engine.runtime.resources); the ops that use it take it through that handle.

- *Initializable* tables (HashTable, HashTableV2, AnonymousHashTable: `tf.lookup.StaticHashTable`) are
  filled once, by LookupTableImportV2 / InitializeTableV2 (keys and values) or
  InitializeTableFromTextFileV2 (a vocabulary file), normally from the model's init op when it
  loads; a lookup before that fails with TensorFlow's "Table not initialized.". Initializing again
  with data of the same size is a no-op, with another size an error (TensorFlow compares sizes only);
  a file initializer on an initialized table is always a no-op.
- *Mutable* tables (MutableHashTable(OfTensors)V2, MutableDenseHashTableV2 and their anonymous forms)
  take inserts, removes and imports at any time; a lookup of a missing key gives the default.

Keys are int32, int64 or strings (float keys work too); values are scalars or, for the OfTensors and
Dense tables, tensors of `value_shape`. A lookup reads an immutable snapshot (key -> row, and the rows
as one array) rebuilt after each change, so concurrent lookups never see a half-applied insert, and a
lookup of n keys costs n dict probes plus one numpy gather.

    >>> t = LookupTable("vocab", np.dtype(object), np.dtype(np.int64))
    >>> t.initialize(np.array([b"a", b"b"], dtype=object), np.array([0, 1]))
    >>> t.find(np.array([b"b", b"zzz"], dtype=object), np.int64(-1))
    array([ 1, -1])
"""

from __future__ import annotations

import itertools
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from engine.runtime.resources import Resource, ResourceManager, resource_name
from kernels.registry import kernel
from kernels.strings.tensors import flat_strings

__all__ = ["LookupTable", "TABLE_OPS"]

# The ops that create a table (what `tensorgate inspect` lists as a model's tables).
TABLE_OPS = frozenset({
    "HashTable", "HashTableV2", "AnonymousHashTable", "MutableHashTable", "MutableHashTableV2",
    "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2",
    "AnonymousMutableHashTable", "AnonymousMutableHashTableOfTensors",
})

WHOLE_LINE = -2
LINE_NUMBER = -1
# What TensorFlow's safe_strto32/64 accept: optional spaces, a sign, digits.
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def _key(value: Any) -> Any:
    """A dict key for one element: bytes for strings (str encoded), Python numbers otherwise."""
    if isinstance(value, str):
        return value.encode("utf-8")
    return value.item() if isinstance(value, np.generic) else value


# Value dtypes whose elements round-trip through Python values (tolist, then fromiter) unchanged.
_SCALAR_KINDS = frozenset("biufO")


class LookupTable(Resource):
    """A hash table from keys to values (scalars, or tensors of `value_shape`)."""

    kind = "lookup table"

    def __init__(self, name: str, key_dtype: np.dtype, value_dtype: np.dtype, value_shape: tuple[int, ...] = (),
                 *, mutable: bool = False, empty_key: Any = None, deleted_key: Any = None):
        super().__init__(name)
        self.key_dtype, self.value_dtype = np.dtype(key_dtype), np.dtype(value_dtype)
        self.value_shape = tuple(value_shape)
        self.mutable = mutable
        self.reserved = {k: what for k, what in ((empty_key, "empty_key"), (deleted_key, "deleted_key"))
                         if k is not None}
        self.initialized = mutable  # mutable tables need no initializer
        self._lock = threading.Lock()
        self._map: dict[Any, np.ndarray] = {}
        # What reads see: each key's row, the rows, and for scalar values each key's value as a Python value.
        self._snapshot: tuple[dict[Any, int], np.ndarray, dict[Any, Any] | None] | None = None

    def describe(self) -> str:
        kind = "mutable hash table" if self.mutable else "hash table"
        return (f"{kind} '{self.name}' ({tf_name_of_numpy(self.key_dtype)} -> {tf_name_of_numpy(self.value_dtype)}, "
                f"{len(self)} entries{'' if self.initialized else ', not initialized'})")

    def __len__(self) -> int:
        return len(self._map)

    # --- writes ------------------------------------------------------------------------------------------

    def _rows(self, keys: Any, values: Any, op: str) -> list[tuple[Any, np.ndarray]]:
        keys, values = np.asarray(keys), np.asarray(values)
        if keys.dtype.kind != self.key_dtype.kind and not (keys.dtype == object and self.key_dtype == object):
            raise TypeError(f"{op}: table '{self.name}' has {tf_name_of_numpy(self.key_dtype)} keys, got "
                            f"{tf_name_of_numpy(keys.dtype)}")
        expected = keys.shape + self.value_shape
        if values.shape != expected:
            raise ValueError(f"{op}: expected values of shape {list(expected)} for keys of shape {list(keys.shape)}, "
                             f"got {list(values.shape)}")
        values = values.astype(self.value_dtype, copy=False).reshape((keys.size,) + self.value_shape)
        rows = [(_key(k), v) for k, v in zip(keys.ravel().tolist(), values)]
        for key, _ in rows:
            if key in self.reserved:
                raise ValueError(f"Using the {self.reserved[key]} as a table key is not allowed")
        return rows

    def _insert(self, rows: list[tuple[Any, np.ndarray]], check_duplicates: bool) -> None:
        for key, value in rows:
            if check_duplicates and key in self._map and not np.array_equal(self._map[key], value):
                raise ValueError(f"HashTable has different value for same key. Key {key!r} has {self._map[key]} "
                                 f"and trying to add value {value}")
            self._map[key] = value
        self._snapshot = None

    def initialize(self, keys: Any, values: Any, op: str = "InitializeTableV2") -> None:
        """Fill an initializable table (LookupTableImportV2 and InitializeTableV2 on a static table)."""
        rows = self._rows(keys, values, op)
        with self._lock:
            if self.initialized:
                if len(rows) != len(self._map):
                    raise ValueError("Table was already initialized with different data.")
                return
            self._insert(rows, check_duplicates=True)
            self.initialized = True

    def initialize_from_file(self, path: str, key_index: int, value_index: int, vocab_size: int,
                             delimiter: str, offset: int) -> None:
        """InitializeTableFromTextFileV2: one entry per line of `path` (see `read_text_file`)."""
        with self._lock:
            if self.initialized:
                return  # TensorFlow ignores a file initializer on an initialized table
        keys, values = read_text_file(path, key_index, value_index, vocab_size, delimiter, offset,
                                      self.key_dtype, self.value_dtype)
        rows = self._rows(keys, values, "InitializeTableFromTextFileV2")
        with self._lock:
            if not self.initialized:
                self._insert(rows, check_duplicates=True)
                self.initialized = True

    def insert(self, keys: Any, values: Any) -> None:
        self._require_mutable("LookupTableInsertV2")
        rows = self._rows(keys, values, "LookupTableInsertV2")
        with self._lock:
            self._insert(rows, check_duplicates=False)

    def remove(self, keys: Any) -> None:
        self._require_mutable("LookupTableRemoveV2")
        with self._lock:
            for k in np.asarray(keys).ravel().tolist():
                key = _key(k)
                if key in self.reserved:
                    raise ValueError(f"Using the {self.reserved[key]} as a table key is not allowed")
                self._map.pop(key, None)
            self._snapshot = None

    def import_(self, keys: Any, values: Any) -> None:
        """LookupTableImportV2: a mutable table's contents replaced; a static table initialized."""
        if not self.mutable:
            self.initialize(keys, values, "LookupTableImportV2")
            return
        rows = self._rows(keys, values, "LookupTableImportV2")
        with self._lock:
            self._map.clear()
            self._insert(rows, check_duplicates=False)

    def _require_mutable(self, op: str) -> None:
        if not self.mutable:
            raise TypeError(f"{op} needs a mutable table; '{self.name}' is a static hash table")

    # --- reads -------------------------------------------------------------------------------------------

    def _current(self) -> tuple[dict[Any, int], np.ndarray, dict[Any, Any] | None]:
        snapshot = self._snapshot
        if snapshot is None:
            with self._lock:
                if self._snapshot is None:
                    index = {key: i for i, key in enumerate(self._map)}
                    rows = np.empty((len(self._map),) + self.value_shape, dtype=self.value_dtype)
                    for i, value in enumerate(self._map.values()):
                        rows[i] = value
                    by_key = None
                    if not self.value_shape and self.value_dtype.kind in _SCALAR_KINDS:
                        by_key = dict(zip(index, rows.tolist()))
                    self._snapshot = (index, rows, by_key)
                snapshot = self._snapshot
        return snapshot

    def find(self, keys: Any, default: Any) -> np.ndarray:
        if not self.initialized:
            raise ValueError("Table not initialized.")
        keys = np.asarray(keys)
        default = np.asarray(default, dtype=self.value_dtype)
        if default.shape not in ((), self.value_shape):
            raise ValueError(f"Expected shape {list(self.value_shape)} or [] for default value but got "
                             f"{list(default.shape)}")
        index, rows, by_key = self._current()
        # tolist() gives Python ints and floats, the dict's own keys; strings as bytes, as flat_strings gives them.
        flat = flat_strings(keys) if keys.dtype == object else keys.ravel().tolist()
        if by_key is not None:  # scalar values: each key's value, or the default, in one pass
            out = np.fromiter(map(by_key.get, flat, itertools.repeat(default.item())), dtype=self.value_dtype,
                              count=keys.size)
            return out.reshape(keys.shape)
        positions = np.fromiter(map(index.get, flat, itertools.repeat(-1)), dtype=np.int64, count=keys.size)
        out = np.empty((keys.size,) + self.value_shape, dtype=self.value_dtype)
        hit = positions >= 0
        out[hit] = rows[positions[hit]]
        out[~hit] = default
        return out.reshape(keys.shape + self.value_shape)

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        index, rows, _ = self._current()
        keys = np.array(list(index), dtype=self.key_dtype) if index else np.empty((0,), dtype=self.key_dtype)
        return keys, rows.copy()


def read_text_file(path: str, key_index: int, value_index: int, vocab_size: int, delimiter: str, offset: int,
                   key_dtype: np.dtype, value_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Keys and values from a vocabulary file, as TensorFlow's TextFileLineIterator reads it: one
    entry per line (a trailing "\\r" dropped), a column picked by index after splitting on
    `delimiter`, WHOLE_LINE (-2) for the whole line, LINE_NUMBER (-1) for the line's number plus
    `offset` (which int32 columns get too, int64 ones not, as in TensorFlow); an empty line is an
    error, and so is a file shorter than `vocab_size` (a longer one is cut there)."""
    for index, dtype, what in ((key_index, key_dtype, "Key"), (value_index, value_dtype, "Value")):
        if index == LINE_NUMBER and dtype != np.int64:
            raise TypeError(f"{what} index for line number requires table {what.lower()} dtype of int64, got "
                            f"{tf_name_of_numpy(dtype)}")
        if index == WHOLE_LINE and dtype.kind not in "iuO":
            raise TypeError(f"{what} index for whole line requires string or integer table {what.lower()}, got "
                            f"{tf_name_of_numpy(dtype)}")
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read vocabulary file {path}: {e.strerror or e}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    sep = delimiter.encode("utf-8")[:1] or b"\t"
    split = max(key_index, value_index) >= 0
    keys: list[Any] = []
    values: list[Any] = []
    position = 0
    for number, line in enumerate(lines):
        position += len(line) + 1
        if vocab_size != -1 and number >= vocab_size:
            break
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            raise ValueError(f"Invalid content in {path}: empty line found at position {position}.")
        tokens = line.split(sep) if split else []
        if split and len(tokens) < max(key_index, value_index) + 1:
            raise ValueError(f"Invalid number of columns in {path} line {number} ({line.decode('utf-8', 'replace')}) "
                             f": expected at least {max(key_index, value_index) + 1} got {len(tokens)}")
        keys.append(_field(line, tokens, key_index, key_dtype, number, offset))
        values.append(_field(line, tokens, value_index, value_dtype, number, offset))
    if vocab_size != -1 and len(keys) < vocab_size:
        raise ValueError(f"Invalid vocab_size in {path}: expected {vocab_size} but got {len(keys)}")
    return np.array(keys, dtype=key_dtype), np.array(values, dtype=value_dtype)


def _field(line: bytes, tokens: list[bytes], index: int, dtype: np.dtype, number: int, offset: int) -> Any:
    if index == LINE_NUMBER:
        return number + offset
    token = line if index == WHOLE_LINE else tokens[index]
    if dtype == object:
        return token
    text = token.decode("utf-8", "replace")
    try:
        if dtype.kind in "iu":
            if not _INTEGER.fullmatch(text):
                raise ValueError
            value = int(text)
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise ValueError
            return value + offset if dtype == np.int32 else value
        return float(text)
    except ValueError:
        raise ValueError(f"Field {text} in line {number} is not a valid {tf_name_of_numpy(dtype)}.") from None


# --- table ops ------------------------------------------------------------------------------------------------


def _table(resources: ResourceManager, node_name: str, container: str, shared_name: str, use_node_name_sharing: bool,
           create) -> LookupTable:
    # NOTE: a table with neither a shared_name nor node-name sharing is private to its kernel in
    # TensorFlow, i.e. to the node within a session: the node's name keys it here either way.
    name = resource_name(container, shared_name, node_name)
    return resources.get_or_create(name, LookupTable, lambda: create(name))


@kernel("HashTableV2", "HashTable", devices=("cpu",), stateful=True)
def hash_table(xp, *, key_dtype, value_dtype, container: str = "", shared_name: str = "",
               use_node_name_sharing: bool = False, resources: ResourceManager, node_name: str) -> tuple:
    return (_table(resources, node_name, container, shared_name, use_node_name_sharing,
                   lambda name: LookupTable(name, key_dtype, value_dtype)),)


@kernel("AnonymousHashTable", devices=("cpu",), stateful=True)
def anonymous_hash_table(xp, *, key_dtype, value_dtype, node_name: str) -> tuple:
    """A table of its own each time the op runs (TensorFlow's anonymous resources)."""
    return (LookupTable(node_name, key_dtype, value_dtype),)


@kernel("MutableHashTableV2", "MutableHashTable", devices=("cpu",), stateful=True)
def mutable_hash_table(xp, *, key_dtype, value_dtype, container: str = "", shared_name: str = "",
                       use_node_name_sharing: bool = False, resources: ResourceManager, node_name: str) -> tuple:
    return (_table(resources, node_name, container, shared_name, use_node_name_sharing,
                   lambda name: LookupTable(name, key_dtype, value_dtype, mutable=True)),)


@kernel("MutableHashTableOfTensorsV2", "MutableHashTableOfTensors", devices=("cpu",), stateful=True)
def mutable_hash_table_of_tensors(xp, *, key_dtype, value_dtype, value_shape=(), container: str = "",
                                  shared_name: str = "", use_node_name_sharing: bool = False,
                                  resources: ResourceManager, node_name: str) -> tuple:
    return (_table(resources, node_name, container, shared_name, use_node_name_sharing,
                   lambda name: LookupTable(name, key_dtype, value_dtype, value_shape or (), mutable=True)),)


@kernel("MutableDenseHashTableV2", "MutableDenseHashTable", devices=("cpu",), stateful=True)
def mutable_dense_hash_table(xp, empty_key, deleted_key=None, *, key_dtype, value_dtype, value_shape=(),
                             container: str = "", shared_name: str = "", use_node_name_sharing: bool = False,
                             initial_num_buckets: int = 131072, max_load_factor: float = 0.8,
                             resources: ResourceManager, node_name: str) -> tuple:
    empty = _key(np.asarray(empty_key).item())
    deleted = None if deleted_key is None else _key(np.asarray(deleted_key).item())
    if deleted is not None and empty == deleted:
        raise ValueError("Empty and deleted keys must have different values")
    return (_table(resources, node_name, container, shared_name, use_node_name_sharing,
                   lambda name: LookupTable(name, key_dtype, value_dtype, value_shape or (), mutable=True,
                                            empty_key=empty, deleted_key=deleted)),)


@kernel("AnonymousMutableHashTable", devices=("cpu",), stateful=True)
def anonymous_mutable_hash_table(xp, *, key_dtype, value_dtype, node_name: str) -> tuple:
    return (LookupTable(node_name, key_dtype, value_dtype, mutable=True),)


@kernel("AnonymousMutableHashTableOfTensors", devices=("cpu",), stateful=True)
def anonymous_mutable_hash_table_of_tensors(xp, *, key_dtype, value_dtype, value_shape=(), node_name: str) -> tuple:
    return (LookupTable(node_name, key_dtype, value_dtype, value_shape or (), mutable=True),)


def _lookup(handle: Any, op: str) -> LookupTable:
    if not isinstance(handle, LookupTable):
        raise TypeError(f"{op} needs a lookup table handle, got {type(handle).__name__}")
    return handle


@kernel("LookupTableFindV2", "LookupTableFind", devices=("cpu",), stateful=True)
def lookup_table_find(xp, table, keys, default_value, *, Tin=None, Tout=None) -> tuple:
    return (_lookup(table, "LookupTableFindV2").find(keys, default_value),)


@kernel("LookupTableSizeV2", "LookupTableSize", devices=("cpu",), stateful=True)
def lookup_table_size(xp, table) -> tuple:
    return (np.array(len(_lookup(table, "LookupTableSizeV2")), dtype=np.int64),)


@kernel("LookupTableExportV2", "LookupTableExport", devices=("cpu",), outputs=2, stateful=True)
def lookup_table_export(xp, table, *, Tkeys=None, Tvalues=None) -> tuple:
    return _lookup(table, "LookupTableExportV2").export()


@kernel("LookupTableImportV2", "LookupTableImport", devices=("cpu",), outputs=0, stateful=True)
def lookup_table_import(xp, table, keys, values, *, Tin=None, Tout=None) -> tuple:
    _lookup(table, "LookupTableImportV2").import_(keys, values)
    return ()


@kernel("LookupTableInsertV2", "LookupTableInsert", devices=("cpu",), outputs=0, stateful=True)
def lookup_table_insert(xp, table, keys, values, *, Tin=None, Tout=None) -> tuple:
    _lookup(table, "LookupTableInsertV2").insert(keys, values)
    return ()


@kernel("LookupTableRemoveV2", devices=("cpu",), outputs=0, stateful=True)
def lookup_table_remove(xp, table, keys, *, Tin=None) -> tuple:
    _lookup(table, "LookupTableRemoveV2").remove(keys)
    return ()


@kernel("InitializeTableV2", "InitializeTable", devices=("cpu",), outputs=0, stateful=True)
def initialize_table(xp, table, keys, values, *, Tkey=None, Tval=None) -> tuple:
    _lookup(table, "InitializeTableV2").initialize(keys, values)
    return ()


@kernel("InitializeTableFromTextFileV2", "InitializeTableFromTextFile", devices=("cpu",), outputs=0, stateful=True)
def initialize_table_from_text_file(xp, table, filename, *, key_index: int, value_index: int, vocab_size: int = -1,
                                    delimiter: str = "\t", offset: int = 0) -> tuple:
    path = np.asarray(filename).item()
    path = path.decode("utf-8") if isinstance(path, bytes) else str(path)
    _lookup(table, "InitializeTableFromTextFileV2").initialize_from_file(
        path, key_index, value_index, vocab_size, delimiter, offset)
    return ()
