"""EditDistance between two SparseTensors of sequences (tf.edit_distance).

Expected values were checked against TensorFlow 2.21's raw op.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels.sparse.edit_distance import levenshtein


def i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def strings(*v) -> np.ndarray:
    return np.array(v, dtype=object)


HYP = (i64(0, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0).reshape(4, 3), strings(b"a", b"b", b"c", b"a"), i64(2, 2, 2))
TRUTH = (i64(0, 1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0).reshape(5, 3), strings(b"a", b"b", b"c", b"a", b"b"),
         i64(2, 2, 3))


def run(run_kernel, hyp, truth, normalize=True):
    (out,) = run_kernel("EditDistance", *hyp, *truth, normalize=normalize)
    assert out.dtype == np.float32
    return out


def test_normalized_distances(run_kernel):
    # (0,0): a hypothesis without truth -> inf; (0,1): a truth without hypothesis -> 1; (1,0): equal -> 0;
    # (1,1): "a" against "ba" -> 1 insertion / 2.
    np.testing.assert_array_equal(run(run_kernel, HYP, TRUTH), [[np.inf, 1], [0, 0.5]])


def test_unnormalized_distances(run_kernel):
    np.testing.assert_array_equal(run(run_kernel, HYP, TRUTH, normalize=False), [[1, 1], [0, 1]])


def test_output_takes_the_larger_leading_shape(run_kernel):
    out = run(run_kernel, (i64(0, 0, 0).reshape(1, 3), np.int32([1]), i64(1, 1, 1)),
              (i64(2, 0, 0).reshape(1, 3), np.int32([2]), i64(3, 1, 1)))
    np.testing.assert_array_equal(out, [[np.inf], [0], [1]])


def test_gaps_in_the_sequence_dim_do_not_count(run_kernel):
    out = run(run_kernel, (i64(0, 0, 0, 5).reshape(2, 2), np.int32([1, 2]), i64(1, 9)),
              (i64(0, 3).reshape(1, 2), np.int32([1]), i64(1, 9)))
    np.testing.assert_array_equal(out, [1])


def test_nan_never_equals_nan(run_kernel):
    seq = (i64(0, 0, 0, 1).reshape(2, 2), np.float32([1, np.nan]), i64(1, 2))
    np.testing.assert_array_equal(run(run_kernel, seq, seq), [0.5])


def test_unsorted_indices_merge_as_tensorflow_merges_them(run_kernel):
    """TensorFlow assumes row-major order without checking: groups are merged in the order given."""
    out = run(run_kernel, (i64(1, 0, 0, 0, 0, 0).reshape(2, 3), np.int32([1, 2]), i64(2, 1, 1)),
              (i64(0, 0, 0).reshape(1, 3), np.int32([2]), i64(2, 1, 1)))
    np.testing.assert_array_equal(out, [[np.inf], [np.inf]])


def test_both_empty(run_kernel):
    empty = (np.zeros((0, 2), np.int64), np.int32([]), i64(2, 3))
    np.testing.assert_array_equal(run(run_kernel, empty, empty), [0, 0])


@pytest.mark.parametrize(
    "hyp, truth, message",
    [((i64(0, 0).reshape(1, 2), np.int32([1]), i64(1, 1)), (i64(0, 0, 0).reshape(1, 3), np.int32([2]), i64(1, 1, 1)),
      "matching ranks"),
     ((i64(0).reshape(1, 1), np.int32([1]), i64(1)), (i64(0).reshape(1, 1), np.int32([2]), i64(1)), "rank at least 2"),
     ((i64(0, 0), np.int32([1]), i64(1, 1)), (i64(0, 0).reshape(1, 2), np.int32([2]), i64(1, 1)),
      "hypothesis_indices should be a matrix"),
     ((i64(0, 0).reshape(1, 2), np.int32([1]), i64(1, 1, 1)), (i64(0, 0).reshape(1, 2), np.int32([2]), i64(1, 1)),
      "hypothesis_shape.NumElements"),
     ((i64(0, 0, 3, 0).reshape(2, 2), np.int32([1, 2]), i64(1, 1)), (i64(0, 0).reshape(1, 2), np.int32([2]), i64(1, 1)),
      "outside the output shape")],
)
def test_errors(run_kernel, hyp, truth, message):
    with pytest.raises(ValueError, match=message):
        run_kernel("EditDistance", *hyp, *truth)


def test_levenshtein():
    assert levenshtein(list("kitten"), list("sitting")) == 3
    assert levenshtein([], [1, 2]) == 2
    assert levenshtein([b"a"], [b"a"]) == 0


def test_a_dense_shape_over_the_memory_limit_is_refused():
    import kernels
    from kernels.limits import AllocationTooLarge

    bound = kernels.lookup("EditDistance", "cpu").bind(np, {}, {"memory_limit": 1 << 20})
    empty = np.zeros((0, 3), np.int64), np.int32([])
    with pytest.raises(AllocationTooLarge, match="EditDistance output"):
        bound(*empty, i64(100000, 100000, 1), *empty, i64(1, 1, 1))
