"""TensorList: TensorFlow's list of tensors carried as one DT_VARIANT scalar, and the ops on it.

Keras RNNs and TF2 TensorArrays (tf.TensorArray under control flow v2 or in a tf.function) pass their
per-step values through TensorLists: TensorListFromTensor unstacks a sequence, TensorListGetItem reads a
step, TensorListSetItem writes one and TensorListStack stacks the results.

    >>> items = TensorList.reserve(np.dtype(np.float32), (None, 2), 3)   # three unset [?, 2] items
    >>> items.with_item(1, np.ones((4, 2), np.float32)).length
    3

A TensorList is immutable: every op returns a new list sharing the item arrays, never changing its input,
because one value is read by several nodes, loop iterations and runs. Element shapes follow
`engine.graph.attrs.decode_shape` (a tuple with None for an unknown dim, None for an unknown rank); an
`element_shape` input is a shape tensor where -1 is an unknown dim and a scalar -1 an unknown rank.
An unset item reads as zeros when the element shape is known (merged from the list's, the op's and, for
reads, the other items'), otherwise it is an error. Error messages are TensorFlow's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.host import format_dims, host, host_scalar
from kernels.limits import check_bytes
from kernels.partial_shape import (
    PartialShape,
    compatible,
    format_shape,
    fully_defined,
    merge_shapes,
    shape_from_tensor,
)
from kernels.registry import kernel

# TensorLists are Python objects holding arrays: their ops run on the host, and placement keeps them there
# (so `xp` is numpy, and string items stack like any others).
_HOST = ("cpu",)

__all__ = ["TensorList"]


def element_zeros(xp: Any, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    """The value of an element never written: zeros, or empty strings for string lists and arrays."""
    if dtype == np.dtype(object):  # strings: TensorFlow's zero is the empty string
        return xp.full(shape, b"", dtype=object)
    return xp.zeros(shape, dtype=dtype)


# --- the value ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class TensorList:
    """An immutable list of tensors: `items` (None for an unset item), `element_dtype`, `element_shape`.

    `max_num_elements` (-1: unbounded) limits TensorListPushBack, as EmptyTensorList sets it.

        >>> lst = TensorList.from_items(np.dtype(np.float32), None, [np.zeros(2, np.float32)])
        >>> lst.pushed(np.ones(2, np.float32)).length
        2
    """

    items: tuple[Any, ...]
    element_dtype: np.dtype
    element_shape: PartialShape
    max_num_elements: int = -1

    # NOTE: as TensorFlow's Shape and Rank see it, a list is a scalar of dtype variant.
    shape = ()
    ndim = 0
    dtype = np.dtype(object)

    @classmethod
    def reserve(cls, element_dtype: np.dtype, element_shape: PartialShape, count: int) -> TensorList:
        return cls((None,) * count, np.dtype(element_dtype), element_shape)

    @classmethod
    def from_items(cls, element_dtype: np.dtype, element_shape: PartialShape, items) -> TensorList:
        return cls(tuple(items), np.dtype(element_dtype), element_shape)

    @property
    def length(self) -> int:
        return len(self.items)

    def replace_items(self, items) -> TensorList:
        return TensorList(tuple(items), self.element_dtype, self.element_shape, self.max_num_elements)

    def with_item(self, index: int, value: Any) -> TensorList:
        items = list(self.items)
        items[index] = value
        return self.replace_items(items)

    def pushed(self, value: Any) -> TensorList:
        return self.replace_items(self.items + (value,))

    def resized(self, size: int) -> TensorList:
        return self.replace_items(self.items[:size] + (None,) * max(size - len(self.items), 0))

    def __repr__(self) -> str:
        unset = sum(item is None for item in self.items)
        return (f"TensorList({tf_name_of_numpy(self.element_dtype)}, {format_shape(self.element_shape)}, "
                f"{len(self.items)} items, {unset} unset)")


def _list(value: Any) -> TensorList:
    if not isinstance(value, TensorList):
        raise ValueError(f"Input handle is not a list. Saw: '{type(value).__name__}'")
    return value


def _check_dtype(op_dtype: np.dtype, lst: TensorList) -> None:
    if np.dtype(op_dtype) != lst.element_dtype:
        raise ValueError(f"Invalid data types; op elements {tf_name_of_numpy(op_dtype)} but list elements "
                         f"{tf_name_of_numpy(lst.element_dtype)}")


def _element_shape(lst: TensorList, element_shape: Any) -> PartialShape:
    """The op's `element_shape` input merged with the list's own (GetElementShapeFromInput)."""
    return merge_shapes(shape_from_tensor(element_shape), lst.element_shape)


def _merge_with_items(shape: PartialShape, items) -> PartialShape:
    for item in items:
        if item is not None:
            shape = merge_shapes(shape, tuple(item.shape))
    return shape


def _index(index: Any) -> int:
    return int(host_scalar(index, "index must be a scalar"))


def _stacked(xp: Any, lst: TensorList, items, element_shape: tuple[int, ...]) -> Any:
    """`items` (None: zeros) stacked on a new leading axis."""
    if not items:
        return element_zeros(xp, lst.element_dtype, (0, *element_shape))
    zeros = None
    parts = []
    for item in items:
        if item is None:
            zeros = element_zeros(xp, lst.element_dtype, element_shape) if zeros is None else zeros
            item = zeros
        parts.append(item)
    return xp.stack(parts)


# --- creating lists -----------------------------------------------------------------------------------------


@kernel("EmptyTensorList", devices=_HOST)
def empty_tensor_list(xp, element_shape, max_num_elements, *, element_dtype: np.dtype, shape_type=None):
    """A list with no items; `max_num_elements` (-1: unbounded) caps TensorListPushBack."""
    if max_num_elements.ndim != 0:
        raise ValueError(f"max_num_elements expected to be a scalar but got shape: "
                         f"{format_dims(max_num_elements.shape)}")
    return (TensorList((), np.dtype(element_dtype), shape_from_tensor(element_shape), int(host(max_num_elements))),)


# What one item of a list costs at least, set or not (a slot in a Python tuple): a size a client sends
# must not make a list of billions of them.
_SLOT_BYTES = 8


@kernel("TensorListReserve", devices=_HOST)
def tensor_list_reserve(xp, element_shape, num_elements, *, element_dtype: np.dtype, shape_type=None,
                        memory_limit: int | None = None):
    """`num_elements` unset items."""
    shape = shape_from_tensor(element_shape)
    count = _index(num_elements)
    if count < 0:
        raise ValueError(f"The num_elements to reserve must be a non negative number, but got {count}")
    check_bytes(count * _SLOT_BYTES, memory_limit, "TensorListReserve slots", (count,))
    return (TensorList.reserve(element_dtype, shape, count),)


def _unstack_check(tensor: Any, shape: PartialShape) -> None:
    if tensor.ndim == 0:
        raise ValueError("Tensor must be at least a vector, but saw shape: []")
    if not compatible(shape, tuple(tensor.shape[1:])):
        raise ValueError(f"Specified a list with shape {format_shape(shape)} from a tensor with shape "
                         f"{format_dims(tensor.shape[1:])}")


@kernel("TensorListFromTensor", devices=_HOST)
def tensor_list_from_tensor(xp, tensor, element_shape, *, element_dtype=None, shape_type=None):
    """One item per slice of `tensor` along its first axis; the list keeps the `element_shape` given."""
    shape = shape_from_tensor(element_shape)
    _unstack_check(tensor, shape)
    return (TensorList.from_items(tensor.dtype, shape, (tensor[i, ...] for i in range(tensor.shape[0]))),)


def _scatter_new(tensor: Any, indices: Any, element_shape: Any, num_elements: int) -> TensorList:
    shape = shape_from_tensor(element_shape)
    if num_elements < -1:
        raise ValueError(f"TensorListScatter expects num_elements >= -1, found: {num_elements}")
    _unstack_check(tensor, shape)
    positions = [int(i) for i in np.ravel(host(indices))]
    if len(positions) != tensor.shape[0]:
        raise ValueError(f"Invalid number of rows in input tensor. Expected: {len(positions)} "
                         f"Actual: {tensor.shape[0]}")
    for i in positions:
        if i < 0:
            raise ValueError("Indices in TensorListScatter must all be non-negative.")
        if num_elements != -1 and i >= num_elements:
            raise ValueError(f"TensorListScatter: Trying to scatter at index {i} in list with size {num_elements}")
    items: list[Any] = [None] * max(max(positions, default=-1) + 1, num_elements)
    for row, i in enumerate(positions):
        items[i] = tensor[row, ...]
    return TensorList.from_items(tensor.dtype, shape, items)


@kernel("TensorListScatter", devices=_HOST)
def tensor_list_scatter(xp, tensor, indices, element_shape, *, element_dtype=None, shape_type=None):
    """A list as long as the largest index + 1, with row k of `tensor` at `indices[k]`."""
    return (_scatter_new(tensor, indices, element_shape, -1),)


@kernel("TensorListScatterV2", devices=_HOST)
def tensor_list_scatter_v2(xp, tensor, indices, element_shape, num_elements, *, element_dtype=None,
                           shape_type=None):
    """TensorListScatter with a minimum length (`num_elements`, -1 for none) that indices must stay under."""
    return (_scatter_new(tensor, indices, element_shape, _index(num_elements)),)


@kernel("TensorListSplit", devices=_HOST)
def tensor_list_split(xp, tensor, element_shape, lengths, *, element_dtype=None, shape_type=None):
    """Consecutive slices of `tensor` along its first axis, `lengths[i]` rows each, using every row."""
    shape = shape_from_tensor(element_shape)
    if shape is not None and len(shape) < 1:
        raise ValueError(f"TensorListSplit requires element_shape to be at least of rank 1, but saw: "
                         f"{format_shape(shape)}")
    if tensor.ndim == 0:
        raise ValueError("Tensor must be at least a vector, but saw shape: []")
    if shape is not None and not compatible(shape[1:], tuple(tensor.shape[1:])):
        raise ValueError(f"tensor shape {format_dims(tensor.shape)} is not compatible with element_shape "
                         f"{format_shape(shape)}")
    if lengths.ndim != 1:
        raise ValueError(f"Expected lengths to be a vector, received shape: {format_dims(lengths.shape)}")
    items, start = [], 0
    for length in (int(n) for n in host(lengths)):
        if length < 0:
            raise ValueError(f"Invalid value in lengths: {length}")
        end = start + length
        if end > tensor.shape[0]:
            raise ValueError(f"Attempting to slice [{start}, {end}] from tensor with length {tensor.shape[0]}")
        items.append(tensor[start:end])
        start = end
    if start != tensor.shape[0]:
        raise ValueError(f"Unused values in tensor. Length of tensor: {tensor.shape[0]} Values used: {start}")
    return (TensorList.from_items(tensor.dtype, shape, items),)


# --- reading lists -----------------------------------------------------------------------------------------


@kernel("TensorListLength", devices=_HOST)
def tensor_list_length(xp, input_handle):
    """The number of items, set or not, as an int32 scalar."""
    return (xp.asarray(_list(input_handle).length, dtype=np.int32),)


@kernel("TensorListElementShape", devices=_HOST)
def tensor_list_element_shape(xp, input_handle, *, shape_type: np.dtype | None = None):
    """The list's element shape (int32 unless `shape_type`): -1 for unknown dims, a scalar -1 for an unknown rank."""
    shape = _list(input_handle).element_shape
    dtype = np.int32 if shape_type is None else shape_type
    if shape is None:
        return (xp.asarray(-1, dtype=dtype),)
    return (xp.asarray([-1 if d is None else d for d in shape], dtype=dtype).reshape(len(shape)),)


