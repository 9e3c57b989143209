"""TensorArray (v1 resource) kernels: arrays written and read as tf.compat.v1 loops do.

Expected values and error messages are written by hand and were checked against TensorFlow 2.21
(tf.raw_ops.TensorArray*V3 in a v1 Session).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kernels
from kernels.state.tensor_array import TensorArray
from tests.kernels.checks import f32, i32, i64
from tests.kernels.conftest import _backends

F32 = np.dtype(np.float32)


class Array:
    """Runs the TensorArray*V3 kernels on one array, threading the flow from op to op as a graph does."""

    def __init__(self, device, xp, size=3, **attrs):
        self.device, self.xp = device, xp
        self.handle, self.flow = self.op("TensorArrayV3", np.int32(size), dtype=attrs.pop("dtype", F32), **attrs)

    def op(self, op, *inputs, **attrs):
        args = [x if isinstance(x, TensorArray) else self.xp.asarray(x) for x in inputs]
        outs = kernels.lookup(op, self.device).bind(self.xp, attrs)(*args)
        return tuple(o if isinstance(o, TensorArray) else np.asarray(o.get() if hasattr(o, "get") else o)
                     for o in outs)

    def write(self, index, value):
        (self.flow,) = self.op("TensorArrayWriteV3", self.handle, np.int32(index), value, self.flow)

    def read(self, index, dtype=F32):
        return self.op("TensorArrayReadV3", self.handle, np.int32(index), self.flow, dtype=dtype)[0]

    def scatter(self, indices, value):
        (self.flow,) = self.op("TensorArrayScatterV3", self.handle, indices, value, self.flow)

    def gather(self, indices, dtype=F32, **attrs):
        return self.op("TensorArrayGatherV3", self.handle, indices, self.flow, dtype=dtype, **attrs)[0]

    def split(self, value, lengths):
        (self.flow,) = self.op("TensorArraySplitV3", self.handle, value, lengths, self.flow)

    def concat(self, **attrs):
        return self.op("TensorArrayConcatV3", self.handle, self.flow, dtype=F32, **attrs)

    def size(self):
        return self.op("TensorArraySizeV3", self.handle, self.flow)[0]


# TensorArray ops run on the CPU only (placement keeps them there).
@pytest.fixture(params=list(_backends("cpu")))
def array(request):
    """array(size, **attrs) -> a new Array on the parametrized backend."""
    device, xp = request.param
    return lambda size=3, **attrs: Array(device, xp, size, **attrs)


def fails(exc, message):
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def same(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def test_write_then_read_passes_the_flow_along(array):
    ta = array(3)
    same(ta.flow, np.float32(0))
    ta.write(1, f32([1, 1]))
    same(ta.flow, np.float32(0))
    same(ta.read(1), f32([1, 1]))
    same(ta.size(), np.int32(3))


def test_each_run_of_tensor_array_v3_makes_a_fresh_array(array):
    first, second = array(2), array(2)
    first.write(0, f32([1]))
    second.write(0, f32([2]))
    same(first.read(0), f32([1]))
    same(second.read(0), f32([2]))


def test_an_element_is_cleared_after_its_read_unless_asked_not_to(array):
    ta = array(3)
    ta.write(1, f32([1, 1]))
    ta.read(1)
    with fails(ValueError, "TensorArray: Could not read index 1 twice because it was cleared after a previous "
                           "read (perhaps try setting clear_after_read = false?)."):
        ta.read(1)
    kept = array(3, clear_after_read=False, tensor_array_name="kept")
    kept.write(1, f32([1, 1]))
    same(kept.read(1), kept.read(1))
    with fails(ValueError, "TensorArray kept: Could not write to TensorArray index 1 because it has already been "
                           "read."):
        kept.write(1, f32([2, 2]))


def test_an_unwritten_element_reads_as_zeros_only_when_the_element_shape_is_known(array):
    same(array(3, element_shape=(2,)).read(0), f32([0, 0]))
    identical = array(3, identical_element_shapes=True)
    identical.write(1, f32([1, 1]))
    same(identical.read(0), f32([0, 0]))
    ta = array(3, element_shape=(None, 2))
    ta.write(0, np.ones((3, 2), F32))
    with fails(ValueError, "TensorArray: Could not read from TensorArray index 1.  Furthermore, the element shape "
                           "is not fully defined: [?,2].  It is possible you are working with a resizeable "
                           "TensorArray and stop_gradients is not allowing the gradients to be written.  If you set "
                           "the full element_shape property on the forward TensorArray, the proper all-zeros "
                           "tensor will be returned instead of incurring this error."):
        ta.read(1)


def test_a_dynamic_array_grows_on_write(array):
    ta = array(3, dynamic_size=True)
    ta.write(5, f32([1, 1]))
    same(ta.size(), np.int32(6))
    ta.scatter(i32(7), f32([[2, 2]]))
    same(ta.size(), np.int32(8))


@pytest.mark.parametrize("index, value, attrs, exc, message", [
    (3, f32([1, 1]), {}, IndexError, "TensorArray: Tried to write to index 3 but array is not resizeable and size "
                                     "is: 3"),
    (-1, f32([1, 1]), {"dynamic_size": True}, IndexError, "TensorArray: Tried to write to index -1 but array is "
                                                          "not resizeable and size is: 3"),
    (1, f32([1, 1]), {"element_shape": (3,)}, ValueError,
     "TensorArray: Could not write to TensorArray index 1 because the value shape is [2] which is incompatible "
     "with the TensorArray's inferred element shape: [3] (consider setting infer_shape=False)."),
    (1, i32(1, 1), {}, ValueError, "TensorArray dtype is float but Op is trying to write dtype int32."),
])
def test_write_errors(array, index, value, attrs, exc, message):
    with fails(exc, message):
        array(3, **attrs).write(index, value)


def test_an_element_is_written_once(array):
    ta = array(3)
    ta.write(1, f32([1, 1]))
    with fails(ValueError, "TensorArray: Could not write to TensorArray index 1 because it has already been "
                           "written to."):
        ta.write(1, f32([1, 1]))
    identical = array(3, identical_element_shapes=True)
    identical.write(0, f32([1, 1]))
    with fails(ValueError, "TensorArray: Could not write to TensorArray index 1 because the value shape is [3] "
                           "which is incompatible with the TensorArray's inferred element shape: [2] (consider "
                           "setting infer_shape=False)."):
        identical.write(1, f32([1, 1, 1]))


def test_read_errors(array):
    ta = array(3)
    with fails(IndexError, "Tried to read from index 3 but array size is: 3"):
        ta.read(3)
    with fails(IndexError, "Tried to read from index -1 but array size is: 3"):
        ta.read(-1)
    ta.write(1, f32([1, 1]))
    with fails(ValueError, "TensorArray dtype is float but Op requested dtype int32."):
        ta.read(1, dtype=np.dtype(np.int32))


def test_scatter_then_gather(array):
    ta = array(3)
    ta.scatter(i32(2, 0), f32([[0, 1], [2, 3]]))
    ta.write(1, f32([1, 1]))
    same(ta.gather(i32(0, 1, 2)), f32([[2, 3], [1, 1], [0, 1]]))


def test_gather_of_nothing_needs_its_element_shape_attr(array):
    same(array(0).gather(np.zeros(0, np.int32), element_shape=(2,)), np.zeros((0, 2), F32))
    with fails(NotImplementedError, "TensorArray has size zero, but element shape <unknown> is not fully defined. "
                                    "Currently only static shapes are supported when packing zero-size "
                                    "TensorArrays."):
        array(0, element_shape=(2,)).gather(np.zeros(0, np.int32))


def test_gather_errors(array):
    ta = array(3)
    ta.write(1, f32([1, 1]))
    ta.write(2, f32([1, 1, 1]))
    with fails(ValueError, "TensorArray has inconsistent shapes.  Index 0 has shape: [2] but index 1 has shape: "
                           "[3]"):
        ta.gather(i32(1, 2))
    ta = array(3)
    ta.write(1, f32([1, 1]))
    with fails(IndexError, "Tried to read from index 3 but array size is: 3"):
        ta.gather(i32(1, 3))
    ta = array(3)
    ta.write(1, f32([1, 1]))
    with fails(ValueError, "TensorArray: Could not read index 1 twice because it was cleared after a previous "
                           "read (perhaps try setting clear_after_read = false?)."):
        ta.gather(i32(1, 1))


@pytest.mark.parametrize("indices, value, message, exc", [
    (i32(3), f32([[1, 1]]), "Max scatter index must be < array size (3 vs. 3)", IndexError),
    (i32(0, 1), f32([[1, 1]]), "Expected len(indices) == values.shape[0], but saw: 2 vs. 1", ValueError),
    (i32(-1), f32([[1, 1]]), "TensorArray: Tried to write to index -1 but array is not resizeable and size is: 3",
     IndexError),
    (i32(0), np.float32(1), "Input value for unpack must be at least a vector but received shape: []", ValueError),
    (i32(0), i32([1, 1]).reshape(1, 2), "TensorArray dtype is float but Op is trying to write dtype int32.",
     ValueError),
])
def test_scatter_errors(array, indices, value, message, exc):
    with fails(exc, message):
        array(3).scatter(indices, value)


def test_split_then_concat(array):
    ta = array(3)
    ta.split(np.arange(12, dtype=np.float32).reshape(6, 2), i64(1, 2, 3))
    joined, lengths = ta.concat()
    same(joined, np.arange(12, dtype=np.float32).reshape(6, 2))
    same(lengths, i64(1, 2, 3))
    joined, lengths = array(0).concat(element_shape_except0=(2,))
    same(joined, np.zeros((0, 2), F32))
    same(lengths, np.zeros(0, np.int64))


def test_split_and_concat_errors(array):
    with fails(ValueError, "Expected sum of lengths to be equal to values.shape[0], but sum of lengths is 3 and "
                           "value's shape is: [6,2]"):
        array(3).split(np.ones((6, 2), F32), i64(1, 2))
    with fails(ValueError, "TensorArray's size is not equal to the size of lengths (3 vs. 2), and the TensorArray "
                           "is not marked as dynamically resizeable"):
        array(3).split(np.ones((3, 2), F32), i64(1, 2))
    ta = array(2)
    ta.write(0, np.ones((2, 2), F32))
    ta.write(1, np.ones((1, 3), F32))
    with fails(ValueError, "TensorArray has inconsistent shapes.  Index 0 has (excepting dimension 0) shape: [2] "
                           "but index 1 has (excepting dimension 0) shape: [3]"):
        ta.concat()
    ta = array(2)
    ta.write(0, np.float32(1))
    ta.write(1, np.float32(2))
    with fails(ValueError, "Concat saw a scalar shape at index 0 but requires at least vectors.  Did you mean to "
                           "call pack?"):
        ta.concat()
    with fails(NotImplementedError, "TensorArray has size zero, but element_shape_except0 <unknown> is not fully "
                                    "defined. Currently only static shapes are supported when concatenating "
                                    "zero-size TensorArrays."):
        array(0).concat()


def test_a_closed_array_refuses_every_op(array):
    ta = array(3, tensor_array_name="done")
    assert ta.op("TensorArrayCloseV3", ta.handle) == ()
    with fails(ValueError, "TensorArray done has already been closed."):
        ta.size()
    with fails(ValueError, "TensorArray done has already been closed."):
        ta.write(0, f32([1]))


def test_a_negative_size_is_refused(array):
    with fails(ValueError, "Size should be >= 0."):
        array(-1)


def test_an_unwritten_string_element_reads_as_the_empty_string():
    import kernels

    bind = lambda op, **attrs: kernels.lookup(op, "cpu").bind(np, attrs)  # noqa: E731
    handle, flow = bind("TensorArrayV3", dtype=np.dtype(object), element_shape=(2,))(np.int32(3))
    (value,) = bind("TensorArrayReadV3", dtype=np.dtype(object))(handle, np.int32(1), flow)
    assert value.tolist() == [b"", b""]
