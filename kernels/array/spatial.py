"""Rearrangements between space and depth or batch: DepthToSpace, SpaceToDepth, SpaceToBatchND and
BatchToSpaceND (and their v1 forms SpaceToBatch and BatchToSpace). Each is a reshape, a transpose and a
reshape; no arithmetic. ExtractImagePatches and ExtractVolumePatches copy each sliding window's
pixels into the depth axis.

SpaceToBatchND / BatchToSpaceND are how TensorFlow lowers dilated ("atrous") convolutions: the image is
cut into block_shape interleaved sub-images stacked on the batch axis, convolved, and put back.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

import numpy as np

from kernels.host import format_dims, host
from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = [
    "depth_to_space",
    "space_to_depth",
    "space_to_batch_nd",
    "batch_to_space_nd",
    "space_to_batch",
    "batch_to_space",
    "extract_image_patches",
    "extract_volume_patches",
]

DataFormat = Literal["NHWC", "NCHW"]


def _nhwc_depth_to_space(xp: Any, x: Any, b: int) -> Any:
    n, h, w, c = x.shape
    if c % (b * b):
        raise ValueError(f"depth {c} is not divisible by block_size^2 = {b * b}")
    # Channel index (i * b + j) * c' + k goes to pixel (h * b + i, w * b + j), channel k.
    t = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
    return t.reshape(n, h * b, w * b, c // (b * b))


def _nhwc_space_to_depth(xp: Any, x: Any, b: int) -> Any:
    n, h, w, c = x.shape
    if h % b or w % b:
        raise ValueError(f"spatial size {h}x{w} is not divisible by block_size {b}")
    t = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
    return t.reshape(n, h // b, w // b, b * b * c)


@kernel("DepthToSpace")
def depth_to_space(xp, input, *, block_size: int, data_format: DataFormat = "NHWC"):
    """Moves depth blocks into block_size x block_size spatial blocks."""
    if data_format == "NHWC":
        return (_nhwc_depth_to_space(xp, input, block_size),)
    y = _nhwc_depth_to_space(xp, input.transpose(0, 2, 3, 1), block_size)
    return (xp.ascontiguousarray(y.transpose(0, 3, 1, 2)),)


@kernel("SpaceToDepth")
def space_to_depth(xp, input, *, block_size: int, data_format: DataFormat = "NHWC"):
    """Moves each block_size x block_size spatial block into the depth axis; the inverse of DepthToSpace."""
    if data_format == "NHWC":
        return (_nhwc_space_to_depth(xp, input, block_size),)
    y = _nhwc_space_to_depth(xp, input.transpose(0, 2, 3, 1), block_size)
    return (xp.ascontiguousarray(y.transpose(0, 3, 1, 2)),)


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values.reshape(-1).tolist()]


@kernel("SpaceToBatchND")
def space_to_batch_nd(xp, input, block_shape, paddings, *, memory_limit: int | None = None):
    """Zero-pads the M spatial axes after batch, then moves each block_shape block onto the batch axis:
    output batch index = (block offset) * batch + original batch index."""
    blocks = _ints(block_shape)
    pads = _ints(paddings)
    m = len(blocks)
    x = input
    if any(pads):
        # The paddings are values a client may send: the padded copy is allocated whole.
        padded = [n + pads[2 * i] + pads[2 * i + 1] for i, n in enumerate(x.shape[1 : 1 + m])]
        if min(pads) >= 0:
            check_elements(x.shape[0] * math.prod(padded) * math.prod(x.shape[1 + m :]), x.dtype, memory_limit,
                           "SpaceToBatchND padded input", [x.shape[0], *padded, *x.shape[1 + m :]])
        x = xp.pad(x, [(0, 0)] + [(pads[2 * i], pads[2 * i + 1]) for i in range(m)] + [(0, 0)] * (x.ndim - 1 - m))
    batch, spatial, rest = x.shape[0], x.shape[1 : 1 + m], x.shape[1 + m :]
    for size, b in zip(spatial, blocks):
        if size % b:
            raise ValueError(f"padded spatial size {size} is not divisible by block size {b}")
    split = [batch]
    for size, b in zip(spatial, blocks):
        split += [size // b, b]
    t = x.reshape(split + list(rest))
    # [batch, s1, b1, ..., sM, bM, rest] -> [b1, ..., bM, batch, s1, ..., sM, rest]
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, t.ndim))
    out_shape = [batch * math.prod(blocks)] + [s // b for s, b in zip(spatial, blocks)] + list(rest)
    return (t.transpose(perm).reshape(out_shape),)


@kernel("BatchToSpaceND")
def batch_to_space_nd(xp, input, block_shape, crops):
    """The inverse of SpaceToBatchND: moves batch blocks back into space, then crops."""
    blocks = _ints(block_shape)
    crop = _ints(crops)
    m = len(blocks)
    batch, spatial, rest = input.shape[0], input.shape[1 : 1 + m], input.shape[1 + m :]
    prod = math.prod(blocks)
    if batch % prod:
        raise ValueError(f"batch {batch} is not divisible by the product of block_shape {blocks}")
    t = input.reshape(blocks + [batch // prod] + list(spatial) + list(rest))
    # [b1, ..., bM, batch', s1, ..., sM, rest] -> [batch', s1, b1, ..., sM, bM, rest]
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    perm += list(range(1 + 2 * m, t.ndim))
    t = t.transpose(perm).reshape([batch // prod] + [s * b for s, b in zip(spatial, blocks)] + list(rest))
    index = (slice(None),) + tuple(
        slice(crop[2 * i], t.shape[1 + i] - crop[2 * i + 1]) for i in range(m)
    )
    return (t[index],)


def _v1_block_pairs(pairs: Any, name: str) -> Any:
    if pairs.shape != (2, 2):
        raise ValueError(f"{name} should have shape [2, 2] instead of {format_dims(pairs.shape)}")
    values = np.asarray(host(pairs), dtype=np.int64)
    if (values < 0).any():
        raise ValueError(f"{name[0].upper()}{name[1:]} must be non-negative")
    return values


@kernel("SpaceToBatch")
def space_to_batch(xp, input, paddings, *, block_size: int, memory_limit: int | None = None):
    """SpaceToBatchND of a 4-D NHWC `input` with the same block_size on both spatial axes."""
    if input.ndim != 4:
        raise ValueError(f"Input rank should be: 4instead of: {input.ndim}")
    if block_size < 2:
        raise ValueError(f"Value for attr 'block_size' of {block_size} must be at least minimum 2")
    pads = _v1_block_pairs(paddings, "paddings")
    return space_to_batch_nd(xp, input, np.array([block_size, block_size]), pads, memory_limit=memory_limit)


@kernel("BatchToSpace")
def batch_to_space(xp, input, crops, *, block_size: int):
    """BatchToSpaceND of a 4-D NHWC `input` with the same block_size on both spatial axes."""
    if input.ndim != 4:
        raise ValueError(f"Input rank should be: 4instead of: {input.ndim}")
    if block_size < 2:
        raise ValueError(f"Value for attr 'block_size' of {block_size} must be at least minimum 2")
    crop = _v1_block_pairs(crops, "crops")
    if input.shape[0] % (block_size * block_size):
        raise ValueError(f"Input batch dimension ({input.shape[0]}) is not divisible by product of block sizes "
                         f"({block_size * block_size})")
    for i in range(2):
        cropped = input.shape[1 + i] * block_size - crop[i].sum()
        if cropped < 0:
            raise ValueError(f"cropped_shape[{i}]={cropped} must be non-negative")
    return batch_to_space_nd(xp, input, np.array([block_size, block_size]), crop)


# ---------------------------------------------------------------------------------------------------
# Patches


def _window(size: int, k: int, stride: int, rate: int, padding: str) -> tuple[int, int]:
    """(output size, padding before) of one spatial dim, as TensorFlow's GetWindowedOutputSize has them."""
    effective = (k - 1) * rate + 1
    if padding == "VALID":
        out = int((size - effective + stride) / stride)  # C++ division: toward zero
        if out < 0:
            raise ValueError(f"Computed output size would be negative: {out} [input_size: {size}, "
                             f"effective_filter_size: {effective}, stride: {stride}]")
        return out, 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + effective - size, 0) // 2


