"""RaggedTensorToTensor: a ragged tensor, given as flat values and row partitions, padded (or cut) into a
dense tensor, what `RaggedTensor.to_tensor()` and `tf.strings.split(x).to_tensor()` lower to.

Each row partition relates one dimension to the next: ROW_SPLITS (row i holds values splits[i]:splits[i+1])
or VALUE_ROWIDS (value k belongs to row rowids[k]), the latter after a FIRST_DIM_SIZE scalar giving the
number of rows. The output shape comes from the `shape` input (-1 for a dim to infer, a scalar -1 for all
of them): the first dim defaults to the number of rows, a ragged dim to its longest row, a uniform dim to
the values'. Rows longer than the shape are cut, shorter ones padded with `default_value`, which
broadcasts to one value's shape.

    splits [0, 2, 2, 5], values [a, b, c, d, e], shape -1  ->  [[a, b, _], [_, _, _], [c, d, e]]

Like TensorFlow's kernel, each value is first given a flat output position (-1 when it is cut off), level
by level; values then go, in order, to their position, except that a value whose position lies before the
previous value's (unsorted row ids) takes the next free cell, as TensorFlow's streaming copy does. Where
TensorFlow would read or write out of bounds (partitions addressing more values than there are), the
kernel refuses instead. Partitions are small and read on the host; values stay on their device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.partial_shape import PartialShape, format_shape, shape_from_tensor
from kernels.ragged.tensor import to_numpy
from kernels.registry import kernel

__all__ = ["ragged_tensor_to_tensor"]

PARTITION_TYPES = ("FIRST_DIM_SIZE", "VALUE_ROWIDS", "ROW_LENGTHS", "ROW_SPLITS", "ROW_LIMITS", "ROW_STARTS")


def _partition_types(row_partition_types: tuple[str, ...]) -> list[str]:
    for name in row_partition_types:
        if name not in PARTITION_TYPES:
            raise ValueError(f"Unknown string for partition info type: {name}")
    return list(row_partition_types)


def _check_default_shape(default_shape: tuple[int, ...], values_shape: tuple[int, ...]) -> None:
    """ValidateDefaultValueShape, with its quirk: default dims are compared with the values' dims from the
    left (values dim i + 1), while broadcasting later aligns them from the right."""
    if len(default_shape) >= len(values_shape):
        # NOTE: two spaces before "must": TensorFlow's message has them.
        raise ValueError(f"default_value.shape={format_dims(default_shape)} and rt_input.flat_values.shape="
                         f"{format_dims(values_shape)} are incompatible: default_value.rank = {len(default_shape)}"
                         f"  must be less than rt_input.flat_values.rank = {len(values_shape)}")
    for i, d in enumerate(default_shape):
        v = values_shape[i + 1]
        if d != 1 and d != v:
            k = i - len(default_shape)
            raise ValueError(f"default_value.shape={format_dims(default_shape)} and rt_input.flat_values.shape="
                             f"{format_dims(values_shape)} are incompatible: default_value.shape[{k}] = {d} but "
                             f"rt_input.flat_values.shape[{k}] = {v}")


def _combine_shapes(ragged_rank: int, shape: PartialShape, values_shape: tuple[int, ...]) -> list[int | None]:
    """The output shape as far as `shape` and the values' inner dims tell (None where still unknown)."""
    rank = ragged_rank + len(values_shape)
    out = [None] * rank if shape is None else list(shape)
    if len(out) != rank:
        raise ValueError(f"rt_input.shape and shape={format_shape(shape)} are incompatible: rt_input.rank = {rank} "
                         f"but shape.rank = {len(out)}")
    for i in range(1, len(values_shape)):
        j = len(out) - len(values_shape) + i
        if out[j] is None:
            out[j] = values_shape[i]
        elif out[j] != values_shape[i]:
            raise ValueError(f"rt_input.shape and shape={format_shape(shape)} are incompatible: rt_input.shape"
                             f"[{i + ragged_rank}] = {values_shape[i]} but shape[{i + ragged_rank}] = {out[j]}")
    return out


