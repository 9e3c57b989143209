"""Non-maximum suppression: NonMaxSuppression (V1-V5) and NonMaxSuppressionWithOverlaps, the greedy box
selection of detection models (tf.image.non_max_suppression and its padded and soft variants).

TensorFlow pops candidates (scores above `score_threshold`) from a priority queue, highest score first and
the lower index first among equal scores, and compares each with the boxes selected so far, the latest
first: a similarity above the IoU threshold suppresses it. Soft-NMS (V5 with soft_nms_sigma > 0) instead
multiplies its score by exp(-0.5 * iou^2 / sigma) per selected box and puts it back in the queue while
the score stays above the threshold. Boxes are [y1, x1, y2, x2] in either corner order; a box of zero
or negative area overlaps nothing. IoU is float32 arithmetic in TensorFlow's order with std::min/max's
treatment of NaN, then rounded to T (float16 or float32), the type the thresholds and scores compare in.

On the CPU, NMS with float32 scores runs as one compiled loop (kernels.image.nms_compiled) wherever every
box is finite; this module is its numpy twin. Here, hard suppression runs a vectorised pass (one IoU row
per selected box against the remaining candidates) wherever every similarity is finite; otherwise (NaN or
infinite coordinates, areas or overlaps, a NaN threshold) and for soft-NMS, the candidates go through
TensorFlow's loop one by one. Soft-NMS takes exp() in float64 rounded to float32, where TensorFlow calls
the C library's expf (within half an ULP).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.image import nms_compiled
from kernels.jit import use_compiled
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = [
    "BoxCorners",
    "box_corners",
    "iou",
    "iou_close_matrix",
    "iou_suppressor",
    "non_max_suppression",
    "non_max_suppression_v2",
    "non_max_suppression_v3",
    "non_max_suppression_v4",
    "non_max_suppression_v5",
    "non_max_suppression_with_overlaps",
    "suppress_in_order",
    "take",
]

_F = np.float32


def std_min(a: Any, b: Any) -> Any:
    """std::min(a, b): `b < a ? b : a` (a NaN in `a` wins, one in `b` loses)."""
    return np.where(b < a, b, a)


def std_max(a: Any, b: Any) -> Any:
    """std::max(a, b): `a < b ? b : a`."""
    return np.where(a < b, b, a)


# --- boxes and their overlap -----------------------------------------------------------------------


@dataclass(frozen=True)
class BoxCorners:
    """Boxes as float32 corners in normalised order, with their areas and whether all of them are finite."""

    ymin: np.ndarray
    xmin: np.ndarray
    ymax: np.ndarray
    xmax: np.ndarray
    area: np.ndarray
    finite: bool  # every coordinate, side and area finite: then every IoU is a finite number


def box_corners(boxes: np.ndarray) -> BoxCorners:
    """The corners of [n, 4] boxes (any float dtype, read as float32) as TensorFlow's IOU() orders them."""
    b = np.asarray(boxes).astype(_F).reshape(-1, 4)
    with np.errstate(all="ignore"):
        ymin, ymax = std_min(b[:, 0], b[:, 2]), std_max(b[:, 0], b[:, 2])
        xmin, xmax = std_min(b[:, 1], b[:, 3]), std_max(b[:, 1], b[:, 3])
        height, width = ymax - ymin, xmax - xmin
        area = height * width
    finite = bool(np.isfinite(height).all() and np.isfinite(width).all() and np.isfinite(area).all())
    return BoxCorners(ymin, xmin, ymax, xmax, area, finite)


def iou(c: BoxCorners, i: Any, j: Any) -> np.ndarray:
    """float32 IoU of boxes `i` (the candidates) with boxes `j` (the selected ones), index arrays or ints
    that broadcast, as TensorFlow's IOU(boxes, i, j) computes it. (With finite corners np.minimum/maximum
    give std::min/max's values; only the sign of a zero can differ, which no comparison sees.)"""
    zero = _F(0)
    lo, hi = (np.maximum, np.minimum) if c.finite else (std_max, std_min)
    with np.errstate(all="ignore"):
        area_i, area_j = c.area[i], c.area[j]
        height = lo(hi(c.ymax[i], c.ymax[j]) - lo(c.ymin[i], c.ymin[j]), zero)
        width = lo(hi(c.xmax[i], c.xmax[j]) - lo(c.xmin[i], c.xmin[j]), zero)
        inter = height * width
        out = np.asarray(inter / (area_i + area_j - inter), dtype=_F)
    return np.where((area_i <= 0) | (area_j <= 0), zero, out)


