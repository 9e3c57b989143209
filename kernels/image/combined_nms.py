"""CombinedNonMaxSuppression: batched, per-class NMS and the top detections over all classes
(tf.image.combined_non_max_suppression, the last op of many detection exports).

Per image and class, boxes scoring above `score_threshold` leave a priority queue ordered by score alone
and a box is kept unless its IoU with one kept before it (the latest first) exceeds `iou_threshold`, up to
max_output_size_per_class. Each class's keepers fill its slots of a vector of size_per_class * classes
records (unused ones score -inf), std::sort orders that vector by score, and the first valid ones are
written out: boxes (clipped to [0, 1] with clip_boxes), scores, class indices as float, and how many are
valid. Outputs have max_total_size rows, or with pad_per_class min(max_total_size, max_size_per_class *
classes).

Neither the queue nor std::sort is stable: among equal scores the order is what libstdc++'s algorithms
leave (`stl_order`), which is followed wherever equal scores reach a position that matters. Elsewhere a
stable sort gives the same order. On the CPU the per-class selection of the whole batch is one compiled
loop (kernels.image.nms_compiled.per_class, which runs libstdc++'s heap itself); this module's selection is
its numpy twin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.image import nms_compiled
from kernels.image.nms import (
    BoxCorners,
    box_corners,
    iou,
    iou_close_matrix,
    iou_suppressor,
    std_max,
    std_min,
    suppress_in_order,
    take,
)
from kernels.image.stl_order import iter_pops, sort_order
from kernels.jit import use_compiled
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["combined_non_max_suppression"]

_F = np.float32
_INT_MAX = 2**31 - 1
_MAX_SHARED_BOXES = 4096  # the pairwise comparison of shared boxes takes n * n bytes


def _scalar(tensor: Any, name: str) -> np.ndarray:
    array = np.asarray(tensor)
    if array.ndim != 0:
        raise ValueError(f"{name} must be 0-D, got shape {format_dims(array.shape)}")
    return array


def _check_shapes(boxes: np.ndarray, scores: np.ndarray) -> None:
    """The box and score shapes, checked after the scalars as TensorFlow does."""
    if boxes.ndim != 4:
        raise ValueError(f"boxes must be 4-D{format_dims(boxes.shape)}")
    if scores.ndim != 3:  # TensorFlow reads num_classes before this check (and fails harder for rank < 3)
        raise ValueError(f"scores must be 3-D{format_dims(scores.shape)}")
    if boxes.shape[2] not in (1, scores.shape[2]):
        raise ValueError("third dimension of boxes must be either 1 or num classes")
    if boxes.shape[3] != 4:
        raise ValueError("boxes must have 4 columns")
    if scores.shape[1] != boxes.shape[1]:
        raise ValueError("scores has incompatible shape")


class _ClassBoxes:
    """One image's boxes for one class (or all classes, q == 1): which a kept box suppresses. Where many
    classes share the boxes, every pair's IoU is compared with the threshold once (`close`)."""

    def __init__(self, corners: BoxCorners, iou_threshold: Any, close: np.ndarray | None):
        self.corners, self.iou_threshold, self.close = corners, iou_threshold, close

    def suppressor(self, order: np.ndarray):
        """`suppressed(p, rest)` over positions in `order` (see nms.suppress_in_order)."""
        if self.close is None:
            return iou_suppressor(take(self.corners, order), self.iou_threshold, _F)
        close = self.close
        return lambda p, rest: rest[close[order[p], order[rest]]]

    def suppresses(self, kept: list[int], box: int) -> bool:
        """Whether one of the boxes `kept` suppresses `box` (a NaN IoU suppresses nothing)."""
        if not kept:
            return False
        if self.close is not None:
            return bool(self.close[kept, box].any())
        return bool((iou(self.corners, box, np.array(kept)) > self.iou_threshold).any())


def _nms_one_class(boxes: _ClassBoxes, class_scores: np.ndarray, size_per_class: int,
                   score_threshold: Any) -> list[int]:
    """The box indices kept for one class, in the order they were selected."""
    candidates = np.flatnonzero(class_scores > score_threshold)
    if candidates.size == 0:
        return []
    values = class_scores[candidates]
    order = candidates[np.argsort(-values.astype(np.float64), kind="stable")]
    sorted_scores = class_scores[order]
    kept, last = suppress_in_order(order.size, size_per_class, boxes.suppressor(order))
    if not (sorted_scores[:-1] == sorted_scores[1:])[:last + 1].any():
        return [int(order[p]) for p in kept]
    # Equal scores were popped: take the queue's own order (pushed in box order).
    kept_boxes: list[int] = []
    for p in iter_pops(values.tolist()):
        if len(kept_boxes) >= size_per_class:
            break
        box = int(candidates[p])
        if not boxes.suppresses(kept_boxes, box):
            kept_boxes.append(box)
    return kept_boxes


