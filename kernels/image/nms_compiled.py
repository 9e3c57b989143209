"""Non-maximum suppression as compiled loops: NonMaxSuppression V1-V5 on float32 scores (hard and soft) and
CombinedNonMaxSuppression's per-class selection, where the numpy twins (kernels.image.nms, combined_nms)
pay numpy's per-call cost for every selected box.

`suppress` is TensorFlow's DoNonMaxSuppressionOp for T = float32: candidates (scores above the score
threshold) sit in a binary heap ordered by score, the lower index first among equal scores (a total order,
so the pops come in exactly TensorFlow's priority-queue order), and each popped candidate is compared with
the boxes selected since it was last compared, the latest first: an IoU above the threshold suppresses it
(hard NMS: a first pass without early exit, which vectorizes, finds the kept boxes that intersect the
candidate, and only those are divided out, since an IoU of 0 suppresses nothing), or soft-NMS multiplies
its score by exp(scale * iou^2) per box and puts it back in the queue while the score stays above the
threshold (the heap's root is replaced by it: the same pops as a pop and a push). exp is taken in float64 and rounded to float32, as the twin does. Boxes are [y1, x1, y2, x2] in
either corner order, normalised with std::min/max; the IoU is TensorFlow's IOU() in float32, in its order
of operations (0 where either box has an area of zero or less). Where a box has a non-finite corner, side
or area, an IoU can be NaN, which TensorFlow turns into a zero score put back in the queue; `suppress`
then returns -1 and the kernel runs its twin, which follows TensorFlow there step by step.

`per_class` is CombinedNonMaxSuppression's DoNMSPerClass for every image and class: its priority queue is
libstdc++'s std::priority_queue over a vector, ordered by score alone, so equal scores pop in the order
its push_heap and pop_heap leave them (kernels.image.stl_order); the loop runs those two algorithms as
libstdc++ writes them, so the pops match TensorFlow's for equal scores too. A NaN IoU suppresses nothing.
"""

# ruff: noqa: FURB136  (the conditional expressions are std::min/max: which operand a NaN or a signed zero
# comes from matters, and min()/max() do not say)
from __future__ import annotations

import math

import numpy as np

from kernels.jit import compiled, readonly

__all__ = ["per_class", "select", "select_per_class", "suppress"]

_OPS = ("NonMaxSuppression", "NonMaxSuppressionV2", "NonMaxSuppressionV3", "NonMaxSuppressionV4",
        "NonMaxSuppressionV5")


@compiled(f"int64({readonly(2)}, {readonly(1)}, int64, float32, float32, boolean, float32, int32[::1], "
          "float32[::1])", ops=_OPS)