def _finite_iou_suppressor(c: BoxCorners, threshold: Any, dtype: Any) -> Callable[[int, np.ndarray], np.ndarray]:
    """`suppressed(p, rest)` for finite boxes: the boxes of `rest` whose IoU with box `p`, rounded to T,
    exceeds the threshold. Only boxes that intersect `p` can (an IoU of 0 never exceeds a threshold >= 0),
    so the IoU is computed for those alone; with finite corners np.minimum/maximum are std::min/max."""
    positive = c.area > 0

    def suppressed(p: int, rest: np.ndarray) -> np.ndarray:
        if not positive[p]:
            return rest[:0]
        height = np.minimum(c.ymax[rest], c.ymax[p]) - np.maximum(c.ymin[rest], c.ymin[p])
        hit = np.flatnonzero(height > 0)
        near = rest[hit]
        width = np.minimum(c.xmax[near], c.xmax[p]) - np.maximum(c.xmin[near], c.xmin[p])
        overlapping = (width > 0) & positive[near]
        near, height, width = near[overlapping], height[hit][overlapping], width[overlapping]
        with np.errstate(all="ignore"):
            inter = height * width
            sims = inter / (c.area[near] + c.area[p] - inter)
        return near[sims.astype(dtype) > threshold]

    return suppressed


def iou_suppressor(c: BoxCorners, threshold: Any, dtype: Any) -> Callable[[int, np.ndarray], np.ndarray]:
    """`suppressed(p, rest)`: the boxes of `rest` whose IoU with box `p` (as T) exceeds the threshold (a
    NaN IoU suppresses nothing)."""
    if c.finite:
        return _finite_iou_suppressor(c, threshold, dtype)
    return lambda p, rest: rest[iou(c, rest, p).astype(dtype) > threshold]


def iou_close_matrix(c: BoxCorners, threshold: Any, dtype: Any, rows: int = 256) -> np.ndarray:
    """[n, n] bool: `close[j, i]`, whether the IoU of candidate box i with selected box j, rounded to T,
    exceeds the threshold; computed `rows` selected boxes at a time (the same values `iou` gives)."""
    n = c.area.size
    close = np.empty((n, n), dtype=bool)
    every = np.arange(n)
    positive = c.area > 0
    for start in range(0, n, rows):
        j = every[start:start + rows, None]
        if not c.finite:
            close[start:start + rows] = iou(c, every[None, :], j).astype(dtype) > threshold
            continue
        with np.errstate(all="ignore"):
            height = np.maximum(np.minimum(c.ymax[None, :], c.ymax[j]) - np.maximum(c.ymin[None, :], c.ymin[j]), 0)
            width = np.maximum(np.minimum(c.xmax[None, :], c.xmax[j]) - np.maximum(c.xmin[None, :], c.xmin[j]), 0)
            inter = height * width
            sims = inter / (c.area[None, :] + c.area[j] - inter)
        close[start:start + rows] = (sims.astype(dtype) > threshold) & positive[None, :] & positive[j]
    return close


def take(c: BoxCorners, index: np.ndarray) -> BoxCorners:
    """The corners of boxes `index`, in that order."""
    return BoxCorners(c.ymin[index], c.xmin[index], c.ymax[index], c.xmax[index], c.area[index], c.finite)


def suppress_in_order(count: int, limit: int,
                      suppressed: Callable[[int, np.ndarray], np.ndarray]) -> tuple[list[int], int]:
    """Hard NMS over `count` candidates in the order they are popped: each is kept unless a kept one before
    it suppressed it, up to `limit` kept. `suppressed(p, rest)` gives the positions among `rest` (those
    still in, after p) that kept candidate p suppresses. Returns the kept positions and the last popped."""
    alive = np.ones(count, dtype=bool)
    kept: list[int] = []
    pos = -1
    while len(kept) < limit:
        following = np.flatnonzero(alive[pos + 1:])
        if following.size == 0:
            return kept, count - 1
        pos += 1 + int(following[0])
        kept.append(pos)
        if len(kept) < limit and following.size > 1:
            alive[suppressed(pos, pos + following[1:] - following[0])] = False
    return kept, pos


@dataclass(frozen=True)
class _Similarity:
    """How alike candidate boxes are to selected ones: `fn(i, j)` as float32, broadcasting; whether every
    value is finite (so the vectorised pass may run); and, for that pass, `suppressor(order, threshold,
    dtype)`, which gives `suppressed(p, rest)` over positions in `order`."""

    fn: Callable[[Any, Any], np.ndarray]
    finite: bool
    suppressor: Callable[[np.ndarray, Any, Any], Callable[[int, np.ndarray], np.ndarray]]