def _shared_boxes(corners: BoxCorners, image_scores: np.ndarray, size_per_class: int, score_threshold: Any,
                  iou_threshold: Any) -> _ClassBoxes:
    """The boxes all classes of an image share (q == 1), with the pairwise comparison when the classes'
    suppression passes would compute more IoUs than it does."""
    n = corners.area.size
    per_class = (image_scores > score_threshold).sum(axis=0)
    work = int((per_class * np.minimum(per_class, size_per_class)).sum())
    close = iou_close_matrix(corners, iou_threshold, _F) if n <= _MAX_SHARED_BOXES and work > n * n else None
    return _ClassBoxes(corners, iou_threshold, close)


def _nms_all_classes(boxes: _ClassBoxes, image_scores: np.ndarray, size_per_class: int,
                     score_threshold: Any) -> list[list[int]]:
    """`_nms_one_class` for every class at once, over shared boxes with their pairwise comparison: each step
    takes every class's best remaining candidate and drops what it suppresses. Classes where equal scores
    were popped are redone one by one in the queue's own order."""
    scores = np.ascontiguousarray(image_scores.T)  # [classes, boxes]
    num_classes, num_boxes = scores.shape
    above = scores > score_threshold
    queued = np.where(above, scores, -np.inf).astype(_F)  # -inf: popped, suppressed or never queued
    kept: list[list[int]] = [[] for _ in range(num_classes)]
    for _ in range(size_per_class if num_boxes else 0):
        best = queued.argmax(axis=1)  # the lowest box index among equal scores (those are redone below)
        taking = np.flatnonzero(queued[np.arange(num_classes), best] > -np.inf)
        if taking.size == 0:
            break
        chosen = best[taking]
        for c, box in zip(taking.tolist(), chosen.tolist()):
            kept[c].append(box)
        queued[taking, chosen] = -np.inf
        queued[taking] = np.where(boxes.close[chosen], np.float32(-np.inf), queued[taking])
    descending = -np.sort(np.where(above, -scores, np.inf), axis=1)
    ties = descending[:, :-1] == descending[:, 1:]
    for c in range(num_classes):
        # the candidates popped: all of them, or those scoring at least the last one kept
        last = scores[c, kept[c][-1]] if len(kept[c]) == size_per_class else -np.inf
        popped = int(np.count_nonzero(above[c] & (scores[c] >= last)))
        if ties[c, :popped].any():
            kept[c] = _nms_one_class(boxes, image_scores[:, c], size_per_class, score_threshold)
    return kept


def _kept_per_class(boxes: np.ndarray, scores: np.ndarray, size_per_class: int, score_threshold: Any,
                    iou_threshold: Any) -> list[list[int]]:
    """For one image (boxes [n, q, 4], scores [n, classes]), the boxes each class keeps, in order."""
    num_classes = scores.shape[1]
    if boxes.shape[1] == 1:
        shared = _shared_boxes(box_corners(boxes[:, 0]), scores, size_per_class, score_threshold, iou_threshold)
        if shared.close is not None:
            return _nms_all_classes(shared, scores, size_per_class, score_threshold)
        return [_nms_one_class(shared, scores[:, c], size_per_class, score_threshold) for c in range(num_classes)]
    return [_nms_one_class(_ClassBoxes(box_corners(boxes[:, c]), iou_threshold, None), scores[:, c], size_per_class,
                           score_threshold) for c in range(num_classes)]


def _sorted_records(slot_scores: np.ndarray, real: np.ndarray, count: int) -> np.ndarray:
    """The slots of the first `count` records after std::sort by score, descending."""
    order = real[np.argsort(-slot_scores[real].astype(np.float64), kind="stable")]
    top = slot_scores[order]
    if not (top[:-1] == top[1:])[:count].any():
        return order[:count]
    return np.array(sort_order(slot_scores.tolist(), descending=True)[:count], dtype=np.int64)


def _clip(values: np.ndarray) -> np.ndarray:
    """std::max(std::min(v, 1.0f), 0.0f): NaN stays."""
    return std_max(std_min(values, _F(1)), _F(0))