def suppress(boxes, scores, max_output, iou_threshold, score_threshold, soft, scale, selected,
             selected_scores):  # pragma: no cover - compiled
    """Select up to `max_output` of the [n, 4] float32 `boxes` into `selected` and their (soft-NMS: decayed)
    scores into `selected_scores` (both at least min(n, max_output) long), best first; returns how many,
    or -1 when a box is not finite. `iou_threshold` must be at least 0 (the kernels check it is in [0, 1])."""
    n = boxes.shape[0]
    zero = np.float32(0.0)
    ymin = np.empty(n, np.float32)
    xmin = np.empty(n, np.float32)
    ymax = np.empty(n, np.float32)
    xmax = np.empty(n, np.float32)
    area = np.empty(n, np.float32)
    for i in range(n):
        y1, x1, y2, x2 = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
        ymin[i] = y2 if y2 < y1 else y1  # std::min(y1, y2)
        ymax[i] = y2 if y1 < y2 else y1  # std::max(y1, y2)
        xmin[i] = x2 if x2 < x1 else x1
        xmax[i] = x2 if x1 < x2 else x1
        height = ymax[i] - ymin[i]
        width = xmax[i] - xmin[i]
        area[i] = height * width
        if not (math.isfinite(height) and math.isfinite(width) and math.isfinite(area[i])):
            return -1

    # The queue: entry k is box heap_index[k] with its current score and the number of selected boxes it
    # has been compared with; an entry comes first when its score is higher, or equal with a lower index.
    heap_index = np.empty(n, np.int64)
    heap_score = np.empty(n, np.float32)
    heap_begin = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        if scores[i] > score_threshold:
            heap_index[size] = i
            heap_score[size] = scores[i]
            heap_begin[size] = 0
            size += 1
    # the selected boxes' corners and areas, in selection order
    length = min(max_output, n)
    k_ymin = np.empty(length, np.float32)
    k_xmin = np.empty(length, np.float32)
    k_ymax = np.empty(length, np.float32)
    k_xmax = np.empty(length, np.float32)
    k_area = np.empty(length, np.float32)
    overlap = np.empty(length, np.bool_)
    heapify_left = size // 2  # positions still to sift down to build the heap (then each pop sifts the root)
    kept = 0
    while True:
        if heapify_left > 0:
            heapify_left -= 1
            hole = heapify_left
        else:
            if kept >= max_output or size == 0:
                break
            candidate, score, begin = heap_index[0], heap_score[0], heap_begin[0]
            original = score
            c_ymin, c_xmin, c_ymax, c_xmax, area_c = ymin[candidate], xmin[candidate], ymax[candidate], \
                xmax[candidate], area[candidate]
            hard = False
            if not soft and area_c > zero:
                # Which kept boxes intersect the candidate: a pass without early exit over their corners
                # (it vectorizes); an IoU of 0 suppresses nothing, so only those are divided out.
                for j in range(kept):
                    top = k_ymin[j] if c_ymin < k_ymin[j] else c_ymin  # std::max
                    bottom = k_ymax[j] if k_ymax[j] < c_ymax else c_ymax  # std::min
                    left = k_xmin[j] if c_xmin < k_xmin[j] else c_xmin
                    right = k_xmax[j] if k_xmax[j] < c_xmax else c_xmax
                    overlap[j] = (bottom - top > zero) & (right - left > zero) & (k_area[j] > zero)
                for j in range(kept - 1, -1, -1):
                    if overlap[j]:
                        top = k_ymin[j] if c_ymin < k_ymin[j] else c_ymin
                        bottom = k_ymax[j] if k_ymax[j] < c_ymax else c_ymax
                        left = k_xmin[j] if c_xmin < k_xmin[j] else c_xmin
                        right = k_xmax[j] if k_xmax[j] < c_xmax else c_xmax
                        inter = (bottom - top) * (right - left)
                        if inter / ((area_c + k_area[j]) - inter) > iou_threshold:
                            hard = True
                            break
            elif soft:
                for j in range(kept - 1, begin - 1, -1):
                    similarity = zero  # TensorFlow's value is +-0 wherever this stays 0: no division needed
                    if area_c > zero and k_area[j] > zero:
                        top = k_ymin[j] if c_ymin < k_ymin[j] else c_ymin
                        bottom = k_ymax[j] if k_ymax[j] < c_ymax else c_ymax
                        left = k_xmin[j] if c_xmin < k_xmin[j] else c_xmin
                        right = k_xmax[j] if k_xmax[j] < c_xmax else c_xmax
                        height = bottom - top
                        width = right - left
                        if height > zero and width > zero:
                            inter = height * width
                            similarity = inter / ((area_c + k_area[j]) - inter)
                    score = score * np.float32(math.exp(np.float64(scale * similarity * similarity)))
                    if score <= score_threshold:
                        break
            if not hard and score == original:
                selected[kept] = candidate
                selected_scores[kept] = score
                k_ymin[kept], k_xmin[kept], k_ymax[kept], k_xmax[kept], k_area[kept] = c_ymin, c_xmin, c_ymax, \
                    c_xmax, area_c
                kept += 1
            if not hard and score != original and score > score_threshold:
                heap_score[0] = score  # decayed: back in the queue, compared from here on only
                heap_begin[0] = kept
            else:
                size -= 1
                heap_index[0], heap_score[0], heap_begin[0] = heap_index[size], heap_score[size], heap_begin[size]
            hole = 0
        # sift the entry at `hole` down
        item_index, item_score, item_begin = heap_index[hole], heap_score[hole], heap_begin[hole]
        while True:
            child = 2 * hole + 1
            if child >= size:
                break
            right_child = child + 1
            if right_child < size and (heap_score[right_child] > heap_score[child] or (
                    heap_score[right_child] == heap_score[child] and heap_index[right_child] < heap_index[child])):
                child = right_child
            if heap_score[child] > item_score or (heap_score[child] == item_score and heap_index[child] < item_index):
                heap_index[hole], heap_score[hole], heap_begin[hole] = heap_index[child], heap_score[child], \
                    heap_begin[child]
                hole = child
            else:
                break
        heap_index[hole], heap_score[hole], heap_begin[hole] = item_index, item_score, item_begin
    return kept


