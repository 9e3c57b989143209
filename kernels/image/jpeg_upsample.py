"""JPEG's fancy chroma upsampling and YCbCr->RGB conversion as one compiled pass over the image: TensorFlow's
default decode (fast IDCT with fancy upsampling), which kernels.image.jpeg rebuilds from a draft-mode
YCbCr decode. Its numpy twin is jpeg._fancy_rgb, a few whole-image passes in int64 per step.

The draft decode hands back every chroma sample replicated over its fh x fv block; the loop reads one sample
per block (row r * fv, column lo + c * fh), forms libjpeg's column sums for each output row (jdsample.c:
3 * nearer + farther row for h2v2 and h1v2, the sample itself for h2v1), interpolates them along the row with
libjpeg's rounding, and converts with the integer arithmetic of jdcolor.c's tables (the twin looks them up),
so the result equals the twin's to the bit. It covers the upsampling factors libjpeg-turbo
upsamples fancily, (2, 2), (2, 1) and (1, 2), with both chroma components alike; the twin does the rest.
Rows are independent: a large image runs in blocks of rows on the engine's pool (kernels.pool).
"""

from __future__ import annotations

import numpy as np

from kernels.jit import compiled
from kernels.pool import Chunk, chunks, run_chunks

__all__ = ["FANCY_FACTORS", "fancy_rows", "fancy_ycc_to_rgb"]

# Upsampling factors (horizontal, vertical) of the compiled pass.
FANCY_FACTORS = ((2, 2), (2, 1), (1, 2))

# RGB bytes per block of rows on the engine's pool: a 320x240 image makes three.
_CHUNK_BYTES = 96 << 10

_OPS = ("DecodeJpeg", "DecodeAndCropJpeg", "DecodeImage", "DecodePng", "DecodeGif")
_PIXELS = "Array(uint8, 3, 'A', readonly=True)"  # any strides: the decoder's buffer keeps 4 bytes a pixel


@compiled(f"void({_PIXELS}, int64, int64, int64, int64, int64, uint8[:, :, ::1])", ops=_OPS)
def fancy_rows(ycc, lo, fh, fv, first, last, out):  # pragma: no cover - compiled
    """Rows [first, last) of the RGB `out` [height, width, 3] from the draft-decoded `ycc` [height, >= lo +
    width, >= 3], columns lo .. lo + width, the chroma upsampled fancily by (fh, fv), one of FANCY_FACTORS."""
    # NOTE: the loops index views with their own counters: an index numba cannot prove non-negative costs
    # each access a wraparound check (measured 3x slower here).
    height, width = out.shape[0], out.shape[1]
    columns = (width + fh - 1) // fh
    rows = (height + fv - 1) // fv
    # a row's column sums, one per chroma sample, with the edge samples repeated on both sides
    sums_cb = np.empty(columns + 2, np.int32)
    sums_cr = np.empty(columns + 2, np.int32)
    up_cb = np.empty(columns * fh, np.int32)  # the row's upsampled chroma
    up_cr = np.empty(columns * fh, np.int32)
    lumas = np.empty(width, np.int32)
    reds = np.empty(width, np.uint8)
    greens = np.empty(width, np.uint8)
    blues = np.empty(width, np.uint8)
    three, zero, full = np.int32(3), np.int32(0), np.int32(255)
    for y in range(first, last):
        r = y // fv
        if fv == 2:
            far = r - 1 if y % 2 == 0 else r + 1  # the farther chroma row: above for even rows, else below
            far = min(max(far, 0), rows - 1)
            near_cb, far_cb = ycc[2 * r, lo::fh, 1], ycc[2 * far, lo::fh, 1]
            near_cr, far_cr = ycc[2 * r, lo::fh, 2], ycc[2 * far, lo::fh, 2]
            for c in range(columns):
                sums_cb[c + 1] = three * np.int32(near_cb[c]) + np.int32(far_cb[c])
                sums_cr[c + 1] = three * np.int32(near_cr[c]) + np.int32(far_cr[c])
        else:
            near_cb, near_cr = ycc[y, lo::fh, 1], ycc[y, lo::fh, 2]
            for c in range(columns):
                sums_cb[c + 1] = np.int32(near_cb[c])
                sums_cr[c + 1] = np.int32(near_cr[c])
        sums_cb[0], sums_cb[columns + 1] = sums_cb[1], sums_cb[columns]
        sums_cr[0], sums_cr[columns + 1] = sums_cr[1], sums_cr[columns]
        if fh == 2:
            # even columns lean on the left neighbour, odd ones on the right (h2v2 sums are x16)
            left, right, shift = (np.int32(8), np.int32(7), 4) if fv == 2 else (np.int32(1), np.int32(2), 2)
            pairs_cb, pairs_cr = up_cb.reshape((columns, 2)), up_cr.reshape((columns, 2))
            for c in range(columns):
                pairs_cb[c, 0] = (three * sums_cb[c + 1] + sums_cb[c] + left) >> shift
                pairs_cb[c, 1] = (three * sums_cb[c + 1] + sums_cb[c + 2] + right) >> shift
                pairs_cr[c, 0] = (three * sums_cr[c + 1] + sums_cr[c] + left) >> shift
                pairs_cr[c, 1] = (three * sums_cr[c + 1] + sums_cr[c + 2] + right) >> shift
        else:
            bias = np.int32(1) if y % 2 == 0 else np.int32(2)
            for c in range(columns):
                up_cb[c] = (sums_cb[c + 1] + bias) >> 2
                up_cr[c] = (sums_cr[c + 1] + bias) >> 2
        # YCbCr -> RGB over planes (loops that vectorize), then interleaved into the row
        luma = ycc[y, lo:lo + width, 0]
        for x in range(width):
            lumas[x] = luma[x]
        for x in range(width):
            y_value = lumas[x]
            cb = up_cb[x] - np.int32(128)
            cr = up_cr[x] - np.int32(128)
            # jdcolor.c's tables, computed: Cr->R, Cb->G + Cr->G (x 2**16, rounded), Cb->B
            red = y_value + ((np.int32(91881) * cr + np.int32(32768)) >> 16)
            green = y_value + ((np.int32(-22554) * cb + np.int32(32768) + np.int32(-46802) * cr) >> 16)
            blue = y_value + ((np.int32(116130) * cb + np.int32(32768)) >> 16)
            reds[x] = min(max(red, zero), full)
            greens[x] = min(max(green, zero), full)
            blues[x] = min(max(blue, zero), full)
        out_red, out_green, out_blue = out[y, :, 0], out[y, :, 1], out[y, :, 2]
        for x in range(width):
            out_red[x] = reds[x]
            out_green[x] = greens[x]
            out_blue[x] = blues[x]


def fancy_ycc_to_rgb(ycc: np.ndarray, lo: int, fh: int, fv: int, out: np.ndarray) -> None:
    """RGB `out` [height, width, 3] from the draft-decoded `ycc` (see fancy_rows), in blocks of rows on the
    engine's pool (kernels.pool)."""

    def work(part: Chunk) -> None:
        fancy_rows(ycc, lo, fh, fv, part.r0, part.r1, out)

    run_chunks(np, work, chunks(1, out.shape[0], out.shape[1] * 3, _CHUNK_BYTES))
