"""RaggedCross: feature crosses of rank-2 ragged, sparse and dense inputs, row by row, what
`tf.ragged.cross` (strings joined with "_X_") and `tf.ragged.cross_hashed` (fingerprints chained with
FingerprintCat64, optionally into buckets) lower to.

Row b of the output holds every combination of one value from row b of each input, the last input
varying fastest; a row with no value in some input has no crosses.

    [[a, b], [c]] x [[x, y], [z]]  ->  [[a_X_x, a_X_y, b_X_x, b_X_y], [c_X_z]]

Strings hash with FarmHash's Fingerprint64 (kernels.strings.hash_functions), int64 values are their own
hash, and the chain starts from `hash_key`. The output's dtype (string or int64) decides which, as in
TensorFlow. Inputs are strings or int64: the op runs on the host.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from kernels.ragged.tensor import verify_splits
from kernels.registry import kernel
from kernels.strings.hash_functions import fingerprint64, fingerprint_cat64

__all__ = ["ragged_cross"]

_MASK64 = (1 << 64) - 1
_INT64_MAX = (1 << 63) - 1
_RANK_2 = "tf.ragged.cross only supports inputs with rank=2."


def _as_string(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(int(value)).encode()


def _as_fingerprint(value: Any) -> int:
    return fingerprint64(value) if isinstance(value, bytes) else int(value) & _MASK64


def _ragged_rows(values: Any, splits: Any) -> list[list]:
    flat, s = np.asarray(values).tolist(), np.asarray(splits).tolist()
    return [flat[s[b]:s[b + 1]] for b in range(len(s) - 1)]


def _sparse_rows(indices: Any, values: Any, batch_size: int) -> list[list]:
    """Rows of a SparseTensor as TensorFlow's reader finds them: walking the indices forward, row r ends at
    the first index whose row is past r (so unsorted indices split where their running maximum passes r)."""
    flat = np.asarray(values).tolist()
    rows = np.asarray(indices)[:, 0] if len(flat) else np.zeros(0, np.int64)
    running = np.maximum.accumulate(rows) if rows.size else rows
    ends = np.searchsorted(running, np.arange(batch_size), side="right").tolist()
    starts = [0, *ends[:-1]]
    return [flat[a:b] for a, b in zip(starts, ends)]


def _check_inputs(ragged: list[tuple[Any, Any]], sparse: list[tuple[Any, Any, Any]], dense: list[Any]) -> int:
    """ValidateInput: shapes, splits, and one batch size for all; returns it."""
    for values, splits in ragged:
        if values.ndim != 1 or splits.ndim != 1:
            raise ValueError(_RANK_2)
        verify_splits(splits, values.size)
    for i, (indices, values, shape) in enumerate(sparse):
        if indices.ndim != 2 or values.ndim != 1 or shape.ndim != 1:
            raise ValueError(f"Invalid SparseTensor {i}")
        if shape.size != 2:
            raise ValueError(_RANK_2)
    for t in dense:
        if t.ndim != 2:
            raise ValueError(_RANK_2)
    if ragged:
        batch_size = ragged[0][1].size - 1
    elif dense:
        batch_size = dense[0].shape[0]
    elif sparse:
        batch_size = int(np.asarray(sparse[0][2])[0])
    else:
        batch_size = 0
    sizes = [s.size - 1 for _, s in ragged] + [int(np.asarray(sh)[0]) for _, _, sh in sparse]
    sizes += [t.shape[0] for t in dense]
    if any(n != batch_size for n in sizes):
        raise ValueError("inputs must all have the same batch dimension size.")
    return batch_size


def _features(input_order: str, ragged, sparse, dense, batch_size: int) -> list[list[list]]:
    """For each input in `input_order`, its values row by row (BuildFeatureReaders)."""
    features, used = [], {"R": 0, "S": 0, "D": 0}
    names = {"R": ("a ragged tensor value", ragged, "values"), "S": ("a sparse tensor value", sparse, "values"),
             "D": ("a dense tensor", dense, "tensors")}
    for c in input_order:
        if c not in names:
            raise ValueError("Unexpected input_order value.")
        what, pool, noun = names[c]
        k = used[c]
        if k >= len(pool):
            raise ValueError(f'input_order "{input_order}" specifies reading {what} at index {k} from a list of '
                             f"{len(pool)} {noun}.")
        used[c] += 1
        if c == "R":
            features.append(_ragged_rows(*pool[k]))
        elif c == "S":
            features.append(_sparse_rows(pool[k][0], pool[k][1], batch_size))
        else:
            features.append(np.asarray(pool[k]).tolist())
    return features


@kernel("RaggedCross", devices=("cpu",), outputs=2)
def ragged_cross(xp: Any, *inputs: Any, Nsparse: int, input_order: str, num_buckets: int, hash_key: int,
                 out_values_type: np.dtype, out_row_splits_type: np.dtype, ragged_values_types: tuple = (),
                 ragged_splits_types: tuple = (), sparse_values_types: tuple = (), dense_types: tuple = (),
                 hashed_output: bool = False) -> tuple:
    """(values, row_splits): the crosses of the inputs' rows, as strings or hashes (by `out_values_type`)."""
    num_ragged = len(ragged_values_types)
    if num_ragged != len(ragged_splits_types):
        raise ValueError("ragged values and splits must have the same length")
    if Nsparse != len(sparse_values_types):
        raise ValueError("sparse indices and values must have the same length")
    if num_ragged + Nsparse + len(dense_types) != len(input_order):
        raise ValueError("Invalid length for input_order")
    rest = list(inputs)
    ragged_values, ragged_splits = rest[:num_ragged], rest[num_ragged:2 * num_ragged]
    rest = rest[2 * num_ragged:]
    indices, values, shapes = rest[:Nsparse], rest[Nsparse:2 * Nsparse], rest[2 * Nsparse:3 * Nsparse]
    dense = rest[3 * Nsparse:]
    ragged = list(zip(ragged_values, ragged_splits))
    sparse = list(zip(indices, values, shapes))
    batch_size = _check_inputs(ragged, sparse, dense)
    features = _features(input_order, ragged, sparse, dense, batch_size)

    hashed = np.dtype(out_values_type) == np.int64
    key = hash_key & _MASK64
    out, splits = [], [0]
    for b in range(batch_size):
        rows = [feature[b] for feature in features]
        if hashed:
            rows = [[_as_fingerprint(v) for v in row] for row in rows]
        else:
            rows = [[_as_string(v) for v in row] for row in rows]
        if features:
            for combination in itertools.product(*rows):
                if hashed:
                    h = key
                    for fp in combination:
                        h = fingerprint_cat64(h, fp)
                    out.append(h % num_buckets if num_buckets > 0 else h % _INT64_MAX)
                else:
                    out.append(b"_X_".join(combination))
        splits.append(len(out))
    if hashed:
        result = np.array(out, dtype=np.int64).reshape(len(out))
    else:
        result = np.empty(len(out), dtype=object)
        result[:] = out
    return result, np.array(splits, dtype=out_row_splits_type)