def _iou_similarity(boxes: np.ndarray) -> _Similarity:
    corners = box_corners(boxes)
    return _Similarity(lambda i, j: iou(corners, i, j), corners.finite,
                       lambda order, threshold, dtype: iou_suppressor(take(corners, order), threshold, dtype))


def _overlap_similarity(overlaps: np.ndarray) -> _Similarity:
    table = np.asarray(overlaps, dtype=_F)

    def suppressor(order: np.ndarray, threshold: Any, dtype: Any) -> Callable[[int, np.ndarray], np.ndarray]:
        return lambda p, rest: rest[table[order[rest], order[p]] > threshold]

    return _Similarity(lambda i, j: table[i, j], bool(np.isfinite(table).all()), suppressor)


# --- the greedy selection --------------------------------------------------------------------------


def _ordered_candidates(scores: np.ndarray, score_threshold: Any) -> np.ndarray:
    """Indices of scores above the threshold, highest first, the lower index first among equals."""
    candidates = np.flatnonzero(scores > score_threshold)
    return candidates[np.lexsort((candidates, -scores[candidates].astype(np.float64)))]


def _hard_vectorised(scores: np.ndarray, max_output: int, iou_threshold: Any, score_threshold: Any,
                     similarity: _Similarity) -> tuple[list[int], list[Any]]:
    """Hard NMS where every similarity is finite: a candidate is kept unless a box selected before it is
    more similar than the threshold (its score is then untouched: exp(0) weights)."""
    order = _ordered_candidates(scores, score_threshold)
    suppressed = similarity.suppressor(order, iou_threshold, scores.dtype.type)
    kept, _ = suppress_in_order(order.size, max_output, suppressed)
    selected = [int(order[p]) for p in kept]
    return selected, [scores[i] for i in selected]


def _exp(x: np.ndarray, dtype: Any) -> np.ndarray:
    """Eigen's exp<T>: expf on float32 (here in float64, rounded once), then rounded to T."""
    return np.exp(x.astype(np.float64)).astype(_F).astype(dtype)


def _greedy(scores: np.ndarray, max_output: int, iou_threshold: Any, score_threshold: Any, sigma: Any,
            similarity: _Similarity) -> tuple[list[int], list[Any]]:
    """TensorFlow's DoNonMaxSuppressionOp loop, candidate by candidate, in T arithmetic."""
    dtype = scores.dtype.type
    soft = bool(sigma > dtype(0))
    scale = dtype(dtype(-0.5) / sigma) if soft else dtype(0)
    # entries (-score, index, score, suppress_begin_index): the queue's order, a total one
    queue = [(-float(scores[i]), int(i), scores[i], 0) for i in np.flatnonzero(scores > score_threshold)]
    heapq.heapify(queue)
    selected: list[int] = []
    selected_scores: list[Any] = []
    chosen = np.empty(min(max_output, len(queue)), dtype=np.int64)  # `selected`, as an array
    while len(selected) < max_output and queue:
        _, index, score, begin = heapq.heappop(queue)
        original = score
        hard = False
        if begin < len(selected):
            later = chosen[begin:len(selected)][::-1]  # the latest selection first
            sims = similarity.fn(index, later).astype(dtype)
            with np.errstate(all="ignore"):
                weights = _exp(scale * sims * sims, dtype)
                if not soft:
                    weights = np.where(sims <= iou_threshold, weights, dtype(0))
                running = np.multiply.accumulate(np.concatenate([[score], weights]).astype(dtype))[1:]
            suppress = (sims > iou_threshold) if not soft else np.zeros(sims.shape, dtype=bool)
            stop = suppress | (running <= score_threshold)
            last = int(np.argmax(stop)) if stop.any() else running.size - 1
            score, hard = running[last], bool(suppress[last])
        if hard:
            continue
        if score == original:
            chosen[len(selected)] = index
            selected.append(index)
            selected_scores.append(score)
        elif score > score_threshold:
            heapq.heappush(queue, (-float(score), index, score, len(selected)))
    return selected, selected_scores


def _suppress(scores: np.ndarray, max_output: int, iou_threshold: Any, score_threshold: Any, sigma: Any,
              similarity: _Similarity) -> tuple[list[int], list[Any]]:
    if max_output < 0:
        raise ValueError("output size must be non-negative")
    dtype = scores.dtype.type
    if not sigma > dtype(0) and similarity.finite and not np.isnan(iou_threshold):
        return _hard_vectorised(scores, max_output, iou_threshold, score_threshold, similarity)
    return _greedy(scores, max_output, iou_threshold, score_threshold, sigma, similarity)


# --- checks and the kernels ------------------------------------------------------------------------