def select(boxes: np.ndarray, scores: np.ndarray, max_output: int, iou_threshold: np.float32,
           score_threshold: np.float32, sigma: np.float32) -> tuple[np.ndarray, np.ndarray] | None:
    """(int32 indices, float32 scores) NMS keeps for float32 scores (soft-NMS where sigma > 0), or None
    where a box is not finite (the twin's case)."""
    if not iou_threshold >= 0:  # (an IoU of 0 would suppress: the kernels refuse such thresholds)
        return None
    boxes = np.ascontiguousarray(boxes, dtype=np.float32).reshape(-1, 4)
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    soft = bool(sigma > 0)
    scale = np.float32(np.float32(-0.5) / sigma) if soft else np.float32(0)
    length = min(max_output, scores.shape[0])
    selected, selected_scores = np.empty(length, np.int32), np.empty(length, np.float32)
    kept = suppress(boxes, scores, max_output, np.float32(iou_threshold), np.float32(score_threshold), soft, scale,
                    selected, selected_scores)
    return None if kept < 0 else (selected[:kept], selected_scores[:kept])


@compiled(f"void({readonly(4)}, {readonly(3)}, int64, float32, float32, float32[:, ::1], float32[:, :, ::1], "
          "int64[::1])", ops=("CombinedNonMaxSuppression",))
