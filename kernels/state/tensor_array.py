"""TensorArray: the TF1 resource array that graphs built with v1 control flow read and write in loops.

A TensorArrayV3 node creates a fresh array each time it runs and outputs (handle, flow). The other ops
take the handle and a `flow` scalar: the flow carries no data, but passing it from each write to the
next read orders the ops that touch one array. tf.compat.v1 `dynamic_rnn`-style loops unstack their
input into one array (TensorArrayScatterV3), read a step per iteration (TensorArrayReadV3), write a
step of output into another (TensorArrayWriteV3) and stack it at the end (TensorArrayGatherV3).

    >>> handle, flow = tensor_array_v3(np, np.int32(2), dtype=np.dtype(np.float32))
    >>> flow = tensor_array_write_v3(np, handle, np.int32(1), np.ones(3, np.float32), flow)[0]
    >>> tensor_array_read_v3(np, handle, np.int32(1), flow, dtype=np.dtype(np.float32))[0]
    array([1., 1., 1.], dtype=float32)

Unlike TensorList values, the array is mutable: each run has its own, since its TensorArrayV3 node runs
again. With `clear_after_read` (the default) an element can be read once. An element never written
reads as zeros when the array's element shape is fully known, and is an error otherwise. Every op is
stateful, so none is constant-folded. Error messages are TensorFlow's, except that an array without a
`tensor_array_name` goes unnamed (TensorFlow names it after its node and a counter). The V2 ops of
TF 1.0-1.2 are left out: TensorFlow itself refuses them in GraphDefs of version 26 and later.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from kernels.host import format_dims, host, host_scalar
from kernels.limits import check_bytes
from kernels.partial_shape import PartialShape, compatible, format_shape, fully_defined
from kernels.registry import kernel
from kernels.state.tensor_list import element_zeros

# TensorArrays are Python objects holding arrays: their ops run on the host, and placement keeps them there.
_HOST = ("cpu",)

__all__ = ["TensorArray"]


@dataclass
class _Element:
    value: Any = None
    written: bool = False
    read: bool = False
    cleared: bool = False


@dataclass(eq=False)
class TensorArray:
    """One run's array: its elements (`_Element`s) and the attrs its TensorArrayV3 node was given."""

    element_dtype: np.dtype
    elements: list[_Element]
    element_shape: PartialShape = None
    dynamic_size: bool = False
    clear_after_read: bool = True
    identical_element_shapes: bool = False
    name: str = ""
    closed: bool = False
    # NOTE: a dataflow executor may run two writes of one loop iteration, or of two, at once.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # NOTE: as TensorFlow's Shape and Rank see it, a handle is a scalar of dtype resource.
    shape = ()
    ndim = 0
    dtype = np.dtype(object)

    @property
    def label(self) -> str:
        return f"TensorArray {self.name}" if self.name else "TensorArray"

    @property
    def size(self) -> int:
        return len(self.elements)

    def check_open(self) -> None:
        if self.closed:
            raise ValueError(f"{self.label} has already been closed.")

    def check_dtype(self, dtype: np.dtype, action: str) -> None:
        if np.dtype(dtype) != self.element_dtype:
            raise ValueError(f"TensorArray dtype is {tf_name_of_numpy(self.element_dtype)} but Op {action} dtype "
                             f"{tf_name_of_numpy(dtype)}.")

    def write(self, index: int, value: Any) -> None:
        with self.lock:
            self._write(index, value)

    def read(self, xp: Any, index: int) -> Any:
        with self.lock:
            return self._read(xp, index)

    def _write(self, index: int, value: Any) -> None:
        self.check_open()
        if index < 0 or (not self.dynamic_size and index >= self.size):
            raise IndexError(f"{self.label}: Tried to write to index {index} but array is not resizeable and "
                             f"size is: {self.size}")
        while index >= self.size:
            self.elements.append(_Element())
        shape = tuple(value.shape)
        if not compatible(self.element_shape, shape):
            raise ValueError(f"{self.label}: Could not write to TensorArray index {index} because the value "
                             f"shape is {format_dims(shape)} which is incompatible with the TensorArray's "
                             f"inferred element shape: {format_shape(self.element_shape)} (consider setting "
                             f"infer_shape=False).")
        if self.identical_element_shapes and not fully_defined(self.element_shape):
            self.element_shape = shape
        element = self.elements[index]
        if element.read:
            raise ValueError(f"{self.label}: Could not write to TensorArray index {index} because it has "
                             f"already been read.")
        if element.written:
            raise ValueError(f"{self.label}: Could not write to TensorArray index {index} because it has "
                             f"already been written to.")
        element.value, element.written = value, True

    def _read(self, xp: Any, index: int) -> Any:
        self.check_open()
        if index < 0 or index >= self.size:
            raise IndexError(f"Tried to read from index {index} but array size is: {self.size}")
        element = self.elements[index]
        if element.cleared:
            raise ValueError(f"{self.label}: Could not read index {index} twice because it was cleared after a "
                             f"previous read (perhaps try setting clear_after_read = false?).")
        if element.written:
            value = element.value
        elif fully_defined(self.element_shape):
            value = element_zeros(xp, self.element_dtype, self.element_shape)
        else:
            raise ValueError(
                f"{self.label}: Could not read from TensorArray index {index}.  Furthermore, the element shape is "
                f"not fully defined: {format_shape(self.element_shape)}.  It is possible you are working with a "
                "resizeable TensorArray and stop_gradients is not allowing the gradients to be written.  If you "
                "set the full element_shape property on the forward TensorArray, the proper all-zeros tensor "
                "will be returned instead of incurring this error.")
        element.read = True
        if self.clear_after_read:
            element.value, element.cleared = None, True
        return value

    def __repr__(self) -> str:
        written = sum(e.written for e in self.elements)
        return (f"TensorArray({tf_name_of_numpy(self.element_dtype)}, {format_shape(self.element_shape)}, "
                f"{self.size} elements, {written} written)")


