"""XLA data-movement kernels (kernels.array.xla): clamped dynamic slices, XlaPad, XlaGather with its
dimension numbers, total-order sorts, XlaBroadcastHelper, and the serialized-proto reader.

Expected values were checked against TensorFlow 2.21 running each op on a CPU in a plain Session.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernels.array.xla import read_int_fields
from tests.kernels.checks import assert_outputs, f32, i32, i64

X = np.arange(12, dtype=np.float32).reshape(3, 4)
NAN_BITS = np.array([0x7FC00000, 0xFFC00000], np.uint32)  # +NaN, -NaN


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        low, v = v & 0x7F, v >> 7
        out.append(low | (0x80 if v else 0))
        if not v:
            return bytes(out)


def gather_numbers(offset, collapsed, start_map, index_vector_dim, operand_batching=(), indices_batching=()) -> bytes:
    """xla.GatherDimensionNumbers, serialized by hand (packed repeated fields 1-3 and 5-6, field 4 a varint)."""
    def packed(field, values):
        body = b"".join(_varint(v) for v in values)
        return _varint(field << 3 | 2) + _varint(len(body)) + body if values else b""
    return (packed(1, offset) + packed(2, collapsed) + packed(3, start_map) + _varint(4 << 3) + _varint(index_vector_dim)
            + packed(5, operand_batching) + packed(6, indices_batching))


CASES = [
    # Starts are clamped so the box fits: (2, -1) -> (1, 0) for a [2, 2] update of [3, 4].
    pytest.param("XlaDynamicUpdateSlice", [X, np.ones((2, 2), np.float32), i32(2, -1)], {},
                 [f32([[0, 1, 2, 3], [1, 1, 6, 7], [1, 1, 10, 11]])], id="dus-clamped"),
    pytest.param("XlaDynamicUpdateSlice", [np.arange(5, dtype=np.int64), i64(9, 9), i64(4)], {},
                 [i64(0, 1, 2, 9, 9)], id="dus-int64-past-end"),
    pytest.param("XlaDynamicUpdateSlice", [X, np.zeros((0, 2), np.float32), i32(1, 1)], {}, [X], id="dus-empty-update"),
    pytest.param("XlaDynamicSlice", [X, i32(2, 3), i32(2, 2)], {}, [f32([[6, 7], [10, 11]])], id="ds-clamped"),
    pytest.param("XlaDynamicSlice", [X, i64(-5, 1), i64(3, 2)], {}, [X[:, 1:3]], id="ds-negative-start"),
    pytest.param("XlaDynamicSlice", [X, i32(1, 9), i32(0, 2)], {}, [np.zeros((0, 2), np.float32)], id="ds-empty"),
    # Interior padding first, then the edges; negative edges cut.
    pytest.param("XlaPad", [X, np.float32(-1), i32(1, -1), i32(0, 2), i32(1, 0)], {},
                 [f32([[-1] * 5, [1, 2, 3, -1, -1], [-1] * 5, [5, 6, 7, -1, -1], [-1] * 5, [9, 10, 11, -1, -1]])],
                 id="pad-interior-negative-low"),
    pytest.param("XlaPad", [np.arange(5, dtype=np.int32), np.int32(0), i32(-2), i32(-3), i32(1)], {},
                 [i32(1, 0, 2, 0)], id="pad-cut-into-interior"),
    pytest.param("XlaPad", [X, np.float32(7), i32(-3, 0), i32(0, 0), i32(0, 0)], {},
                 [np.zeros((0, 4), np.float32)], id="pad-cut-everything"),
    pytest.param("XlaPad", [np.zeros((0, 2), np.float32), np.float32(7), i32(1, 0), i32(1, 0), i32(3, 1)], {},
                 [np.full((2, 3), 7, np.float32)], id="pad-empty-input"),
    # Gathers: rows by index (7 clamped to 2); ivd = rank means an implicit trailing index vector of 1.
    pytest.param("XlaGather", [X, i32(2, 0, 7).reshape(3, 1), i32(1, 4)],
                 {"dimension_numbers": gather_numbers([1], [0], [0], 1), "indices_are_sorted": False},
                 [X[[2, 0, 2]]], id="gather-rows"),
    pytest.param("XlaGather", [X, i32(2, 0), i32(1, 4)],
                 {"dimension_numbers": gather_numbers([1], [0], [0], 1), "indices_are_sorted": False},
                 [X[[2, 0]]], id="gather-implicit-index-vector"),
    pytest.param("XlaGather", [X, i32(1, 3, 0, -1).reshape(2, 2), i32(2, 2)],
                 {"dimension_numbers": gather_numbers([1, 2], [], [0, 1], 1), "indices_are_sorted": True},
                 [np.stack([X[1:3, 2:4], X[0:2, 0:2]])], id="gather-windows"),
    pytest.param("XlaGather", [X, i32(0, 2, 1, 0).reshape(2, 2), i32(2, 1)],
                 {"dimension_numbers": gather_numbers([0], [1], [0, 1], 1), "indices_are_sorted": False},
                 [f32([[2, 4], [6, 8]])], id="gather-offset-dim-first"),
    pytest.param("XlaGather", [X.reshape(3, 4, 1), i32(3, 0, 2).reshape(3, 1), i32(1, 1, 1)],
                 {"dimension_numbers": gather_numbers([2], [1], [1], 1, [0], [0]), "indices_are_sorted": False},
                 [f32([[3], [4], [10]])], id="gather-batching-dims"),
    # Sorts: last dim, total order for floats.
    pytest.param("XlaSort", [np.array([[3, 1, 2], [0, -1, 5]], np.int32)], {}, [i32(1, 2, 3, -1, 0, 5).reshape(2, 3)],
                 id="sort-int"),
    pytest.param("XlaSort", [np.array([True, False, True])], {}, [np.array([False, True, True])], id="sort-bool"),
    pytest.param("XlaSort", [np.array([200, 3, 255, 0], np.uint8)], {}, [np.array([0, 3, 200, 255], np.uint8)],
                 id="sort-uint8"),
    pytest.param("XlaKeyValueSort", [f32([[3, 1, 2]]), i32(10, 20, 30).reshape(1, 3)], {},
                 [f32([[1, 2, 3]]), i32(20, 30, 10).reshape(1, 3)], id="key-value-sort"),
    pytest.param("XlaBroadcastHelper", [np.ones((2, 3, 4), np.float32), f32([1, 2, 3]), i32(1)], {},
                 [np.ones((2, 3, 4), np.float32), f32([1, 2, 3]).reshape(1, 3, 1)], id="broadcast-helper-rhs"),
    pytest.param("XlaBroadcastHelper", [np.ones((3, 4), np.float32), np.ones((2, 3, 4), np.float32), i64(1, 2)], {},
                 [np.ones((1, 3, 4), np.float32), np.ones((2, 3, 4), np.float32)], id="broadcast-helper-lhs"),
    pytest.param("XlaBroadcastHelper", [X, X, np.zeros(0, np.int32)], {}, [X, X], id="broadcast-helper-same-rank"),
    pytest.param("XlaOptimizationBarrier", [X, i32(1)], {"T": (np.dtype(np.float32), np.dtype(np.int32))}, [X, i32(1)],
                 id="optimization-barrier"),
    pytest.param("XlaSharding", [X], {"sharding": "\x08\x01\x1a\x01\x00"}, [X], id="sharding"),
]

ERRORS = [
    pytest.param("XlaDynamicSlice", [X, i32(0, 0), i32(4, 2)], {}, ValueError, r"size_indices\[0\] = 4 is not in \[0, 3\]",
                 id="ds-size-too-big"),
    pytest.param("XlaDynamicSlice", [X, i32(0), i32(1, 1)], {}, ValueError, "start_indices must be a vector with one entry",
                 id="ds-short-starts"),
    pytest.param("XlaDynamicUpdateSlice", [X, np.ones((4, 2), np.float32), i32(0, 0)], {}, ValueError, "does not fit",
                 id="dus-update-too-big"),
    pytest.param("XlaDynamicUpdateSlice", [X, np.ones((2,), np.float32), i32(0, 0)], {}, ValueError, "rank",
                 id="dus-rank"),
    pytest.param("XlaPad", [X, np.float32(7), i32(-3, 0), i32(-1, 0), i32(0, 0)], {}, ValueError, "negative size",
                 id="pad-negative-size"),
    pytest.param("XlaPad", [X, np.float32(7), i32(0, 0), i32(0, 0), i32(-1, 0)], {}, ValueError,
                 r"padding_interior\[0\] = -1 must be non-negative", id="pad-negative-interior"),
    pytest.param("XlaPad", [X, f32([1, 2]), i32(0, 0), i32(0, 0), i32(0, 0)], {}, ValueError, "scalar", id="pad-value-vector"),
    pytest.param("XlaGather", [X, i32(2, 0).reshape(2, 1), i32(2, 4)],
                 {"dimension_numbers": gather_numbers([1], [0], [0], 1), "indices_are_sorted": False}, ValueError,
                 "collapsed or batching dim must have slice size", id="gather-collapsed-size"),
    pytest.param("XlaGather", [X, i32(2, 0).reshape(2, 1), i32(1, 4)],
                 {"dimension_numbers": gather_numbers([1], [0], [0, 1], 1), "indices_are_sorted": False}, ValueError,
                 "start_index_map names 2 dims", id="gather-index-vector-length"),
    pytest.param("XlaGather", [X, i32(2, 0).reshape(2, 1), i32(1, 4)],
                 {"dimension_numbers": b"\x0a\x05\x01", "indices_are_sorted": False}, ValueError,
                 "not a valid serialized proto", id="gather-truncated-proto"),
    pytest.param("XlaKeyValueSort", [f32([[3, 1, 2]]), i32(1, 2, 3)], {}, ValueError, "dimensions must match",
                 id="key-value-sort-shapes"),
    pytest.param("XlaSort", [np.float32(1)], {}, ValueError, "scalar", id="sort-scalar"),
    pytest.param("XlaSort", [np.array([1 + 1j], np.complex64)], {}, TypeError, "complex64", id="sort-complex"),
    pytest.param("XlaBroadcastHelper", [np.ones((3, 2), np.float32), np.ones((2, 3, 4), np.float32), i32(1, 0)], {},
                 ValueError, "increasing", id="broadcast-helper-decreasing"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_xla_kernels(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


@pytest.mark.parametrize("op, inputs, attrs, error, message", ERRORS)
def test_xla_kernel_errors(run_kernel, op, inputs, attrs, error, message):
    with pytest.raises(error, match=message):
        run_kernel(op, *inputs, **attrs)


def test_sort_uses_ieee_total_order(run_kernel):
    """-NaN < -inf < -1 < -0 < +0 < 1 < inf < +NaN, whatever order the input had them in."""
    pos_nan, neg_nan = NAN_BITS.view(np.float32)
    x = np.array([0.0, pos_nan, 1, -0.0, neg_nan, np.inf, -1, -np.inf], np.float32)
    (out,) = run_kernel("XlaSort", x)
    want = np.array([neg_nan, -np.inf, -1, -0.0, 0.0, 1, np.inf, pos_nan], np.float32)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    (out64,) = run_kernel("XlaSort", x.astype(np.float64))
    np.testing.assert_array_equal(np.signbit(out64), np.signbit(want))
    (out_bf16,) = run_kernel("XlaSort", x.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(np.signbit(out_bf16), np.signbit(want))
    np.testing.assert_array_equal(out_bf16.astype(np.float32)[1:-1], want[1:-1])


def test_dynamic_update_slice_leaves_its_input_alone(run_kernel):
    x = X.copy()
    run_kernel("XlaDynamicUpdateSlice", x, np.ones((1, 1), np.float32), i32(0, 0))
    np.testing.assert_array_equal(x, X)


def test_proto_reader_takes_str_and_bytes():
    """The engine decodes a UTF-8-clean string attr to str: the reader takes either, packed or not."""
    serialized = gather_numbers([1, 2], [0], [0], 1)
    assert read_int_fields(serialized, "x") == read_int_fields(serialized.decode("utf-8"), "x")
    assert read_int_fields(serialized, "x") == {1: [1, 2], 2: [0], 3: [0], 4: [1]}
    unpacked = b"\x08\x01\x08\x02\x10\x00"  # field 1 twice and field 2, as plain varints
    assert read_int_fields(unpacked, "x") == {1: [1, 2], 2: [0]}
    assert read_int_fields(b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "x") == {1: [-1]}
    with pytest.raises(ValueError, match="wire type 3"):
        read_int_fields(b"\x0b", "dimension_numbers")
