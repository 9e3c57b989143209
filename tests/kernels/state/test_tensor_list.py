"""TensorList kernels: lists built, read and changed as Keras RNNs and TF2 TensorArrays use them.

Expected values and error messages are written by hand and were checked against TensorFlow 2.21's raw
ops (tf.raw_ops.TensorList*) on CPU.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kernels
from kernels.state.tensor_list import TensorList
from tests.kernels.checks import f32, i32, i64
from tests.kernels.conftest import _backends

F32 = np.dtype(np.float32)
X32 = np.arange(6, dtype=np.float32).reshape(3, 2)  # three items of shape [2]
UNKNOWN = np.int32(-1)  # the element_shape input meaning "unknown rank"


def _to_device(xp, value):
    if isinstance(value, TensorList):
        return value.replace_items(None if item is None else xp.asarray(item) for item in value.items)
    return xp.asarray(value)


def _to_host(value):
    if isinstance(value, TensorList):
        return value.replace_items(None if item is None else _to_host(item) for item in value.items)
    return np.asarray(value.get() if hasattr(value, "get") else value)


# TensorList ops run on the CPU only (placement keeps them there).
@pytest.fixture(params=list(_backends("cpu")))
def run(request):
    """run("Op", *inputs, **attrs) -> outputs, with TensorLists kept as lists and arrays back in numpy."""
    device, xp = request.param

    def run_op(op, *inputs, **attrs):
        outs = kernels.lookup(op, device).bind(xp, attrs)(*[_to_device(xp, x) for x in inputs])
        return tuple(_to_host(o) for o in outs)

    return run_op


def fails(exc, message):
    return pytest.raises(exc, match="^" + re.escape(message) + "$")


def items_of(lst: TensorList) -> list:
    return [None if item is None else item.tolist() for item in lst.items]


def same(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def from_tensor(run, tensor=X32, shape=UNKNOWN) -> TensorList:
    return run("TensorListFromTensor", tensor, shape, element_dtype=tensor.dtype)[0]


def reserve(run, shape, count, dtype=F32) -> TensorList:
    return run("TensorListReserve", shape, np.int32(count), element_dtype=dtype)[0]


# --- creating lists ---------------------------------------------------------------------------------------


def test_reserve_makes_unset_items_with_the_given_element_shape(run):
    lst = reserve(run, i32(-1, 2), 3)
    assert items_of(lst) == [None, None, None]
    assert lst.element_dtype == F32 and lst.element_shape == (None, 2)
    assert reserve(run, UNKNOWN, 0).element_shape is None
    assert reserve(run, i64(4), 1).element_shape == (4,)


@pytest.mark.parametrize("shape, count, message", [
    (i32(2), -1, "The num_elements to reserve must be a non negative number, but got -1"),
    (np.int32(-2), 3, "The only valid scalar shape tensor is the fully unknown shape specified as -1."),
    (i32(2, -2), 3, "Dimension -2 must be >= -1"),
    (np.array([[2]], np.int32), 3, "Shape must be at most rank 1 but is rank 2"),
    (f32([2]), 3, "Expected an int32 or int64 shape tensor; found float"),
])
def test_reserve_refuses_bad_counts_and_shapes(run, shape, count, message):
    with fails(ValueError, message):
        reserve(run, shape, count)


def test_from_tensor_splits_the_first_axis_and_keeps_the_shape_it_was_given(run):
    lst = from_tensor(run, X32, i32(-1))
    assert items_of(lst) == [[0, 1], [2, 3], [4, 5]]
    assert lst.element_shape == (None,)
    same(run("TensorListElementShape", lst)[0], i32(-1))


def test_from_tensor_refuses_scalars_and_incompatible_shapes(run):
    with fails(ValueError, "Tensor must be at least a vector, but saw shape: []"):
        from_tensor(run, np.float32(1))
    with fails(ValueError, "Specified a list with shape [3] from a tensor with shape [2]"):
        from_tensor(run, X32, i32(3))


def test_empty_list_with_a_maximum_refuses_a_push_past_it(run):
    lst = run("EmptyTensorList", i32(2), np.int32(1), element_dtype=F32)[0]
    assert items_of(lst) == [] and lst.max_num_elements == 1
    (lst,) = run("TensorListPushBack", lst, f32([1, 2]), element_dtype=F32)
    with fails(ValueError, "Tried to push item into a full list list size: 1 max_num_elements: 1"):
        run("TensorListPushBack", lst, f32([3, 4]), element_dtype=F32)
    with fails(ValueError, "max_num_elements expected to be a scalar but got shape: [1]"):
        run("EmptyTensorList", i32(2), i32(1), element_dtype=F32)


def test_scatter_places_rows_and_leaves_gaps_unset(run):
    rows = f32([[9, 9], [8, 8]])
    lst = run("TensorListScatter", rows, i32(2, 0), i32(2), element_dtype=F32)[0]
    assert items_of(lst) == [[8, 8], None, [9, 9]]
    lst = run("TensorListScatterV2", rows, i32(2, 0), i32(2), np.int32(4), element_dtype=F32)[0]
    assert items_of(lst) == [[8, 8], None, [9, 9], None]
    same(run("TensorListStack", lst, UNKNOWN, element_dtype=F32)[0], f32([[8, 8], [0, 0], [9, 9], [0, 0]]))


@pytest.mark.parametrize("op, indices, num_elements, message", [
    ("TensorListScatterV2", i32(2, 0), 2, "TensorListScatter: Trying to scatter at index 2 in list with size 2"),
    ("TensorListScatterV2", i32(-2, 0), -1, "Indices in TensorListScatter must all be non-negative."),
    ("TensorListScatterV2", i32(2, 0), -2, "TensorListScatter expects num_elements >= -1, found: -2"),
    ("TensorListScatter", i32(2), None, "Invalid number of rows in input tensor. Expected: 1 Actual: 2"),
])
def test_scatter_refuses_bad_indices(run, op, indices, num_elements, message):
    extra = () if num_elements is None else (np.int32(num_elements),)
    with fails(ValueError, message):
        run(op, f32([[9, 9], [8, 8]]), indices, i32(2), *extra, element_dtype=F32)


def test_split_cuts_consecutive_pieces(run):
    lst = run("TensorListSplit", X32, i32(-1, 2), i64(1, 0, 2), element_dtype=F32)[0]
    assert items_of(lst) == [[[0, 1]], [], [[2, 3], [4, 5]]]
    assert lst.element_shape == (None, 2)


@pytest.mark.parametrize("shape, lengths, message", [
    (i32(-1, 2), i64(1, 1), "Unused values in tensor. Length of tensor: 3 Values used: 2"),
    (i32(-1, 2), i64(2, 2), "Attempting to slice [2, 4] from tensor with length 3"),
    (i32(-1, 2), i64(-1, 4), "Invalid value in lengths: -1"),
    (np.zeros(0, np.int32), i64(3), "TensorListSplit requires element_shape to be at least of rank 1, but saw: []"),
    (i32(-1, 3), i64(3), "tensor shape [3,2] is not compatible with element_shape [?,3]"),
])
def test_split_refuses_lengths_that_do_not_cover_the_tensor(run, shape, lengths, message):
    with fails(ValueError, message):
        run("TensorListSplit", X32, shape, lengths, element_dtype=F32)


# --- reading lists ----------------------------------------------------------------------------------------


def test_length_and_element_shape(run):
    same(run("TensorListLength", reserve(run, UNKNOWN, 4))[0], np.int32(4))
    same(run("TensorListElementShape", reserve(run, UNKNOWN, 0), shape_type=np.dtype(np.int64))[0], np.int64(-1))
    same(run("TensorListElementShape", reserve(run, i32(-1, 2), 3))[0], i32(-1, 2))
    same(run("TensorListElementShape", reserve(run, np.zeros(0, np.int32), 1))[0], np.zeros(0, np.int32))


def test_get_item_reads_a_set_item(run):
    same(run("TensorListGetItem", from_tensor(run), np.int32(2), UNKNOWN, element_dtype=F32)[0], f32([4, 5]))


def test_get_item_reads_an_unset_item_as_zeros_of_the_merged_shape(run):
    lst = reserve(run, i32(-1, 2), 3)
    same(run("TensorListGetItem", lst, np.int32(0), i32(3, -1), element_dtype=F32)[0], np.zeros((3, 2), F32))
    # the unknown dim comes from another item once one is set
    (lst,) = run("TensorListSetItem", lst, np.int32(1), np.ones((4, 2), F32), element_dtype=F32)
    same(run("TensorListGetItem", lst, np.int32(0), UNKNOWN, element_dtype=F32)[0], np.zeros((4, 2), F32))
    ints = reserve(run, i32(2), 2, np.dtype(np.int32))
    same(run("TensorListGetItem", ints, np.int32(1), UNKNOWN, element_dtype=np.dtype(np.int32))[0], i32(0, 0))


def test_get_item_reads_an_unset_string_as_empty_strings():
    strings = kernels.lookup("TensorListReserve", "cpu").bind(np, {"element_dtype": np.dtype(object)})(
        i32(2), np.int32(1))[0]
    got = kernels.lookup("TensorListGetItem", "cpu").bind(np, {"element_dtype": np.dtype(object)})(
        strings, np.int32(0), UNKNOWN)[0]
    assert got.dtype == object and got.tolist() == [b"", b""]


@pytest.mark.parametrize("index, shape, exc, message", [
    (0, UNKNOWN, ValueError, "Trying to read an uninitialized tensor but element_shape is not fully defined: "
                             "[?,2] and no list element is set."),
    (0, i32(3, 3), ValueError, "PartialTensorShape: Incompatible shapes during merge: [3,3] vs. [?,2]"),
    (0, i32(3), ValueError, "PartialTensorShape: Incompatible ranks during merge: 1 vs. 2"),
    (3, UNKNOWN, IndexError, "Trying to access element 3 in a list with 3 elements."),
    (-1, UNKNOWN, IndexError, "Trying to access element -1 in a list with 3 elements."),
])
def test_get_item_errors(run, index, shape, exc, message):
    with fails(exc, message):
        run("TensorListGetItem", reserve(run, i32(-1, 2), 3), np.int32(index), shape, element_dtype=F32)


def test_ops_check_the_element_dtype(run):
    lst = reserve(run, i32(-1, 2), 3)
    message = "Invalid data types; op elements int32 but list elements float"
    int32 = np.dtype(np.int32)
    with fails(ValueError, message):
        run("TensorListGetItem", lst, np.int32(0), UNKNOWN, element_dtype=int32)
    with fails(ValueError, message):
        run("TensorListStack", lst, UNKNOWN, element_dtype=int32)
    with fails(ValueError, message):
        run("TensorListSetItem", lst, np.int32(0), np.ones((4, 2), np.int32), element_dtype=int32)
    with fails(ValueError, message):
        run("TensorListPushBack", lst, np.ones((4, 2), np.int32), element_dtype=int32)
    with fails(ValueError, "Invalid data types; list elements float but tried to append int32"):
        run("TensorListPushBack", lst, np.ones((4, 2), np.int32), element_dtype=F32)
    with fails(ValueError, "Invalid data types; input tensor type: int32 list element_type: float"):
        run("TensorListScatterIntoExistingList", lst, np.ones((1, 4, 2), np.int32), i32(0))


def test_stack_stacks_items_with_unset_ones_as_zeros(run):
    (lst,) = run("TensorListSetItem", reserve(run, i32(-1, 2), 3), np.int32(1), np.ones((1, 2), F32),
                 element_dtype=F32)
    same(run("TensorListStack", lst, UNKNOWN, element_dtype=F32)[0], f32([[[0, 0]], [[1, 1]], [[0, 0]]]))
    same(run("TensorListStack", reserve(run, i32(-1, 2), 2), i32(1, 2), element_dtype=F32, num_elements=2)[0],
         np.zeros((2, 1, 2), F32))
    ints = from_tensor(run, i32(4, 5, 6))
    same(run("TensorListStack", ints, UNKNOWN, element_dtype=np.dtype(np.int32), num_elements=3)[0], i32(4, 5, 6))


def test_stack_of_an_empty_list_needs_a_full_element_shape(run):
    same(run("TensorListStack", reserve(run, UNKNOWN, 0), i32(0, 2), element_dtype=F32)[0], np.zeros((0, 0, 2), F32))
    same(run("TensorListStack", reserve(run, i32(2), 0), UNKNOWN, element_dtype=F32)[0], np.zeros((0, 2), F32))
    with fails(ValueError, "Tried to stack elements of an empty list with non-fully-defined element_shape: "
                           "[?,2]"):
        run("TensorListStack", reserve(run, i32(-1, 2), 0), UNKNOWN, element_dtype=F32)


@pytest.mark.parametrize("lst, shape, num_elements, message", [
    ("unset", UNKNOWN, -1, "Tried to stack list which only contains uninitialized tensors and has a "
                           "non-fully-defined element_shape: [?,2]"),
    ("three", UNKNOWN, 2, "Operation expected a list with 2 elements but got a list with 3 elements."),
    ("three", i32(3), -1, "PartialTensorShape: Incompatible shapes during merge: [3] vs. [2]"),
    ("ragged", UNKNOWN, -1, "PartialTensorShape: Incompatible shapes during merge: [2] vs. [3]"),
    ("mixed_rank", UNKNOWN, -1, "PartialTensorShape: Incompatible ranks during merge: 1 vs. 2"),
])
def test_stack_errors(run, lst, shape, num_elements, message):
    lists = {
        "unset": TensorList.reserve(F32, (None, 2), 3),
        "three": TensorList.from_items(F32, None, X32),
        "ragged": TensorList.from_items(F32, None, [np.ones(2, F32), np.ones(3, F32)]),
        "mixed_rank": TensorList.from_items(F32, None, [np.ones(2, F32), np.ones((2, 1), F32)]),
    }
    with fails(ValueError, message):
        run("TensorListStack", lists[lst], shape, element_dtype=F32, num_elements=num_elements)


def test_gather_picks_items_in_index_order_and_flattens_the_indices(run):
    lst = from_tensor(run)
    same(run("TensorListGather", lst, i32(2, 0, 2), UNKNOWN, element_dtype=F32)[0], f32([[4, 5], [0, 1], [4, 5]]))
    same(run("TensorListGather", lst, np.array([[2, 0], [1, 1]], np.int32), UNKNOWN, element_dtype=F32)[0],
         f32([[4, 5], [0, 1], [2, 3], [2, 3]]))
    partly = TensorList.from_items(F32, (None, 2), [None, np.ones((4, 2), F32)])
    same(run("TensorListGather", partly, i32(0, 1), UNKNOWN, element_dtype=F32)[0],
         np.stack([np.zeros((4, 2), F32), np.ones((4, 2), F32)]))


def test_gather_errors(run):
    lst = from_tensor(run)
    with fails(IndexError, "Trying to gather element 3 in a list with 3 elements."):
        run("TensorListGather", lst, i32(3), UNKNOWN, element_dtype=F32)
    with fails(IndexError, "Trying to gather element -1 in a list with 3 elements."):
        run("TensorListGather", lst, i32(-1), UNKNOWN, element_dtype=F32)
    with fails(ValueError, "Tried to gather 0-elements from a list with non-fully-defined shape: <unknown>"):
        run("TensorListGather", lst, np.zeros(0, np.int32), UNKNOWN, element_dtype=F32)
    same(run("TensorListGather", lst, np.zeros(0, np.int32), i32(2), element_dtype=F32)[0], np.zeros((0, 2), F32))


def test_concat_v2_joins_items_and_reports_their_lengths(run):
    lst = from_tensor(run)
    joined, lengths = run("TensorListConcatV2", lst, UNKNOWN, np.zeros(0, np.int64), element_dtype=F32)
    same(joined, f32([0, 1, 2, 3, 4, 5]))
    same(lengths, i64(2, 2, 2))


def test_concat_v2_sizes_unset_items_from_the_others_or_from_leading_dims(run):
    lst = TensorList.from_items(F32, (None, 2), [None, np.ones((2, 2), F32), None])
    joined, lengths = run("TensorListConcatV2", lst, UNKNOWN, np.zeros(0, np.int64), element_dtype=F32)
    same(joined, f32([[0, 0], [0, 0], [1, 1], [1, 1], [0, 0], [0, 0]]))
    same(lengths, i64(2, 2, 2))
    joined, lengths = run("TensorListConcatV2", lst, UNKNOWN, i64(1, 5, 3), element_dtype=F32)
    same(lengths, i64(1, 2, 3))
    assert joined.shape == (6, 2)
    _, lengths = run("TensorListConcatV2", lst, UNKNOWN, i64(1), element_dtype=F32)
    same(lengths, i64(1, 2, 2))
    joined, lengths = run("TensorListConcatV2", reserve(run, UNKNOWN, 0), i32(-1, 2), np.zeros(0, np.int64),
                          element_dtype=F32)
    same(joined, np.zeros((0, 2), F32))
    same(lengths, np.zeros(0, np.int64))


@pytest.mark.parametrize("lst, shape, message", [
    ("scalars", UNKNOWN, "Concat saw a scalar shape at index 0 but requires at least vectors."),
    ("three", np.zeros(0, np.int32), "Concat requires elements to be at least vectors, found scalars instead."),
    ("cubes", i32(3, 2), "First entry of element_shape input does not match the first dim of list element at "
                         "index: 0 Expected: 3 Actual: 2"),
    ("empty", i32(-1, -1), "All except the first dimension must be fully defined when concating an empty "
                           "tensor list. element_shape: [?]"),
    ("unset", UNKNOWN, "Trying to concat list with only uninitialized tensors but element_shape_except_first_dim "
                       "is not fully defined: <unknown>"),
])
def test_concat_v2_errors(run, lst, shape, message):
    lists = {
        "scalars": TensorList.from_items(F32, None, f32([0, 1, 2])),
        "three": TensorList.from_items(F32, None, X32),
        "cubes": TensorList.from_items(F32, None, np.zeros((3, 2, 2), F32)),
        "empty": TensorList.reserve(F32, None, 0),
        "unset": TensorList.reserve(F32, None, 2),
    }
    with fails(ValueError, message):
        run("TensorListConcatV2", lists[lst], shape, np.zeros(0, np.int64), element_dtype=F32)


def test_concat_v1_takes_the_element_shape_from_its_attr(run):
    lst = from_tensor(run, np.arange(12, dtype=np.float32).reshape(3, 2, 2))
    joined, lengths = run("TensorListConcat", lst, element_dtype=F32)
    same(joined, np.arange(12, dtype=np.float32).reshape(6, 2))
    same(lengths, i64(2, 2, 2))
    # v1 drops the first dim of its attr and ignores the list's own shape: unset items cannot be sized
    with fails(ValueError, "Concating lists with uninitialized tensors is not supported in this version of "
                           "TensorListConcat. Consider updating your GraphDef to run the newer version."):
        run("TensorListConcat", reserve(run, i32(2, 2), 2), element_dtype=F32, element_shape=(3, 2))
    with fails(ValueError, "Trying to concat list with only uninitialized tensors but element_shape_except_first_dim "
                           "is not fully defined: <unknown>"):
        run("TensorListConcat", reserve(run, i32(2, 2), 2), element_dtype=F32)


# --- changing lists ---------------------------------------------------------------------------------------


def test_set_item_returns_a_new_list_and_leaves_its_input_alone(run):
    lst = from_tensor(run)
    (changed,) = run("TensorListSetItem", lst, np.int32(1), f32([7, 7]), element_dtype=F32)
    assert items_of(changed) == [[0, 1], [7, 7], [4, 5]]
    assert items_of(lst) == [[0, 1], [2, 3], [4, 5]]


def test_set_item_grows_the_list_when_asked(run):
    (lst,) = run("TensorListSetItem", reserve(run, i32(2), 1), np.int32(3), f32([1, 2]), element_dtype=F32,
                 resize_if_index_out_of_bounds=True)
    same(run("TensorListStack", lst, i32(2), element_dtype=F32)[0], f32([[0, 0], [0, 0], [0, 0], [1, 2]]))


@pytest.mark.parametrize("index, item, resize, exc, message", [
    (3, np.ones((4, 2), F32), False, IndexError, "Trying to modify element 3 in a list with 3 elements."),
    (-1, np.ones((4, 2), F32), False, IndexError, "Trying to modify element -1 in a list with 3 elements."),
    (-1, np.ones((4, 2), F32), True, IndexError, "Trying to modify element -1 in a list with 3 elements."),
    (0, np.ones((4, 3), F32), False, ValueError, "Tried to set a tensor with incompatible shape at a list index. "
                                                 "Item element shape: [4,3] list shape: [?,2]"),
])
def test_set_item_errors(run, index, item, resize, exc, message):
    with fails(exc, message):
        run("TensorListSetItem", reserve(run, i32(-1, 2), 3), np.int32(index), item, element_dtype=F32,
            resize_if_index_out_of_bounds=resize)


def test_push_back_appends_and_checks_the_shape(run):
    (lst,) = run("TensorListPushBack", from_tensor(run), f32([7, 8]), element_dtype=F32)
    same(run("TensorListStack", lst, UNKNOWN, element_dtype=F32)[0], f32([[0, 1], [2, 3], [4, 5], [7, 8]]))
    with fails(ValueError, "Tried to append a tensor with incompatible shape to a list. Op element shape: [3] "
                           "list shape: [2]"):
        run("TensorListPushBack", reserve(run, i32(2), 0), f32([7, 8, 9]), element_dtype=F32)


def test_pop_back_returns_the_shorter_list_and_the_last_item(run):
    lst, last = run("TensorListPopBack", from_tensor(run), UNKNOWN, element_dtype=F32)
    same(last, f32([4, 5]))
    assert items_of(lst) == [[0, 1], [2, 3]]
    lst, last = run("TensorListPopBack", reserve(run, i32(-1, 2), 3), i32(5, -1), element_dtype=F32)
    same(last, np.zeros((5, 2), F32))
    assert lst.length == 2


def test_pop_back_errors(run):
    with fails(ValueError, "Trying to pop from an empty list."):
        run("TensorListPopBack", reserve(run, i32(2), 0), UNKNOWN, element_dtype=F32)
    with fails(ValueError, "Trying to read an uninitialized tensor but element_shape is not fully defined.[?,2]"):
        run("TensorListPopBack", reserve(run, i32(-1, 2), 3), UNKNOWN, element_dtype=F32)


def test_resize_pads_with_unset_items_or_cuts(run):
    lst = from_tensor(run)
    (longer,) = run("TensorListResize", lst, np.int32(5))
    same(run("TensorListStack", longer, i32(2), element_dtype=F32)[0], f32([[0, 1], [2, 3], [4, 5], [0, 0], [0, 0]]))
    (shorter,) = run("TensorListResize", lst, np.int32(1))
    assert items_of(shorter) == [[0, 1]]
    with fails(ValueError, "TensorListSlice expects size to be non-negative. Got: -1"):
        run("TensorListResize", lst, np.int32(-1))


def test_scatter_into_existing_list_overwrites_and_grows(run):
    lst = from_tensor(run)
    (changed,) = run("TensorListScatterIntoExistingList", lst, f32([[9, 9], [8, 8]]), i32(1, 1))
    assert items_of(changed) == [[0, 1], [8, 8], [4, 5]]  # the last write wins
    (grown,) = run("TensorListScatterIntoExistingList", lst, f32([[9, 9]]), i32(4))
    # NOTE: TensorFlow fills the gap with empty float vectors, not unset items
    same(run("TensorListGetItem", grown, np.int32(3), UNKNOWN, element_dtype=F32)[0], np.zeros(0, F32))
    same(run("TensorListGetItem", grown, np.int32(4), UNKNOWN, element_dtype=F32)[0], f32([9, 9]))
    with fails(ValueError, "PartialTensorShape: Incompatible shapes during merge: [2] vs. [0]"):
        run("TensorListStack", grown, i32(2), element_dtype=F32)


@pytest.mark.parametrize("tensor, indices, message", [
    (f32([[9, 9]]), i32(0, 1), "Expected len(indices) == tensor.shape[0], but saw: 2 vs. 1"),
    (np.float32(9), i32(0), "Tensor must be at least a vector, but saw shape: []"),
    (f32([[9, 9]]), i32(-1), "Indices in TensorListScatter must all be non-negative."),
])
def test_scatter_into_existing_list_errors(run, tensor, indices, message):
    with fails(ValueError, message):
        run("TensorListScatterIntoExistingList", from_tensor(run), tensor, indices)


def test_a_list_is_a_variant_scalar():
    lst = TensorList.reserve(F32, (2,), 1)
    assert lst.shape == () and lst.ndim == 0 and lst.dtype == np.dtype(object)
    assert repr(lst) == "TensorList(float, [2], 1 items, 1 unset)"


def test_ops_refuse_what_is_not_a_list(run):
    with fails(ValueError, "Input handle is not a list. Saw: 'ndarray'"):
        run("TensorListLength", np.float32(0))


def test_string_rows_stay_zero_d_arrays_through_a_list() -> None:
    """map_fn over a batch of strings (encoded images) unstacks a 1-D string tensor: each item must be a
    0-d string array, as TensorFlow's elements are, not a bare bytes object."""
    from kernels.state.tensor_list import tensor_list_from_tensor, tensor_list_get_item

    strings = np.array([b"a", b"bc"], dtype=object)
    (lst,) = tensor_list_from_tensor(np, strings, np.array(-1, np.int32))
    (item,) = tensor_list_get_item(np, lst, np.int32(1), np.array(-1, np.int32), element_dtype=np.dtype(object))
    assert isinstance(item, np.ndarray) and item.shape == () and item.item() == b"bc"
