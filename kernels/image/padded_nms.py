"""Padded, tiled non-max suppression: the whole While loop of Model Garden's `sorted_non_max_suppression_padded`
and of `tf.image.non_max_suppression_padded`, as one op (the planner recognises the loop:
engine.passes.padded_nms_loop).

    _TensorgatePaddedNms(boxes, output_size, idx, iou_threshold, max_output_size, tile_limit, tile_size)
        -> (boxes, output_size, idx, iterations)

`boxes` [B, N, 4] are sorted by score, N a multiple of `tile_size`. While min(output_size) < max_output_size
and idx < tile_limit, tile idx of every image is processed and idx advances: its boxes are cross-suppressed
by each earlier tile in turn (zeroed where an IoU with a box of that tile is not below the threshold), then
self-suppressed by TensorFlow's fixed-point iteration over the tile's IoU matrix M (the IoUs at or above the
threshold from each box to the later ones):

    repeat:  can_suppress[i] = max_k M[k, i] CMP t;  keep[j] = max_i (can_suppress[i] M[i, j]) CMP t
             M[j, :] *= keep[j]                      while any image's cleared IoU mass > t

where `spelling` "tf_image" takes t as the IoU threshold and CMP as `<`, and "model_garden" t = 0.5, CMP `<=`
(Model Garden's constants), whose IoU is also -1 wherever a box's largest coordinate is negative. Boxes with a
suppressor left in M are zeroed, and output_size counts the tile's boxes with a coordinate above 0.

`iterations` is how many times the loop ran, or -1 where this op does not compute what the loop would and
the loop must run as written: an IoU of a tile's self-suppression that is NaN (0 / 0 for boxes whose area
is -1e-8), an IoU threshold not above 0, a tile outside the boxes, or more iterations (of the loop or of the
loops inside it) than `max_iterations`. Boxes must be finite, with coordinates within 2**60, so that areas
stay finite; the caller checks that.

One difference from TensorFlow, in the stopping test of the self-suppression: the mass an iteration clears
is summed exactly here (float64 over float32 IoUs), where TensorFlow subtracts two float32 sums of the whole
matrix, which can differ from it by their rounding when it is within rounding of t.

On the CPU the tiles run as kernels.image.padded_nms_compiled's loop, one image per call, the images of a
batch spread over the kernel pool; this module's numpy code is its twin, computing the loop's matrices as
TensorFlow does.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels import pool
from kernels.image import padded_nms_compiled
from kernels.image.padded_nms_compiled import OP
from kernels.jit import use_compiled
from kernels.registry import kernel

__all__ = ["COORDINATE_LIMIT", "OP", "padded_nms"]

# Boxes whose coordinates are within this bound have finite areas and sums of areas in float32.
COORDINATE_LIMIT = float(2**60)
_F = np.float32
_EPSILON = _F(1e-8)
_MODEL_GARDEN_THRESHOLD = _F(0.5)
# Spread a batch's images over the pool when it has at least this many boxes in all (a hand-off costs tens
# of microseconds; an image's tile costs that with a few dozen boxes left).
_POOL_MIN_BOXES = 4096


def _self_test(spelling: str, iou_threshold: Any) -> tuple[Any, bool]:
    """(t, whether CMP is <=) of the self-suppression."""
    if spelling == "model_garden":
        return _MODEL_GARDEN_THRESHOLD, True
    return iou_threshold, False


# --- the numpy twin: TensorFlow's matrices -----------------------------------------------------------------


def _iou(a: np.ndarray, b: np.ndarray, invalid_boxes: bool) -> np.ndarray:
    """IoU [B, Na, Nb] of boxes a [B, Na, 4] with b [B, Nb, 4] as TensorFlow's bbox_overlap computes it."""
    ay1, ax1, ay2, ax2 = (a[:, :, k:k + 1] for k in range(4))
    by1, bx1, by2, bx2 = (b[:, None, :, k] for k in range(4))
    inter = np.maximum(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), _F(0)) * np.maximum(
        np.minimum(ay2, by2) - np.maximum(ay1, by1), _F(0))
    union = (((ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1)) - inter) + _EPSILON
    iou = inter / union
    if invalid_boxes:
        invalid = (a.max(axis=2) < 0)[:, :, None] | (b.max(axis=2) < 0)[:, None, :]
        iou = np.where(invalid, _F(-1), iou)
    return iou