@kernel("TensorListGetItem", devices=_HOST)
def tensor_list_get_item(xp, input_handle, index, element_shape, *, element_dtype: np.dtype):
    """Item `index`; an unset one reads as zeros of the element shape, inferred from the other items if need be."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    i = _index(index)
    if not 0 <= i < lst.length:
        raise IndexError(f"Trying to access element {i} in a list with {lst.length} elements.")
    if lst.items[i] is not None:
        return (lst.items[i],)
    shape = _element_shape(lst, element_shape)
    if not fully_defined(shape):
        shape = _merge_with_items(shape, lst.items)
    if not fully_defined(shape):
        raise ValueError(f"Trying to read an uninitialized tensor but element_shape is not fully defined: "
                         f"{format_shape(shape)} and no list element is set.")
    return (element_zeros(xp, lst.element_dtype, shape),)


@kernel("TensorListStack", devices=_HOST)
def tensor_list_stack(xp, input_handle, element_shape, *, element_dtype: np.dtype, num_elements: int = -1):
    """All items stacked on a new first axis (unset ones as zeros); `num_elements` (-1: any) checks the length."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    if num_elements != -1 and lst.length != num_elements:
        raise ValueError(f"Operation expected a list with {num_elements} elements but got a list with "
                         f"{lst.length} elements.")
    shape = _element_shape(lst, element_shape)
    if not fully_defined(shape) and not lst.items:
        raise ValueError(f"Tried to stack elements of an empty list with non-fully-defined element_shape: "
                         f"{format_shape(shape)}")
    if not fully_defined(lst.element_shape):
        shape = _merge_with_items(shape, lst.items)
    if not fully_defined(shape):
        raise ValueError(f"Tried to stack list which only contains uninitialized tensors and has a "
                         f"non-fully-defined element_shape: {format_shape(shape)}")
    return (_stacked(xp, lst, lst.items, shape),)