def _max_width(kind: str, partition: np.ndarray) -> int:
    """The longest row of a partition (TensorFlow's GetMaxWidth)."""
    if kind == "ROW_SPLITS":
        return max(int(np.diff(partition).max(initial=0)), 0) if partition.size > 1 else 0
    if kind == "VALUE_ROWIDS":
        if partition.size == 0:
            return 0
        starts = np.flatnonzero(np.diff(partition) != 0) + 1
        bounds = np.concatenate(([0], starts, [partition.size]))
        return int(np.diff(bounds).max())
    raise ValueError(f"Cannot handle partition type {kind}")


def _index_from_splits(splits: np.ndarray, parent: np.ndarray, multiplier: int, size: int) -> np.ndarray:
    """Output positions of the next level's items, from row splits (CalculateOutputIndexRowSplit)."""
    rows = splits.size - 1
    if rows > parent.size:
        raise ValueError(f"Row partition size is greater than output size: {rows} > {parent.size}")
    if splits.size == 0:
        return np.zeros(0, np.int64)
    lengths = np.diff(splits)
    counts = np.maximum(lengths, 0)
    total = int(counts.sum())
    if total != int(splits[-1]):
        raise ValueError("Invalid row split size.")
    starts = parent[:rows]
    kept = np.where(starts == -1, 0, np.minimum(size, lengths))
    row = np.repeat(np.arange(rows), counts)
    column = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.where(column < kept[row], starts[row] + column * multiplier, -1)


def _index_from_rowids(rowids: np.ndarray, parent: np.ndarray, multiplier: int, size: int) -> np.ndarray:
    """Output positions of the next level's items, from value row ids (CalculateOutputIndexValueRowID): a
    row's column counts up while consecutive ids repeat, and restarts whenever the id changes."""
    if rowids.size == 0:
        return np.zeros(0, np.int64)
    run_start = np.concatenate(([True], rowids[1:] != rowids[:-1]))
    # TensorFlow checks each row id where it changes, unsigned: negative ids fail too.
    bad = np.flatnonzero(run_start & ((rowids < 0) | (rowids >= parent.size)))
    if bad.size:
        k = int(bad[0])
        which = "current_value_rowid" if k == 0 else "next_value_rowid"
        raise ValueError(f"Got {which}={int(rowids[k])} which is not less than {parent.size}")
    positions = np.arange(rowids.size)
    column = positions - np.maximum.accumulate(np.where(run_start, positions, 0))
    starts = parent[rowids]
    keep = (starts >= 0) & ((column == 0) | (column < size))
    return np.where(keep, starts + column * multiplier, -1)


def _first_dimension(kind: str, partition: np.ndarray) -> int:
    if kind == "FIRST_DIM_SIZE":
        if partition.ndim != 0:
            raise ValueError(f"FIRST_DIM_SIZE must be a scalar, got shape {format_dims(partition.shape)}")
        return int(partition)
    if kind == "VALUE_ROWIDS":
        raise ValueError("Cannot handle VALUE_ROWIDS in first dimension.")
    if kind == "ROW_SPLITS":
        if partition.ndim == 0:  # (TensorFlow reads a garbage size here)
            raise ValueError("ROW_SPLITS must be a vector, got shape []")
        return partition.shape[0] - 1
    raise ValueError(f"Cannot handle type {kind}")


def _default_cell(xp: Any, default_value: Any, cell_shape: tuple[int, ...]) -> Any:
    """The default value as one cell (the shape of one value): a scalar fills, a default of the cell's size is
    taken in order, anything else broadcasts (numpy-style, from the right)."""
    if default_value.size == 1:
        return default_value.reshape(())
    if default_value.size == int(np.prod(cell_shape)):
        return default_value.reshape(cell_shape)
    try:
        return xp.broadcast_to(default_value, cell_shape)
    except ValueError:
        raise ValueError("Error broadcasting default_value") from None