def _scalar(tensor: Any, name: str, rank_note: bool = False) -> np.ndarray:
    array = np.asarray(tensor)
    if array.ndim != 0:
        note = f" (Shape must be rank 0 but is rank {array.ndim})" if rank_note else ""
        raise ValueError(f"{name} must be 0-D, got shape {format_dims(array.shape)}{note}")
    return array


def _check_boxes_and_scores(boxes: np.ndarray, scores: np.ndarray) -> None:
    if boxes.ndim != 2:
        raise ValueError(f"boxes must be 2-D{format_dims(boxes.shape)} (Shape must be rank 2 but is rank "
                         f"{boxes.ndim})")
    if boxes.shape[1] != 4:
        raise ValueError(f"boxes must have 4 columns (Dimension must be 4 but is {boxes.shape[1]})")
    _check_scores(scores, boxes.shape[0])


def _check_scores(scores: np.ndarray, num_boxes: int) -> None:
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D{format_dims(scores.shape)} (Shape must be rank 1 but is rank "
                         f"{scores.ndim})")
    if scores.shape[0] != num_boxes:
        raise ValueError(f"scores has incompatible shape (Dimensions must be equal, but are {num_boxes} and "
                         f"{scores.shape[0]})")


def _value_type(scores: np.ndarray) -> type:
    """T: float16 for half scores, float32 otherwise."""
    return np.float16 if scores.dtype == np.float16 else np.float32


_LOWEST = {np.float16: np.finfo(np.float16).min, np.float32: np.finfo(np.float32).min}


def _check_iou_threshold(value: Any) -> None:
    if not (value >= 0 and value <= 1):
        raise ValueError("iou_threshold must be in [0, 1]")


def _run(boxes: Any, scores: Any, max_output_size: np.ndarray, iou_threshold: Any, score_threshold: Any = None,
         sigma: Any = None, memory_limit: int | None = None, pad: bool = False,
         compiled: bool = False) -> tuple[np.ndarray, ...]:
    """Checks shapes (after the scalars, as TensorFlow does), selects, pads; (indices, scores, valid). NMS
    on float32 scores runs kernels.image.nms_compiled's loop when `compiled` (this module's code is its
    twin)."""
    boxes, scores = np.asarray(boxes), np.asarray(scores)
    _check_boxes_and_scores(boxes, scores)
    dtype = _value_type(scores)
    scores = scores.astype(dtype, copy=False)
    if score_threshold is None:
        score_threshold = _LOWEST[dtype]  # numeric_limits<T>::lowest()
    output_size = int(max_output_size)
    if output_size < 0:
        raise ValueError("output size must be non-negative")
    if pad and output_size > 0:
        check_elements(output_size, np.int32, memory_limit, "NonMaxSuppression padded output", (output_size,))
    iou_value, score_value = dtype(iou_threshold), dtype(score_threshold)
    sigma_value = dtype(0) if sigma is None else dtype(sigma)
    result = None
    if use_compiled(np, compiled, scores.dtype) and not np.isnan(iou_value):
        result = nms_compiled.select(boxes, scores, output_size, iou_value, score_value, sigma_value)
    if result is None:
        chosen, chosen_scores = _suppress(scores, output_size, iou_value, score_value, sigma_value,
                                          _iou_similarity(boxes))
        result = np.array(chosen, dtype=np.int32), np.array(chosen_scores, dtype=dtype).reshape(-1)
    selected, selected_scores = result
    valid = selected.size
    if pad:
        selected = np.concatenate([selected, np.zeros(output_size - valid, np.int32)])
        selected_scores = np.concatenate([selected_scores, np.zeros(output_size - valid, dtype)])
    return selected, selected_scores, np.int32(valid)


@kernel("NonMaxSuppression", devices=("cpu",))
def non_max_suppression(xp: Any, boxes: Any, scores: Any, max_output_size: Any, *,
                        iou_threshold: float = 0.5, compiled: bool = False) -> tuple:
    """int32 indices of the boxes kept, best first; float32 boxes, no score threshold."""
    mos = _scalar(max_output_size, "max_output_size")
    _check_iou_threshold(_F(iou_threshold))
    return _run(boxes, np.asarray(scores, dtype=_F), mos, _F(iou_threshold), compiled=compiled)[:1]


def _threshold(tensor: Any, name: str, dtype: type, rank_note: bool = False) -> Any:
    """GetScalar<T>: a float16/32/64 or bfloat16 scalar input as T (a double through float, as Eigen's half
    conversion goes)."""
    return dtype(_scalar(tensor, name, rank_note).astype(_F))