@kernel("TensorListGather", devices=_HOST)
def tensor_list_gather(xp, input_handle, indices, element_shape, *, element_dtype: np.dtype):
    """The items at `indices` (flattened) stacked on a new first axis, unset ones as zeros."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    positions = [int(i) for i in np.ravel(host(indices))]
    shape = _element_shape(lst, element_shape)
    if not fully_defined(shape) and not positions:
        raise ValueError(f"Tried to gather 0-elements from a list with non-fully-defined shape: "
                         f"{format_shape(shape)}")
    for i in positions:
        if not 0 <= i < lst.length:
            raise IndexError(f"Trying to gather element {i} in a list with {lst.length} elements.")
    chosen = [lst.items[i] for i in positions]
    if not fully_defined(lst.element_shape):
        shape = _merge_with_items(shape, chosen)
    if not fully_defined(shape):
        raise ValueError(f"Tried to gather uninitialized tensors from a list with non-fully-defined "
                         f"element_shape: {format_shape(shape)}")
    return (_stacked(xp, lst, chosen, shape),)


def _concat(xp: Any, lst: TensorList, shape: PartialShape, leading_dims: list[int] | None) -> tuple:
    """TensorListConcat(V2): items joined along their first axis, and each item's length (int64)."""
    if shape is not None and len(shape) < 1:
        raise ValueError("Concat requires elements to be at least vectors, found scalars instead.")
    first_dim = None if shape is None else shape[0]
    rest = None if shape is None else shape[1:]
    if not lst.items and not fully_defined(rest):
        raise ValueError(f"All except the first dimension must be fully defined when concating an empty tensor "
                         f"list. element_shape: {format_shape(rest)}")
    if not fully_defined(lst.element_shape):
        infer = first_dim is None
        inferred = first_dim
        for i, item in enumerate(lst.items):
            if item is None:
                continue
            if item.ndim == 0:
                raise ValueError(f"Concat saw a scalar shape at index {i} but requires at least vectors.")
            rest = merge_shapes(rest, tuple(item.shape[1:]))
            if first_dim is not None and first_dim != item.shape[0]:
                raise ValueError(f"First entry of element_shape input does not match the first dim of list "
                                 f"element at index: {i} Expected: {first_dim} Actual: {item.shape[0]}")
            if infer:
                if inferred is None:
                    inferred = item.shape[0]
                elif inferred != item.shape[0]:
                    inferred, infer = None, False
        first_dim = inferred
    if not fully_defined(rest):
        raise ValueError(f"Trying to concat list with only uninitialized tensors but "
                         f"element_shape_except_first_dim is not fully defined: {format_shape(rest)}")
    lengths, parts = [], []
    for i, item in enumerate(lst.items):
        if item is not None:
            n = item.shape[0]
        elif (leading_dims is None or i >= len(leading_dims)) and first_dim is not None:
            n = first_dim
        elif leading_dims is None:
            raise ValueError("Concating lists with uninitialized tensors is not supported in this version of "
                             "TensorListConcat. Consider updating your GraphDef to run the newer version.")
        elif i >= len(leading_dims):
            raise ValueError(f"List contains uninitialized tensor at index {i} but leading_dims has only "
                             f"{len(leading_dims)} elements.")
        else:
            n = leading_dims[i]
        lengths.append(n)
        parts.append(item if item is not None else element_zeros(xp, lst.element_dtype, (n, *rest)))
    if not parts:
        joined = element_zeros(xp, lst.element_dtype, (0, *rest))
    else:
        joined = xp.concatenate(parts)
    return joined, xp.asarray(lengths, dtype=np.int64).reshape(len(lengths))


