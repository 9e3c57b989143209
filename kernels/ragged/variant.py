"""RaggedTensorVariant: a ragged tensor carried in one DT_VARIANT scalar, and the ops that pack and unpack
it (RaggedTensorToVariant, RaggedTensorFromVariant).

Ragged values cross `tf.map_fn` this way: the ragged input is unbatched into a vector of variants (one
ragged row each) that a TensorList hands out one per iteration; each iteration's ragged result is packed
into a scalar variant, and the stacked vector of them is decoded back into one ragged tensor.

    >>> rows = ragged_tensor_to_variant(np, np.array([0, 2, 3]), np.arange(3.0), batched_input=True)[0]
    >>> rows.shape, rows[1]
    ((2,), RaggedTensorVariant(double, ragged_rank=0, values [1]))

Like TensorList (kernels.state.tensor_list), a RaggedTensorVariant is an immutable Python object that reads as a
scalar of dtype variant; a vector of them is a numpy object array. The ops run on the host. Error
messages are TensorFlow's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.host import format_dims
from kernels.ragged.tensor import verify_splits
from kernels.registry import kernel

__all__ = ["RaggedTensorVariant", "ragged_tensor_to_variant", "ragged_tensor_from_variant"]

_HOST = ("cpu",)


@dataclass(frozen=True, eq=False)
class RaggedTensorVariant:
    """One ragged tensor: `nested_splits` (outermost first; none for a plain tensor) and flat `values`.

        >>> RaggedTensorVariant((np.array([0, 1, 1]),), np.array([7.0])).ragged_rank
        1
    """

    nested_splits: tuple[Any, ...]
    values: Any

    # NOTE: as TensorFlow's Shape and Rank see it, the variant is a scalar of dtype variant.
    shape = ()
    ndim = 0
    dtype = np.dtype(object)

    @property
    def ragged_rank(self) -> int:
        return len(self.nested_splits)

    def __repr__(self) -> str:
        return (f"RaggedTensorVariant({tf_name_of_numpy(self.values.dtype)}, ragged_rank={self.ragged_rank}, "
                f"values {format_dims(self.values.shape)})")


def _variants(items: list[RaggedTensorVariant]) -> np.ndarray:
    """A vector of variants: a numpy object array holding the objects themselves."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def _tensor_debug_string(t: Any) -> str:
    """Tensor::DebugString for the small tensors TensorFlow's messages show."""
    flat = np.asarray(t).reshape(-1)[:3].tolist()
    shown = " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in flat)
    return f"Tensor<type: {tf_name_of_numpy(t.dtype)} shape: {format_dims(t.shape)} values: {shown}>"


# --- RaggedTensorToVariant ---------------------------------------------------------------------------------


def _check_ragged(splits: tuple[Any, ...], values: Any) -> None:
    """The splits must describe the values; TensorFlow checks the innermost level first."""
    if splits and values.ndim == 0:
        raise ValueError("Requires flat_values to have rank>=1 when nested_row_splits is not empty, but is 0.")
    for i in range(len(splits) - 1, -1, -1):
        count = values.shape[0] if i == len(splits) - 1 else splits[i + 1].shape[0] - 1
        verify_splits(splits[i], count)


def _unbatch(splits: tuple[Any, ...], values: Any) -> list[RaggedTensorVariant]:
    """The rows of a ragged tensor, each a ragged tensor of one ragged rank less."""
    if not splits:
        if values.ndim == 0:
            raise ValueError("Can't unbatch rank-0 tensor.")
        return [RaggedTensorVariant((), values[i]) for i in range(values.shape[0])]
    outer = np.asarray(splits[0]).tolist()
    rows = []
    for i in range(len(outer) - 1):
        start, limit = outer[i], outer[i + 1]
        inner = []
        for s in splits[1:]:
            piece = s[start:limit + 1]
            inner.append(piece - piece[0])
            start, limit = int(s[start]), int(s[limit])
        rows.append(RaggedTensorVariant(tuple(inner), values[start:limit]))
    return rows


@kernel("RaggedTensorToVariant", devices=_HOST)
def ragged_tensor_to_variant(xp: Any, *inputs: Any, batched_input: bool) -> tuple:
    """The ragged tensor (*splits, values) as one scalar variant, or with `batched_input` as a vector of
    variants, one per row."""
    *splits, values = inputs
    splits = tuple(splits)
    _check_ragged(splits, values)
    if not batched_input:
        return (RaggedTensorVariant(splits, values),)
    return (_variants(_unbatch(splits, values)),)


# --- RaggedTensorFromVariant -------------------------------------------------------------------------------


def _variant_debug_string(item: Any) -> str:
    kind = type(item).__name__
    if kind == "TensorList":
        return "Variant<type: tensorflow::TensorList value: TensorList>"
    return f"Variant<type: {kind} value: {item!r}>"