@kernel("NonMaxSuppressionV2", devices=("cpu",))
def non_max_suppression_v2(xp: Any, boxes: Any, scores: Any, max_output_size: Any, iou_threshold: Any, *,
                           compiled: bool = False) -> tuple:
    """V1 with float16 or float32 boxes and scores and the IoU threshold as an input."""
    dtype = _value_type(np.asarray(scores))
    mos = _scalar(max_output_size, "max_output_size")
    iou_value = _threshold(iou_threshold, "iou_threshold", dtype)
    _check_iou_threshold(iou_value)
    return _run(boxes, scores, mos, iou_value, compiled=compiled)[:1]


def _v3_inputs(scores: Any, max_output_size: Any, iou_threshold: Any, score_threshold: Any,
               rank_note: bool) -> tuple[np.ndarray, Any, Any]:
    dtype = _value_type(np.asarray(scores))
    mos = _scalar(max_output_size, "max_output_size", rank_note)
    iou_value = _threshold(iou_threshold, "iou_threshold", dtype, rank_note)
    _check_iou_threshold(iou_value)
    return mos, iou_value, _threshold(score_threshold, "score_threshold", dtype)


@kernel("NonMaxSuppressionV3", devices=("cpu",))
def non_max_suppression_v3(xp: Any, boxes: Any, scores: Any, max_output_size: Any, iou_threshold: Any,
                           score_threshold: Any, *, compiled: bool = False) -> tuple:
    """V2 keeping only scores above `score_threshold`."""
    mos, iou_value, score_value = _v3_inputs(scores, max_output_size, iou_threshold, score_threshold, True)
    return _run(boxes, scores, mos, iou_value, score_value, compiled=compiled)[:1]


@kernel("NonMaxSuppressionV4", devices=("cpu",), outputs=2)
def non_max_suppression_v4(xp: Any, boxes: Any, scores: Any, max_output_size: Any, iou_threshold: Any,
                           score_threshold: Any, *, pad_to_max_output_size: bool = False,
                           memory_limit: int | None = None, compiled: bool = False) -> tuple:
    """V3, and how many indices are valid; with pad_to_max_output_size the indices are padded with 0."""
    mos, iou_value, score_value = _v3_inputs(scores, max_output_size, iou_threshold, score_threshold, False)
    indices, _, valid = _run(boxes, scores, mos, iou_value, score_value, memory_limit=memory_limit,
                             pad=pad_to_max_output_size, compiled=compiled)
    return indices, valid


@kernel("NonMaxSuppressionV5", devices=("cpu",), outputs=3)
def non_max_suppression_v5(xp: Any, boxes: Any, scores: Any, max_output_size: Any, iou_threshold: Any,
                           score_threshold: Any, soft_nms_sigma: Any, *, pad_to_max_output_size: bool = False,
                           memory_limit: int | None = None, compiled: bool = False) -> tuple:
    """V4 with soft-NMS (soft_nms_sigma > 0) and the selected boxes' (decayed) scores."""
    dtype = _value_type(np.asarray(scores))
    mos, iou_value, score_value = _v3_inputs(scores, max_output_size, iou_threshold, score_threshold, False)
    sigma = _threshold(soft_nms_sigma, "soft_nms_sigma", dtype)
    if not sigma >= 0:
        raise ValueError("soft_nms_sigma_val must be >= 0")
    return _run(boxes, scores, mos, iou_value, score_value, sigma, memory_limit, pad_to_max_output_size, compiled)


@kernel("NonMaxSuppressionWithOverlaps", devices=("cpu",))
def non_max_suppression_with_overlaps(xp: Any, overlaps: Any, scores: Any, max_output_size: Any,
                                      overlap_threshold: Any, score_threshold: Any) -> tuple:
    """Greedy selection by a given [n, n] similarity matrix (`overlaps[candidate, selected]`), float32."""
    mos = _scalar(max_output_size, "max_output_size")
    overlap_value = _F(_scalar(overlap_threshold, "overlap_threshold"))
    score_value = _F(_scalar(score_threshold, "score_threshold"))
    overlaps, scores = np.asarray(overlaps, dtype=_F), np.asarray(scores, dtype=_F)
    if overlaps.ndim != 2:
        raise ValueError(f"overlaps must be 2-D{format_dims(overlaps.shape)}")
    if overlaps.shape[1] != overlaps.shape[0]:
        raise ValueError(f"overlaps must be square{format_dims(overlaps.shape)}")
    _check_scores(scores, overlaps.shape[0])
    selected, _ = _suppress(scores, int(mos), overlap_value, score_value, _F(0), _overlap_similarity(overlaps))
    return (np.array(selected, dtype=np.int32),)
