"""The ragged-tensor kernels: RaggedTensorToTensor, RaggedTensorToSparse, RaggedRange, RaggedGather,
RaggedCross and the variant pair, with TensorFlow's quirks and errors. Expected values and messages were
read off TensorFlow 2.21; tests/fixtures/ops/ragged/ holds TensorFlow's outputs for more inputs, and the
graphs common ragged code lowers to (map_fn over ragged rows included)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kernels
from kernels.ragged.variant import RaggedTensorVariant
from kernels.state.tensor_list import TensorList
from kernels.strings.hash_functions import fingerprint_cat64
from tests.kernels.checks import assert_outputs, f32, i32, i64

SPLITS = i64(0, 2, 2, 5, 6)  # [[1, 2], [], [3, 4, 5], [6]]
VALUES = f32([1, 2, 3, 4, 5, 6])
UNKNOWN = np.int64(-1)


def strings(*values: str) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() for v in values]
    return out


def raises(message: str):
    return pytest.raises(ValueError, match=re.escape(message))


# --- RaggedTensorToTensor ---------------------------------------------------------------------------------

def to_tensor(run, shape, values, default, partitions, types):
    return run("RaggedTensorToTensor", shape, values, default, *partitions, row_partition_types=tuple(types))


TO_TENSOR = [
    pytest.param(UNKNOWN, VALUES, np.float32(0), [SPLITS], ["ROW_SPLITS"],
                 f32([[1, 2, 0], [0, 0, 0], [3, 4, 5], [6, 0, 0]]), id="row-splits"),
    pytest.param(i64(2, 2), VALUES, np.float32(-1), [SPLITS], ["ROW_SPLITS"], f32([[1, 2], [-1, -1]]), id="truncate"),
    pytest.param(i32(5, 4), VALUES, np.float32(9), [SPLITS.astype(np.int32)], ["ROW_SPLITS"],
                 f32([[1, 2, 9, 9], [9] * 4, [3, 4, 5, 9], [6, 9, 9, 9], [9] * 4]), id="pad-int32"),
    pytest.param(i64(-1, -1), VALUES[:5], np.float32(0), [np.int64(4), i64(0, 0, 2, 2, 2)],
                 ["FIRST_DIM_SIZE", "VALUE_ROWIDS"], f32([[1, 2, 0], [0, 0, 0], [3, 4, 5], [0, 0, 0]]),
                 id="value-rowids"),
    # NOTE: TensorFlow copies values in order: one whose cell lies behind the previous one goes to the next cell.
    pytest.param(i64(-1, -1), VALUES[:5], np.float32(0), [np.int64(4), i64(0, 0, 2, 1, 1)],
                 ["FIRST_DIM_SIZE", "VALUE_ROWIDS"], f32([[1, 2], [0, 0], [3, 4], [5, 0]]), id="unsorted-rowids"),
    pytest.param(UNKNOWN, np.arange(9, dtype=np.float32), np.float32(0), [i64(0, 1, 1, 4), i64(0, 3, 3, 5, 9)],
                 ["ROW_SPLITS", "ROW_SPLITS"],
                 f32([[[0, 1, 2, 0], [0, 0, 0, 0], [0, 0, 0, 0]], [[0] * 4] * 3,
                      [[0, 0, 0, 0], [3, 4, 0, 0], [5, 6, 7, 8]]]), id="ragged-rank-2"),
    pytest.param(i64(2, 2, 2), np.arange(9, dtype=np.float32), np.float32(-1), [i64(0, 1, 4), i64(0, 3, 5, 5, 9)],
                 ["ROW_SPLITS", "ROW_SPLITS"], f32([[[0, 1], [-1, -1]], [[3, 4], [-1, -1]]]), id="rank-2-truncate"),
    pytest.param(UNKNOWN, np.arange(12, dtype=np.float32).reshape(3, 2, 2), np.array([[-1], [-2]], np.float32),
                 [i64(0, 1, 1, 3)], ["ROW_SPLITS"],
                 f32([[[[0, 1], [2, 3]], [[-1, -1], [-2, -2]]], [[[-1, -1], [-2, -2]]] * 2,
                      [[[4, 5], [6, 7]], [[8, 9], [10, 11]]]]), id="default-broadcast"),
    # A default with as many elements as a cell is taken in order, though numpy could not broadcast [4] to [4, 1].
    pytest.param(UNKNOWN, np.arange(4, dtype=np.float32).reshape(1, 4, 1), f32([-1, -2, -3, -4]), [i64(0, 0, 1)],
                 ["ROW_SPLITS"], f32([[[[-1], [-2], [-3], [-4]]], [[[0], [1], [2], [3]]]]), id="default-in-order"),
    pytest.param(i64(-1, 3), strings("a", "b", "c"), np.array(b"<p>", dtype=object), [i64(0, 2, 2, 3)],
                 ["ROW_SPLITS"], np.array([[b"a", b"b", b"<p>"], [b"<p>"] * 3, [b"c", b"<p>", b"<p>"]], dtype=object),
                 id="strings"),
    pytest.param(UNKNOWN, np.zeros(0, np.float32), np.float32(0), [i64(0)], ["ROW_SPLITS"],
                 np.zeros((0, 0), np.float32), id="empty-batch"),
    pytest.param(i64(3, 2), np.zeros(0, np.float32), np.float32(7), [i64(0)], ["ROW_SPLITS"],
                 np.full((3, 2), 7, np.float32), id="empty-batch-shaped"),
    pytest.param(UNKNOWN, np.zeros((0, 3), np.float32), np.float32(0), [i64(0, 0, 0)], ["ROW_SPLITS"],
                 np.zeros((2, 0, 3), np.float32), id="empty-rows-zero-size-values"),
    # Splits ending before the values leave the rest unused; splits may start past 0 if the rows add up.
    pytest.param(UNKNOWN, VALUES[:5], np.float32(0), [i64(0, 2, 4)], ["ROW_SPLITS"], f32([[1, 2], [3, 4]]),
                 id="values-left-over"),
    pytest.param(UNKNOWN, VALUES[:3], np.float32(0), [i64(1, 0, 3)], ["ROW_SPLITS"], f32([[0, 0, 0], [1, 2, 3]]),
                 id="splits-from-1"),
]


@pytest.mark.parametrize("shape, values, default, partitions, types, expected", TO_TENSOR)
def test_ragged_tensor_to_tensor(run_kernel, shape, values, default, partitions, types, expected):
    assert_outputs(to_tensor(run_kernel, shape, values, default, partitions, types), [expected])


TO_TENSOR_ERRORS = [
    pytest.param(UNKNOWN, VALUES, np.float32(0), [SPLITS], ["FOO"], "Unknown string for partition info type: FOO",
                 id="unknown-type"),
    pytest.param(UNKNOWN, VALUES, np.float32(0), [SPLITS], [], "No row_partition_types given.", id="no-types"),
    pytest.param(UNKNOWN, VALUES, np.float32(0), [i64(0, 0, 1)], ["VALUE_ROWIDS"],
                 "Cannot handle VALUE_ROWIDS in first dimension.", id="rowids-first"),
    pytest.param(UNKNOWN, VALUES, np.float32(0), [i64(2, 4)], ["ROW_LENGTHS"], "Cannot handle type ROW_LENGTHS",
                 id="row-lengths-first"),
    pytest.param(UNKNOWN, VALUES, np.float32(0), [np.int64(2), i64(2, 4)], ["FIRST_DIM_SIZE", "ROW_LENGTHS"],
                 "Cannot handle partition type ROW_LENGTHS", id="row-lengths-width"),
    pytest.param(i64(2, 3), VALUES, np.float32(0), [np.int64(2), i64(2, 4)], ["FIRST_DIM_SIZE", "ROW_LENGTHS"],
                 "Unsupported partition type:ROW_LENGTHS", id="row-lengths-index"),
    pytest.param(UNKNOWN, VALUES, np.float32(0), [np.zeros(0, np.int64)], ["ROW_SPLITS"],
                 "Invalid first partition input. Tensor requires at least one element.", id="no-first-partition"),
    pytest.param(UNKNOWN, VALUES, f32([0]), [SPLITS], ["ROW_SPLITS"],
                 "default_value.shape=[1] and rt_input.flat_values.shape=[6] are incompatible: default_value.rank = 1 "
                 " must be less than rt_input.flat_values.rank = 1", id="default-rank"),
    # NOTE: TensorFlow checks default dims against the values' from the left (dim i against values dim i + 1).
    pytest.param(UNKNOWN, np.zeros((6, 2, 3), np.float32), f32([7, 8, 9]), [SPLITS], ["ROW_SPLITS"],
                 "default_value.shape=[3] and rt_input.flat_values.shape=[6,2,3] are incompatible: "
                 "default_value.shape[-1] = 3 but rt_input.flat_values.shape[-1] = 2", id="default-dim"),
    pytest.param(UNKNOWN, np.zeros((6, 2, 3), np.float32), f32([7, 8]), [SPLITS], ["ROW_SPLITS"],
                 "Error broadcasting default_value", id="default-broadcast"),
    pytest.param(i64(4, 3, 1), VALUES, np.float32(0), [SPLITS], ["ROW_SPLITS"],
                 "rt_input.shape and shape=[4,3,1] are incompatible: rt_input.rank = 2 but shape.rank = 3",
                 id="shape-rank"),
    pytest.param(i64(-1, -1, 4), np.zeros((6, 3), np.float32), np.float32(0), [SPLITS], ["ROW_SPLITS"],
                 "rt_input.shape and shape=[?,?,4] are incompatible: rt_input.shape[2] = 3 but shape[2] = 4",
                 id="shape-inner-dim"),
    pytest.param(np.int64(3), VALUES, np.float32(0), [SPLITS], ["ROW_SPLITS"],
                 "The only valid scalar shape tensor is the fully unknown shape specified as -1.", id="scalar-shape"),
    pytest.param(np.array([[3, 3]], np.int64), VALUES, np.float32(0), [SPLITS], ["ROW_SPLITS"],
                 "Shape must be at most rank 1 but is rank 2", id="matrix-shape"),
    pytest.param(i64(4, -2), VALUES, np.float32(0), [SPLITS], ["ROW_SPLITS"], "Dimension -2 must be >= -1",
                 id="shape-below-minus-1"),
    pytest.param(i64(-1, -1), VALUES[:5], np.float32(0), [np.int64(-2), i64(0, 0, 1, 1, 1)],
                 ["FIRST_DIM_SIZE", "VALUE_ROWIDS"], "Dimension -2 must be >= 0", id="negative-first-dim"),
    pytest.param(i64(-1, -1), VALUES[:5], np.float32(0), [np.int64(2), i64(0, 0, 2, 2, 2)],
                 ["FIRST_DIM_SIZE", "VALUE_ROWIDS"], "Got next_value_rowid=2 which is not less than 2",
                 id="rowid-past-rows"),
    pytest.param(i64(-1, -1), VALUES[:5], np.float32(0), [np.int64(3), i64(-1, 0, 1, 1, 1)],
                 ["FIRST_DIM_SIZE", "VALUE_ROWIDS"], "Got current_value_rowid=-1 which is not less than 3",
                 id="negative-first-rowid"),
    pytest.param(i64(-1, -1), VALUES[:5], np.float32(0), [i64(0, 3, 2, 5)], ["ROW_SPLITS"],
                 "Invalid row split size.", id="decreasing-splits"),
    pytest.param(UNKNOWN, VALUES[:5], np.float32(0), [i64(0, 1, 2), i64(0, 2, 3, 5)], ["ROW_SPLITS", "ROW_SPLITS"],
                 "Row partition size is greater than output size: 3 > 2", id="inner-rows-past-outer"),
    # Where TensorFlow reads or writes out of bounds, the kernel refuses.
    pytest.param(UNKNOWN, VALUES[:5], np.float32(0), [i64(0, 2, 7)], ["ROW_SPLITS"],
                 "The row partitions address 7 values but there are only 5", id="splits-past-values"),
    pytest.param(i64(2, 1), VALUES[:2], np.float32(0), [np.int64(2), i64(1, 0)], ["FIRST_DIM_SIZE", "VALUE_ROWIDS"],
                 "Row ids out of order place values past the end of the output", id="unsorted-rowids-overflow"),
    pytest.param(UNKNOWN, VALUES, np.float32(0), [SPLITS], ["ROW_SPLITS", "ROW_SPLITS"],
                 "row_partition_types has 2 entries but only 1 row_partition_tensors were given",
                 id="missing-partition"),
]


@pytest.mark.parametrize("shape, values, default, partitions, types, message", TO_TENSOR_ERRORS)
def test_ragged_tensor_to_tensor_errors(run_kernel, shape, values, default, partitions, types, message):
    with raises(message):
        to_tensor(run_kernel, shape, values, default, partitions, types)


# --- RaggedTensorToSparse -----------------------------------------------------------------------------------

def test_ragged_tensor_to_sparse(run_kernel):
    outs = run_kernel("RaggedTensorToSparse", i32(0, 1, 1, 3), i32(0, 2, 2, 3), np.arange(6.0).reshape(3, 2))
    indices = [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 0, 1, 1], [2, 1, 0, 0], [2, 1, 0, 1]]
    assert_outputs(outs, [np.array(indices, np.int64), np.arange(6.0), i64(3, 2, 2, 2)])


def test_ragged_tensor_to_sparse_of_no_rows(run_kernel):
    outs = run_kernel("RaggedTensorToSparse", i64(0), np.zeros((0, 3), np.float32))
    assert_outputs(outs, [np.zeros((0, 3), np.int64), np.zeros(0, np.float32), i64(0, 0, 3)])


@pytest.mark.parametrize("splits, values, message", [
    pytest.param([np.zeros(0, np.int64)], VALUES, "ragged splits may not be empty.", id="empty"),
    pytest.param([i64(1, 2, 6)], VALUES, "First value of ragged splits must be 0.", id="first"),
    pytest.param([i64(0, 3, 2, 6)], VALUES, "Ragged splits should be non decreasing, but we got 3 followed by 2",
                 id="decreasing"),
    pytest.param([i64(0, 2, 3), i64(0, 1, 3)], VALUES[:3],
                 "Final value of ragged splits must match the length the corresponding ragged values.", id="inner"),
    pytest.param([i64(0, 3, 4)], VALUES,
                 "Final value of ragged splits must match the length the corresponding ragged values.", id="values"),
])
def test_ragged_tensor_to_sparse_errors(run_kernel, splits, values, message):
    with raises(message):
        run_kernel("RaggedTensorToSparse", *splits, values)


# --- RaggedRange --------------------------------------------------------------------------------------------

RANGES = [
    pytest.param([i32(0, 5, 2, 9), i32(3, 5, 10, 0), i32(1, 1, 3, -4)], {},
                 [i64(0, 3, 3, 6, 9), i32(0, 1, 2, 2, 5, 8, 9, 5, 1)], id="int32"),
    pytest.param([np.int64(-2), i64(3, -5), np.int64(2)], {"Tsplits": np.dtype(np.int32)},
                 [i32(0, 3, 3), i64(-2, 0, 2)], id="broadcast-int32-splits"),
    # NOTE: each value adds delta to the previous one in float32: 0.1 steps drift (0.3 is 0.30000001).
    pytest.param([np.float32(0), np.float32(0.5), np.float32(0.1)], {},
                 [i64(0, 5), np.array([0, 0.1, np.float32(0.1) + np.float32(0.1), np.float32(0.2) + np.float32(0.1),
                                       np.float32(np.float32(0.2) + np.float32(0.1)) + np.float32(0.1)],
                                      np.float32)], id="float32-accumulates"),
    pytest.param([np.zeros(0, np.int64), np.zeros(0, np.int64), np.int64(1)], {}, [i64(0), np.zeros(0, np.int64)],
                 id="no-rows"),
]


@pytest.mark.parametrize("inputs, attrs, expected", RANGES)
def test_ragged_range(run_kernel, inputs, attrs, expected):
    assert_outputs(run_kernel("RaggedRange", *inputs, **attrs), expected)


@pytest.mark.parametrize("inputs, attrs, message", [
    pytest.param([np.zeros((1, 1), np.int32), np.int32(3), np.int32(1)], {}, "starts must be a scalar or vector",
                 id="rank"),
    pytest.param([i32(0, 1), i32(3, 3, 3), np.int32(1)], {}, "starts, limits, and deltas must have the same shape",
                 id="shapes"),
    pytest.param([i32(0, 1), i32(3, 3), i32(1, 0)], {}, "Requires delta != 0", id="zero-delta"),
    pytest.param([np.float32(0), np.float32("nan"), np.float32(1)], {},
                 "Requires ((limit - start) / delta) <= 9223372036854775807", id="nan"),
    pytest.param([np.int64(0), np.int64(2**40), np.int64(1)], {"Tsplits": np.dtype(np.int32)},
                 "Requires ((limit - start) / delta) <= 2147483647", id="past-int32-splits"),
])
def test_ragged_range_errors(run_kernel, inputs, attrs, message):
    with raises(message):
        run_kernel("RaggedRange", *inputs, **attrs)


# --- RaggedGather -------------------------------------------------------------------------------------------

def gather(run, splits, values, indices):
    rank = len(splits) + np.ndim(indices) - 1
    return run("RaggedGather", *splits, values, indices, OUTPUT_RAGGED_RANK=rank)


GATHERS = [
    pytest.param([SPLITS], VALUES, i32(2, 0, 1, 2), [i64(0, 3, 5, 5, 8), f32([3, 4, 5, 1, 2, 3, 4, 5])], id="vector"),
    pytest.param([SPLITS], VALUES, np.array([[3, 0], [1, 1]]), [i64(0, 2, 4), i64(0, 1, 3, 3, 3), f32([6, 1, 2])],
                 id="matrix"),
    pytest.param([i32(0, 2, 3), i32(0, 1, 3, 6)], np.arange(12.0).reshape(6, 2), np.int64(0),
                 [i32(0, 1, 3), np.arange(6.0).reshape(3, 2)], id="scalar-rank-2"),
    pytest.param([i64(1, 2, 5)], VALUES[:5], i32(1, 0), [i64(0, 3, 4), f32([3, 4, 5, 2])], id="splits-from-1"),
    pytest.param([i64(0, 1, 3)], strings("x", "y", "z"), i64(1, 0), [i64(0, 2, 3), strings("y", "z", "x")],
                 id="strings"),
    pytest.param([SPLITS], VALUES, np.zeros(0, np.int32), [i64(0), np.zeros(0, np.float32)], id="no-indices"),
]


@pytest.mark.parametrize("splits, values, indices, expected", GATHERS)
def test_ragged_gather(run_kernel, splits, values, indices, expected):
    assert_outputs(gather(run_kernel, splits, values, indices), expected)


@pytest.mark.parametrize("splits, values, indices, message", [
    pytest.param([SPLITS], VALUES, i32(2, 4), "indices[1] = 4 is not in [0, 4)", id="index"),
    pytest.param([SPLITS], VALUES, np.array([[2, 0], [1, -1]]), "indices[1,1] = -1 is not in [0, 4)",
                 id="index-2d"),
    pytest.param([SPLITS], VALUES, np.int32(7), "indices = 7 is not in [0, 4)", id="index-scalar"),
    pytest.param([i64(0, 0)], np.float32(1), i32(0), "params.rank must be nonzero", id="scalar-values"),
    pytest.param([np.zeros(0, np.int64)], VALUES, np.zeros(0, np.int32), "Ragged splits may not be empty",
                 id="empty-splits"),
    pytest.param([i64(-1, 2, 6)], VALUES, i32(0), "Ragged splits must be non-negative", id="negative"),
    pytest.param([i64(0, 2, 7)], VALUES, i32(0), "Ragged splits must not point past values", id="past-values"),
    pytest.param([i64(0, 3, 2, 6)], VALUES, i32(0), "Ragged splits must be sorted", id="unsorted"),
    # NOTE: TensorFlow lets this one through and reads past the inner splits.
    pytest.param([i64(0, 2, 4), i64(0, 1, 3, 6)], VALUES, i32(1), "Ragged splits must not point past values",
                 id="past-inner-rows"),
])
def test_ragged_gather_errors(run_kernel, splits, values, indices, message):
    with raises(message):
        gather(run_kernel, splits, values, indices)


# --- RaggedCross ---------------------------------------------------------------------------------------------

def cross(run, ragged=(), sparse=(), dense=(), order=None, hashed=False, num_buckets=0, hash_key=0,
          splits_type=np.int64):
    order = "R" * len(ragged) + "S" * len(sparse) + "D" * len(dense) if order is None else order
    attrs = dict(Nsparse=len(sparse), input_order=order, hashed_output=hashed, num_buckets=num_buckets,
                 hash_key=hash_key, out_values_type=np.dtype(np.int64 if hashed else object),
                 out_row_splits_type=np.dtype(splits_type),
                 ragged_values_types=tuple(v.dtype for v, _ in ragged),
                 ragged_splits_types=tuple(s.dtype for _, s in ragged),
                 sparse_values_types=tuple(v.dtype for _, v, _ in sparse), dense_types=tuple(d.dtype for d in dense))
    inputs = [v for v, _ in ragged] + [s for _, s in ragged] + [i for i, _, _ in sparse] + [v for _, v, _ in sparse]
    inputs += [sh for _, _, sh in sparse] + list(dense)
    return run("RaggedCross", *inputs, **attrs)


WORDS = (strings("a", "b", "c"), i64(0, 2, 2, 3))
DENSE = np.array([[b"x", b"y"], [b"z", b"w"], [b"q", b"r"]], dtype=object)


def test_ragged_cross_strings(run_kernel):
    sparse = (np.array([[0, 0], [2, 0], [2, 1]], np.int64), strings("s", "t", "u"), i64(3, 2))
    outs = cross(run_kernel, ragged=[WORDS], sparse=[sparse], dense=[DENSE])
    assert_outputs(outs, [strings("a_X_s_X_x", "a_X_s_X_y", "b_X_s_X_x", "b_X_s_X_y", "c_X_t_X_q", "c_X_t_X_r",
                                  "c_X_u_X_q", "c_X_u_X_r"), i64(0, 4, 4, 8)])


def test_ragged_cross_orders_inputs_and_writes_ids_as_decimal(run_kernel):
    outs = cross(run_kernel, ragged=[(i64(1, -2, 3), i32(0, 2, 2, 3))], dense=[DENSE[:, :1]], order="DR",
                 splits_type=np.int32)
    assert_outputs(outs, [strings("x_X_1", "x_X_-2", "q_X_3"), i32(0, 2, 2, 3)])


def test_ragged_cross_hashed(run_kernel):
    dense = np.array([[5, 6], [7, 8], [9, 10]], np.int64)
    outs = cross(run_kernel, ragged=[WORDS], dense=[dense], hashed=True)
    expected = i64(3536881465319654904, 2264609134536016569, 1525868809108760097, 1653262993751403250,
                   560943478212642083, 8780353678173021980)
    assert_outputs(outs, [expected, i64(0, 4, 4, 6)])
    outs = cross(run_kernel, ragged=[WORDS], dense=[dense], hashed=True, num_buckets=100, hash_key=12345)
    assert_outputs(outs, [i64(72, 49, 3, 56, 97, 31), i64(0, 4, 4, 6)])


def test_fingerprint_cat64_of_int64_features():
    # tf.ragged.cross_hashed of [[-1]] and [[-5]]: int64 ids are their own fingerprints (as unsigned)
    h = fingerprint_cat64(fingerprint_cat64(0, 2**64 - 1), 2**64 - 5)
    assert h % (2**63 - 1) == 5126586155608938721


@pytest.mark.parametrize("kwargs, message", [
    pytest.param(dict(ragged=[WORDS], dense=[DENSE[:2]]), "inputs must all have the same batch dimension size.",
                 id="batch"),
    pytest.param(dict(ragged=[(WORDS[0], i64(0, 2, 2, 4))]), "Invalid ragged splits: last element of ragged splits "
                 "must be the number of ragged values(3) but is 4", id="splits"),
    pytest.param(dict(ragged=[WORDS], dense=[DENSE.reshape(3, 2, 1)]), "tf.ragged.cross only supports inputs with "
                 "rank=2.", id="rank"),
    pytest.param(dict(ragged=[WORDS], order="X"), "Unexpected input_order value.", id="order"),
    pytest.param(dict(ragged=[WORDS], order="RD"), "Invalid length for input_order", id="order-length"),
    pytest.param(dict(ragged=[WORDS], dense=[DENSE], order="RR"),
                 'input_order "RR" specifies reading a ragged tensor value at index 1 from a list of 1 values.',
                 id="order-past-inputs"),
])
def test_ragged_cross_errors(run_kernel, kwargs, message):
    with raises(message):
        cross(run_kernel, **kwargs)


# --- RaggedTensorToVariant / RaggedTensorFromVariant --------------------------------------------------------

def to_variant(run, splits, values, batched):
    (encoded,) = run("RaggedTensorToVariant", *splits, values, batched_input=batched)
    return encoded


def from_variant(run, encoded, input_rank, output_rank, values_type=np.float32, splits_type=np.int64):
    return run("RaggedTensorFromVariant", encoded, input_ragged_rank=input_rank, output_ragged_rank=output_rank,
               Tvalues=np.dtype(values_type), Tsplits=np.dtype(splits_type))


def test_variant_is_a_scalar_python_object():
    (encoded,) = kernels.lookup("RaggedTensorToVariant", "cpu").bind(np, {"batched_input": False})(SPLITS, VALUES)
    assert isinstance(encoded, RaggedTensorVariant)
    assert (encoded.shape, encoded.ndim, encoded.dtype, encoded.ragged_rank) == ((), 0, np.dtype(object), 1)
    assert not kernels.has_op("RaggedTensorToVariant", "gpu") and not kernels.has_op("RaggedTensorFromVariant", "gpu")


def test_variant_unbatches_rows(run_kernel):
    rows = to_variant(run_kernel, [i64(0, 2, 3), i64(0, 1, 3, 6)], np.arange(12.0).reshape(6, 2), True)
    assert rows.shape == (2,)
    first, second = rows
    assert [s.tolist() for s in first.nested_splits] == [[0, 1, 3]]
    assert first.values.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert [s.tolist() for s in second.nested_splits] == [[0, 3]]
    assert second.values.shape == (3, 2)


@pytest.mark.parametrize("splits, values, batched, ranks, values_type", [
    pytest.param([SPLITS], VALUES, True, (0, 1), np.float32, id="batched"),
    pytest.param([SPLITS], VALUES, True, (-1, 1), np.float32, id="inferred-rank"),
    pytest.param([i32(0, 2, 3, 3), i32(0, 1, 3, 6)], np.arange(12.0).reshape(6, 2), True, (1, 2), np.float64,
                 id="rank-2"),
    pytest.param([i64(0, 1, 1, 3)], strings("x", "", "z"), True, (0, 1), object, id="strings"),
    pytest.param([i64(0, 2, 3), i64(0, 1, 3, 6)], np.arange(6.0), False, (2, 2), np.float64, id="unbatched"),
])
def test_variant_round_trip(run_kernel, splits, values, batched, ranks, values_type):
    encoded = to_variant(run_kernel, splits, values, batched)
    outs = from_variant(run_kernel, encoded, *ranks, values_type=values_type, splits_type=splits[0].dtype)
    assert_outputs(outs, [*splits, values])


def test_variant_rows_of_a_dense_tensor(run_kernel):
    encoded = to_variant(run_kernel, [], np.arange(6, dtype=np.int32).reshape(3, 2), True)
    assert_outputs(from_variant(run_kernel, encoded, 0, 1, np.int32), [i64(0, 2, 4, 6), np.arange(6, dtype=np.int32)])


def test_variant_of_no_rows_stacks_to_an_empty_vector(run_kernel):
    encoded = to_variant(run_kernel, [i64(0)], np.zeros((0, 3), np.float32), True)
    assert_outputs(from_variant(run_kernel, encoded, 0, 1), [i64(0), np.zeros(0, np.float32)])


def test_variant_matrix_stacks_with_a_uniform_dim(run_kernel):
    encoded = to_variant(run_kernel, [i64(0, 2, 2, 5, 5, 6, 6)], VALUES, True).reshape(2, 3)
    assert_outputs(from_variant(run_kernel, encoded, 0, 2), [i64(0, 3, 6), i64(0, 2, 2, 5, 5, 6, 6), VALUES])


@pytest.mark.parametrize("splits, values, batched, message", [
    pytest.param([i64(1, 2)], np.float32(3), False,
                 "Requires flat_values to have rank>=1 when nested_row_splits is not empty, but is 0.", id="scalar"),
    pytest.param([i64(1, 2, 6)], VALUES, True,
                 "Invalid ragged splits: first element of ragged splits  must be 0 but is 1", id="first"),
    pytest.param([i64(0, 3, 2, 6)], VALUES, False, "Invalid ragged splits: ragged splits must be monotonically "
                 "increasing, but ragged_splits[2]=2 is smaller than row_splits[1]=3", id="decreasing"),
    pytest.param([np.zeros(0, np.int64)], VALUES, True,
                 "Invalid ragged splits: ragged splits must have at least one splits, but is empty", id="empty"),
    # NOTE: the innermost splits are checked first.
    pytest.param([i64(1, 2), i64(0, 5)], VALUES[:3], False, "Invalid ragged splits: last element of ragged splits "
                 "must be the number of ragged values(3) but is 5", id="inner-first"),
    pytest.param([np.array([[0, 1]], np.int64)], VALUES[:1], True,
                 "Invalid ragged splits: ragged splits must be rank 1 but is rank 2", id="matrix"),
    pytest.param([], np.float32(3), True, "Can't unbatch rank-0 tensor.", id="unbatch-scalar"),
])
def test_ragged_tensor_to_variant_errors(run_kernel, splits, values, batched, message):
    with raises(message):
        to_variant(run_kernel, splits, values, batched)


def _stack(*items) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


@pytest.mark.parametrize("encoded, ranks, values_type, splits_type, message", [
    pytest.param(_stack(RaggedTensorVariant((), VALUES)), (1, 2), np.float32, np.int64,
                 "Encoded input RaggedTensorVariant has ragged_rank=0.  Expected ragged_rank=1.", id="ragged-rank"),
    pytest.param(_stack(RaggedTensorVariant((), VALUES)), (0, 2), np.float32, np.int64,
                 "output_ragged_rank must be equal to input_ragged_rank + encoded_ragged.dims(); output_ragged_rank: "
                 "2, input_ragged_rank: 0, encoded_variant.dims(): 1.", id="output-rank"),
    pytest.param(_stack(RaggedTensorVariant((), VALUES)), (-1, 0), np.float32, np.int64,
                 "Inferred input_ragged_rank (output_ragged_rank - encoded_variant.dims()) must be >= 0, found "
                 "output_ragged_rank: 0, encoded_variant.dims(): 1, inferred input_ragged_rank: -1", id="inferred"),
    pytest.param(_stack(RaggedTensorVariant((), VALUES)), (0, 1), np.int32, np.int64,
                 "Expected values Tensor dtype: int32, found: float", id="values-dtype"),
    pytest.param(_stack(RaggedTensorVariant((SPLITS,), VALUES)), (1, 2), np.float32, np.int32,
                 "Expected row_splits Tensor dtype: int32, found: int64", id="splits-dtype"),
    pytest.param(_stack(RaggedTensorVariant((), f32([1, 2])), RaggedTensorVariant((), np.float32(0))), (0, 1),
                 np.float32, np.int64, "Ragged values must have rank >= 1; encoded scalar element at index 1 has values "
                 "Tensor: Tensor<type: float shape: [] values: 0>", id="scalar-values"),
    pytest.param(_stack(RaggedTensorVariant((), VALUES), TensorList.from_items(np.float32, None, [])), (0, 1),
                 np.float32, np.int64, "Input Variant element at index 1 doesn't hold a RaggedTensorVariant: "
                 "Variant<type: tensorflow::TensorList value: TensorList>", id="not-ragged"),
    pytest.param(_stack(RaggedTensorVariant((), np.zeros((2, 3), np.float32)),
                        RaggedTensorVariant((), np.zeros(1, np.float32))), (0, 1), np.float32, np.int64,
                 "Rank of values must match for all components; values shape at index 0: [2,3], values shape at "
                 "index 1: [1]", id="values-rank"),
    pytest.param(_stack(RaggedTensorVariant((), np.zeros((2, 3), np.float32)),
                        RaggedTensorVariant((), np.zeros((1, 2), np.float32))), (0, 1), np.float32, np.int64,
                 "All flat_values must have compatible shapes.  Shape at index 0: [3].  Shape at index 1: [2].  If "
                 "you are using tf.map_fn", id="values-shape"),
])
def test_ragged_tensor_from_variant_errors(encoded, ranks, values_type, splits_type, message):
    bound = kernels.lookup("RaggedTensorFromVariant", "cpu").bind(np, {
        "input_ragged_rank": ranks[0], "output_ragged_rank": ranks[1], "Tvalues": np.dtype(values_type),
        "Tsplits": np.dtype(splits_type)})
    with raises(message):
        bound(encoded)


def test_ragged_gather_checks_its_output_ragged_rank(run_kernel):
    with raises("OUTPUT_RAGGED_RANK is 2, but gathering 1-D indices from params of ragged rank 1 gives ragged rank 1"):
        run_kernel("RaggedGather", SPLITS, VALUES, i32(0), OUTPUT_RAGGED_RANK=2)