@kernel("TensorListConcatV2", devices=_HOST, outputs=2)
def tensor_list_concat_v2(xp, input_handle, element_shape, leading_dims, *, element_dtype: np.dtype,
                          shape_type=None):
    """(items joined along axis 0, their lengths); unset items take their length from `leading_dims`."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    shape = _element_shape(lst, element_shape)
    return _concat(xp, lst, shape, [int(n) for n in np.ravel(host(leading_dims))])


@kernel("TensorListConcat", devices=_HOST, outputs=2)
def tensor_list_concat(xp, input_handle, *, element_dtype: np.dtype, element_shape: PartialShape = None):
    """TensorListConcat v1: the element shape is an attr, whose first dim is ignored."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    rest = None if element_shape is None else element_shape[1:]
    return _concat(xp, lst, None if rest is None else (None, *rest), None)


# --- changing lists (each returns a new list) ------------------------------------------------------------


@kernel("TensorListSetItem", devices=_HOST)
def tensor_list_set_item(xp, input_handle, index, item, *, element_dtype: np.dtype,
                         resize_if_index_out_of_bounds: bool = False):
    """The list with item `index` replaced; with `resize_if_index_out_of_bounds` it grows to fit."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    i = _index(index)
    grow = resize_if_index_out_of_bounds and i >= lst.length
    if i < 0 or (i >= lst.length and not grow):  # (TensorFlow 2.21 crashes on a negative index with resize)
        raise IndexError(f"Trying to modify element {i} in a list with {lst.length} elements.")
    if not compatible(lst.element_shape, tuple(item.shape)):
        raise ValueError(f"Tried to set a tensor with incompatible shape at a list index. Item element shape: "
                         f"{format_dims(item.shape)} list shape: {format_shape(lst.element_shape)}")
    return ((lst.resized(i + 1) if grow else lst).with_item(i, item),)


@kernel("TensorListPushBack", devices=_HOST)
def tensor_list_push_back(xp, input_handle, tensor, *, element_dtype: np.dtype):
    """The list with `tensor` appended."""
    if tensor.dtype != np.dtype(element_dtype):
        raise ValueError(f"Invalid data types; list elements {tf_name_of_numpy(element_dtype)} but tried to "
                         f"append {tf_name_of_numpy(tensor.dtype)}")
    lst = _list(input_handle)
    if not compatible(lst.element_shape, tuple(tensor.shape)):
        raise ValueError(f"Tried to append a tensor with incompatible shape to a list. Op element shape: "
                         f"{format_dims(tensor.shape)} list shape: {format_shape(lst.element_shape)}")
    _check_dtype(element_dtype, lst)
    if lst.max_num_elements != -1 and lst.length >= lst.max_num_elements:
        raise ValueError(f"Tried to push item into a full list list size: {lst.length} max_num_elements: "
                         f"{lst.max_num_elements}")
    return (lst.pushed(tensor),)


@kernel("TensorListPopBack", devices=_HOST, outputs=2)
def tensor_list_pop_back(xp, input_handle, element_shape, *, element_dtype: np.dtype):
    """(the list without its last item, that item); an unset one reads as zeros of the element shape."""
    lst = _list(input_handle)
    _check_dtype(element_dtype, lst)
    if not lst.items:
        raise ValueError("Trying to pop from an empty list.")
    last = lst.items[-1]
    if last is None:
        shape = _element_shape(lst, element_shape)
        if not fully_defined(shape):
            # NOTE: no space before the shape: TensorFlow's message runs them together.
            raise ValueError(f"Trying to read an uninitialized tensor but element_shape is not fully defined."
                             f"{format_shape(shape)}")
        last = element_zeros(xp, lst.element_dtype, shape)
    return (lst.replace_items(lst.items[:-1]), last)


@kernel("TensorListResize", devices=_HOST)
def tensor_list_resize(xp, input_handle, size, *, memory_limit: int | None = None):
    """The list cut to `size` items, or padded with unset ones."""
    lst = _list(input_handle)
    n = _index(size)
    if n < 0:
        raise ValueError(f"TensorListSlice expects size to be non-negative. Got: {n}")
    check_bytes(n * _SLOT_BYTES, memory_limit, "TensorListResize slots", (n,))
    return (lst.resized(n),)


@kernel("TensorListScatterIntoExistingList", devices=_HOST)
def tensor_list_scatter_into_existing_list(xp, input_handle, tensor, indices, *, element_dtype=None):
    """The list with row k of `tensor` at `indices[k]` (the last write wins), grown to fit the largest index."""
    lst = _list(input_handle)
    if tensor.dtype != lst.element_dtype:
        raise ValueError(f"Invalid data types; input tensor type: {tf_name_of_numpy(tensor.dtype)} list "
                         f"element_type: {tf_name_of_numpy(lst.element_dtype)}")
    if tensor.ndim == 0:
        raise ValueError("Tensor must be at least a vector, but saw shape: []")
    if indices.ndim != 1:
        raise ValueError(f"Expected indices to be a vector, but received shape: {format_dims(indices.shape)}")
    positions = [int(i) for i in host(indices)]
    if len(positions) != tensor.shape[0]:
        raise ValueError(f"Expected len(indices) == tensor.shape[0], but saw: {len(positions)} vs. "
                         f"{tensor.shape[0]}")
    if any(i < 0 for i in positions):  # TensorFlow 2.21 crashes here; refuse as its other scatters do
        raise ValueError("Indices in TensorListScatter must all be non-negative.")
    items = list(lst.items)
    # NOTE: TensorFlow grows the list with default tensors (float, shape [0]), not unset items; a
    # later TensorListStack then fails to merge shapes, as it does here.
    grow = max(positions, default=-1) + 1 - len(items)
    items += [xp.zeros((0,), np.float32)] * max(grow, 0)
    for row, i in enumerate(positions):
        items[i] = tensor[row, ...]
    return (lst.replace_items(items),)
