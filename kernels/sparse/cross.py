"""Kernels of the feature crosses: SparseCross, SparseCrossV2 and SparseCrossHashed, behind feature columns'
`crossed_column`, `tf.sparse.cross(_hashed)` and the Keras `HashedCrossing` layer
(`tensorflow/core/kernels/sparse_cross_op.cc`).

Each input is a column of features per batch row: a 2-D SparseTensor (its entries of row b, in order) or a
dense [batch, k] matrix; sparse inputs come first, then dense ones. Row b of the output lists the cartesian
product of its columns' features, the last column varying fastest, as a SparseTensor [batch, max count].
A cross is either the features joined by a separator (integers written in decimal) or a hash: each
feature's 64-bit fingerprint (FarmHash Fingerprint64 of a string, an integer as is) chained with
`FingerprintCat64`, then taken modulo `num_buckets` (modulo 2^63-1 when num_buckets is 0).

Like TensorFlow, a sparse column's features are read by walking its entries in order while their row
index is the next batch row: entries after the first one out of row order (or out of range) are ignored.
SparseCrossHashed hashes integer features from only their 4 low bytes (TensorFlow takes sizeof(DataType)
bytes of the int64), keeps dense integer features raw unless `strong_hash`, and starts the chain from the
first feature rather than a hash key.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.jit import use_compiled
from kernels.registry import kernel
from kernels.sparse.cross_compiled import hashed_crosses
from kernels.sparse.tensor import to_numpy
from kernels.strings.hash_functions import fingerprint64, fingerprint_cat64, siphash24

__all__ = ["sparse_cross", "sparse_cross_v2", "sparse_cross_hashed"]

_MASK64 = 0xFFFFFFFFFFFFFFFF
_INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------------------------------------------
# Reading the columns


def _validate(indices: tuple, values: tuple, shapes: tuple, dense: tuple) -> int:
    """TensorFlow's ValidateInput; returns the batch size (of the first sparse input, else the first dense)."""
    for i, ix in enumerate(indices):
        if ix.ndim != 2:
            raise ValueError(f"Input indices should be a matrix but received shape {format_dims(ix.shape)} "
                             f"at position {i}")
        if ix.shape[1] != 2:
            raise ValueError(f"Expected D2 of index to be 2 got {ix.shape[1]} at position {i}")
    for i, v in enumerate(values):
        if v.ndim != 1:
            raise ValueError(f"Input values should be a vector but received shape {format_dims(v.shape)} "
                             f"at position {i}")
        if indices[i].shape[0] != v.shape[0]:
            raise ValueError(f"Expected size of values to be {indices[i].shape[0]} got {v.shape[0]} at position {i}")
    for i, s in enumerate(shapes):
        if s.ndim != 1:
            raise ValueError(f"Input shapes should be a vector but received shape {format_dims(s.shape)} "
                             f"at position {i}")
        if s.shape[0] != 2:
            raise ValueError(f"shape should imply a 2D tensor, but got {format_dims(s.shape)} at position {i}")
    for i, d in enumerate(dense):
        if d.ndim != 2:
            raise ValueError(f"Dense inputs should be a matrix but received shape {format_dims(d.shape)} "
                             f"at position {i}")
    sizes = [int(to_numpy(s)[0]) for s in shapes]
    batch = sizes[0] if shapes else (dense[0].shape[0] if dense else 0)
    for i, size in enumerate(sizes):
        if size != batch:
            raise ValueError(f"Expected batch size {batch} got {size} at position {i}")
    for i, d in enumerate(dense):
        if d.shape[0] != batch:
            raise ValueError(f"Expected batch size {batch} got {d.shape[0]} at dense tensor {i}")
    return batch


def _sparse_column(indices: Any, values: Any, batch: int, feature: Callable[[Any], Any]) -> list[list[Any]]:
    """Each batch row's features of a sparse input, read the way TensorFlow walks the entries."""
    rows = to_numpy(indices)[:, 0]
    # The walk consumes entries while their row is the current batch row: the longest prefix of
    # non-decreasing rows in [0, batch).
    bad = (rows < 0) | (rows >= batch)
    if rows.size > 1:
        bad[1:] |= rows[1:] < rows[:-1]
    stop = int(np.argmax(bad)) if bad.any() else rows.size
    flat = [feature(v) for v in to_numpy(values)[:stop].tolist()]
    counts = np.bincount(rows[:stop], minlength=batch)[:batch] if stop else np.zeros(batch, dtype=np.int64)
    ends = np.cumsum(counts)
    return [flat[e - c:e] for c, e in zip(counts.tolist(), ends.tolist())]