def _patches(xp: Any, x: Any, ksizes: tuple, strides: tuple, rates: tuple, padding: str,
             memory_limit: int | None, op: str) -> Any:
    """[batch, out..., prod(k) * depth]: each window's pixels in row-major kernel order, depth fastest;
    SAME padding reads zeros."""
    rank = x.ndim
    for name, values in (("ksizes", ksizes), ("strides", strides), ("rates", rates)):
        if len(values) != rank:
            raise ValueError(f"Length for attr '{name}' of {len(values)} must be {rank}")
        if values[0] != 1 or values[-1] != 1:
            raise ValueError(f"Only support {name} across space.")
        if any(v < 1 for v in values):
            raise ValueError(f"{name} must be positive, got {list(values)}")
    spatial = x.shape[1:-1]
    dims = [_window(n, k, s, r, padding) for n, k, s, r in zip(spatial, ksizes[1:-1], strides[1:-1], rates[1:-1])]
    out_sizes = [o for o, _ in dims]
    kernel_sizes = ksizes[1:-1]
    out_shape = (x.shape[0], *out_sizes, math.prod(kernel_sizes) * x.shape[-1])
    check_elements(math.prod(out_shape), x.dtype, memory_limit, f"{op} output", out_shape)
    if math.prod(out_shape) == 0:
        return xp.zeros(out_shape, dtype=x.dtype)
    pads = [(0, 0)]
    for n, (o, before), k, s, r in zip(spatial, dims, kernel_sizes, strides[1:-1], rates[1:-1]):
        needed = (o - 1) * s + (k - 1) * r + 1
        pads.append((before, max(needed - n - before, 0)))
    pads.append((0, 0))
    padded = xp.pad(x, pads) if any(a or b for a, b in pads) else x
    windows = []
    for offsets in itertools.product(*(range(k) for k in kernel_sizes)):
        index = (slice(None),) + tuple(
            slice(i * r, i * r + (o - 1) * s + 1, s)
            for i, r, o, s in zip(offsets, rates[1:-1], out_sizes, strides[1:-1])
        )
        windows.append(padded[index])
    return xp.stack(windows, axis=-2).reshape(out_shape)


@kernel("ExtractImagePatches")
def extract_image_patches(xp, images, *, ksizes: tuple, strides: tuple, rates: tuple,
                          padding: Literal["SAME", "VALID"], memory_limit: int | None = None):
    """[batch, out_rows, out_cols, ksize_rows * ksize_cols * depth]: the (dilated) windows of 4-D `images`."""
    if images.ndim != 4:
        raise ValueError(f"input must be 4-dimensional{format_dims(images.shape)}")
    return (_patches(xp, images, ksizes, strides, rates, padding, memory_limit, "ExtractImagePatches"),)


@kernel("ExtractVolumePatches")
def extract_volume_patches(xp, input, *, ksizes: tuple, strides: tuple, padding: Literal["SAME", "VALID"],
                           memory_limit: int | None = None):
    """[batch, out_planes, out_rows, out_cols, prod(ksizes) * depth]: the windows of 5-D `input`."""
    if input.ndim != 5:
        raise ValueError(f"input must be 5-dimensional{format_dims(input.shape)}")
    return (_patches(xp, input, ksizes, strides, (1,) * 5, padding, memory_limit, "ExtractVolumePatches"),)
