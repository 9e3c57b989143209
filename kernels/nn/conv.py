"""2-D convolutions: Conv2D (grouped too), DepthwiseConv2dNative and Conv2DBackpropInput, on NHWC blocks.

The window geometry (SAME / VALID / EXPLICIT, taps that skip padding) is kernels.nn.window's; work is
split into chunks of whole images or row blocks (kernels.pool) so that each chunk's working set stays in
cache. Conv2D is im2col + GEMM per chunk: on CPU the chunks run on the kernel pool with BLAS
single-threaded, or one BLAS-threaded GEMM at a time (kernels.blas).

A Conv2D whose input is deeper than its filter is a grouped convolution (Keras' `Conv2D(groups=g)`): the
input's channels fall into g = input depth / filter depth groups, and output channel o reads only group
o // (out_depth / g). With one input channel per group it is a depthwise convolution, and runs as one; a
few shallow groups run as a plain Conv2D with the block-diagonal dense filter (g times the arithmetic, but
fast GEMMs); otherwise each chunk's im2col patches are laid out group by group and one batched GEMM
multiplies each group's patches by that group's filter matrix.

The convolution bodies take an optional `Epilogue` (kernels.nn.window): a callable that finishes one
chunk's output block in place (bias, batch-norm scaling, activation) right after the chunk is computed,
while the block is still in cache. The fused ops (`_FusedConv2D`, ...) are these bodies with an epilogue;
plain ops pass none. Depthwise convolution on CPU float32 is one compiled pass (kernels.nn.depthwise); the
numpy body here is its twin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy

from kernels import blas
from kernels.jit import use_compiled
from kernels.limits import check_elements
from kernels.nn.depthwise import depthwise_conv2d_compiled
from kernels.nn.window import DataFormat, Epilogue, Padding, Window2D, from_nhwc, tap_span, to_nhwc, window_from_attrs
from kernels.pool import Chunk, chunks, pool_size, run_chunks, run_tasks
from kernels.registry import kernel

__all__ = [
    "block_diagonal_filter",
    "conv2d",
    "conv2d_backprop_input",
    "conv2d_nhwc",
    "conv_groups",
    "depthwise_conv2d",
    "depthwise_conv2d_nhwc",
]

# Bytes of im2col patches per chunk: large enough for an efficient GEMM, small enough that the patch
# matrix stays in the last-level cache between being written and being read by the GEMM.
_PATCH_BYTES_PER_CHUNK = 4 << 20
# Bytes of a depthwise chunk's working set (its phase images, output block and product scratch). Larger
# than L2: numpy's ufunc loops, not the cache, bound each pass, and fewer chunks cost less Python.
_DEPTHWISE_BYTES_PER_CHUNK = 8 << 20

# A grouped Conv2D with g groups of d input channels runs as a plain Conv2D with the block-diagonal dense filter
# while g * d**2 <= this: numpy's GEMMs on a few columns, and its im2col copies of a few contiguous channels
# per group, are slow enough that g times the arithmetic takes less time. Measured on one thread (both run
# their chunks on the pool alike; 28x28 to 112x112, 3x3 and 1x1, batch 1 and 8), the grouped GEMMs catch up at
# about g = 50 for d = 2, 12 for d = 4, 3 for d = 8 and 2 for d = 16; at d = 8, g = 7 (RegNetX's layers) they
# ran 1.6x faster than the dense filter, at d = 2, g = 16 3.3x slower.
_DENSE_GROUPED_LIMIT = 200


# --- Conv2D ------------------------------------------------------------------------------------------------


def _padded(xp: Any, x: Any, win: Window2D, buffer: Any | None) -> Any:
    """x with the window's padding around it, written into `buffer` (whose border is already zero) when
    given; x itself when the window needs no padding."""
    n, h, w, _ = x.shape
    if buffer is None:
        return x
    dst = buffer[:n]
    dst[:, win.pad_top : win.pad_top + h, win.pad_left : win.pad_left + w] = x
    return dst


def _pad_buffer(xp: Any, win: Window2D, images: int, channels: int, dtype: Any) -> Any | None:
    """A zeroed buffer for `images` padded images, or None when the window reads no padding cell."""
    rows_read = (win.out_h - 1) * win.stride_h + (win.kh - 1) * win.dilation_h + 1
    cols_read = (win.out_w - 1) * win.stride_w + (win.kw - 1) * win.dilation_w + 1
    height = max(win.pad_top + win.in_h, rows_read)
    width = max(win.pad_left + win.in_w, cols_read)
    if win.pad_top == win.pad_left == 0 and height == win.in_h and width == win.in_w:
        return None
    return xp.zeros((images, height, width, channels), dtype=dtype)


def _windows(xp: Any, padded: Any, win: Window2D, rows: tuple[int, int]) -> Any:
    """A strided view [images, rows, out_w, kh, kw, c] of every window of output rows [r0, r1)."""
    s_n, s_h, s_w, s_c = padded.strides
    m, c = padded.shape[0], padded.shape[3]
    start = padded[:, rows[0] * win.stride_h :]
    return xp.lib.stride_tricks.as_strided(
        start,
        shape=(m, rows[1] - rows[0], win.out_w, win.kh, win.kw, c),
        strides=(s_n, s_h * win.stride_h, s_w * win.stride_w, s_h * win.dilation_h, s_w * win.dilation_w, s_c),
    )


def conv_groups(in_depth: int, filter_shape: Sequence[int]) -> int:
    """How many groups a Conv2D of an `in_depth`-deep input with an HWIO filter convolves: in_depth / the
    filter's input depth. ValueError, with TensorFlow's message, when the depths do not divide."""
    patch_depth, out_depth = int(filter_shape[2]), int(filter_shape[3])
    if in_depth == patch_depth:
        return 1
    if patch_depth <= 0:
        raise ValueError(f"filter depth must be strictly positive, got {patch_depth}")
    if in_depth % patch_depth:
        raise ValueError(f"input depth must be evenly divisible by filter depth: {in_depth} vs {patch_depth}")
    groups = in_depth // patch_depth
    if groups <= 0:
        raise ValueError(f"number of groups must be strictly positive, got {groups}")
    if out_depth % groups or out_depth < groups:
        raise ValueError(f"output depth must be evenly divisible by number of groups: {out_depth} vs {groups}")
    return groups


def conv2d_nhwc(xp: Any, x: Any, filt: Any, win: Window2D, epilogue: Epilogue | None = None) -> Any:
    """Conv2D on an NHWC input and an HWIO filter: im2col (one strided copy) + one GEMM per chunk, each
    chunk's output block finished by `epilogue` (if any) as soon as its GEMM is done. A grouped filter
    (input deeper than the filter) runs as a depthwise convolution, with its block-diagonal dense filter,
    or as grouped GEMMs."""
    n, _, _, c = x.shape
    kh, kw, _, o = filt.shape
    groups = conv_groups(c, filt.shape)
    if groups > 1 and filt.shape[2] == 1:
        # One input channel per group: output channel o = c * (o / groups) + k reads input channel c, which
        # is DepthwiseConv2dNative's layout (filter [kh, kw, c, multiplier]), a plain reshape of HWIO.
        return depthwise_conv2d_nhwc(xp, x, filt.reshape(kh, kw, c, o // c), win, epilogue)
    if groups > 1 and groups * filt.shape[2] ** 2 <= _DENSE_GROUPED_LIMIT:
        filt = block_diagonal_filter(xp, filt, groups)
    elif groups > 1:
        return _grouped_conv2d_nhwc(xp, x, filt, groups, win, epilogue)
    dtype = xp.result_type(x.dtype, filt.dtype)
    w_mat = xp.ascontiguousarray(filt, dtype=dtype).reshape(kh * kw * c, o)
    pointwise = kh == kw == 1 and win.stride_h == win.stride_w == 1 and win.pad_top == win.pad_left == 0
    if pointwise and (win.out_h, win.out_w) == (win.in_h, win.in_w):
        # A 1x1 convolution is a plain matmul over all pixels.
        pixels = xp.ascontiguousarray(x, dtype=dtype)
        if epilogue is None:
            return blas.matmul(xp, pixels.reshape(-1, c), w_mat).reshape(n, win.out_h, win.out_w, o)
        return _pointwise_with_epilogue(xp, pixels, w_mat, epilogue)

    out = xp.empty((n, win.out_h, win.out_w, o), dtype=dtype)
    parts = chunks(n, win.out_h, win.out_w * kh * kw * c * out.itemsize, _PATCH_BYTES_PER_CHUNK)

    def compute(p: Chunk, padded: Any, patch_buffer: Any, gemm: Callable[..., Any]) -> None:
        """Chunk p: the windows of `padded` (its images, padded) into `patch_buffer`, one GEMM into its
        output block, then the epilogue while the block is in cache."""
        pixels = (p.b1 - p.b0) * (p.r1 - p.r0) * win.out_w
        patches = patch_buffer[:pixels]
        patches.reshape(p.b1 - p.b0, p.r1 - p.r0, win.out_w, kh, kw, c)[...] = _windows(xp, padded, win, p.rows)
        block = out[p.b0 : p.b1, p.r0 : p.r1]  # contiguous, so reshape gives a view
        gemm(patches, w_mat, out=block.reshape(pixels, o))
        if epilogue is not None:
            epilogue(block, (slice(p.b0, p.b1), slice(p.r0, p.r1)))

    patch_rows = max((p.b1 - p.b0) * (p.r1 - p.r0) for p in parts) * win.out_w
    if xp is numpy and blas.blas_threads_limited() and len(parts) >= 2:
        # BLAS is single-threaded (kernels.blas): whole chunks (im2col copy, GEMM, epilogue) run on the
        # pool, each with patches of its own, reading one padded copy of the batch made up front.
        padded_all = _padded(xp, x.astype(dtype, copy=False), win, _pad_buffer(xp, win, n, c, dtype))
        run_tasks(lambda p: compute(p, padded_all[p.b0 : p.b1], xp.empty((patch_rows, kh * kw * c), dtype),
                                    xp.matmul), parts)
        return out
    images = max(p.b1 - p.b0 for p in parts)
    pad_buffer = _pad_buffer(xp, win, images, c, dtype)
    patch_buffer = xp.empty((patch_rows, kh * kw * c), dtype)
    padded, padded_images = None, None
    for p in parts:
        if padded_images != (p.b0, p.b1):  # row blocks of one image share its padded copy
            padded, padded_images = _padded(xp, x[p.b0 : p.b1], win, pad_buffer), (p.b0, p.b1)
        compute(p, padded, patch_buffer, functools.partial(blas.matmul, xp))
    return out


def block_diagonal_filter(xp: Any, filt: Any, groups: int) -> Any:
    """The dense HWIO filter [kh, kw, c, o] of a grouped one: group q's block where its input channels meet
    its output channels, zeros elsewhere, so that a plain Conv2D computes the grouped convolution."""
    kh, kw, cg, o = filt.shape
    og = o // groups
    dense = xp.zeros((kh, kw, groups, cg, groups, og), dtype=filt.dtype)
    q = xp.arange(groups)
    # Two index arrays apart: the indexed axis comes first, [groups, kh, kw, cg, og].
    dense[:, :, q, :, q, :] = filt.reshape(kh, kw, cg, groups, og).transpose(3, 0, 1, 2, 4)
    return dense.reshape(kh, kw, groups * cg, o)


def _grouped_conv2d_nhwc(xp: Any, x: Any, filt: Any, groups: int, win: Window2D, epilogue: Epilogue | None) -> Any:
    """Grouped Conv2D (filter [kh, kw, c / groups, o]): per chunk, im2col patches laid out group-major,
    [groups, pixels, kh * kw * c / groups] (one strided copy, as for Conv2D), then one batched GEMM
    against the [groups, kh * kw * c / groups, o / groups] filter matrices, written straight into the
    output block viewed as [groups, pixels, o / groups]. A 1x1 convolution that reads no padding needs no
    copy: the GEMMs read the pixels themselves, viewed as [groups, pixels, c / groups]. With BLAS
    single-threaded, chunks run on the pool as Conv2D's do, each with patches of its own."""
    n, _, _, c = x.shape
    kh, kw, cg, o = filt.shape
    og = o // groups
    width = kh * kw * cg
    dtype = xp.result_type(x.dtype, filt.dtype)
    # Group g's matrix: rows (i, j, input channel of the group) as in HWIO, columns its o / groups outputs.
    w_mats = filt.astype(dtype, copy=False).reshape(kh, kw, cg, groups, og).transpose(3, 0, 1, 2, 4)
    w_mats = xp.ascontiguousarray(w_mats).reshape(groups, width, og)
    out = xp.empty((n, win.out_h, win.out_w, o), dtype=dtype)
    pointwise = kh == kw == 1 and win.stride_h == win.stride_w == 1 and win.pad_top == win.pad_left == 0
    pointwise = pointwise and (win.out_h, win.out_w) == (win.in_h, win.in_w)
    if pointwise:
        x = xp.ascontiguousarray(x, dtype=dtype)
        parts = chunks(n, win.out_h, win.out_w * (c + o) * out.itemsize, _PATCH_BYTES_PER_CHUNK)
    else:
        parts = chunks(n, win.out_h, win.out_w * kh * kw * c * out.itemsize, _PATCH_BYTES_PER_CHUNK)
    most = max((p.b1 - p.b0) * (p.r1 - p.r0) for p in parts) * win.out_w

    def compute(p: Chunk, padded: Any, patch_buffer: Any) -> None:
        """Chunk p: its patches (from `padded`, its images padded) into `patch_buffer`, one batched GEMM into
        its output block, then the epilogue."""
        m, rows = p.b1 - p.b0, p.r1 - p.r0
        pixels = m * rows * win.out_w
        if pointwise:
            patches = x[p.b0 : p.b1, p.r0 : p.r1].reshape(pixels, groups, cg).transpose(1, 0, 2)
        else:
            patches = patch_buffer[: groups * pixels * width].reshape(groups, pixels, width)
            windows = _windows(xp, padded, win, p.rows).reshape(m, rows, win.out_w, kh, kw, groups, cg)
            patches.reshape(groups, m, rows, win.out_w, kh, kw, cg)[...] = windows.transpose(5, 0, 1, 2, 3, 4, 6)
        block = out[p.b0 : p.b1, p.r0 : p.r1]  # contiguous: its [groups, pixels, og] view is each group's GEMM output
        xp.matmul(patches, w_mats, out=block.reshape(pixels, groups, og).transpose(1, 0, 2))
        if epilogue is not None:
            epilogue(block, (slice(p.b0, p.b1), slice(p.r0, p.r1)))

    if xp is numpy and blas.blas_threads_limited() and len(parts) >= 2:
        # As conv2d_nhwc: whole chunks on the pool, reading one padded copy of the batch made up front.
        padded_all = None if pointwise else _padded(xp, x.astype(dtype, copy=False), win,
                                                     _pad_buffer(xp, win, n, c, dtype))
        run_tasks(lambda p: compute(p, None if pointwise else padded_all[p.b0 : p.b1],
                                    None if pointwise else xp.empty(most * groups * width, dtype)), parts)
        return out
    pad_buffer = None if pointwise else _pad_buffer(xp, win, max(p.b1 - p.b0 for p in parts), c, dtype)
    patch_buffer = None if pointwise else xp.empty(most * groups * width, dtype)
    padded, padded_images = None, None
    for p in parts:
        if not pointwise and padded_images != (p.b0, p.b1):  # row blocks of one image share its padded copy
            padded, padded_images = _padded(xp, x[p.b0 : p.b1], win, pad_buffer), (p.b0, p.b1)
        compute(p, padded, patch_buffer)
    return out


