"""DrawBoundingBoxes and DrawBoundingBoxesV2: box outlines drawn one pixel wide onto a batch of images
(tf.image.draw_bounding_boxes, summaries and debugging outputs of detection models).

A box [y_min, x_min, y_max, x_max] in normalised coordinates becomes rows y * (height - 1) and columns
x * (width - 1), each a float32 product truncated to an integer. Boxes whose minimum passes their maximum,
or that lie wholly outside the image, are skipped; otherwise each edge inside the image is drawn (the
others are clipped away), box after box, in colour `box index % colours`. V2 takes the colours as an input
([colours, >= depth]; an empty one means the default table); V1 and an empty V2 table cycle through
TensorFlow's ten defaults (all 1 on a one-channel image).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.host import format_dims
from kernels.registry import kernel

__all__ = ["draw_bounding_boxes", "draw_bounding_boxes_v2"]

_DEFAULT_COLORS = np.array([
    [1, 1, 0, 1],      # yellow
    [0, 0, 1, 1],      # blue
    [1, 0, 0, 1],      # red
    [0, 1, 0, 1],      # lime
    [0.5, 0, 0.5, 1],  # purple
    [0.5, 0.5, 0, 1],  # olive
    [0.5, 0, 0, 1],    # maroon
    [0, 0, 0.5, 1],    # navy blue
    [0, 1, 1, 1],      # aqua
    [1, 0, 1, 1],      # fuchsia
], dtype=np.float32)

_INT64_MIN = -(2**63)


def _truncate(values: np.ndarray) -> list[int]:
    """float -> int64 as x86's cvttss2si converts: toward zero, NaN and out-of-range values to INT64_MIN."""
    out = []
    for v in values.tolist():
        out.append(int(v) if np.isfinite(v) and -(2.0**63) <= v < 2.0**63 else _INT64_MIN)
    return out


def _color_table(colors: Any, depth: int) -> np.ndarray:
    if colors is not None:
        colors = np.asarray(colors, dtype=np.float32)
        if colors.ndim != 2:
            raise ValueError(f"colors must be a 2-D matrix{format_dims(colors.shape)}")
        if colors.shape[1] < depth:
            raise ValueError(f"colors must have equal or more channels than the image provided: "
                             f"{format_dims(colors.shape)}")
        if colors.size:
            return colors[:, :depth]
    table = _DEFAULT_COLORS[:, :depth].copy()
    if depth == 1:
        table[:, 0] = 1
    return table


def _draw(images: Any, boxes: Any, colors: Any) -> tuple:
    images, boxes = np.asarray(images), np.asarray(boxes, dtype=np.float32)
    if images.ndim != 4:
        raise ValueError("The rank of the images should be 4")
    if boxes.ndim != 3:
        raise ValueError("The rank of the boxes tensor should be 3")
    if images.shape[0] != boxes.shape[0]:
        raise ValueError("The batch sizes should be the same")
    batch, height, width, depth = images.shape
    if depth not in (1, 3, 4):
        raise ValueError("Channel depth should be either 1 (GRY), 3 (RGB), or 4 (RGBA)")
    if boxes.shape[2] != 4:
        raise ValueError(f"The size of the third dimension of the box must be 4. Received: {boxes.shape[2]}")
    table = _color_table(colors, depth).astype(images.dtype)
    canvas = images.copy()
    with np.errstate(all="ignore"):
        rows = boxes[..., [0, 2]] * np.float32(height - 1)
        cols = boxes[..., [1, 3]] * np.float32(width - 1)
    for b in range(batch):
        for i in range(boxes.shape[1]):
            min_row, max_row = _truncate(rows[b, i])
            min_col, max_col = _truncate(cols[b, i])
            if min_row > max_row or min_col > max_col:
                continue  # inverted: TensorFlow logs a warning and skips it
            if min_row >= height or max_row < 0 or min_col >= width or max_col < 0:
                continue  # wholly outside the image
            color = table[i % len(table)]
            row_span = slice(max(min_row, 0), min(max_row, height - 1) + 1)
            col_span = slice(max(min_col, 0), min(max_col, width - 1) + 1)
            if min_row >= 0:
                canvas[b, min_row, col_span] = color
            if max_row < height:
                canvas[b, max_row, col_span] = color
            if min_col >= 0:
                canvas[b, row_span, min_col] = color
            if max_col < width:
                canvas[b, row_span, max_col] = color
    return (canvas,)


@kernel("DrawBoundingBoxes", devices=("cpu",))
def draw_bounding_boxes(xp: Any, images: Any, boxes: Any) -> tuple:
    """`images` [batch, h, w, 1|3|4] (float32 or float16) with `boxes` [batch, n, 4] outlined."""
    return _draw(images, boxes, None)


@kernel("DrawBoundingBoxesV2", devices=("cpu",))
def draw_bounding_boxes_v2(xp: Any, images: Any, boxes: Any, colors: Any) -> tuple:
    """DrawBoundingBoxes with the colours given ([colours, >= depth] float32)."""
    return _draw(images, boxes, colors)
