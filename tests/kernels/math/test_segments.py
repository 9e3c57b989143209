"""Segment reductions: sorted (Segment*), unsorted (UnsortedSegment*) and sparse (SparseSegment*), with
TensorFlow's empty-segment values, integer means, NaN folding and errors. Expected values and messages
were read off TensorFlow 2.21; tests/fixtures/ops/sparse/ holds TensorFlow's outputs for more inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels.checks import assert_outputs, f32, i32, i64

NAN = float("nan")
F_LOWEST, F_HIGHEST = np.finfo(np.float32).min, np.finfo(np.float32).max
D = f32([1, 2, 3])
ROWS = np.arange(8, dtype=np.float32).reshape(4, 2)

CASES = [
    # Sorted segments: rows no id names hold 0 (1 for Prod), Max/Min included
    pytest.param("SegmentSum", [D, i32(0, 0, 2)], {}, [f32([3, 0, 3])], id="sum-gap"),
    pytest.param("SegmentMax", [D, i32(1, 1, 3)], {}, [f32([0, 2, 0, 3])], id="max-gaps-are-zero"),
    pytest.param("SegmentMin", [np.array([5, -2, 3], np.int64), i32(1, 1, 3)], {}, [i64(0, -2, 0, 3)],
                 id="min-int-gaps-are-zero"),
    pytest.param("SegmentProd", [D, i32(1, 1, 3)], {}, [f32([1, 2, 1, 3])], id="prod-gaps-are-one"),
    pytest.param("SegmentMean", [np.array([-5, 0, -7, 2], np.int32), i64(0, 0, 1, 1)], {}, [i32(-2, -2)],
                 id="mean-int-truncates"),
    pytest.param("SegmentMean", [ROWS, i32(0, 0, 0, 2)], {}, [f32([[2, 3], [0, 0], [6, 7]])], id="mean-rows"),
    pytest.param("SegmentSum", [np.zeros((0, 3), np.float32), np.zeros(0, np.int32)], {},
                 [np.zeros((0, 3), np.float32)], id="sum-empty"),
    pytest.param("SegmentMax", [f32([1, NAN, 3, NAN, -1]), i32(0, 0, 1, 1, 2)], {}, [f32([NAN, NAN, -1])],
                 id="max-ending-in-nan"),
    pytest.param("SegmentMax", [f32([NAN, 1, 3]), i32(0, 0, 0)], {}, [f32([3])], id="max-number-replaces-nan"),
    pytest.param("SegmentMin", [f32([1, NAN, 0.5]), i32(0, 0, 0)], {}, [f32([0.5])], id="min-after-nan"),
    pytest.param("SegmentSum", [np.array([2 + 1j, 3, 4], np.complex64), i32(0, 0, 2)], {},
                 [np.array([5 + 1j, 0, 4], np.complex64)], id="sum-complex"),
    # Unsorted segments: negative ids dropped, empty segments hold the identity
    pytest.param("UnsortedSegmentSum", [D, i32(2, -1, 2), np.int32(4)], {}, [f32([0, 0, 4, 0])],
                 id="unsorted-sum-drops-negative"),
    pytest.param("UnsortedSegmentMax", [D, i32(0, -1, 2), np.int32(4)], {}, [f32([1, F_LOWEST, 3, F_LOWEST])],
                 id="unsorted-max-empty-is-lowest"),
    pytest.param("UnsortedSegmentMin", [D, i32(0, 0, 0), np.int64(2)], {}, [f32([1, F_HIGHEST])],
                 id="unsorted-min-empty-is-highest"),
    pytest.param("UnsortedSegmentMax", [i32(3, 4), i32(0, 0), np.int32(2)], {}, [i32(4, -2**31)],
                 id="unsorted-max-int"),
    pytest.param("UnsortedSegmentProd", [D, i32(0, 0, 0), np.int32(2)], {}, [f32([6, 1])], id="unsorted-prod"),
    pytest.param("UnsortedSegmentSum", [np.arange(12, dtype=np.float32).reshape(2, 2, 3),
                                        np.array([[0, -1], [2, 0]], np.int32), np.int64(3)], {},
                 [f32([[9, 11, 13], [0, 0, 0], [6, 7, 8]])], id="unsorted-ids-2d"),
    pytest.param("UnsortedSegmentSum", [np.float32(2), np.int32(0), np.int32(2)], {}, [f32([2, 0])],
                 id="unsorted-scalar"),
    pytest.param("UnsortedSegmentSum", [np.zeros((2, 0), np.float32), i32(0, 7), np.int32(2)], {},
                 [np.zeros((2, 0), np.float32)], id="unsorted-no-data-no-check"),
    pytest.param("UnsortedSegmentMax", [f32([NAN, 1, 2, NAN, 5]), i32(0, 0, 1, 1, 1), np.int32(2)], {},
                 [f32([1, 5])], id="unsorted-max-nan"),
    # Sparse segments: gather, then sorted segment sums
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1, 3, 3), i32(0, 0, 2, 2)], {}, [f32([[2, 4], [0, 0], [12, 14]])],
                 id="sparse-sum"),
    pytest.param("SparseSegmentMean", [ROWS, i32(0, 1, 3, 3), i32(0, 0, 2, 2)], {}, [f32([[1, 2], [0, 0], [6, 7]])],
                 id="sparse-mean"),
    pytest.param("SparseSegmentSqrtN", [ROWS, i32(1, 1, 1), i32(0, 0, 1)], {},
                 [np.stack([f32([4, 6]) / np.float32(np.sqrt(2)), f32([2, 3])])], id="sparse-sqrtn"),
    pytest.param("SparseSegmentSum", [np.arange(8, dtype=np.int32).reshape(4, 2), i64(0, 1, 3), i64(0, 0, 2)], {},
                 [np.array([[2, 4], [0, 0], [6, 7]], np.int32)],
                 id="sparse-sum-int64-indices"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1), i32(2, 3)], {}, [f32([[0, 0], [0, 0], [0, 1], [2, 3]])],
                 id="sparse-leading-gap"),
    pytest.param("SparseSegmentMean", [ROWS, i32(), i32()], {}, [np.zeros((0, 2), np.float32)], id="sparse-empty"),
    pytest.param("SparseSegmentSumWithNumSegments", [ROWS, i32(0, 1, 3), i32(0, 0, 2), np.int32(5)], {},
                 [f32([[2, 4], [0, 0], [6, 7], [0, 0], [0, 0]])], id="sparse-num-segments"),
    pytest.param("SparseSegmentSqrtNWithNumSegments", [ROWS, i32(), i32(), np.int64(2)], {},
                 [np.zeros((2, 2), np.float32)], id="sparse-num-segments-no-entries"),
    pytest.param("SparseSegmentMean", [ROWS, i32(0, 1), i32(0, 0)], {"sparse_gradient": True}, [f32([[1, 2]])],
                 id="sparse-gradient-attr-changes-nothing"),
]


@pytest.mark.parametrize("op, inputs, attrs, expected", CASES)
def test_segment_reductions(run_kernel, op, inputs, attrs, expected):
    assert_outputs(run_kernel(op, *inputs, **attrs), expected)


def test_long_sparse_segments_match_a_reference(run_kernel):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((30, 5)).astype(np.float32)
    indices = rng.integers(0, 30, 100).astype(np.int32)
    ids = np.sort(rng.integers(0, 12, 100)).astype(np.int32)
    (mean,) = run_kernel("SparseSegmentMean", data, indices, ids)
    expected = np.zeros((12, 5), np.float64)
    for seg in range(12):
        rows = indices[ids == seg]
        if rows.size:
            expected[seg] = data[rows].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(mean, expected, rtol=1e-5, atol=1e-6)


ERRORS = [
    pytest.param("SegmentSum", [D, np.array([[0, 0, 1]], np.int32)], "segment_ids should be a vector.",
                 id="ids-not-vector"),
    pytest.param("SegmentSum", [D, i32(0, 1)], "segment_ids should be the same size as dimension 0 of input.",
                 id="ids-size"),
    pytest.param("SegmentSum", [np.float32(1), np.array([[0]], np.int32)], "input must be at least rank 1",
                 id="scalar-data-first"),
    pytest.param("SegmentSum", [D, i32(1, 0, 0)], "segment ids are not increasing", id="unsorted"),
    pytest.param("SegmentMax", [D, i32(0, 2, 1)], "segment ids are not increasing", id="unsorted-later"),
    pytest.param("SegmentSum", [D, i32(-1, 0, 1)],
                 r"Segment id -1 out of range \[0, 2\), possibly because 'segment_ids' input is not sorted.",
                 id="negative-first"),
    pytest.param("SegmentSum", [D, i32(-3, -2, -1)], "segment ids must be >= 0", id="all-negative"),
    pytest.param("SegmentSum", [f32([1, 2, 3, 4]), i32(0, 4, 5, 2)], r"Segment id 4 out of range \[0, 3\)",
                 id="out-of-range-before-unsorted"),
    pytest.param("UnsortedSegmentSum", [D, i32(0, 1), np.int32(3)],
                 r"data.shape = \[3\] does not start with segment_ids.shape = \[2\]", id="unsorted-prefix"),
    pytest.param("UnsortedSegmentSum", [D, i32(0, 1, 3), np.int32(3)], r"segment_ids\[2\] = 3 is out of range \[0, 3\)",
                 id="unsorted-out-of-range"),
    pytest.param("UnsortedSegmentSum", [np.ones((2, 2, 2), np.float32), np.array([[0, 1], [9, 1]], np.int32),
                                        np.int32(3)], r"segment_ids\[1,0\] = 9 is out of range \[0, 3\)",
                 id="unsorted-out-of-range-2d"),
    pytest.param("UnsortedSegmentSum", [np.float32(2), np.int32(5), np.int32(2)],
                 r"segment_ids = 5 is out of range \[0, 2\)", id="unsorted-out-of-range-scalar"),
    pytest.param("UnsortedSegmentSum", [D, i32(0, 1, 0), np.int32(-1)], "Input num_segments == -1 must not be negative.",
                 id="unsorted-negative-num"),
    pytest.param("UnsortedSegmentSum", [D, i32(0, 1), i32(2)], r"num_segments should be a scalar, not shape \[1\]",
                 id="unsorted-num-not-scalar-first"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 4, 3), i32(0, 0, 2)], r"Bad: indices\[1\] == 4 out of range \[0, 4\)",
                 id="sparse-index-out-of-range"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, -1, 3), i32(0, 0, 2)], r"indices\[1\] == -1 out of range",
                 id="sparse-negative-index"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1, 3), i32(0, 2, 1)], "segment ids are not increasing",
                 id="sparse-unsorted"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 9, 3), i32(1, 0, 2)], "segment ids are not increasing",
                 id="sparse-unsorted-before-bad-index"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1, 3), i32(-1, 0, 1)], r"Segment id -1 out of range \[0, 2\)",
                 id="sparse-negative-id"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1, 3), i32(-3, -2, -1)], "segment ids must be >= 0",
                 id="sparse-all-negative"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1, 3), i32(0, 0)], "segment_ids and indices should have same size.",
                 id="sparse-sizes"),
    pytest.param("SparseSegmentSum", [ROWS, np.array([[0, 1]], np.int32), i32(0, 0)], "indices should be a vector.",
                 id="sparse-indices-not-vector"),
    pytest.param("SparseSegmentSum", [ROWS, i32(0, 1), np.array([[0, 0]], np.int32)], "segment_ids should be a vector.",
                 id="sparse-ids-not-vector"),
    pytest.param("SparseSegmentSum", [np.float32(1), i32(0), i32(0)], "Shape must be at least rank 1",
                 id="sparse-scalar-data"),
    pytest.param("SparseSegmentSumWithNumSegments", [ROWS, i32(0, 1, 3), i32(0, 0, 2), np.int32(2)],
                 "segment ids must be < num_segments", id="sparse-too-few-segments"),
    pytest.param("SparseSegmentSumWithNumSegments", [ROWS, i32(0, 1, 3), i32(2, 0, 1), np.int32(4)],
                 "segment ids are not increasing", id="sparse-num-unsorted"),
    pytest.param("SparseSegmentSumWithNumSegments", [ROWS, np.array([[0]], np.int32), i32(0), np.int32(-1)],
                 "segment ids must be >= 0", id="sparse-negative-num-first"),
    pytest.param("SparseSegmentMeanWithNumSegments", [ROWS, i32(0), i32(0), i32(3)],
                 r"num_segments should be a scalar, not shape \[1\]", id="sparse-num-not-scalar"),
]


@pytest.mark.parametrize("op, inputs, message", ERRORS)
def test_segment_errors(run_kernel, op, inputs, message):
    with pytest.raises(ValueError, match=message):
        run_kernel(op, *inputs)