def _tile_twin(work: np.ndarray, start: int, tile: int, threshold: Any, spelling: str,
               max_iterations: int) -> bool:
    """Tile [start, start + tile) of every image of `work`, suppressed in place; False where the op does not
    handle it (a NaN IoU in the self-suppression, or more iterations than `max_iterations`)."""
    invalid_boxes = spelling == "model_garden"
    box_slice = work[:, start:start + tile]
    for t in range(start // tile):
        iou = _iou(work[:, t * tile:(t + 1) * tile], box_slice, invalid_boxes)
        box_slice *= np.all(iou < threshold, axis=1)[:, :, None].astype(_F)
    iou = _iou(box_slice, box_slice, invalid_boxes)
    if np.isnan(iou).any():
        return False
    later = np.arange(tile)[None, :] > np.arange(tile)[:, None]
    m = iou * (later & (iou >= threshold)).astype(_F)
    limit, inclusive = _self_test(spelling, threshold)
    compare = np.less_equal if inclusive else np.less
    for _ in range(max_iterations):
        can_suppress = compare(m.max(axis=1), limit).astype(_F)
        keep = compare((can_suppress[:, :, None] * m).max(axis=1), limit)
        cleared = (m * ~keep[:, :, None]).sum(axis=(1, 2), dtype=np.float64)
        m = keep[:, :, None].astype(_F) * m
        if not np.any(cleared > limit):
            break
    else:
        return False
    box_slice *= (_F(1) - (m.sum(axis=1) > 0).astype(_F))[:, :, None]
    return True


# --- the compiled tiles -----------------------------------------------------------------------------------


def _tile_compiled(work: np.ndarray, start: int, tile: int, threshold: Any, spelling: str,
                   max_iterations: int) -> bool:
    """`_tile_twin` by the compiled loop, one image per call, images over the pool for large batches."""
    batch = work.shape[0]
    limit, inclusive = _self_test(spelling, threshold)
    mass = np.zeros((batch, tile + 1), np.float64)
    cover = np.empty((batch, tile), np.int64)
    rounds = np.empty(batch, np.int64)
    status = np.zeros(batch, np.int64)
    invalid_boxes = spelling == "model_garden"

    def run(images: range) -> None:
        for b in images:
            status[b] = padded_nms_compiled.suppress_tile(work, b, start, tile, _F(threshold), invalid_boxes,
                                                          _F(limit), inclusive, mass, cover, rounds)

    if batch > 1 and batch * (start + tile) >= _POOL_MIN_BOXES:
        parts = max(1, min(batch, pool.pool_size()))
        pool.run_tasks(run, [range(p * batch // parts, (p + 1) * batch // parts) for p in range(parts)])
    else:
        run(range(batch))
    if status.any():
        return False
    # TensorFlow stops every image at the first iteration that cleared no more than `limit` in any image.
    stop = 1
    while stop <= int(rounds.max()) and bool(np.any((stop <= rounds) & (mass[:, stop - 1] > limit))):
        stop += 1
    if stop > max_iterations:
        return False
    suppressed = (cover > stop).astype(_F)
    work[:, start:start + tile] *= (_F(1) - suppressed)[:, :, None]
    return True


@kernel(OP, outputs=4, devices=("cpu",))
def padded_nms(xp: Any, boxes: np.ndarray, output_size: np.ndarray, idx: np.ndarray, iou_threshold: np.ndarray,
               max_output_size: np.ndarray, tile_limit: np.ndarray, tile_size: np.ndarray, *,
               spelling: Literal["model_garden", "tf_image"], max_iterations: int, compiled: bool = False) -> tuple:
    """The padded NMS loop (see the module docstring): (boxes, output_size, idx, iterations), iterations -1
    where the loop must run as written."""
    threshold = _F(iou_threshold)
    tile = int(tile_size)
    batch, num_boxes = boxes.shape[0], boxes.shape[1]
    not_handled = (boxes, output_size, idx, np.int64(-1))
    if not threshold > 0 or tile <= 0 or batch == 0:
        return not_handled
    work = np.array(boxes, dtype=_F, order="C")
    sizes = np.array(output_size, dtype=np.int32)
    at, limit, most = int(idx), int(tile_limit), int(max_output_size)
    step = _tile_compiled if use_compiled(np, compiled, work.dtype) else _tile_twin
    iterations = 0
    while int(sizes.min()) < most and at < limit:
        if iterations == max_iterations or at < 0 or at > max_iterations or (at + 1) * tile > num_boxes \
                or num_boxes % tile:
            return not_handled
        with np.errstate(invalid="ignore", divide="ignore"):  # (NaN IoUs: declined above, as values)
            handled = step(work, at * tile, tile, threshold, spelling, max_iterations)
        if not handled:
            return not_handled
        box_slice = work[:, at * tile:(at + 1) * tile]
        sizes += np.count_nonzero(np.any(box_slice > 0, axis=2), axis=1).astype(np.int32)
        at += 1
        iterations += 1
    return work, sizes, np.asarray(at, np.int32), np.int64(iterations)
