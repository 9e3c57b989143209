"""Winograd convolution F(2x2, 3x3): a 3x3, stride-1 Conv2D as 16 GEMMs on transformed tiles, 2.25 times
fewer multiplications than the direct (im2col) convolution.

The output is cut into 2x2 tiles; tile (ty, tx) reads the 4x4 input window at rows 2ty - pad_top and
columns 2tx - pad_left (cells outside the image read as zero, which is how padding works here). With
B, G and A the F(2x2, 3x3) matrices (Lavin & Gray, 2016),

    V[p, tile, c] = (B^T d B)[p]          input transform of each 4x4 window d, per input channel
    U[p, c, k]    = (G g G^T)[p]          filter transform of each 3x3 filter g (once per plan)
    M[p]          = V[p] @ U[p]           16 GEMMs: [tiles, C] @ [C, K], one per position p
    y             = A^T M A               output transform: a 2x2 output block per tile, per channel k

Work is split into chunks of tiles (whole images, or tile rows of one image) whose V and M stay in the
last-level cache, as conv2d_nhwc's im2col chunks do; each chunk's output block is finished by the epilogue
(bias, batch norm, residual add, activation) as soon as it is written. With BLAS single-threaded (a
Session's default, kernels.blas) big convolutions run chunk by chunk as tasks on the engine's pool, small
ones in three phases split over the pool. The transforms are compiled loops (kernels.jit) with numpy twins
that compute the same float32 operations in the same order, so the two agree to the bit.

Accuracy: F(2x2, 3x3)'s transforms only add, subtract and halve, so its float32 error stays close to the
direct convolution's (about 4e-7 of the output's scale on ResNet-like layers, against 3.7e-7 direct).
F(4x4, 3x3) would do 1.8 times fewer multiplications, but its error, about 7e-6 of the output's scale, is
at the golden fixtures' tolerance (1e-5); F(3x3, 3x3) measured 2.5e-6.

`_TensorgateWinogradConv2D` (our op; engine.passes.winograd writes it for a Conv2D or _FusedConv2D with a
constant 3x3 filter) takes the filter and its transform U, both constants, and picks Winograd or the direct
convolution per call by `prefers_winograd`: the data's shape is only known then.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kernels import blas
from kernels.jit import compiled, readonly, use_compiled
from kernels.nn.conv import conv2d_nhwc, conv_groups
from kernels.nn.fused import CONV_FUSED_OPS, channel_epilogue, check_channels, split_fused_ops
from kernels.nn.window import DataFormat, Epilogue, Padding, Window2D, from_nhwc, to_nhwc, window_from_attrs
from kernels.pool import Chunk, chunks, pool_size, run_chunks, run_tasks
from kernels.registry import kernel

__all__ = [
    "FILTER_TRANSFORM",
    "FUSED_OPS",
    "POSITIONS",
    "enough_channels",
    "input_tiles",
    "output_tiles",
    "prefers_winograd",
    "qualifies",
    "winograd_conv2d",
    "winograd_conv2d_nhwc",
    "winograd_filter",
]

# Transform positions (4 x 4) per 2 x 2 output tile.
POSITIONS = 16
# G of F(2x2, 3x3): U = G g G^T. Computed in float64 and rounded once to float32.
FILTER_TRANSFORM = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# [16, 9]: row 4a + b, column 3i + j holds G[a, i] G[b, j].
_FILTER_TRANSFORM_2D = np.kron(FILTER_TRANSFORM, FILTER_TRANSFORM)

# Bytes of transformed input and GEMM output (V and M) per chunk, or half of U's if that is more: every chunk
# rereads all of U in its 16 GEMMs. Measured on 2 cores (ResNet50's 3x3 layers, batch 8 and 32, BLAS
# single-threaded, a chunk per pool task, min of 9): 4 MiB ran up to 1.3x faster than 1-2 MiB and about
# as fast as 8-16 MiB, except at 512 channels (U 16 MiB), where 8 MiB ran 1.15x faster than 4.
_CHUNK_BYTES = 4 << 20
# With single-threaded BLAS, a convolution whose V and M come to at least this, and to twice U, runs as chunk
# tasks on the pool (at least two per worker, each rereading U); a smaller one runs in three phases, each
# split over the pool: input transform, GEMMs (by position, each with every tile, so U is read once),
# output transform. Measured on 2 cores, ms (tasks / phases): 64 channels at 56x56, batch 2 (12 MiB):
# 5.2 / 5.4, batch 8: 13.7 / 18.5; 128 at 28x28, batch 2 (6 MiB): 4.5 / 3.3, batch 8: 10.1 / 12.5; 256 at
# 14x14, batch 4 (6 MiB): 7.7 / 5.3, batch 8 (12 MiB): 9.3 / 13.6; 512 at 7x7 (U 16 MiB), batch 16: 24.1 /
# 22.3, batch 32: 41.6 / 40.7.
_MIN_TASK_BYTES = 8 << 20

# When Winograd beats the direct convolution (conv2d_nhwc: im2col + one GEMM per chunk). Measured on 2 shared
# cores, as a Session runs them (BLAS single-threaded, work on the engine's pool), float32, SAME, bias +
# ReLU epilogue, ms per call (direct / Winograd, median of 15 alternating calls), with the GEMMs' work
# tiles x C x K in brackets (M = 2**20):
#
#     C    K   size  batch 1                   batch 2                  batch 4
#     512  512    7  3.48 / 2.93  (4 M)        6.68 / 4.71  (8 M)       11.9 / 8.15  (16 M)
#     256  256    7  0.88 / 0.87  (1 M)        1.81 / 1.43  (2 M)       3.73 / 2.23  (4 M)
#     256  256   14  3.23 / 2.02  (3 M)        3.82 / 2.38  (6 M)       7.46 / 4.73  (12 M)
#     128  128   14  0.65 / 0.54  (0.8 M)      1.05 / 0.78  (1.5 M)     1.91 / 1.18  (3 M)
#     128  128    7  0.26 / 0.34  (0.25 M)     0.47 / 0.47  (0.5 M)     0.65 / 0.58  (1 M)
#      64   64   28  0.65 / 0.53  (0.8 M)      1.19 / 0.83  (1.5 M)     2.57 / 1.72  (3 M)
#      64   64   14  0.28 / 0.40  (0.2 M)      0.46 / 0.48  (0.4 M)     0.71 / 0.63  (0.8 M)
#      64   64    7  0.12 / 0.33  (0.06 M)     batch 8: 0.43 / 0.47 (0.5 M), batch 32: 1.13 / 0.88 (2 M)
#      32   32   56  0.98 / 0.88  (0.8 M)      1.79 / 1.73  (1.5 M)     5.01 / 3.25  (3 M)
#      32   32   28  0.46 / 0.55  (0.2 M)      0.71 / 0.70  (0.4 M)     1.08 / 0.86  (0.8 M)
#      16   16   56  0.59 / 0.65               0.95 / 1.01              1.64 / 1.95
#
# and at batch 32 (ResNet50's layers): 64 @ 56: 88 / 53, 128 @ 28: 71 / 36, 256 @ 14: 65 / 36, 512 @ 7: 68 / 42.
# Each transform is a pass over memory and each of the 16 GEMMs is smaller than the direct one, so
# Winograd paid once the GEMMs had work enough: tiles x C x K of at least 600,000 (0.57 M), with at least
# 32 channels in and out (with 16 it lost at every size measured).
#
# Those small convolutions lost to the direct one's parallel GEMM, not to its arithmetic: a direct convolution
# of fewer than kernels.blas.SPLIT_MIN_FLOPS multiply-adds runs on one thread (its GEMM is not split), and so
# does Winograd then (below, its transforms and GEMMs are not split either). On one thread, Winograd took
# 0.5-0.9 of the direct convolution's time at every such size measured (CPU time, min of 10, ms: 32 -> 64 at
# 32x32, batch 1: 0.46 / 0.29; 64 -> 128 at 16x16: 0.43 / 0.27; 128 -> 128 at 8x8: 0.24 / 0.11; 256 -> 256 at
# 4x4: 0.32 / 0.18; 16 -> 16 at 56x56: 0.28 / 0.24; 16 -> 32 at 28x28: 0.12 / 0.09), down to 16 channels.
#
# So a convolution whose Winograd GEMMs kernels.blas would not split (16 x tiles x C x K under SPLIT_MIN_FLOPS)
# runs Winograd too, as chunk tasks on the pool where it has work for a few (_MIN_SMALL_TASK_WORK) and on the
# caller's thread below that, down to 16 channels; larger ones with at least 32 channels, whatever their tiles
# (wall time on 2 busy cores, pool and all, ms: 32 -> 64 at 32x32, batch 1: 0.50 / 0.35; 64 -> 128 at 16x16:
# 0.46 / 0.29; 128 -> 128 at 8x8: 0.29 / 0.10; 512 -> 512 at 7x7: 4.5 / 3.8; 16 -> 16 at 56x56: 0.30 / 0.31).
_MIN_CHANNELS = 32
_MIN_SMALL_CHANNELS = 16
_MIN_SMALL_TASK_WORK = 1 << 21

# The fused_ops lists the op accepts: none (a plain Conv2D), or any of _FusedConv2D's.
FUSED_OPS = ((),) + CONV_FUSED_OPS
FusedOps = Literal[FUSED_OPS]


def qualifies(filter_shape: tuple[int, ...], strides: Any, dilations: Any, data_format: str) -> bool:
    """Whether a Conv2D with this HWIO filter shape and these attrs is one Winograd F(2x2, 3x3) computes:
    a 3x3 filter, stride 1 and dilation 1 (the group count is checked per call, on the data's depth)."""
    if len(filter_shape) != 4 or tuple(filter_shape[:2]) != (3, 3):
        return False
    spatial = (1, 2) if data_format == "NHWC" else (2, 3)
    return all(int(strides[a]) == 1 and int(dilations[a]) == 1 for a in spatial)


def enough_channels(in_channels: int, out_channels: int) -> bool:
    """The part of the measured rule (see _MIN_CHANNELS above) a filter alone decides: below it Winograd
    never pays, whatever the data's shape, and engine.passes.winograd leaves the convolution alone."""
    return min(in_channels, out_channels) >= _MIN_SMALL_CHANNELS


def _single_threaded(macs: int) -> bool:
    """Whether a product of `macs` multiply-adds runs on one thread (kernels.blas does not split it)."""
    return macs < blas.SPLIT_MIN_FLOPS


def prefers_winograd(batch: int, out_h: int, out_w: int, in_channels: int, out_channels: int) -> bool:
    """The measured rule (see _MIN_CHANNELS above): whether Winograd is faster than the direct convolution."""
    if not enough_channels(in_channels, out_channels):
        return False
    tiles = batch * -(-out_h // 2) * -(-out_w // 2)
    if _single_threaded(POSITIONS * tiles * in_channels * out_channels):
        return True  # Winograd's GEMMs are not split: on one thread (or as a few tasks) its arithmetic wins
    return min(in_channels, out_channels) >= _MIN_CHANNELS


def winograd_filter(xp: Any, filt: Any) -> Any:
    """U [16, C, K] of an HWIO [3, 3, C, K] filter: G g G^T per (c, k), position p = 4 * row + column,
    computed in float64 and rounded once to float32."""
    c, k = filt.shape[2], filt.shape[3]
    # U[4a + b] = sum_ij G[a, i] G[b, j] g[i, j]: one float64 GEMM with kron(G, G) [16, 9] over the taps
    # (ResNet50's 16 filters: a 512x512 one in 38 ms, against 160 as two GEMMs through an intermediate).
    u = xp.matmul(xp.asarray(_FILTER_TRANSFORM_2D), filt.astype(xp.float64).reshape(9, c * k))
    return xp.ascontiguousarray(u.reshape(POSITIONS, c, k), dtype=xp.float32)


# --- input transform: V = B^T d B of each tile's 4x4 input window ----------------------------------------


@compiled(f"void({readonly(4)}, int64, int64, int64, int64, int64, int64, int64, int64, float32[:, :, ::1])",
          ops=("_TensorgateWinogradConv2D",))
def _input_tiles_loop(x, pad_t, pad_l, tiles_w, b0, b1, ty0, ty1, t0, v):  # pragma: no cover
    """v[:, t0 + t] = B^T d B for the tiles of images [b0, b1), tile rows [ty0, ty1), numbered row-major
    from t0; d is the 4x4 window of NHWC x (zeros outside it)."""
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    rows = np.empty((4, 4, c), np.float32)  # B^T d
    border = np.zeros((4, 4, c), np.float32)  # a tile's window copied here when it reaches past the image
    t = t0
    for b in range(b0, b1):
        for ty in range(ty0, ty1):
            y0 = 2 * ty - pad_t
            for tx in range(tiles_w):
                x0 = 2 * tx - pad_l
                if y0 >= 0 and y0 + 4 <= h and x0 >= 0 and x0 + 4 <= w:
                    src, oy, ox = x[b], y0, x0
                else:
                    src, oy, ox = border, 0, 0
                    for i in range(4):
                        for j in range(4):
                            cell = border[i, j]
                            if 0 <= y0 + i < h and 0 <= x0 + j < w:
                                pixel = x[b, y0 + i, x0 + j]
                                for k in range(c):
                                    cell[k] = pixel[k]
                            else:
                                for k in range(c):
                                    cell[k] = 0.0
                # 1-D contiguous channel vectors: the channel loops vectorize.
                for j in range(4):
                    d0, d1, d2, d3 = src[oy, ox + j], src[oy + 1, ox + j], src[oy + 2, ox + j], src[oy + 3, ox + j]
                    r0, r1, r2, r3 = rows[0, j], rows[1, j], rows[2, j], rows[3, j]
                    for k in range(c):
                        r0[k] = d0[k] - d2[k]
                        r1[k] = d1[k] + d2[k]
                        r2[k] = d2[k] - d1[k]
                        r3[k] = d1[k] - d3[k]
                for i in range(4):
                    d0, d1, d2, d3 = rows[i, 0], rows[i, 1], rows[i, 2], rows[i, 3]
                    v0, v1, v2, v3 = v[4 * i, t], v[4 * i + 1, t], v[4 * i + 2, t], v[4 * i + 3, t]
                    for k in range(c):
                        v0[k] = d0[k] - d2[k]
                        v1[k] = d1[k] + d2[k]
                        v2[k] = d2[k] - d1[k]
                        v3[k] = d1[k] - d3[k]
                t += 1


def _input_tiles_twin(xp: Any, x: Any, win: Window2D, tiles_w: int, part: Chunk, t0: int, v: Any) -> None:
    """The numpy (and cupy) twin of _input_tiles_loop: the same float32 operations in the same order, on
    a zero-padded copy of the part's input rows viewed as overlapping 4x4 windows."""
    m, tile_rows, c = part.b1 - part.b0, part.r1 - part.r0, x.shape[3]
    height, width = 2 * tile_rows + 2, 2 * tiles_w + 2
    top, left = 2 * part.r0 - win.pad_top, -win.pad_left
    padded = xp.zeros((m, height, width, c), dtype=xp.float32)
    y_lo, y_hi = max(top, 0), min(top + height, win.in_h)
    x_lo, x_hi = max(left, 0), min(left + width, win.in_w)
    if y_lo < y_hi and x_lo < x_hi:
        padded[:, y_lo - top : y_hi - top, x_lo - left : x_hi - left] = x[part.b0 : part.b1, y_lo:y_hi, x_lo:x_hi]
    s_n, s_h, s_w, s_c = padded.strides
    d = xp.lib.stride_tricks.as_strided(
        padded, shape=(m, tile_rows, tiles_w, 4, 4, c), strides=(s_n, 2 * s_h, 2 * s_w, s_h, s_w, s_c)
    )
    d0, d1, d2, d3 = (d[:, :, :, i] for i in range(4))
    rows = (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
    tiles = m * tile_rows * tiles_w
    out = v[:, t0 : t0 + tiles].reshape(4, 4, m, tile_rows, tiles_w, c)
    for i, r in enumerate(rows):
        r0, r1, r2, r3 = (r[:, :, :, j] for j in range(4))
        xp.subtract(r0, r2, out=out[i, 0])
        xp.add(r1, r2, out=out[i, 1])
        xp.subtract(r2, r1, out=out[i, 2])
        xp.subtract(r1, r3, out=out[i, 3])


def input_tiles(xp: Any, x: Any, win: Window2D, part: Chunk, v: Any, t0: int = 0, *, compiled: bool = False) -> None:
    """Write V (B^T d B) of the tiles of `part` (images [b0, b1), tile rows [r0, r1)) into v[:, t0:]:
    v is [16, tiles, C] float32, C-contiguous; x is NHWC. The compiled loop needs x C-contiguous float32."""
    tiles_w = -(-win.out_w // 2)
    if use_compiled(xp, compiled, x.dtype, v.dtype) and x.flags.c_contiguous:
        _input_tiles_loop(x, win.pad_top, win.pad_left, tiles_w, part.b0, part.b1, part.r0, part.r1, t0, v)
    else:
        _input_tiles_twin(xp, x, win, tiles_w, part, t0, v)


# --- output transform: y = A^T M A, a 2x2 output block per tile ------------------------------------------


@compiled("void(float32[:, :, ::1], int64, int64, int64, int64, int64, int64, float32[:, :, :, ::1])",
          ops=("_TensorgateWinogradConv2D",))
def _output_tiles_loop(m, tiles_w, b0, b1, ty0, ty1, t0, out):  # pragma: no cover
    """out[b0:b1, 2 ty0 : 2 ty1] (clipped to the output) = A^T M A of tiles t0, t0 + 1, ... (row-major)."""
    oh, ow, kk = out.shape[1], out.shape[2], out.shape[3]
    cols = np.empty((2, 4, kk), np.float32)  # A^T M
    t = t0
    for b in range(b0, b1):
        for ty in range(ty0, ty1):
            for tx in range(tiles_w):
                for j in range(4):
                    m0, m1, m2, m3 = m[j, t], m[4 + j, t], m[8 + j, t], m[12 + j, t]
                    s0, s1 = cols[0, j], cols[1, j]
                    for k in range(kk):
                        s0[k] = m0[k] + m1[k] + m2[k]
                        s1[k] = m1[k] - m2[k] - m3[k]
                for i in range(2):
                    r = 2 * ty + i
                    if r >= oh:
                        break
                    s0, s1, s2, s3 = cols[i, 0], cols[i, 1], cols[i, 2], cols[i, 3]
                    y0 = out[b, r, 2 * tx]
                    for k in range(kk):
                        y0[k] = s0[k] + s1[k] + s2[k]
                    if 2 * tx + 1 < ow:
                        y1 = out[b, r, 2 * tx + 1]
                        for k in range(kk):
                            y1[k] = s1[k] - s2[k] - s3[k]
                t += 1


def _output_tiles_twin(xp: Any, m: Any, tiles_w: int, part: Chunk, t0: int, out: Any) -> None:
    """The numpy (and cupy) twin of _output_tiles_loop: the same float32 operations in the same order."""
    images, tile_rows, kk = part.b1 - part.b0, part.r1 - part.r0, m.shape[2]
    tiles = images * tile_rows * tiles_w
    mm = m[:, t0 : t0 + tiles].reshape(4, 4, images, tile_rows, tiles_w, kk)
    cols = (mm[0] + mm[1] + mm[2], mm[1] - mm[2] - mm[3])  # each [4 (column j), images, tile_rows, tiles_w, kk]
    y = xp.empty((images, tile_rows, 2, tiles_w, 2, kk), dtype=m.dtype)
    for i, s in enumerate(cols):
        y[:, :, i, :, 0] = s[0] + s[1] + s[2]
        y[:, :, i, :, 1] = s[1] - s[2] - s[3]
    r0, r1 = 2 * part.r0, min(2 * part.r1, out.shape[1])
    y = y.reshape(images, 2 * tile_rows, 2 * tiles_w, kk)
    out[part.b0 : part.b1, r0:r1] = y[:, : r1 - r0, : out.shape[2]]


def output_tiles(xp: Any, m: Any, part: Chunk, out: Any, t0: int = 0, *, compiled: bool = False) -> None:
    """Write A^T M A of the tiles of `part` (M in m[:, t0:], [16, tiles, K]) into its rows of the NHWC
    output `out` (C-contiguous), clipped to the output's size."""
    tiles_w = -(-out.shape[2] // 2)
    if use_compiled(xp, compiled, m.dtype, out.dtype):
        _output_tiles_loop(m, tiles_w, part.b0, part.b1, part.r0, part.r1, t0, out)
    else:
        _output_tiles_twin(xp, m, tiles_w, part, t0, out)


# --- the convolution -------------------------------------------------------------------------------------


def _split(part: Chunk, ways: int) -> list[Chunk]:
    """`part` cut into up to `ways` pieces: whole images, or tile rows of its one image."""
    images, rows = part.b1 - part.b0, part.r1 - part.r0
    if images > 1:
        step = -(-images // ways)
        return [Chunk(b, min(b + step, part.b1), part.r0, part.r1) for b in range(part.b0, part.b1, step)]
    step = -(-rows // ways)
    return [Chunk(part.b0, part.b1, r, min(r + step, part.r1)) for r in range(part.r0, part.r1, step)]


def winograd_conv2d_nhwc(
    xp: Any, x: Any, u: Any, win: Window2D, epilogue: Epilogue | None = None, *, compiled: bool = False
) -> Any:
    """Conv2D of float32 NHWC `x` with a 3x3, stride-1, dilation-1 filter given as its transform `u`
    ([16, C, K], winograd_filter), by F(2x2, 3x3); each chunk's output block finished by `epilogue`.

    Chunks are Chunk(images, tile rows). With BLAS single-threaded (kernels.blas, a Session's default) and
    tiles enough, each chunk is one task on the engine's pool: its input transform, 16 GEMMs, output
    transform and epilogue, at least two chunks per worker. Otherwise (a small convolution, BLAS's own
    threads, or a GPU) chunks run one after another, their transforms and their GEMMs split over the pool
    (kernels.blas.matmul), except where kernels.blas would not split the GEMMs: then all on the caller's thread."""
    if win.kh != 3 or win.kw != 3 or (win.stride_h, win.stride_w, win.dilation_h, win.dilation_w) != (1, 1, 1, 1):
        raise ValueError(f"Winograd F(2x2, 3x3) needs a 3x3 window of stride 1 and dilation 1, got {win}")
    n, c = x.shape[0], x.shape[3]
    k = u.shape[2]
    out = xp.empty((n, win.out_h, win.out_w, k), dtype=xp.float32)
    if out.size == 0:
        return out
    fast = use_compiled(xp, compiled, x.dtype, u.dtype)
    if fast:
        x = np.ascontiguousarray(x)
    tiles_h, tiles_w = -(-win.out_h // 2), -(-win.out_w // 2)
    row_bytes = tiles_w * POSITIONS * (c + k) * 4  # V and M of one row of tiles

    def finish(piece: Chunk, m: Any, first: int) -> None:
        output_tiles(xp, m, piece, out, first, compiled=fast)
        if epilogue is not None:
            rows = slice(2 * piece.r0, min(2 * piece.r1, win.out_h))
            epilogue(out[piece.b0 : piece.b1, rows], (slice(piece.b0, piece.b1), rows))

    chunk_bytes = max(_CHUNK_BYTES, POSITIONS * c * k * 2)
    total_bytes = n * tiles_h * row_bytes
    workers = pool_size()
    single_threaded_blas = xp is np and blas.blas_threads_limited()
    gemm_work = POSITIONS * n * tiles_h * tiles_w * c * k
    # GEMMs too small for kernels.blas to split: the transforms are too (the pool's hand-offs would cost more
    # than they save), unless there is work enough for a few chunk tasks.
    inline = _single_threaded(gemm_work)
    small_tasks = inline and gemm_work >= _MIN_SMALL_TASK_WORK and workers > 1
    if single_threaded_blas and total_bytes >= POSITIONS * c * k * 4 * 2 and (total_bytes >= _MIN_TASK_BYTES
                                                                             or small_tasks):
        budget = min(chunk_bytes, total_bytes // (2 * workers))

        def work(part: Chunk) -> None:
            tiles = (part.b1 - part.b0) * (part.r1 - part.r0) * tiles_w
            v = np.empty((POSITIONS, tiles, c), np.float32)
            m = np.empty((POSITIONS, tiles, k), np.float32)
            input_tiles(xp, x, win, part, v, compiled=fast)
            np.matmul(v, u, out=m)
            finish(part, m, 0)

        run_tasks(work, chunks(n, tiles_h, row_bytes, budget))
        return out

    parts = chunks(n, tiles_h, row_bytes, chunk_bytes)
    most = max((p.b1 - p.b0) * (p.r1 - p.r0) for p in parts) * tiles_w
    v_buffer = xp.empty(POSITIONS * most * c, dtype=xp.float32)
    m_buffer = xp.empty(POSITIONS * most * k, dtype=xp.float32)
    for part in parts:
        tile_rows = part.r1 - part.r0
        tiles = (part.b1 - part.b0) * tile_rows * tiles_w
        # C-contiguous [16, tiles, ·] views of the buffers, as the compiled loops and the GEMMs want them.
        v = v_buffer[: POSITIONS * tiles * c].reshape(POSITIONS, tiles, c)
        m = m_buffer[: POSITIONS * tiles * k].reshape(POSITIONS, tiles, k)

        def first_tile(piece: Chunk, part: Chunk = part, tile_rows: int = tile_rows) -> int:
            return ((piece.b0 - part.b0) * tile_rows + piece.r0 - part.r0) * tiles_w

        pieces = [part] if inline else _split(part, workers)
        run_chunks(xp, lambda piece, v=v: input_tiles(xp, x, win, piece, v, first_tile(piece), compiled=fast), pieces)
        # From the request's thread: the 16 GEMMs split over the pool by position (kernels.blas explains why
        # not BLAS's own threads).
        blas.matmul(xp, v, u, out=m)
        run_chunks(xp, lambda piece, m=m: finish(piece, m, first_tile(piece)), pieces)
    return out


# --- the op ----------------------------------------------------------------------------------------------


@kernel("_TensorgateWinogradConv2D")
def winograd_conv2d(
    xp,
    x,
    filter,
    transformed,
    *args,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    fused_ops: FusedOps = (),
    num_args: int = 0,
    epsilon: float = 0.0001,
    leakyrelu_alpha: float = 0.2,
    compiled: bool = False,
):
    """Conv2D (fused_ops empty) or _FusedConv2D of `x` with the HWIO `filter`, whose Winograd transform
    (winograd_filter) is `transformed`: by Winograd F(2x2, 3x3) where `prefers_winograd` says it is
    faster, by the direct convolution with `filter` otherwise (and for a grouped convolution, or data
    other than float32)."""
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    channels = filter.shape[3]
    if tuple(transformed.shape) != (POSITIONS, filter.shape[2], channels):
        raise ValueError(f"_TensorgateWinogradConv2D: transformed filter has shape {list(transformed.shape)}; "
                         f"expected {[POSITIONS, filter.shape[2], channels]}")
    winograd = (
        qualifies(tuple(filter.shape), strides, dilations, data_format)
        and xs.dtype == xp.float32 and transformed.dtype == xp.float32
        and conv_groups(xs.shape[3], filter.shape) == 1
        and prefers_winograd(xs.shape[0], win.out_h, win.out_w, xs.shape[3], channels)
    )

    def convolve(epilogue: Epilogue | None) -> Any:
        if winograd:
            return winograd_conv2d_nhwc(xp, xs, transformed, win, epilogue, compiled=compiled)
        return conv2d_nhwc(xp, xs, filter, win, epilogue)

    if not fused_ops:
        if args:
            raise ValueError(f"_TensorgateWinogradConv2D without fused_ops takes no extra inputs, got {len(args)}")
        return (from_nhwc(xp, convolve(None), data_format),)
    # As _FusedConv2D (kernels.nn.fused): the same fused steps, checked the same way.
    head, activation = split_fused_ops("_FusedConv2D", tuple(fused_ops), len(args))
    per_channel = args[:1] if head == ("BiasAdd", "Add") else args
    check_channels("_TensorgateWinogradConv2D", per_channel, channels)
    addend = None
    if head == ("BiasAdd", "Add"):
        addend = to_nhwc(args[1], data_format)
        if tuple(addend.shape) != (xs.shape[0], win.out_h, win.out_w, channels):
            # A broadcasting addend: added after the convolution, then the activation, as _FusedConv2D does.
            epilogue = channel_epilogue(xp, ("BiasAdd",), per_channel, None, epsilon, leakyrelu_alpha)
            y = from_nhwc(xp, convolve(epilogue), data_format) + args[1]
            if activation is not None:
                activation(xp, y, leakyrelu_alpha)
            return (y,)
    # Named, so that a compiled row epilogue (swish, hard swish, the ReLU family) applies the activation.
    epilogue = channel_epilogue(xp, head, per_channel, activation, epsilon, leakyrelu_alpha, addend,
                                fused_ops[-1] if activation is not None else None, compiled)
    return (from_nhwc(xp, convolve(epilogue), data_format),)