def per_class(boxes, scores, size_per_class, iou_threshold, score_threshold, slot_scores, slot_boxes,
              counts):  # pragma: no cover - compiled
    """For each image b of boxes [batch, n, q, 4] and scores [batch, n, classes]: each class c's kept boxes
    into slots c * size_per_class + k of slot_scores [batch, classes * size_per_class] (-inf where unused,
    as given) and slot_boxes [batch, slots, 4] (the box as given), how many slots in counts[b]."""
    batch, n, q = boxes.shape[0], boxes.shape[1], boxes.shape[2]
    classes = scores.shape[2]
    zero = np.float32(0.0)
    ymin = np.empty((n, q), np.float32)
    xmin = np.empty((n, q), np.float32)
    ymax = np.empty((n, q), np.float32)
    xmax = np.empty((n, q), np.float32)
    area = np.empty((n, q), np.float32)
    heap_key = np.empty(n, np.float32)
    heap_item = np.empty(n, np.int64)
    selected = np.empty(max(size_per_class, 1), np.int64)
    for b in range(batch):
        for i in range(n):
            for k in range(q):
                y1, x1, y2, x2 = boxes[b, i, k, 0], boxes[b, i, k, 1], boxes[b, i, k, 2], boxes[b, i, k, 3]
                ymin[i, k] = y2 if y2 < y1 else y1  # std::min(y1, y2)
                ymax[i, k] = y2 if y1 < y2 else y1  # std::max(y1, y2)
                xmin[i, k] = x2 if x2 < x1 else x1
                xmax[i, k] = x2 if x1 < x2 else x1
                area[i, k] = (ymax[i, k] - ymin[i, k]) * (xmax[i, k] - xmin[i, k])
        count = 0
        for c in range(classes):
            k = c if q > 1 else 0
            # std::priority_queue::emplace in box order: push_back, then __push_heap (sift up while the
            # parent's score is less)
            size = 0
            for i in range(n):
                key = scores[b, i, c]
                if key > score_threshold:
                    hole = size
                    size += 1
                    parent = (hole - 1) // 2
                    while hole > 0 and heap_key[parent] < key:
                        heap_key[hole], heap_item[hole] = heap_key[parent], heap_item[parent]
                        hole = parent
                        parent = (hole - 1) // 2
                    heap_key[hole], heap_item[hole] = key, i
            kept = 0
            while kept < size_per_class and size > 0:
                candidate, candidate_score = heap_item[0], heap_key[0]
                # std::pop_heap: the last entry fills the hole at the root through __adjust_heap (the hole
                # goes down to a leaf along the larger children, then the value sifts up)
                size -= 1
                if size > 0:
                    key, item = heap_key[size], heap_item[size]
                    hole = 0
                    child = 0
                    while child < (size - 1) // 2:
                        child = 2 * (child + 1)
                        if heap_key[child] < heap_key[child - 1]:
                            child -= 1
                        heap_key[hole], heap_item[hole] = heap_key[child], heap_item[child]
                        hole = child
                    if size % 2 == 0 and child == (size - 2) // 2:
                        child = 2 * (child + 1)
                        heap_key[hole], heap_item[hole] = heap_key[child - 1], heap_item[child - 1]
                        hole = child - 1
                    parent = (hole - 1) // 2
                    while hole > 0 and heap_key[parent] < key:
                        heap_key[hole], heap_item[hole] = heap_key[parent], heap_item[parent]
                        hole = parent
                        parent = (hole - 1) // 2
                    heap_key[hole], heap_item[hole] = key, item
                area_c = area[candidate, k]
                keep = True
                for j in range(kept - 1, -1, -1):
                    other = selected[j]
                    area_s = area[other, k]
                    # IOU(): 0 unless both areas are positive (a NaN area goes on, as in TensorFlow)
                    if area_c <= zero or area_s <= zero:
                        continue
                    top = ymin[other, k] if ymin[candidate, k] < ymin[other, k] else ymin[candidate, k]
                    bottom = ymax[other, k] if ymax[other, k] < ymax[candidate, k] else ymax[candidate, k]
                    left = xmin[other, k] if xmin[candidate, k] < xmin[other, k] else xmin[candidate, k]
                    right = xmax[other, k] if xmax[other, k] < xmax[candidate, k] else xmax[candidate, k]
                    height = bottom - top
                    width = right - left
                    inter = (zero if height < zero else height) * (zero if width < zero else width)
                    if inter / ((area_c + area_s) - inter) > iou_threshold:
                        keep = False
                        break
                if keep:
                    slot = c * size_per_class + kept
                    slot_scores[b, slot] = candidate_score
                    for m in range(4):
                        slot_boxes[b, slot, m] = boxes[b, candidate, k, m]
                    selected[kept] = candidate
                    kept += 1
            count += kept
        counts[b] = count


def select_per_class(boxes: np.ndarray, scores: np.ndarray, size_per_class: int, iou_threshold: np.float32,
                     score_threshold: np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TensorFlow's result-candidate vectors of a CombinedNonMaxSuppression batch: slot scores [batch,
    classes * size_per_class] (-inf where unused), slot boxes [batch, slots, 4], and the used slots' count
    per image."""
    boxes = np.ascontiguousarray(boxes, dtype=np.float32)
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    batch, classes = scores.shape[0], scores.shape[2]
    slot_scores = np.full((batch, classes * size_per_class), -np.inf, np.float32)
    slot_boxes = np.zeros((batch, classes * size_per_class, 4), np.float32)
    counts = np.zeros(batch, np.int64)
    per_class(boxes, scores, size_per_class, np.float32(iou_threshold), np.float32(score_threshold), slot_scores,
              slot_boxes, counts)
    return slot_scores, slot_boxes, counts