def _components(encoded: Any, ragged_rank: int, value_dtype: np.dtype, split_dtype: np.dtype) -> list:
    """The variants of `encoded`, in row-major order, checked against the op's ragged rank and dtypes."""
    items = [encoded] if isinstance(encoded, RaggedTensorVariant) else np.asarray(encoded).reshape(-1).tolist()
    for i, item in enumerate(items):
        if not isinstance(item, RaggedTensorVariant):
            raise ValueError(f"Input Variant element at index {i} doesn't hold a RaggedTensorVariant: "
                             f"{_variant_debug_string(item)}")
        if item.ragged_rank != ragged_rank:
            raise ValueError(f"Encoded input RaggedTensorVariant has ragged_rank={item.ragged_rank}.  Expected "
                             f"ragged_rank={ragged_rank}.")
        if item.values.dtype != value_dtype:
            raise ValueError(f"Expected values Tensor dtype: {tf_name_of_numpy(value_dtype)}, found: "
                             f"{tf_name_of_numpy(item.values.dtype)}")
        if item.values.ndim < 1 and encoded.ndim > 0:
            raise ValueError(f"Ragged values must have rank >= 1; encoded scalar element at index {i} has values "
                             f"Tensor: {_tensor_debug_string(item.values)}")
        for s in item.nested_splits:
            if s.dtype != split_dtype:
                raise ValueError(f"Expected row_splits Tensor dtype: {tf_name_of_numpy(split_dtype)}, found: "
                                 f"{tf_name_of_numpy(s.dtype)}")
            if s.ndim != 1:
                raise ValueError(f"Ragged splits must have rank 1; encoded scalar element at index {i} has splits "
                                 f"Tensor {_tensor_debug_string(s)}")
    return items


def _stacked_values(items: list[RaggedTensorVariant], value_dtype: np.dtype) -> Any:
    if not items:
        # NOTE: TensorFlow cannot know the inner shape of no components, and gives shape [0].
        return np.zeros((0,), dtype=value_dtype)
    first = items[0].values.shape
    for i, item in enumerate(items[1:], start=1):
        if item.values.ndim != len(first):
            raise ValueError(f"Rank of values must match for all components; values shape at index 0: "
                             f"{format_dims(first)}, values shape at index {i}: {format_dims(item.values.shape)}")
    for i, item in enumerate(items):
        if item.values.shape[1:] != first[1:]:
            raise ValueError(f"All flat_values must have compatible shapes.  Shape at index 0: "
                             f"{format_dims(first[1:])}.  Shape at index {i}: {format_dims(item.values.shape[1:])}.  "
                             "If you are using tf.map_fn, then you may need to specify an explicit "
                             "fn_output_signature with appropriate ragged_rank, and/or convert output tensors to "
                             "RaggedTensors.")
    return np.concatenate([item.values for item in items])


def _nested_stack(items: list[RaggedTensorVariant], dims: tuple[int, ...], ragged_rank: int,
                  value_dtype: np.dtype, split_dtype: np.dtype) -> list[Any]:
    """The components, laid out in an array of shape `dims`, stacked into one ragged tensor."""
    out = []
    # NOTE: TensorFlow sizes these uniform splits by one dim each, which is only right for two dims or fewer.
    for i in range(len(dims) - 1):
        out.append(np.arange(dims[i] + 1, dtype=np.int64) * dims[i + 1])
    counts = [item.values.shape[0] if ragged_rank == 0 else item.nested_splits[0].shape[0] - 1 for item in items]
    out.append(np.concatenate(([0], np.cumsum(counts, dtype=np.int64))))
    for level in range(ragged_rank):
        pieces, offset = [np.zeros(1, np.int64)], 0
        for item in items:
            s = np.asarray(item.nested_splits[level], dtype=np.int64)
            pieces.append(s[1:] + offset)
            offset = int(pieces[-1][-1]) if s.size > 1 else offset
        out.append(np.concatenate(pieces))
    return [s.astype(split_dtype) for s in out] + [_stacked_values(items, value_dtype)]


@kernel("RaggedTensorFromVariant", devices=_HOST, outputs=lambda attrs: attrs["output_ragged_rank"] + 1)
def ragged_tensor_from_variant(xp: Any, encoded_ragged: Any, *, input_ragged_rank: int, output_ragged_rank: int,
                               Tvalues: np.dtype, Tsplits: np.dtype = np.dtype(np.int64)) -> tuple:
    """(*splits, values) of the ragged tensor a variant holds, or, for an array of variants each holding a
    tensor of `input_ragged_rank`, of their stack (ragged rank `output_ragged_rank`)."""
    rank = encoded_ragged.ndim
    if input_ragged_rank == -1:
        input_ragged_rank = output_ragged_rank - rank
        if input_ragged_rank < 0:
            raise ValueError(f"Inferred input_ragged_rank (output_ragged_rank - encoded_variant.dims()) must be >= 0, "
                             f"found output_ragged_rank: {output_ragged_rank}, encoded_variant.dims(): {rank}, "
                             f"inferred input_ragged_rank: {input_ragged_rank}")
    if output_ragged_rank != rank + input_ragged_rank:
        raise ValueError(f"output_ragged_rank must be equal to input_ragged_rank + encoded_ragged.dims(); "
                         f"output_ragged_rank: {output_ragged_rank}, input_ragged_rank: {input_ragged_rank}, "
                         f"encoded_variant.dims(): {rank}.")
    items = _components(encoded_ragged, input_ragged_rank, np.dtype(Tvalues), np.dtype(Tsplits))
    if rank == 0:
        return (*items[0].nested_splits, items[0].values)
    return tuple(_nested_stack(items, tuple(encoded_ragged.shape), input_ragged_rank, np.dtype(Tvalues),
                               np.dtype(Tsplits)))
