"""ResizeBilinear and ResizeNearestNeighbor as compiled loops over the output (uint8 and float32 images), where
the numpy twins (kernels.image.resize) gather whole rows and columns into temporaries a step at a time.

Both take the twin's taps (the input rows and columns each output row and column reads, and the bilinear
weights, computed in float32 as TensorFlow does) and only replace the pass over the pixels. The bilinear
loop interpolates along x within the two source rows and then between them, each value as TensorFlow's
compute_lerp computes it (top + (bottom - top) * y_lerp over top = top_left + (top_right - top_left) *
x_lerp, in float32), so the result equals the twin's to the bit; a source row interpolated along x serves
every output row that reads it in turn. The nearest loop copies pixels. Large outputs are cut into blocks
of rows run on the engine's pool (kernels.pool), as TensorFlow shards its resize over the intra-op pool.
"""

from __future__ import annotations

import numpy as np

from kernels.jit import compiled
from kernels.pool import Chunk, chunks, run_chunks

__all__ = ["bilinear", "bilinear_rows", "nearest", "nearest_rows"]

# Output bytes per block of rows: a few blocks per core for a 224x224 image, each far above the pool's
# dispatch cost.
_CHUNK_BYTES = 192 << 10

_INDEX = "Array(int64, 1, 'C', readonly=True)"  # the taps are cached, read-only arrays
_WEIGHT = "Array(float32, 1, 'C', readonly=True)"
_TAPS = f"{_INDEX}, {_INDEX}, {_WEIGHT}, {_INDEX}, {_INDEX}, {_WEIGHT}"


@compiled(*(f"void(Array({t}, 4, 'C', readonly=True), {_TAPS}, int64, int64, int64, int64, float32[:, :, :, ::1])"
            for t in ("uint8", "float32")), ops=("ResizeBilinear",))
def bilinear_rows(images, y0, y1, y_lerp, x0, x1, x_lerp, b0, b1, r0, r1, out):  # pragma: no cover - compiled
    """out[b, r, q, c] for images [b0, b1) and output rows [r0, r1), from rows y0[r], y1[r] and columns x0[q],
    x1[q] of images [n, h, w, c]."""
    batch, height, channels = images.shape[0], images.shape[1], images.shape[3]
    out_h, values = out.shape[1], out.shape[2] * channels
    pixels = images.reshape((batch, height, -1))
    rows_out = out.reshape((batch, out_h, values))
    # each output value's source positions within a row, and its x weight
    left, right = np.empty(values, np.int64), np.empty(values, np.int64)
    x_weight = np.empty(values, np.float32)
    for q in range(out.shape[2]):
        for c in range(channels):
            left[q * channels + c] = x0[q] * channels + c
            right[q * channels + c] = x1[q] * channels + c
            x_weight[q * channels + c] = x_lerp[q]
    # Source rows interpolated along x, two at a time: consecutive output rows mostly share one (downscaling)
    # or both (upscaling), so each is interpolated once. held[k] is the source row in slot k.
    along_x = np.empty((2, values), np.float32)
    held = np.empty(2, np.int64)
    for b in range(b0, b1):
        held[0], held[1] = -1, -1
        for r in range(r0, r1):
            top_row, bottom_row = y0[r], y1[r]
            top_slot = bottom_slot = 0
            for k in range(2):
                wanted = top_row if k == 0 else bottom_row
                if held[0] == wanted:
                    slot = 0
                elif held[1] == wanted:
                    slot = 1
                else:
                    # the top row goes where the bottom row is not held; the bottom row beside the top one
                    slot = (1 if held[0] == bottom_row else 0) if k == 0 else 1 - top_slot
                    source, target = pixels[b, wanted], along_x[slot]
                    for e in range(values):
                        start, end = np.float32(source[left[e]]), np.float32(source[right[e]])
                        target[e] = start + (end - start) * x_weight[e]
                    held[slot] = wanted
                if k == 0:
                    top_slot = slot
                else:
                    bottom_slot = slot
            upper, lower, row = along_x[top_slot], along_x[bottom_slot], rows_out[b, r]
            y_weight = y_lerp[r]
            for e in range(values):
                row[e] = upper[e] + (lower[e] - upper[e]) * y_weight


@compiled(*(f"void(Array({t}, 4, 'C', readonly=True), {_INDEX}, {_INDEX}, int64, int64, int64, int64, "
              f"{t}[:, :, :, ::1])" for t in ("uint8", "float32")), ops=("ResizeNearestNeighbor",))
def nearest_rows(images, rows, cols, b0, b1, r0, r1, out):  # pragma: no cover - compiled
    """out[b, r, q] = images[b, rows[r], cols[q]] for images [b0, b1) and output rows [r0, r1)."""
    channels = images.shape[3]
    for b in range(b0, b1):
        for r in range(r0, r1):
            source, row = images[b, rows[r]], out[b, r]
            for q in range(out.shape[2]):
                pixel, value = row[q], source[cols[q]]
                for c in range(channels):
                    pixel[c] = value[c]


def bilinear(images: np.ndarray, y_taps: tuple, x_taps: tuple, out: np.ndarray) -> None:
    """Bilinear resizing of images [n, h, w, c] into out [n, out_h, out_w, c] (float32) with the twin's taps
    (lower, upper, lerp) per axis, in blocks of output rows on the engine's pool."""
    row_bytes = out.shape[2] * out.shape[3] * 4

    def work(part: Chunk) -> None:
        bilinear_rows(images, *y_taps, *x_taps, part.b0, part.b1, part.r0, part.r1, out)

    run_chunks(np, work, chunks(out.shape[0], out.shape[1], row_bytes, _CHUNK_BYTES))


def nearest(images: np.ndarray, rows: np.ndarray, cols: np.ndarray, out: np.ndarray) -> None:
    """Nearest-neighbour resizing: out[b, r, q] = images[b, rows[r], cols[q]], in blocks of output rows."""
    row_bytes = out.shape[2] * out.shape[3] * out.itemsize

    def work(part: Chunk) -> None:
        nearest_rows(images, rows, cols, part.b0, part.b1, part.r0, part.r1, out)

    run_chunks(np, work, chunks(out.shape[0], out.shape[1], row_bytes, _CHUNK_BYTES))