def _dense_column(dense: Any, feature: Callable[[Any], Any]) -> list[list[Any]]:
    return [[feature(v) for v in row] for row in to_numpy(dense).tolist()]


def _columns(inputs: tuple, n: int, num_dense: int, sparse_feature: Callable, dense_feature: Callable
             ) -> tuple[int, list[list[list[Any]]]]:
    indices, values, shapes = inputs[:n], inputs[n:2 * n], inputs[2 * n:3 * n]
    dense = inputs[3 * n:3 * n + num_dense]
    batch = _validate(indices, values, shapes, dense)
    columns = [_sparse_column(ix, v, batch, sparse_feature) for ix, v in zip(indices, values)]
    columns += [_dense_column(d, dense_feature) for d in dense]
    return batch, columns


def _crosses(xp: Any, batch: int, columns: list, combine: Callable[[tuple], Any], dtype: Any) -> tuple:
    """The output SparseTensor: row b holds combine(p) for each p in the product of b's features."""
    out_indices, out_values, widest = [], [], 0
    for b in range(batch):
        count = 0
        for product in itertools.product(*(column[b] for column in columns)) if columns else ():
            out_values.append(combine(product))
            count += 1
        out_indices.extend((b, c) for c in range(count))
        widest = max(widest, count)
    indices = np.array(out_indices, dtype=np.int64).reshape(-1, 2)
    if dtype == object:
        values = np.empty(len(out_values), dtype=object)
        values[:] = out_values
    else:
        values = np.array(out_values, dtype=dtype)
    return xp.asarray(indices), xp.asarray(values) if dtype != object else values, \
        xp.asarray(np.array([batch, widest], dtype=np.int64))


def _fingerprints(values: Any, feature: Callable[[Any], int]) -> np.ndarray:
    """Each feature's 64-bit fingerprint, as uint64 in the values' shape; integer features TensorFlow keeps
    raw are taken as they are (`feature` is int(value) & 2^64-1 for them)."""
    host = to_numpy(values)
    if host.dtype.kind in "iu" and feature is _raw_or_fingerprint64:
        return host.astype(np.int64, copy=False).view(np.uint64)
    flat = host.reshape(-1).tolist()
    if feature is _raw_or_fingerprint64 and all(type(v) is bytes for v in flat):
        feature = fingerprint64  # strings (as kernels hold them): no per-feature type test
    return np.fromiter(map(feature, flat), dtype=np.uint64, count=len(flat)).reshape(host.shape)


def _raw_or_fingerprint64(value: Any) -> int:
    """SparseCross' feature hash: a string's Fingerprint64, an integer as is."""
    return fingerprint64(value) if isinstance(value, bytes) else int(value) & _MASK64


def _hashed_compiled(inputs: tuple, n: int, num_dense: int, sparse_feature: Callable, dense_feature: Callable,
                     start: int | None, num_buckets: int) -> tuple:
    """The hashed crosses by the compiled loop (kernels.sparse.cross_compiled): `_columns` and `_crosses` are
    its twin."""
    indices, values, shapes = inputs[:n], inputs[n:2 * n], inputs[2 * n:3 * n]
    dense = inputs[3 * n:3 * n + num_dense]
    batch = _validate(indices, values, shapes, dense)
    sparse = [(to_numpy(ix)[:, 0], _fingerprints(v, sparse_feature)) for ix, v in zip(indices, values)]
    return hashed_crosses(sparse, [_fingerprints(d, dense_feature) for d in dense], batch, start, num_buckets)


def _as_bytes(value: Any) -> bytes:
    """A feature as the bytes of its string: strings as they are, integers in decimal (std::to_string)."""
    return value if isinstance(value, bytes) else str(int(value)).encode()


def _bucket(hashed: int, num_buckets: int) -> int:
    return hashed % num_buckets if num_buckets > 0 else hashed % _INT64_MAX


# ---------------------------------------------------------------------------------------------------
# The kernels