def _array(handle: Any) -> TensorArray:
    if not isinstance(handle, TensorArray):
        raise ValueError(f"Input handle is not a TensorArray. Saw: '{type(handle).__name__}'")
    return handle


def _index(index: Any) -> int:
    return int(host_scalar(index, "index must be a scalar"))


def _vector(a: Any, what: str) -> list[int]:
    if a.ndim != 1:
        raise ValueError(f"Expected {what} to be a vector, but received shape: {format_dims(a.shape)}")
    return [int(i) for i in host(a)]


_ELEMENT_BYTES = 64


def _new_array(size: Any, dtype: np.dtype, element_shape: PartialShape, dynamic_size: bool,
               clear_after_read: bool, identical_element_shapes: bool, tensor_array_name: str,
               memory_limit: int | None = None) -> TensorArray:
    n = _index(size)
    if n < 0:
        raise ValueError("Size should be >= 0.")
    # Each element is a small Python object before anything is written: a size a client sends must not
    # make billions of them.
    check_bytes(n * _ELEMENT_BYTES, memory_limit, "TensorArray elements", (n,))
    return TensorArray(np.dtype(dtype), [_Element() for _ in range(n)], element_shape, dynamic_size,
                       clear_after_read, identical_element_shapes, tensor_array_name)


def _flow(xp: Any) -> Any:
    return xp.asarray(0.0, dtype=np.float32)


@kernel("TensorArrayV3", devices=_HOST, outputs=2, stateful=True)
def tensor_array_v3(xp, size, *, dtype: np.dtype, element_shape: PartialShape = None, dynamic_size: bool = False,
                    clear_after_read: bool = True, identical_element_shapes: bool = False,
                    tensor_array_name: str = "", memory_limit: int | None = None):
    """(handle, flow): a new array of `size` unwritten elements."""
    array = _new_array(size, dtype, element_shape, dynamic_size, clear_after_read, identical_element_shapes,
                       tensor_array_name, memory_limit)
    return (array, _flow(xp))


@kernel("TensorArrayWriteV3", devices=_HOST, stateful=True)
def tensor_array_write_v3(xp, handle, index, value, flow_in, *, T=None):
    """Writes element `index` (once); returns the flow."""
    array = _array(handle)
    array.check_dtype(value.dtype, "is trying to write")
    array.write(_index(index), value)
    return (flow_in,)


@kernel("TensorArrayReadV3", devices=_HOST, stateful=True)
def tensor_array_read_v3(xp, handle, index, flow_in, *, dtype: np.dtype):
    """Element `index`; it is cleared after the read when the array has clear_after_read."""
    array = _array(handle)
    array.check_dtype(dtype, "requested")
    return (array.read(xp, _index(index)),)


def _stack(xp: Any, array: TensorArray, values: list, element_shape: PartialShape) -> Any:
    if not values:
        if not fully_defined(element_shape):
            raise NotImplementedError(
                f"TensorArray has size zero, but element shape {format_shape(element_shape)} is not fully "
                "defined. Currently only static shapes are supported when packing zero-size TensorArrays.")
        return xp.zeros((0, *element_shape), dtype=array.element_dtype)
    first = tuple(values[0].shape)
    for i, v in enumerate(values[1:], start=1):
        if tuple(v.shape) != first:
            raise ValueError(f"TensorArray has inconsistent shapes.  Index 0 has shape: {format_dims(first)} but "
                             f"index {i} has shape: {format_dims(v.shape)}")
    return xp.stack(values)