def _pointwise_with_epilogue(xp: Any, x: Any, w_mat: Any, epilogue: Epilogue) -> Any:
    """A 1x1 convolution of contiguous NHWC `x` as one GEMM per chunk of pixels, each chunk's block
    finished by `epilogue` while it is in cache (one GEMM and a separate pass would reread it all)."""
    n, h, w, c = x.shape
    o = w_mat.shape[1]
    out = xp.empty((n, h, w, o), dtype=w_mat.dtype)
    parts = chunks(n, h, w * (c + o) * out.itemsize, _PATCH_BYTES_PER_CHUNK)
    parallel = xp is numpy and blas.blas_threads_limited() and len(parts) >= 2

    def work(p: Chunk) -> None:
        block = out[p.b0 : p.b1, p.r0 : p.r1]
        pixels = (p.b1 - p.b0) * (p.r1 - p.r0) * w
        rows = x[p.b0 : p.b1, p.r0 : p.r1].reshape(pixels, c)
        # One chunk: its GEMM may take BLAS's threads (kernels.blas); several: each chunk is one pool task.
        (xp.matmul if parallel else functools.partial(blas.matmul, xp))(rows, w_mat, out=block.reshape(pixels, o))
        epilogue(block, (slice(p.b0, p.b1), slice(p.r0, p.r1)))

    if parallel:
        run_tasks(work, parts)
    else:
        for p in parts:
            work(p)
    return out


