"""Rearrangements between space and depth or batch: DepthToSpace, SpaceToDepth, SpaceToBatchND and
BatchToSpaceND. Each is a reshape, a transpose and a reshape; no arithmetic.

SpaceToBatchND / BatchToSpaceND are how TensorFlow lowers dilated ("atrous") convolutions: the image is
cut into block_shape interleaved sub-images stacked on the batch axis, convolved, and put back.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["depth_to_space", "space_to_depth", "space_to_batch_nd", "batch_to_space_nd"]

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
