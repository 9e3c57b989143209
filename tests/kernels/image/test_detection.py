"""Detection kernels: NonMaxSuppression V1-V5, NonMaxSuppressionWithOverlaps, CombinedNonMaxSuppression,
DrawBoundingBoxes. tests/fixtures/ops/detection/ holds TensorFlow 2.21's outputs; here are the behaviours
users rely on, the orders TensorFlow leaves equal scores in (values from TensorFlow 2.21), a plain greedy
loop the kernels must agree with, and TensorFlow's errors."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels.image.stl_order import pop_order, sort_order
from kernels.limits import AllocationTooLarge
from tests.kernels.checks import f32, i32


def run(op: str, *inputs, memory_limit: int | None = None, **attrs) -> tuple:
    bound = kernels.lookup(op, "cpu").bind(np, attrs, {"memory_limit": memory_limit})
    return bound(*inputs)


def v3(boxes, scores, max_output=10, iou=0.5, score=float("-inf"), dtype=np.float32):
    (out,) = run("NonMaxSuppressionV3", np.asarray(boxes, dtype), np.asarray(scores, dtype), np.int32(max_output),
                 np.float32(iou), np.float32(score))
    return out.tolist()


def random_boxes(rng: np.random.Generator, n: int, grid: int = 20) -> np.ndarray:
    centre = rng.uniform(0, 1, (n, 2))
    half = rng.uniform(0.02, 0.3, (n, 2))
    boxes = np.round(np.concatenate([centre - half, centre + half], axis=1) * grid) / grid
    flip = rng.random(n) < 0.3
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    return boxes.astype(np.float32)


def plain_greedy(boxes: np.ndarray, scores: np.ndarray, max_output: int, iou_threshold: float, score_threshold: float,
                 dtype=np.float32) -> list[int]:
    """The textbook loop, one pair at a time in float32 (rounded to `dtype` to compare), ties by index."""
    b = boxes.astype(np.float32)
    order = sorted((i for i in range(len(scores)) if scores[i] > dtype(score_threshold)),
                   key=lambda i: (-float(scores[i]), i))

    def iou(i: int, j: int) -> np.float32:
        ymin_i, ymax_i = sorted((b[i, 0], b[i, 2]))
        xmin_i, xmax_i = sorted((b[i, 1], b[i, 3]))
        ymin_j, ymax_j = sorted((b[j, 0], b[j, 2]))
        xmin_j, xmax_j = sorted((b[j, 1], b[j, 3]))
        area_i = (ymax_i - ymin_i) * (xmax_i - xmin_i)
        area_j = (ymax_j - ymin_j) * (xmax_j - xmin_j)
        if area_i <= 0 or area_j <= 0:
            return np.float32(0)
        inter = max(min(ymax_i, ymax_j) - max(ymin_i, ymin_j), np.float32(0)) * \
            max(min(xmax_i, xmax_j) - max(xmin_i, xmin_j), np.float32(0))
        return inter / (area_i + area_j - inter)

    kept: list[int] = []
    for i in order:
        if len(kept) == max_output:
            break
        if all(dtype(iou(i, j)) <= dtype(iou_threshold) for j in kept):
            kept.append(i)
    return kept


# --- NonMaxSuppression V1-V5 ---------------------------------------------------------------------------


def test_identical_and_flipped_boxes_suppress_each_other():
    boxes = [[0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [2, 2, 3, 3]]
    assert v3(boxes, [0.5, 0.9, 0.7, 0.1]) == [1, 3]


def test_equal_scores_keep_the_lower_index_first():
    boxes = [[0, 0, 1, 1], [2, 2, 3, 3], [0, 0, 1, 1], [4, 4, 5, 5]]
    assert v3(boxes, [0.5, 0.5, 0.5, 0.5]) == [0, 1, 3]


def test_an_iou_equal_to_the_threshold_does_not_suppress():
    # IoU of the two boxes is exactly 1/2; of the first and third exactly float32(1/3)
    boxes = [[0, 0, 1, 1], [0, 0, 1, 2], [0, 0, 1, 3]]
    assert v3(boxes, [0.9, 0.8, 0.7], iou=0.5) == [0, 1]
    assert v3(boxes, [0.9, 0.8, 0.7], iou=float(np.float32(1 / 3))) == [0, 2]
    assert v3(boxes, [0.9, 0.8, 0.7], iou=0.49) == [0, 2]


def test_zero_area_boxes_overlap_nothing():
    boxes = [[0, 0, 1, 1], [0.5, 0.5, 0.5, 0.9], [0.2, 0.2, 0.2, 0.2]]
    assert v3(boxes, [0.9, 0.8, 0.7], iou=0.0) == [0, 1, 2]


def test_nan_scores_are_never_selected_and_scores_must_beat_the_threshold():
    boxes = [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]]
    assert v3(boxes, [np.nan, 0.3, 0.7], score=0.3) == [2]
    assert v3(boxes, [np.inf, 0.3, np.nan]) == [0, 1]


def test_no_boxes_and_max_output_zero():
    assert v3(np.zeros((0, 4)), np.zeros(0)) == []
    assert v3([[0, 0, 1, 1]], [1.0], max_output=0) == []


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("seed", range(6))
def test_hard_nms_is_the_plain_greedy_loop(seed, dtype):
    rng = np.random.default_rng(seed)
    boxes = random_boxes(rng, 200)
    scores = (np.round(rng.uniform(0, 1, 200), 2)).astype(np.float32)
    for max_output, iou, score in [(50, 0.5, 0.0), (300, 0.3, 0.5), (7, 0.0, -1.0)]:
        want = plain_greedy(boxes.astype(dtype), scores.astype(dtype), max_output, iou, score, dtype)
        assert v3(boxes, scores, max_output, iou, score, dtype) == want


def test_non_finite_boxes_take_tensorflows_loop():
    # A NaN IoU zeroes the candidate's score and puts it back in the queue; with score 0 it is selected later.
    boxes = f32([[0, 0, 1, 1], [np.nan, 0, 1, 1], [5, 5, 6, 6]])
    assert v3(boxes, [0.9, 0.8, 0.1]) == [0, 2, 1]


def test_v4_pads_with_zeros_and_counts_the_valid_indices():
    boxes = f32([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3]])
    indices, valid = run("NonMaxSuppressionV4", boxes, f32([0.9, 0.8, 0.7]), np.int32(5), np.float32(0.5),
                         np.float32(0), pad_to_max_output_size=True)
    assert indices.tolist() == [0, 2, 0, 0, 0] and indices.dtype == np.int32
    assert valid.shape == () and int(valid) == 2


def test_v5_soft_nms_decays_overlapping_scores():
    boxes = f32([[0, 0, 1, 1], [0, 0, 1, 2], [3, 3, 4, 4]])
    indices, scores, valid = run("NonMaxSuppressionV5", boxes, f32([0.9, 0.8, 0.5]), np.int32(3), np.float32(1),
                                 np.float32(0), np.float32(0.5))
    # box 1 decays to 0.8 * exp(-0.5 / 0.5 * iou^2) with iou = 1/2 (0.62), still above box 2
    assert indices.tolist() == [0, 1, 2] and int(valid) == 3
    np.testing.assert_allclose(scores, [0.9, 0.8 * np.exp(-0.25), 0.5], rtol=1e-6)
    indices, scores, _ = run("NonMaxSuppressionV5", boxes, f32([0.9, 0.8, 0.7]), np.int32(3), np.float32(1),
                             np.float32(0), np.float32(0.5))
    assert indices.tolist() == [0, 2, 1]


def test_v5_keeps_float16():
    boxes = np.array([[0, 0, 1, 1], [0, 0, 1, 2]], np.float16)
    _, scores, _ = run("NonMaxSuppressionV5", boxes, np.array([0.9, 0.8], np.float16), np.int32(2), np.float16(1),
                       np.float16(0), np.float16(0.5))
    assert scores.dtype == np.float16


def test_with_overlaps_reads_candidate_then_selected():
    overlaps = f32([[1, 0.2, 0.9], [0.9, 1, 0.2], [0.2, 0.2, 1]])  # overlaps[candidate, selected]
    (out,) = run("NonMaxSuppressionWithOverlaps", overlaps, f32([0.9, 0.8, 0.7]), np.int32(3), np.float32(0.5),
                 np.float32(0))
    assert out.tolist() == [0, 2]


BOXES, SCORES = f32([[0, 0, 1, 1]]), f32([1])


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("NonMaxSuppression", [BOXES, SCORES, i32(1, 2)], {}, r"max_output_size must be 0-D, got shape \[2\]$"),
    ("NonMaxSuppression", [BOXES, SCORES, np.int32(1)], {"iou_threshold": 1.5}, r"iou_threshold must be in \[0, 1\]"),
    ("NonMaxSuppression", [f32([1, 2, 3]), SCORES, np.int32(1)], {},
     r"boxes must be 2-D\[3\] \(Shape must be rank 2 but is rank 1\)"),
    ("NonMaxSuppression", [f32([[0, 0, 1]]), SCORES, np.int32(1)], {},
     r"boxes must have 4 columns \(Dimension must be 4 but is 3\)"),
    ("NonMaxSuppression", [BOXES, f32([[1]]), np.int32(1)], {},
     r"scores must be 1-D\[1,1\] \(Shape must be rank 1 but is rank 2\)"),
    ("NonMaxSuppression", [BOXES, f32([1, 2]), np.int32(1)], {},
     r"scores has incompatible shape \(Dimensions must be equal, but are 1 and 2\)"),
    ("NonMaxSuppression", [BOXES, SCORES, np.int32(-1)], {}, "output size must be non-negative"),
    ("NonMaxSuppressionV3", [BOXES, SCORES, i32(1, 2), np.float32(0.5), np.float32(0)], {},
     r"max_output_size must be 0-D, got shape \[2\] \(Shape must be rank 0 but is rank 1\)"),
    ("NonMaxSuppressionV3", [BOXES, SCORES, np.int32(1), np.float32(np.nan), np.float32(0)], {},
     r"iou_threshold must be in \[0, 1\]"),
    ("NonMaxSuppressionV3", [BOXES, SCORES, np.int32(1), np.float32(0.5), f32([0])], {},
     r"score_threshold must be 0-D, got shape \[1\]$"),
    ("NonMaxSuppressionV5", [BOXES, SCORES, np.int32(1), np.float32(0.5), np.float32(0), np.float32(-1)], {},
     "soft_nms_sigma_val must be >= 0"),
    ("NonMaxSuppressionV5", [BOXES, SCORES, np.int32(1), np.float32(0.5), np.float32(0), f32([1])], {},
     r"soft_nms_sigma must be 0-D, got shape \[1\]"),
    ("NonMaxSuppressionWithOverlaps", [f32([[1, 0]]), SCORES, np.int32(1), np.float32(0.5), np.float32(0)], {},
     r"overlaps must be square\[1,2\]"),
])
def test_nms_errors_are_tensorflows(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        run(op, *inputs, **attrs)


def test_padding_to_a_huge_max_output_size_is_refused_before_allocating():
    with pytest.raises(AllocationTooLarge):
        run("NonMaxSuppressionV4", BOXES, SCORES, np.int32(2**31 - 1), np.float32(0.5), np.float32(0),
            pad_to_max_output_size=True, memory_limit=1 << 20)


# --- CombinedNonMaxSuppression --------------------------------------------------------------------------


def combined(boxes, scores, per_class, total, iou=0.5, score=0.0, **attrs):
    return run("CombinedNonMaxSuppression", f32(boxes), f32(scores), np.int32(per_class), np.int32(total),
               np.float32(iou), np.float32(score), **attrs)


def test_combined_selects_per_class_then_the_best_over_all_classes():
    boxes = [[[[0, 0, 1, 1]], [[0, 0, 1, 1.1]], [[0.5, 0.5, 2, 2]]]]
    scores = [[[0.9, 0.1], [0.8, 0.7], [0.3, 0.6]]]
    out_boxes, out_scores, out_classes, valid = combined(boxes, scores, 2, 4)
    assert out_scores.tolist() == [[np.float32(0.9), np.float32(0.7), np.float32(0.6), np.float32(0.3)]]
    assert out_classes.tolist() == [[0, 1, 1, 0]]
    assert valid.tolist() == [4] and valid.dtype == np.int32
    np.testing.assert_array_equal(out_boxes[0, 2], [0.5, 0.5, 1, 1])  # clipped to [0, 1]


def test_combined_pads_and_pad_per_class_shortens():
    boxes, scores = [[[[0, 0, 1, 1]], [[2, 2, 3, 3]]]], [[[0.9, 0.2], [0.8, 0.1]]]
    out_boxes, _, _, valid = combined(boxes, scores, 1, 10)
    assert out_boxes.shape == (1, 10, 4) and valid.tolist() == [2]
    out_boxes, _, _, _ = combined(boxes, scores, 1, 10, pad_per_class=True)
    assert out_boxes.shape == (1, 2, 4)


def test_combined_orders_equal_scores_as_tensorflow():
    # 20 disjoint boxes, two classes, every score 0.5: TensorFlow 2.21's order, from its priority queue per
    # class and std::sort over all
    n = 20
    boxes = [[[[i, 0, i + 0.5, 1]] for i in range(n)]]
    out_boxes, _, out_classes, _ = combined(boxes, np.full((1, n, 2), 0.5), n, 2 * n, clip_boxes=False)
    order = [12, 2, 6, 14, 19, 18, 17, 16, 13, 15, 0, 11, 10, 9, 8, 5, 7, 4, 1, 3]
    assert out_boxes[0, :, 0].astype(int).tolist() == order * 2
    assert out_classes[0].tolist() == [1] * n + [0] * n
    out_boxes, _, _, _ = combined([[[[i, 0, i + 0.5, 1]] for i in range(5)]], np.full((1, 5, 1), 0.5), 5, 5,
                                  clip_boxes=False)
    assert out_boxes[0, :, 0].astype(int).tolist() == [0, 2, 4, 1, 3]


def test_libstdcxx_orders_are_permutations_sorted_by_key():
    rng = np.random.default_rng(0)
    for n in (0, 1, 5, 16, 17, 40, 200):
        keys = rng.choice([0.1, 0.2, 0.3], n).tolist()
        pops, ordered = pop_order(keys), sort_order(keys, descending=True)
        assert sorted(pops) == sorted(ordered) == list(range(n))
        assert [keys[i] for i in pops] == [keys[i] for i in ordered] == sorted(keys, reverse=True)
    assert pop_order([0.5] * 5) == [0, 2, 4, 1, 3]


B4, S3 = np.zeros((1, 2, 1, 4), np.float32), np.zeros((1, 2, 3), np.float32)


@pytest.mark.parametrize("inputs, message", [
    ([B4, np.zeros((2, 2, 3), np.float32), 1, 1, 0.5, 0.0], "boxes and scores must have same batch size"),
    ([B4, S3, i32(1), 1, 0.5, 0.0], r"max_size_per_class must be 0-D, got shape \[1\]"),
    ([B4, S3, 0, 1, 0.5, 0.0], "max_size_per_class must be positive"),
    ([B4, S3, 1, 0, 0.5, 0.0], "max_total_size must be > 0"),
    ([B4, S3, 1, 1, 1.5, 0.0], r"iou_threshold must be in \[0, 1\]"),
    ([np.zeros((1, 2, 4), np.float32), S3, 1, 1, 0.5, 0.0], r"boxes must be 4-D\[1,2,4\]"),
    ([B4, np.zeros((1, 2, 3, 1), np.float32), 1, 1, 0.5, 0.0], r"scores must be 3-D\[1,2,3,1\]"),
    ([np.zeros((1, 2, 2, 4), np.float32), S3, 1, 1, 0.5, 0.0], "third dimension of boxes must be either 1 or num"),
    ([np.zeros((1, 2, 1, 3), np.float32), S3, 1, 1, 0.5, 0.0], "boxes must have 4 columns"),
    ([B4, np.zeros((1, 3, 3), np.float32), 1, 1, 0.5, 0.0], "scores has incompatible shape"),
])
def test_combined_errors_are_tensorflows(inputs, message):
    boxes, scores, per_class, total, iou, score = inputs
    with pytest.raises(ValueError, match=message):
        run("CombinedNonMaxSuppression", boxes, scores, np.asarray(per_class, np.int32), np.asarray(total, np.int32),
            np.float32(iou), np.float32(score))


def test_combined_refuses_a_huge_max_total_size_before_allocating():
    with pytest.raises(AllocationTooLarge):
        run("CombinedNonMaxSuppression", B4, S3, np.int32(1), np.int32(2**31 - 1), np.float32(0.5), np.float32(0),
            memory_limit=1 << 20)


# --- DrawBoundingBoxes ---------------------------------------------------------------------------------


def test_draw_outlines_a_box_in_the_first_default_colour():
    images = np.zeros((1, 5, 5, 3), np.float32)
    (out,) = run("DrawBoundingBoxes", images, f32([[[0.25, 0.25, 0.75, 0.75]]]))
    outline = np.zeros((5, 5), bool)
    outline[1, 1:4] = outline[3, 1:4] = outline[1:4, 1] = outline[1:4, 3] = True
    np.testing.assert_array_equal(out[0][outline], np.tile([1, 1, 0], (8, 1)))  # yellow
    assert not out[0][~outline].any()
    assert not images.any()  # the input is untouched


def test_draw_v2_cycles_through_the_given_colours_and_skips_inverted_boxes():
    images = np.zeros((1, 3, 3, 1), np.float16)
    boxes = f32([[[0, 0, 0, 1], [1, 0, 1, 1], [1, 1, 0, 0]]])
    (out,) = run("DrawBoundingBoxesV2", images, boxes, f32([[0.5, 9], [0.25, 9]]))
    assert out.dtype == np.float16
    assert out[0, :, :, 0].tolist() == [[0.5, 0.5, 0.5], [0, 0, 0], [0.25, 0.25, 0.25]]


@pytest.mark.parametrize("op, inputs, message", [
    ("DrawBoundingBoxes", [np.zeros((2, 2, 3), np.float32), np.zeros((1, 1, 4), np.float32)],
     "The rank of the images should be 4"),
    ("DrawBoundingBoxes", [np.zeros((1, 2, 2, 3), np.float32), np.zeros((1, 4), np.float32)],
     "The rank of the boxes tensor should be 3"),
    ("DrawBoundingBoxes", [np.zeros((1, 2, 2, 3), np.float32), np.zeros((2, 1, 4), np.float32)],
     "The batch sizes should be the same"),
    ("DrawBoundingBoxes", [np.zeros((1, 2, 2, 2), np.float32), np.zeros((1, 1, 4), np.float32)],
     r"Channel depth should be either 1 \(GRY\), 3 \(RGB\), or 4 \(RGBA\)"),
    ("DrawBoundingBoxes", [np.zeros((1, 2, 2, 3), np.float32), np.zeros((1, 1, 5), np.float32)],
     "The size of the third dimension of the box must be 4. Received: 5"),
    ("DrawBoundingBoxesV2", [np.zeros((1, 2, 2, 3), np.float32), np.zeros((1, 1, 4), np.float32), f32([1, 1, 1])],
     r"colors must be a 2-D matrix\[3\]"),
    ("DrawBoundingBoxesV2", [np.zeros((1, 2, 2, 3), np.float32), np.zeros((1, 1, 4), np.float32), f32([[1, 1]])],
     r"colors must have equal or more channels than the image provided: \[1,2\]"),
])
def test_draw_errors_are_tensorflows(op, inputs, message):
    with pytest.raises(ValueError, match=message):
        run(op, *inputs)