@kernel("CombinedNonMaxSuppression", devices=("cpu",), outputs=4)
def combined_non_max_suppression(xp: Any, boxes: Any, scores: Any, max_output_size_per_class: Any,
                                 max_total_size: Any, iou_threshold: Any, score_threshold: Any, *,
                                 pad_per_class: bool = False, clip_boxes: bool = True,
                                 memory_limit: int | None = None, compiled: bool = False) -> tuple:
    """nmsed_boxes [batch, size, 4], nmsed_scores and nmsed_classes [batch, size] float32, valid_detections
    [batch] int32, from boxes [batch, num_boxes, q (1 or classes), 4] and scores [batch, num_boxes, classes]."""
    boxes, scores = np.asarray(boxes, dtype=_F), np.asarray(scores, dtype=_F)
    if boxes.ndim == 0 or scores.ndim == 0:
        _check_shapes(boxes, scores)
    if boxes.shape[0] != scores.shape[0]:
        raise ValueError("boxes and scores must have same batch size")
    max_size_per_class = int(_scalar(max_output_size_per_class, "max_size_per_class"))
    if max_size_per_class <= 0:
        raise ValueError("max_size_per_class must be positive")
    total_size = int(_scalar(max_total_size, "max_total_size"))
    if total_size <= 0:
        raise ValueError("max_total_size must be > 0")
    iou_value = _F(_scalar(iou_threshold, "iou_threshold"))
    score_value = _F(_scalar(score_threshold, "score_threshold"))
    if not (iou_value >= 0 and iou_value <= 1):
        raise ValueError("iou_threshold must be in [0, 1]")
    _check_shapes(boxes, scores)
    batch, num_boxes = boxes.shape[:2]
    num_classes = scores.shape[2]
    size_per_class = min(max_size_per_class, num_boxes)
    slots = size_per_class * num_classes
    if slots > _INT_MAX:
        raise ValueError("size_per_class * num_classes causes overflow")
    per_batch = min(total_size, min(_INT_MAX, max_size_per_class * num_classes)) if pad_per_class else total_size
    check_elements(batch * (per_batch * 6 + slots * 2), _F, memory_limit, "CombinedNonMaxSuppression outputs",
                   (batch, per_batch))
    if use_compiled(np, compiled):  # (the inputs are float32 here)
        slot_scores, slot_boxes, _ = nms_compiled.select_per_class(boxes, scores, size_per_class, iou_value,
                                                                   score_value)
    else:
        slot_scores, slot_boxes = _slots(boxes, scores, size_per_class, score_value, iou_value)
    out_boxes = np.zeros((batch, per_batch, 4), _F)
    out_scores = np.zeros((batch, per_batch), _F)
    out_classes = np.zeros((batch, per_batch), _F)
    valid = np.zeros(batch, np.int32)
    for b in range(batch):
        real = np.flatnonzero(slot_scores[b] != -np.inf)  # kept boxes score above the threshold: never -inf
        count = min(real.size, per_batch)
        top = _sorted_records(slot_scores[b], real, count)
        valid[b] = count
        picked = slot_boxes[b, top]
        out_boxes[b, :count] = _clip(picked) if clip_boxes else picked
        out_scores[b, :count] = slot_scores[b, top]
        out_classes[b, :count] = (top // size_per_class).astype(_F) if size_per_class else 0
    return out_boxes, out_scores, out_classes, valid


def _slots(boxes: np.ndarray, scores: np.ndarray, size_per_class: int, score_threshold: Any,
           iou_threshold: Any) -> tuple[np.ndarray, np.ndarray]:
    """TensorFlow's result-candidate vectors: per image, each class's kept boxes in slots c * size_per_class
    + k, their scores [batch, slots] (-inf where unused) and boxes [batch, slots, 4]."""
    batch, _, q, _ = boxes.shape
    num_classes = scores.shape[2]
    slot_scores = np.full((batch, size_per_class * num_classes), -np.inf, _F)
    slot_boxes = np.zeros((batch, size_per_class * num_classes, 4), _F)
    for b in range(batch):
        for c, kept in enumerate(_kept_per_class(boxes[b], scores[b], size_per_class, score_threshold,
                                                 iou_threshold)):
            kept = np.array(kept, dtype=np.int64)
            start = c * size_per_class
            slot_scores[b, start:start + kept.size] = scores[b, kept, c]
            slot_boxes[b, start:start + kept.size] = boxes[b, kept, c if q > 1 else 0]
    return slot_scores, slot_boxes