def _destinations(index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the values to copy, the output cell each goes to), as TensorFlow's streaming copy places them: in
    order, at its position or, when that lies behind the previous one, at the next cell after it."""
    source = np.flatnonzero(index >= 0)
    wanted = index[source]
    order = np.arange(wanted.size)
    return source, (np.maximum.accumulate(wanted - order) + order if wanted.size else wanted)


@kernel("RaggedTensorToTensor")
def ragged_tensor_to_tensor(xp: Any, shape: Any, values: Any, default_value: Any, *row_partition_tensors: Any,
                            row_partition_types: tuple[str, ...]) -> tuple:
    """The dense tensor of the ragged tensor (values, row partitions), padded with `default_value`."""
    types = _partition_types(row_partition_types)
    if not types:
        raise ValueError("No row_partition_types given.")
    if len(row_partition_tensors) < len(types):  # (TensorFlow reads past its inputs)
        raise ValueError(f"row_partition_types has {len(types)} entries but only {len(row_partition_tensors)} "
                         "row_partition_tensors were given")
    partitions = [to_numpy(p).astype(np.int64, copy=False) for p in row_partition_tensors[:len(types)]]
    if partitions[0].size == 0:
        raise ValueError("Invalid first partition input. Tensor requires at least one element.")
    first_dimension = _first_dimension(types[0], partitions[0])
    if types[0] == "FIRST_DIM_SIZE":
        types, partitions = types[1:], partitions[1:]
    ragged_rank = len(types)

    values_shape = tuple(values.shape)
    _check_default_shape(tuple(default_value.shape), values_shape)
    dims = _combine_shapes(ragged_rank, shape_from_tensor(to_numpy(shape)), values_shape)
    if dims[0] is None:
        dims[0] = first_dimension
    for i in range(1, ragged_rank + 1):
        if dims[i] is None:
            dims[i] = _max_width(types[i - 1], partitions[i - 1].reshape(-1))
    for d in dims:
        if d < 0:
            raise ValueError(f"Dimension {d} must be >= 0")

    cell_shape = tuple(dims[ragged_rank + 1:])
    cells = int(np.prod(dims[:ragged_rank + 1]))
    out = xp.empty((cells, *cell_shape), dtype=values.dtype)
    if cells == 0:
        return (out.reshape(dims),)
    # multiplier[i]: how many cells one step along dim i moves (over the ragged dims)
    multiplier = [1] * (ragged_rank + 1)
    for i in range(ragged_rank - 1, -1, -1):
        multiplier[i] = multiplier[i + 1] * dims[i + 1]
    index = np.where(np.arange(first_dimension) < dims[0], np.arange(first_dimension) * multiplier[0], -1)
    for level, (kind, partition) in enumerate(zip(types, partitions), start=1):
        flat = partition.reshape(-1)
        if kind == "ROW_SPLITS":
            index = _index_from_splits(flat, index, multiplier[level], dims[level])
        elif kind == "VALUE_ROWIDS":
            index = _index_from_rowids(flat, index, multiplier[level], dims[level])
        else:
            raise ValueError(f"Unsupported partition type:{kind}")
    if index.size > values_shape[0]:  # (TensorFlow reads past the values)
        raise ValueError(f"The row partitions address {index.size} values but there are only {values_shape[0]}")
    if out.size == 0:
        return (out.reshape(dims),)
    source, destination = _destinations(index)
    if destination.size and int(destination[-1]) >= cells:  # (TensorFlow writes past its output)
        raise ValueError("Row ids out of order place values past the end of the output")
    out[...] = _default_cell(xp, default_value, cell_shape)
    if source.size:
        out[xp.asarray(destination)] = values[xp.asarray(source)]
    return (out.reshape(dims),)