@kernel("SparseCross", devices=("cpu",), outputs=3)
def sparse_cross(xp: Any, *inputs: Any, N: int, hashed_output: bool, num_buckets: int, hash_key: int,
                 sparse_types: tuple = (), dense_types: tuple = (), out_type: Any = None,
                 internal_type: Any = None, compiled: bool = False) -> tuple:
    """Crosses of the sparse and dense columns: strings joined by "_X_", or hashes chained from `hash_key`."""
    if internal_type is not None and np.dtype(internal_type) == object:
        for v in inputs[N:2 * N]:
            if v.dtype != object:
                raise ValueError("Input values should be of internal type 7 but received 9")  # DataType enums
        for d in inputs[3 * N:]:
            if d.dtype != object:
                raise ValueError("Dense inputs should be of internal type 7 but received 9")
    if hashed_output:
        fingerprint = _raw_or_fingerprint64
        start = hash_key & _MASK64
        if use_compiled(xp, compiled) and N + len(dense_types):
            return _hashed_compiled(inputs, N, len(dense_types), fingerprint, fingerprint, start, num_buckets)
        batch, columns = _columns(inputs, N, len(dense_types), fingerprint, fingerprint)

        def combine(product: tuple) -> int:
            hashed = start
            for f in product:
                hashed = fingerprint_cat64(hashed, f)
            return _bucket(hashed, num_buckets)

        return _crosses(xp, batch, columns, combine, np.int64)
    batch, columns = _columns(inputs, N, len(dense_types), _as_bytes, _as_bytes)
    return _crosses(xp, batch, columns, b"_X_".join, object)


@kernel("SparseCrossV2", devices=("cpu",), outputs=3)
def sparse_cross_v2(xp: Any, *inputs: Any, N: int, sparse_types: tuple = (), dense_types: tuple = ()) -> tuple:
    """String crosses of the sparse and dense columns, joined by the scalar string input `sep` (the last)."""
    *columns_in, sep = inputs
    batch, columns = _columns(tuple(columns_in), N, len(dense_types), _as_bytes, _as_bytes)
    if sep.ndim != 0:
        raise ValueError(f"Input separator should be a scalar. Received: {_debug_string(sep)}")
    return _crosses(xp, batch, columns, to_numpy(sep).item().join, object)


def _debug_string(t: Any) -> str:
    values = " ".join(v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)
                      for v in to_numpy(t).reshape(-1).tolist())
    return f"Tensor<type: string shape: {format_dims(t.shape)} values: {values}>"


@kernel("SparseCrossHashed", devices=("cpu",), outputs=3)
def sparse_cross_hashed(xp: Any, *inputs: Any, N: int, sparse_types: tuple = (), dense_types: tuple = (),
                        compiled: bool = False) -> tuple:
    """Hashed crosses chained from the first feature; `num_buckets`, `strong_hash` and the two-word SipHash
    `salt` are the last three inputs."""
    *columns_in, num_buckets, strong_hash, salt = inputs
    columns_in = tuple(columns_in)
    indices, values, shapes = columns_in[:N], columns_in[N:2 * N], columns_in[2 * N:3 * N]
    _validate(indices, values, shapes, columns_in[3 * N:])
    buckets = int(to_numpy(num_buckets).reshape(-1)[0])
    strong = bool(to_numpy(strong_hash).reshape(-1)[0])
    key = [int(k) & _MASK64 for k in to_numpy(salt).reshape(-1).tolist()]
    if len(key) != 2:
        raise ValueError(f'Input "salt" must have length 2 but has length {len(key)}')

    def keyed(data: bytes) -> int:
        return siphash24(key[0], key[1], data) if strong else fingerprint64(data)

    def sparse_feature(value: Any) -> int:
        # NOTE: TensorFlow hashes sizeof(DataType) = 4 bytes of an int64 feature: its low half.
        return keyed(value if isinstance(value, bytes) else (int(value) & _MASK64).to_bytes(8, "little")[:4])

    def dense_feature(value: Any) -> int:
        if isinstance(value, bytes):
            return keyed(value)
        return keyed((int(value) & _MASK64).to_bytes(8, "little")[:4]) if strong else int(value) & _MASK64

    if use_compiled(xp, compiled) and N + len(dense_types):
        return _hashed_compiled(columns_in, N, len(dense_types), sparse_feature, dense_feature, None, buckets)
    batch, columns = _columns(columns_in, N, len(dense_types), sparse_feature, dense_feature)

    def combine(product: tuple) -> int:
        hashed = product[0]
        for f in product[1:]:
            hashed = fingerprint_cat64(hashed, f)
        return _bucket(hashed, buckets)

    return _crosses(xp, batch, columns, combine, np.int64)
