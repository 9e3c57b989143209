"""The compiled loop of the padded NMS kernel (kernels.image.padded_nms): one image's tile of boxes, cross-
suppressed by the tiles before it and then self-suppressed, touching only the boxes that are not all zeros.

The loop TensorFlow runs computes IoU matrices over whole tiles, most of whose boxes are zeros (padding, and
boxes a score threshold zeroed); a zero box has an intersection of 0 with any finite box, so its IoUs are
0 / ((0 + area) - 0 + 1e-8): 0, or NaN where area + 1e-8 rounds to 0, which this loop checks for instead of
computing them. The IoU of two non-zero boxes is TensorFlow's, in float32 and in its order of operations.

Self-suppression is TensorFlow's fixed-point iteration over the tile's "edges" (IoUs at or above the IoU
threshold, from an earlier box to a later one), run here to its fixed point with, for each box, the
iteration that cleared its row and, for each iteration, the IoU mass it cleared; TensorFlow stops the
iteration of every image of a batch at once, so the caller picks the iteration to stop at from all images'
masses and reads which boxes are suppressed then from `cover` (the last iteration at which a box still had a
suppressor that was not cleared). Only edges that exist are visited, so a tile of sparse, separate boxes
costs little more than its IoUs.
"""

# ruff: noqa: FURB136  (conditional expressions are TensorFlow's Maximum/Minimum on finite values)
from __future__ import annotations

import numpy as np

from kernels.jit import compiled

__all__ = ["OP", "suppress_tile"]

OP = "_TensorgatePaddedNms"


@compiled("int64(float32[:, :, ::1], int64, int64, int64, float32, boolean, float32, boolean, float64[:, ::1], "
          "int64[:, ::1], int64[::1])", ops=(OP,))