@kernel("TensorArrayGatherV3", devices=_HOST, stateful=True)
def tensor_array_gather_v3(xp, handle, indices, flow_in, *, dtype: np.dtype, element_shape: PartialShape = None):
    """The elements at `indices` stacked on a new first axis (each read as TensorArrayReadV3 reads it)."""
    array = _array(handle)
    array.check_dtype(dtype, "requested")
    positions = _vector(indices, "indices")
    array.check_open()
    return (_stack(xp, array, [array.read(xp, i) for i in positions], element_shape),)


@kernel("TensorArrayScatterV3", devices=_HOST, stateful=True)
def tensor_array_scatter_v3(xp, handle, indices, value, flow_in, *, T=None):
    """Writes row k of `value` to element `indices[k]`; returns the flow."""
    array = _array(handle)
    array.check_dtype(value.dtype, "is trying to write")
    positions = _vector(indices, "indices")
    if value.ndim == 0:
        raise ValueError("Input value for unpack must be at least a vector but received shape: []")
    if len(positions) != value.shape[0]:
        raise ValueError(f"Expected len(indices) == values.shape[0], but saw: {len(positions)} vs. "
                         f"{value.shape[0]}")
    array.check_open()
    if positions and not array.dynamic_size and max(positions) >= array.size:
        raise IndexError(f"Max scatter index must be < array size ({max(positions)} vs. {array.size})")
    for row, i in enumerate(positions):
        array.write(i, value[row, ...])
    return (flow_in,)


@kernel("TensorArraySplitV3", devices=_HOST, stateful=True)
def tensor_array_split_v3(xp, handle, value, lengths, flow_in, *, T=None):
    """Writes consecutive slices of `value` (`lengths[i]` rows) to elements 0, 1, ...; returns the flow."""
    array = _array(handle)
    array.check_dtype(value.dtype, "is trying to write")
    if lengths.ndim != 1:
        raise ValueError(f"Expected lengths to be a vector, received shape: {format_dims(lengths.shape)}")
    sizes = [int(n) for n in host(lengths)]
    if value.ndim == 0:
        raise ValueError("Expected value to be at least a vector, but received shape: []")
    if sum(sizes) != value.shape[0]:
        raise ValueError(f"Expected sum of lengths to be equal to values.shape[0], but sum of lengths is "
                         f"{sum(sizes)} and value's shape is: {format_dims(value.shape)}")
    array.check_open()
    if not array.dynamic_size and array.size != len(sizes):
        raise ValueError(f"TensorArray's size is not equal to the size of lengths ({array.size} vs. "
                         f"{len(sizes)}), and the TensorArray is not marked as dynamically resizeable")
    start = 0
    for i, n in enumerate(sizes):
        array.write(i, value[start:start + n])
        start += n
    return (flow_in,)


@kernel("TensorArrayConcatV3", devices=_HOST, outputs=2, stateful=True)
def tensor_array_concat_v3(xp, handle, flow_in, *, dtype: np.dtype, element_shape_except0: PartialShape = None):
    """(every element joined along axis 0, each element's length as int64)."""
    array = _array(handle)
    array.check_dtype(dtype, "requested")
    array.check_open()
    values = [array.read(xp, i) for i in range(array.size)]
    if not values:
        if not fully_defined(element_shape_except0):
            raise NotImplementedError(
                f"TensorArray has size zero, but element_shape_except0 {format_shape(element_shape_except0)} is "
                "not fully defined. Currently only static shapes are supported when concatenating zero-size "
                "TensorArrays.")
        return xp.zeros((0, *element_shape_except0), dtype=array.element_dtype), xp.zeros((0,), dtype=np.int64)
    for i, v in enumerate(values):
        if v.ndim == 0:
            raise ValueError(f"Concat saw a scalar shape at index {i} but requires at least vectors.  Did you "
                             "mean to call pack?")
    rest = tuple(values[0].shape[1:])
    for i, v in enumerate(values[1:], start=1):
        if tuple(v.shape[1:]) != rest:
            raise ValueError(f"TensorArray has inconsistent shapes.  Index 0 has (excepting dimension 0) shape: "
                             f"{format_dims(rest)} but index {i} has (excepting dimension 0) shape: "
                             f"{format_dims(v.shape[1:])}")
    lengths = xp.asarray([v.shape[0] for v in values], dtype=np.int64)
    return xp.concatenate(values), lengths


@kernel("TensorArraySizeV3", devices=_HOST, stateful=True)
def tensor_array_size_v3(xp, handle, flow_in):
    """The number of elements, as an int32 scalar."""
    array = _array(handle)
    array.check_open()
    return (xp.asarray(array.size, dtype=np.int32),)


@kernel("TensorArrayCloseV3", devices=_HOST, outputs=0, stateful=True)
def tensor_array_close_v3(xp, handle):
    """Closes the array: later ops on it fail."""
    _array(handle).closed = True
    return ()
