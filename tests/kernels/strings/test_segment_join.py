"""UnsortedSegmentJoin: rows joined per segment as TensorFlow 2.21 joins them (tests/fixtures/ops/strings_sweep/
holds its outputs), including its separator quirks, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels.limits import AllocationTooLarge
from tests.kernels.checks import i32, i64


def s(*values: str | bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = [v.encode() if isinstance(v, str) else v for v in values]
    return out


def join(inputs, ids, num, memory_limit=None, **attrs):
    bound = kernels.lookup("UnsortedSegmentJoin", "cpu").bind(np, attrs, {"memory_limit": memory_limit})
    return bound(inputs, ids, num)[0]


def test_rows_join_in_order_and_empty_segments_are_empty():
    out = join(s("a", "b", "c", "d"), i32(2, 0, 2, 2), np.int32(4), separator="-")
    assert out.tolist() == [b"b", b"", b"a-c-d", b""]


def test_the_separator_only_follows_a_non_empty_start():
    # TensorFlow appends the separator once the joined string is non-empty: leading empty parts vanish,
    # later ones leave their separators
    out = join(s("", "", "x", "", "y"), i32(0, 0, 0, 0, 0), np.int32(1), separator=",")
    assert out.tolist() == [b"x,,y"]


def test_a_separator_ends_at_its_first_nul():
    out = join(s("a", "b"), i64(0, 0), np.int64(1), separator="+\0-")
    assert out.tolist() == [b"a+b"]


def test_inner_dimensions_join_elementwise_and_ids_may_have_rank_two():
    inputs = s("a", "b", "c", "d", "e", "f").reshape(3, 2)
    assert join(inputs, i32(1, 0, 1), np.int32(2), separator="|").tolist() == [[b"c", b"d"], [b"a|e", b"b|f"]]
    assert join(inputs, np.array([[0, 1], [1, 1], [0, 0]], np.int32), np.int32(2)).tolist() == [b"aef", b"bcd"]


@pytest.mark.parametrize("inputs, ids, num, message", [
    (s("a"), i32(0), np.zeros(0, np.int32), "Number of segments cannot be empty."),
    (s("a"), np.int32(0), np.int32(1), "Segment_id cannot have rank 0"),
    (s("a"), np.zeros((1, 1), np.int32), np.int32(1), "Invalid segment_id rank 2 for input with 1 dimension"),
    (s("a", "b"), i32(0), np.int32(1), "Segment dimension is 1 while input dimension is 1 in rank 0"),
    (s("a", "b"), i32(0, 2), np.int32(2), "segment_ids are not allowed to exceed num_segments or to have negative"),
    (s("a", "b"), i32(0, -1), np.int32(2), "segment_ids are not allowed to exceed num_segments or to have negative"),
    (s("a"), i32(0), np.int32(-1), "num_segments must be non-negative"),
])
def test_errors_are_tensorflows(inputs, ids, num, message):
    with pytest.raises(ValueError, match=message):
        join(inputs, ids, num)


def test_a_huge_num_segments_is_refused_before_allocating():
    with pytest.raises(AllocationTooLarge):
        join(s("a"), i64(0), np.int64(10**12), memory_limit=1 << 20)