def suppress_tile(boxes, b, start, tile, threshold, invalid_boxes, self_threshold, inclusive, mass, cover,
                  rounds):  # pragma: no cover - compiled
    """Boxes [start, start + tile) of image `b` of `boxes` [B, N, 4] (written in place), cross-suppressed by
    boxes [0, start) tile by tile: a box is zeroed (times 0.0) where an IoU with a box of an earlier tile is
    not below `threshold`. Then the tile's self-suppression to its fixed point: mass[b, k] is the IoU mass
    iteration k + 1 clears, rounds[b] how many iterations cleared rows, cover[b, j] the last iteration after
    which box j still has an uncleared suppressor (tile + 2: always; 0: never). With `invalid_boxes` an IoU
    with a box whose largest coordinate is negative is -1 (Model Garden's). The self-suppression compares
    with `self_threshold`, `<=` when `inclusive` else `<`. Returns 0, or -1 where an IoU of the tile is NaN
    (TensorFlow's reductions over NaN are the loop's to follow). `threshold` must be above 0."""
    eps = np.float32(1e-8)
    zero = np.float32(0.0)
    y1 = np.empty(tile, np.float32)
    x1 = np.empty(tile, np.float32)
    y2 = np.empty(tile, np.float32)
    x2 = np.empty(tile, np.float32)
    area = np.empty(tile, np.float32)
    invalid = np.zeros(tile, np.bool_)
    live = np.empty(tile, np.int64)

    # --- cross suppression: each earlier tile in turn --------------------------------------------------
    for t in range(start // tile):
        base = t * tile
        n_rows = 0
        zero_rows = False
        for i in range(tile):
            r = base + i
            a0, a1, a2, a3 = boxes[b, r, 0], boxes[b, r, 1], boxes[b, r, 2], boxes[b, r, 3]
            if a0 == zero and a1 == zero and a2 == zero and a3 == zero:
                zero_rows = True
                continue
            y1[n_rows], x1[n_rows], y2[n_rows], x2[n_rows] = a0, a1, a2, a3
            area[n_rows] = (a2 - a0) * (a3 - a1)
            invalid[n_rows] = invalid_boxes and max(max(a0, a1), max(a2, a3)) < zero
            n_rows += 1
        for j in range(tile):
            c = start + j
            b0, b1, b2, b3 = boxes[b, c, 0], boxes[b, c, 1], boxes[b, c, 2], boxes[b, c, 3]
            if b0 == zero and b1 == zero and b2 == zero and b3 == zero:
                continue  # zero stays zero whatever it is multiplied by
            b_area = (b2 - b0) * (b3 - b1)
            b_invalid = invalid_boxes and max(max(b0, b1), max(b2, b3)) < zero
            # a zero row's IoU is 0 (kept) or NaN (suppresses: NaN < threshold is false)
            suppressed = zero_rows and not b_invalid and b_area + eps == zero
            i = 0
            while not suppressed and i < n_rows:
                if not (b_invalid or invalid[i]):
                    w = min(x2[i], b3) - max(x1[i], b1)
                    h = min(y2[i], b2) - max(y1[i], b0)
                    inter = (w if w > zero else zero) * (h if h > zero else zero)
                    iou = inter / (((area[i] + b_area) - inter) + eps)
                    suppressed = not (iou < threshold)
                elif not (np.float32(-1.0) < threshold):
                    suppressed = True
                i += 1
            if suppressed:
                for k in range(4):
                    boxes[b, c, k] = boxes[b, c, k] * zero

    # --- self suppression: the tile's edges --------------------------------------------------------------
    n_live = 0
    zero_boxes = False
    for j in range(tile):
        c = start + j
        a0, a1, a2, a3 = boxes[b, c, 0], boxes[b, c, 1], boxes[b, c, 2], boxes[b, c, 3]
        if a0 == zero and a1 == zero and a2 == zero and a3 == zero:
            zero_boxes = True
            continue
        live[n_live] = j
        y1[n_live], x1[n_live], y2[n_live], x2[n_live] = a0, a1, a2, a3
        area[n_live] = (a2 - a0) * (a3 - a1)
        invalid[n_live] = invalid_boxes and max(max(a0, a1), max(a2, a3)) < zero
        n_live += 1
    capacity = n_live * (n_live - 1) // 2
    edge_from = np.empty(capacity, np.int64)
    edge_to = np.empty(capacity, np.int64)
    edge_iou = np.empty(capacity, np.float32)
    n_edges = 0
    for p in range(n_live):
        if invalid[p]:
            continue  # -1 against everything: never an edge, never NaN
        if zero_boxes and area[p] + eps == zero:
            return -1  # its IoU with a zero box is 0 / 0
        for q in range(p, n_live):
            if invalid[q]:
                continue
            w = min(x2[p], x2[q]) - max(x1[p], x1[q])
            h = min(y2[p], y2[q]) - max(y1[p], y1[q])
            inter = (w if w > zero else zero) * (h if h > zero else zero)
            iou = inter / (((area[p] + area[q]) - inter) + eps)
            if np.isnan(iou):
                return -1
            if q > p and iou >= threshold:
                edge_from[n_edges] = live[p]
                edge_to[n_edges] = live[q]
                edge_iou[n_edges] = iou
                n_edges += 1

    row_mass = np.zeros(tile, np.float64)
    for e in range(n_edges):
        row_mass[edge_from[e]] += edge_iou[e]
    active = np.ones(tile, np.bool_)
    cleared_at = np.zeros(tile, np.int64)
    column_max = np.empty(tile, np.float32)
    can_suppress = np.empty(tile, np.bool_)
    k = 0
    while True:
        k += 1
        column_max[:] = zero
        for e in range(n_edges):
            if active[edge_from[e]] and edge_iou[e] > column_max[edge_to[e]]:
                column_max[edge_to[e]] = edge_iou[e]
        for j in range(tile):
            can_suppress[j] = column_max[j] <= self_threshold if inclusive else column_max[j] < self_threshold
        column_max[:] = zero
        for e in range(n_edges):
            i = edge_from[e]
            if active[i] and can_suppress[i] and edge_iou[e] > column_max[edge_to[e]]:
                column_max[edge_to[e]] = edge_iou[e]
        cleared = 0.0
        changed = False
        for j in range(tile):
            kept = column_max[j] <= self_threshold if inclusive else column_max[j] < self_threshold
            if active[j] and not kept:
                active[j] = False
                cleared_at[j] = k
                cleared += row_mass[j]
                changed = True
        if not changed:
            break
        mass[b, k - 1] = cleared
    rounds[b] = k - 1
    never = tile + 2
    for j in range(tile):
        cover[b, j] = 0
    for e in range(n_edges):
        until = cleared_at[edge_from[e]]
        until = never if until == 0 else until
        cover[b, edge_to[e]] = max(cover[b, edge_to[e]], until)
    return 0