@kernel("Conv2D")
def conv2d(
    xp,
    x,
    filter,
    *,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
):
    """2-D convolution with an HWIO filter; output channels = filter's last axis. An input deeper than the
    filter (a multiple of its depth) is a grouped convolution."""
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    return (from_nhwc(xp, conv2d_nhwc(xp, xs, filter, win), data_format),)


# --- DepthwiseConv2dNative ---------------------------------------------------------------------------------


def depthwise_conv2d_nhwc(xp: Any, x: Any, filt: Any, win: Window2D, epilogue: Epilogue | None = None) -> Any:
    """DepthwiseConv2dNative on an NHWC input and a (kh, kw, c, multiplier) filter.

    Each chunk first copies its input slab, zero-padded, into stride_h * stride_w contiguous phase
    images (phase (p, q) holds padded rows p, p + s_h, ... and columns q, q + s_w, ...), so that every tap
    reads one phase image at a fixed offset: a full block of contiguous rows, at any stride. Each tap is
    then one multiply (and one add) over the chunk's output block, taps in filter order as TensorFlow
    sums them; chunks are sized to stay in L2 cache and run on the thread pool.
    """
    n, _, _, c = x.shape
    kh, kw, _, mult = filt.shape
    dtype = xp.result_type(x.dtype, filt.dtype)
    out = xp.empty((n, win.out_h, win.out_w, c * mult), dtype=dtype)
    sh, sw = win.stride_h, win.stride_w
    # Tap (i, j) reads padded row r * s_h + i * d_h, which is row r + (i * d_h) // s_h of phase (i * d_h) % s_h.
    taps = [(i, j, (i * win.dilation_h) % sh, (j * win.dilation_w) % sw, (i * win.dilation_h) // sh,
             (j * win.dilation_w) // sw) for i, j in win.taps()]
    phases = sorted({(t[2], t[3]) for t in taps})
    extra_h, extra_w = max(t[4] for t in taps), max(t[5] for t in taps)
    # The tap's weights are repeated along the output row, so that (with multiplier 1) every operand is one
    # contiguous run per row and numpy's inner loop spans out_w * c elements rather than c.
    row_shape = (win.out_w, c) if mult == 1 else (win.out_w, c, mult)
    taps_w = filt.astype(dtype, copy=False).reshape(kh, kw, 1, *row_shape[1:])
    taps_w = xp.ascontiguousarray(xp.broadcast_to(taps_w, (kh, kw, *row_shape)))

    def phase_image(p: Chunk, ph: int, pw: int) -> Any:
        rows, cols = p.r1 - p.r0 + extra_h, win.out_w + extra_w
        image = xp.empty((p.b1 - p.b0, rows, cols, c), dtype=dtype)
        # Phase row u is padded row (r0 + u) * s_h + ph, i.e. input row (r0 + u) * s_h + ph - pad_top.
        a, b, in_rows = tap_span(ph - win.pad_top, sh, win.in_h, p.r0, p.r0 + rows)
        a, b = min(a - p.r0, rows), b - p.r0
        c0, c1, in_cols = tap_span(pw - win.pad_left, sw, win.in_w, 0, cols)
        c0 = min(c0, cols)
        image[:, :a] = 0
        image[:, b:] = 0
        image[:, a:b, :c0] = 0
        image[:, a:b, c1:] = 0
        image[:, a:b, c0:c1] = x[p.b0 : p.b1, in_rows, in_cols]
        return image

    def work(p: Chunk) -> None:
        images = {(ph, pw): phase_image(p, ph, pw) for ph, pw in phases}
        rows = p.r1 - p.r0
        block = out[p.b0 : p.b1, p.r0 : p.r1]
        acc = block.reshape(p.b1 - p.b0, rows, *row_shape)
        product = None
        for k, (i, j, ph, pw, oi, oj) in enumerate(taps):
            src = images[ph, pw][:, oi : oi + rows, oj : oj + win.out_w]
            if mult != 1:
                src = src[..., None]
            if k == 0:
                xp.multiply(src, taps_w[i, j], out=acc)
                continue
            if product is None:
                product = xp.empty_like(acc)
            xp.multiply(src, taps_w[i, j], out=product)
            xp.add(acc, product, out=acc)
        if epilogue is not None:
            epilogue(block, (slice(p.b0, p.b1), slice(p.r0, p.r1)))

    row_bytes = out.itemsize * win.out_w * (2 * c * mult + c * len(phases) * sh)
    # At least two chunks per worker, so that the pool's threads share the work evenly.
    budget = min(_DEPTHWISE_BYTES_PER_CHUNK, max(n * win.out_h * row_bytes // (2 * pool_size()), row_bytes))
    run_chunks(xp, work, chunks(n, win.out_h, row_bytes, budget))
    return out


@kernel("DepthwiseConv2dNative")
def depthwise_conv2d(
    xp,
    x,
    filter,
    *,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    compiled: bool = False,
):
    """Each input channel c convolved with its own kh x kw x multiplier filter; output channel c*mult + m.
    One compiled pass on CPU float32 (kernels.nn.depthwise), else the numpy body below."""
    xs = to_nhwc(x, data_format)
    win = window_from_attrs(xs.shape[1:3], filter.shape[:2], strides, padding, explicit_paddings, data_format, dilations)
    if use_compiled(xp, compiled, xs.dtype, filter.dtype):
        return (from_nhwc(xp, depthwise_conv2d_compiled(xp, xs, filter, win), data_format),)
    return (from_nhwc(xp, depthwise_conv2d_nhwc(xp, xs, filter, win), data_format),)


# --- Conv2DBackpropInput -----------------------------------------------------------------------------------


@kernel("Conv2DBackpropInput")
def conv2d_backprop_input(
    xp,
    input_sizes,
    filter,
    out_backprop,
    *,
    strides: tuple[int, ...],
    padding: Padding,
    explicit_paddings: tuple[int, ...] = (),
    data_format: DataFormat = "NHWC",
    dilations: tuple[int, ...] = (1, 1, 1, 1),
    memory_limit: int | None = None,
):
    """The gradient of Conv2D with respect to its input (a transposed convolution): every output-gradient
    pixel scatters filter-weighted values back onto the input cells its window read."""
    sizes = [int(s) for s in input_sizes.tolist()]
    n, h, w_, c = sizes if data_format == "NHWC" else (sizes[0], sizes[2], sizes[3], sizes[1])
    # input_sizes is a value a client may send: the output it names is allocated whole.
    if min(sizes) >= 0:
        check_elements(n * h * w_ * c, xp.result_type(out_backprop.dtype, filter.dtype), memory_limit,
                       "Conv2DBackpropInput output", sizes)
    dy = to_nhwc(out_backprop, data_format)
    kh, kw, _, o = filter.shape
    win = window_from_attrs((h, w_), (kh, kw), strides, padding, explicit_paddings, data_format, dilations)
    if (win.out_h, win.out_w) != tuple(dy.shape[1:3]):
        raise ValueError(
            f"out_backprop spatial shape {tuple(dy.shape[1:3])} does not match the forward convolution's "
            f"output {(win.out_h, win.out_w)}"
        )
    dtype = xp.result_type(dy.dtype, filter.dtype)
    # cols[pixel, (i, j, c)] = sum_o dy[pixel, o] * filter[i, j, c, o]: one GEMM, then a col2im scatter.
    w_t = xp.ascontiguousarray(filter, dtype=dtype).reshape(kh * kw * c, o).T
    dx = xp.zeros((n, h, w_, c), dtype=dtype)
    # Chunks are whole images: row blocks of one image would scatter onto overlapping input rows.
    step = max(_PATCH_BYTES_PER_CHUNK // max(win.out_h * win.out_w * kh * kw * c * dx.itemsize, 1), 1)
    for b0 in range(0, n, step):
        b1 = min(b0 + step, n)
        dy_rows = xp.ascontiguousarray(dy[b0:b1], dtype=dtype).reshape(-1, o)
        cols = xp.matmul(dy_rows, w_t).reshape(b1 - b0, win.out_h, win.out_w, kh, kw, c)
        for i, j in win.taps():
            out_rows, out_cols, in_rows, in_cols = win.tap(i, j)
            # Within one tap distinct outputs read distinct input cells, so += on the slice is safe.
            target = dx[b0:b1, in_rows, in_cols]
            xp.add(target, cols[:, out_rows, out_cols, i, j], out=target)
    return (from_nhwc(xp, dx, data_format),)
