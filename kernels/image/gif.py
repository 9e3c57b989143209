"""GIF decoding as TensorFlow's gif_io.cc does it over giflib: every frame composited onto the previous
one, [frames, height, width, 3] uint8.

The blocks are parsed here and each frame's LZW data is expanded by Pillow's C decoder; compositing is
TensorFlow's, not a browser's: the canvas is as large as the largest frame (not the logical screen), a
frame starts as a copy of the one before (the first as black), its rectangle is clipped to the canvas,
pixels of the frame's transparent index keep what was there, and disposal methods are ignored. A colour
index past the frame's colour table is an error, as in TensorFlow.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from PIL import Image

from kernels.image.limits import check_image_size
from kernels.limits import check_elements

__all__ = ["GifError", "decode", "SIGNATURE"]

SIGNATURE = b"GIF8"


class GifError(ValueError):
    """Data giflib (or TensorFlow's use of it) refuses; the message follows TensorFlow's."""


@dataclass
class _Frame:
    left: int
    top: int
    width: int
    height: int
    interlaced: bool
    palette: np.ndarray | None  # [n, 3]
    transparent: int | None
    bits: int
    data: bytes  # the LZW sub-blocks, length-prefixed, up to the terminator


def _color_table(data: bytes, pos: int, flags: int) -> tuple[np.ndarray, int]:
    size = 3 * (2 << (flags & 7))
    table = data[pos:pos + size]
    if len(table) < size:
        raise GifError("failed to slurp gif file: Failed to read from given file")
    return np.frombuffer(table, np.uint8).reshape(-1, 3), pos + size


def _sub_blocks(data: bytes, pos: int) -> int:
    """The position after the sub-blocks starting at `pos` (after their zero terminator)."""
    while True:
        if pos >= len(data):
            raise GifError("failed to slurp gif file: Failed to read from given file")
        n = data[pos]
        pos += 1 + n
        if n == 0:
            return pos


def _parse(data: bytes) -> tuple[np.ndarray | None, list[_Frame]]:
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        raise GifError("failed to open gif file: Data is not in GIF format")
    if len(data) < 13:
        raise GifError("failed to open gif file: No screen descriptor detected")
    flags = data[10]
    pos = 13
    global_table = None
    if flags & 0x80:
        try:
            global_table, pos = _color_table(data, pos, flags)
        except GifError:
            raise GifError("failed to open gif file: No screen descriptor detected") from None
    frames: list[_Frame] = []
    transparent = None
    while True:
        if pos >= len(data):
            raise GifError("failed to slurp gif file: Failed to read from given file")
        kind = data[pos]
        if kind == 0x3B:  # trailer
            break
        if kind == 0x21:  # extension
            if pos + 2 > len(data):
                raise GifError("failed to slurp gif file: Failed to read from given file")
            label = data[pos + 1]
            if label == 0xF9 and pos + 7 <= len(data) and data[pos + 2] >= 4:
                packed, index = data[pos + 3], data[pos + 6]
                transparent = index if packed & 1 else None
            pos = _sub_blocks(data, pos + 2)
            continue
        if kind != 0x2C:
            raise GifError("failed to slurp gif file: Wrong record type detected")
        if pos + 10 > len(data):
            raise GifError("failed to slurp gif file: Failed to read from given file")
        left, top, width, height, fflags = struct.unpack("<HHHHB", data[pos + 1:pos + 10])
        pos += 10
        table = None
        if fflags & 0x80:
            table, pos = _color_table(data, pos, fflags)
        if pos >= len(data):
            raise GifError("failed to slurp gif file: Failed to read from given file")
        bits = data[pos]
        end = _sub_blocks(data, pos + 1)
        frames.append(_Frame(left, top, width, height, bool(fflags & 0x40), table, transparent, bits,
                             data[pos + 1:end]))
        transparent = None
        pos = end
    return global_table, frames


def _indices(frame: _Frame) -> np.ndarray:
    """The frame's [height, width] colour indices, LZW-decoded by Pillow."""
    if frame.width == 0 or frame.height == 0:
        return np.zeros((frame.height, frame.width), np.uint8)
    if not 1 <= frame.bits <= 12:
        raise GifError("failed to slurp gif file: Image is defective, decoding aborted")
    image = Image.new("L", (frame.width, frame.height), 0)
    try:
        image.frombytes(frame.data, "gif", frame.bits, int(frame.interlaced), -1)
    except ValueError as e:
        raise GifError("failed to slurp gif file: Image is defective, decoding aborted") from e
    return np.asarray(image)


def decode(data: bytes, *, expand_animations: bool = True, memory_limit: int | None = None) -> np.ndarray:
    """[frames, height, width, 3] uint8 (one frame unless `expand_animations`); AllocationTooLarge past
    `memory_limit` bytes (counted before any frame is decoded)."""
    global_table, frames = _parse(data)
    if not frames:
        raise GifError("gif file does not contain any image")
    width = max(f.width for f in frames)
    height = max(f.height for f in frames)
    count = len(frames) if expand_animations else 1
    check_image_size("GIF", height, width, frames=count)
    check_elements(count * height * width * 3, np.uint8, memory_limit, "decoded GIF", (count, height, width, 3))
    out = np.zeros((count, height, width, 3), np.uint8)
    for k in range(count):
        frame = frames[k]
        if k > 0:
            out[k] = out[k - 1]
        table = frame.palette if frame.palette is not None else global_table
        if table is None:
            raise GifError("missing color map")
        indices = _indices(frame)
        top, left = min(frame.top, height), min(frame.left, width)
        bottom, right = min(frame.top + frame.height, height), min(frame.left + frame.width, width)
        patch = indices[:bottom - top, :right - left]
        keep = patch == frame.transparent if frame.transparent is not None else np.zeros(patch.shape, bool)
        if (patch[~keep] >= len(table)).any():
            bad = int(patch[~keep][patch[~keep] >= len(table)][0])
            raise GifError(f"found color index {bad} outside of color map range {len(table)}")
        colors = table[np.minimum(patch, len(table) - 1)]
        region = out[k, top:bottom, left:right]
        region[...] = np.where(keep[..., None], region, colors)
    return out
