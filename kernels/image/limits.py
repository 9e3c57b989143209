"""Limits of the image decoders: how many pixels a decoded image may have before any memory is allocated
for it, so that a small file declaring a huge size (a decompression bomb) is refused, not decoded.

The limit is MAX_IMAGE_PIXELS = 2**28 (268 million) pixels per decoded tensor, counting every frame of an
animation: at most 805 MB of uint8 RGB, 2.1 GB of float32 RGB. TensorFlow's own checks, which come on
top (JPEG: height * width * channels < 2**29; PNG: fewer than 2**29 pixels), keep their messages.
"""

from __future__ import annotations

__all__ = ["MAX_IMAGE_PIXELS", "ImageTooLargeError", "check_image_size"]

MAX_IMAGE_PIXELS = 2**28


class ImageTooLargeError(ValueError):
    """A declared image size beyond MAX_IMAGE_PIXELS; raised before decoding."""


def check_image_size(kind: str, height: int, width: int, frames: int = 1) -> None:
    """ImageTooLargeError when frames * height * width exceeds MAX_IMAGE_PIXELS."""
    pixels = int(frames) * int(height) * int(width)
    if pixels > MAX_IMAGE_PIXELS:
        count = f"{frames} frames of " if frames != 1 else ""
        raise ImageTooLargeError(
            f"{kind} image too large to decode: {count}{width}x{height} pixels ({pixels} in all) exceeds the "
            f"limit of {MAX_IMAGE_PIXELS} pixels (a decompression bomb?)")
