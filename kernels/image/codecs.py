"""Kernels of the image codec ops: DecodeJpeg, DecodeAndCropJpeg, ExtractJpegShape, DecodePng, DecodeGif,
DecodeBmp, DecodeImage, EncodeJpeg, EncodePng. Host only: their inputs or outputs are strings.

As in TensorFlow, every decode op looks at the magic bytes, not at its own name: DecodeJpeg and DecodePng
decode JPEG, PNG and single-frame GIF alike, DecodeGif returns any of them as [frames, h, w, 3], and only
DecodeImage (and DecodeBmp) take BMP. The format modules hold the decoders: kernels/image/jpeg.py,
png.py, gif.py (BMP, a header and raw rows, is here). Declared sizes are checked against
kernels/image/limits.py, and against the request's memory limit (kernels.limits; read from the header,
before decoding), before anything is allocated. WebP and JPEG XL, which DecodeImage also reads in
TensorFlow, are refused with TensorFlow's unknown-format error.
"""

from __future__ import annotations

import struct
from typing import Any, Literal

import numpy as np

from kernels.host import format_dims
from kernels.image import gif as gif_codec
from kernels.image import jpeg as jpeg_codec
from kernels.image import png as png_codec
from kernels.image.limits import check_image_size
from kernels.limits import check_bytes
from kernels.registry import kernel

__all__ = ["decode_image", "extract_jpeg_shape", "encode_jpeg", "encode_png"]

_JPEG, _PNG, _GIF, _BMP = "JPEG", "PNG", "GIF", "BMP"
_DCT_METHODS = ("", "INTEGER_FAST", "INTEGER_ACCURATE")


def _format(data: bytes) -> str | None:
    if data.startswith(b"\xff\xd8\xff"):
        return _JPEG
    if data.startswith(png_codec.SIGNATURE):
        return _PNG
    if data.startswith(gif_codec.SIGNATURE):
        return _GIF
    if data.startswith(b"BM"):
        return _BMP
    return None


def _contents(contents: Any) -> bytes:
    if contents.ndim != 0:
        raise ValueError(f"`contents` must be scalar but got shape{format_dims(contents.shape)}")
    data = contents.item() if hasattr(contents, "item") else contents
    data = data.encode() if isinstance(data, str) else bytes(data)
    if not data:
        raise ValueError("Input is empty.")
    return data


def _convert(pixels: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """TensorFlow's uint8 -> dtype scaling of decoded pixels (uint16: v * 256; float: v * (1/255))."""
    if dtype == np.uint8:
        return pixels
    if dtype == np.uint16:
        return pixels.astype(np.uint16) * np.uint16(256)
    return pixels.astype(np.float32) * np.float32(1.0 / 255)


def _decode_bmp(data: bytes, channels: int) -> np.ndarray:
    """TensorFlow's own BMP reader: uncompressed 8/24/32-bit rows, bottom-up unless the height is negative."""
    if len(data) < 32:
        raise ValueError("Incomplete bmp content, requires at least 32 bytes to find the header size, width, "
                         f"height, and bpp, got {len(data)} bytes")
    header_size, = struct.unpack_from("<i", data, 10)
    width, height = struct.unpack_from("<ii", data, 18)
    bpp, = struct.unpack_from("<h", data, 28)
    img_channels = int(bpp / 8) if bpp >= 0 else -(-bpp // 8)
    if img_channels not in (1, 3, 4):
        raise ValueError(f"Number of channels inherent in the image must be 1, 3 or 4, was {img_channels}")
    out_channels = channels or img_channels
    if width <= 0:
        raise ValueError("Width must be positive")
    if height == 0:
        raise ValueError("Height must be nonzero")
    if header_size < 0:
        raise ValueError("header size must be nonnegative")
    rows = abs(height)
    if width * rows >= (2**31 - 1) // 8:
        raise ValueError("Total possible pixel bytes must be less than 2^30")
    check_image_size("BMP", rows, width)
    row_size = (img_channels * width + 3) // 4 * 4
    size_diff = len(data) - header_size - row_size * rows
    if size_diff != 0:
        raise ValueError(f"Input size should match (header_size + row_size * abs_height) but they differ by "
                         f"{size_diff}")
    raw = np.frombuffer(data, np.uint8, count=row_size * rows, offset=header_size).reshape(rows, row_size)
    px = raw[:, :width * img_channels].reshape(rows, width, img_channels)
    if height > 0:
        px = px[::-1]
    if img_channels == 1:
        rgb = np.repeat(px, 3, axis=2)
        alpha = np.full((rows, width, 1), 255, np.uint8)
    else:
        rgb = px[:, :, 2::-1]
        alpha = px[:, :, 3:4] if img_channels == 4 else np.full((rows, width, 1), 255, np.uint8)
    if out_channels == 1:
        return np.ascontiguousarray(px[:, :, :1])
    if out_channels == 3:
        return np.ascontiguousarray(rgb)
    return np.concatenate([rgb, alpha], axis=2)


def _jpeg_header(data: bytes) -> jpeg_codec.JpegHeader | None:
    """The JPEG header of `data`, or None when it cannot be read (the decoder then reports the problem)."""
    try:
        return jpeg_codec.read_header(data)
    except jpeg_codec.JpegError:
        return None


def _declared_size(fmt: str, data: bytes, channels: int, ratio: int,
                   header: jpeg_codec.JpegHeader | None) -> tuple[int, int, int] | None:
    """(height, width, channels) as the header declares them, read without decoding (`header`, for JPEG);
    None when the header cannot be read (the decoder then reports the problem) or for GIF (gif_codec
    counts its frames)."""
    try:
        if fmt == _JPEG:
            if header is None:
                return None
            return -(-header.height // ratio), -(-header.width // ratio), channels or min(header.components, 3)
        if fmt == _PNG and len(data) >= 24 and data[12:16] == b"IHDR":
            width, height = struct.unpack_from(">II", data, 16)
            return height, width, channels or 4
        if fmt == _BMP and len(data) >= 32:
            width, height = struct.unpack_from("<ii", data, 18)
            return abs(height), max(width, 0), channels or 4
    except (jpeg_codec.JpegError, struct.error):
        return None
    return None


def _check_budget(op: str, fmt: str, data: bytes, channels: int, dtype: np.dtype, ratio: int,
                  memory_limit: int | None, jpeg_header: jpeg_codec.JpegHeader | None) -> None:
    """A small file may declare a huge image: its decoded size (the uint8 or uint16 pixels, and their
    conversion to `dtype`) must fit in the request's memory limit, checked from the header before decoding.
    kernels.image.limits' fixed pixel cap applies on top."""
    if memory_limit is None:
        return
    declared = _declared_size(fmt, data, channels, ratio, jpeg_header)
    if declared is None:
        return
    height, width, depth = declared
    per_value = 2 if fmt == _PNG and dtype != np.uint8 else 1
    if dtype != np.uint8:
        per_value += dtype.itemsize
    check_bytes(height * width * depth * per_value, memory_limit, f"{op} decoded image", (height, width, depth))


def _wrong_op(fmt: str, op: str) -> ValueError:
    if op == "DecodeAndCropJpeg":
        return ValueError(f"DecodeAndCropJpeg operation can run on JPEG only, but detected {fmt}.")
    if fmt == _BMP:
        return ValueError(f"Trying to decode BMP format using a wrong op. Use `decode_bmp` or `decode_image` "
                          f"instead. Op used: {op}")
    lower = fmt.lower()
    return ValueError(f"Trying to decode {fmt} format using DecodeBmp op. Use `decode_{lower}` or `decode_image` "
                      "instead.")


def _decode(op: str, data: bytes, *, channels: int = 0, dtype: np.dtype = np.dtype(np.uint8),
            expand_animations: bool = True, jpeg: dict | None = None, crop: Any = None,
            memory_limit: int | None = None, compiled: bool = False) -> np.ndarray:
    """TensorFlow's DecodeImageV2Op::Compute for `op`, on the bytes of one image (`compiled`: whether the
    JPEG decoder may run its compiled loop, kernels.jit)."""
    fmt = _format(data)
    if fmt is None:
        raise ValueError("Unknown image file format. One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required.")
    dtype = np.dtype(dtype)
    header = _jpeg_header(data) if fmt == _JPEG else None
    _check_budget(op, fmt, data, channels, dtype, (jpeg or {}).get("ratio", 1), memory_limit, header)
    if fmt == _JPEG:
        if channels not in (0, 1, 3):
            raise ValueError("JPEG does not support 4 channels")
        window = None
        if op == "DecodeAndCropJpeg":
            if crop.ndim != 1:
                raise ValueError(f"crop_window must be 1-D, got shape {format_dims(crop.shape)}")
            if crop.shape[0] != 4:
                raise ValueError(f"crop_size must have four elements {format_dims(crop.shape)}")
            window = tuple(int(v) for v in crop.tolist())
        elif op == "DecodeBmp":
            raise _wrong_op(fmt, op)
        pixels = jpeg_codec.decode(data, channels=channels, crop=window, header=header, compiled=compiled,
                                   **(jpeg or {"dct_method": ""}))
        pixels = _convert(pixels, dtype)
        return pixels[None] if op == "DecodeGif" else pixels
    if fmt == _PNG:
        if op in ("DecodeBmp", "DecodeAndCropJpeg"):
            raise _wrong_op(fmt, op)
        pixels = png_codec.decode(data, channels=channels, sixteen_bits=dtype != np.uint8)
        if dtype == np.float32:
            pixels = pixels.astype(np.float32) * np.float32(1.0 / 65535)
        return pixels[None] if op == "DecodeGif" else pixels
    if fmt == _GIF:
        if channels not in (0, 3):
            raise ValueError(f"channels must be 0 or 3 for GIF, got {channels}")
        if op in ("DecodeBmp", "DecodeAndCropJpeg"):
            raise _wrong_op(fmt, op)
        expand = expand_animations or op in ("DecodePng", "DecodeJpeg", "DecodeGif")
        frames = gif_codec.decode(data, expand_animations=expand, memory_limit=memory_limit)
        if op in ("DecodePng", "DecodeJpeg"):
            if frames.shape[0] != 1:
                raise ValueError(f"Got {frames.shape[0]} frames, but animated gifs can only be decoded by "
                                 "tf.io.decode_gif or tf.io.decode_image")
            frames = frames[0]
        elif op == "DecodeImage" and not expand_animations:
            frames = frames[0]
        return _convert(frames, dtype)
    if channels == 1:
        raise ValueError(f"`channels` must be 0, 3 or 4 for BMP, but got {channels}")
    if op not in ("DecodeBmp", "DecodeImage"):
        raise _wrong_op(fmt, op)
    return _convert(_decode_bmp(data, channels), dtype)


def _check_channels(channels: int) -> None:
    if channels not in (0, 1, 3, 4):
        raise ValueError(f"`channels` must be 0, 1, 3 or 4 but got {channels}")


def _jpeg_options(ratio: int, fancy_upscaling: bool, try_recover_truncated: bool, acceptable_fraction: float,
                  dct_method: str) -> dict:
    if ratio not in (1, 2, 4, 8):
        raise ValueError(f"ratio must be 1, 2, 4, or 8, got {ratio}")
    if dct_method not in _DCT_METHODS:
        raise ValueError("dct_method must be one of {'', 'INTEGER_FAST', 'INTEGER_ACCURATE'}")
    return {"ratio": ratio, "fancy_upscaling": fancy_upscaling, "try_recover_truncated": try_recover_truncated,
            "acceptable_fraction": acceptable_fraction, "dct_method": dct_method}


@kernel("DecodeJpeg", devices=("cpu",))
def decode_jpeg(xp, contents, *, channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
                try_recover_truncated: bool = False, acceptable_fraction: float = 1.0, dct_method: str = "",
                memory_limit: int | None = None, compiled: bool = False):
    """[height, width, channels] uint8 of a JPEG (or PNG, or one-frame GIF)."""
    _check_channels(channels)
    options = _jpeg_options(ratio, fancy_upscaling, try_recover_truncated, acceptable_fraction, dct_method)
    return (_decode("DecodeJpeg", _contents(contents), channels=channels, jpeg=options, memory_limit=memory_limit,
                    compiled=compiled),)


@kernel("DecodeAndCropJpeg", devices=("cpu",))
def decode_and_crop_jpeg(xp, contents, crop_window, *, channels: int = 0, ratio: int = 1,
                         fancy_upscaling: bool = True, try_recover_truncated: bool = False,
                         acceptable_fraction: float = 1.0, dct_method: str = "", memory_limit: int | None = None,
                         compiled: bool = False):
    """The [y, x, height, width] window of a JPEG, decoding only the rows and iMCU columns it needs."""
    _check_channels(channels)
    options = _jpeg_options(ratio, fancy_upscaling, try_recover_truncated, acceptable_fraction, dct_method)
    return (_decode("DecodeAndCropJpeg", _contents(contents), channels=channels, jpeg=options,
                    crop=np.asarray(crop_window), memory_limit=memory_limit, compiled=compiled),)


@kernel("DecodePng", devices=("cpu",))
def decode_png(xp, contents, *, channels: int = 0, dtype: np.dtype = np.dtype(np.uint8),
               memory_limit: int | None = None, compiled: bool = False):
    """[height, width, channels] uint8 or uint16 of a PNG (or JPEG, or one-frame GIF)."""
    _check_channels(channels)
    if np.dtype(dtype) not in (np.uint8, np.uint16):
        raise ValueError(f"`dtype` for `DecodePng` must be unit8, unit16 but got: {np.dtype(dtype).name}")
    return (_decode("DecodePng", _contents(contents), channels=channels, dtype=dtype, memory_limit=memory_limit,
                    compiled=compiled),)


@kernel("DecodeGif", devices=("cpu",))
def decode_gif(xp, contents, *, memory_limit: int | None = None, compiled: bool = False):
    """[frames, height, width, 3] uint8 of a GIF (a JPEG or PNG as one frame)."""
    return (_decode("DecodeGif", _contents(contents), channels=3, memory_limit=memory_limit, compiled=compiled),)


@kernel("DecodeBmp", devices=("cpu",))
def decode_bmp(xp, contents, *, channels: int = 0, memory_limit: int | None = None):
    """[height, width, channels] uint8 of an uncompressed BMP."""
    _check_channels(channels)
    return (_decode("DecodeBmp", _contents(contents), channels=channels, memory_limit=memory_limit),)


@kernel("DecodeImage", devices=("cpu",))
def decode_image(xp, contents, *, channels: int = 0, dtype: np.dtype = np.dtype(np.uint8),
                 expand_animations: bool = True, memory_limit: int | None = None, compiled: bool = False):
    """Any of JPEG, PNG, GIF, BMP; GIFs as [frames, h, w, 3] when `expand_animations`; dtype uint8, uint16
    or float32 scaled to [0, 1]."""
    _check_channels(channels)
    if np.dtype(dtype) not in (np.uint8, np.uint16, np.float32):
        raise ValueError(f"`dtype` for `DecodeImage` must be unit8, unit16, float but got: {np.dtype(dtype).name}")
    return (_decode("DecodeImage", _contents(contents), channels=channels, dtype=dtype,
                    expand_animations=expand_animations, memory_limit=memory_limit, compiled=compiled),)


@kernel("ExtractJpegShape", devices=("cpu",))
def extract_jpeg_shape(xp, contents, *, output_type: np.dtype = np.dtype(np.int32)):
    """[height, width, components] from a JPEG's header, without decoding it."""
    if contents.ndim != 0:
        raise ValueError(f"contents must be scalar, got shape {format_dims(contents.shape)}")
    data = _contents(contents)
    try:
        header = jpeg_codec.read_header(data)
    except jpeg_codec.JpegError:
        raise ValueError(f"Invalid JPEG data, size {len(data)}") from None
    return (np.array([header.height, header.width, header.components], dtype=output_type),)


@kernel("EncodeJpeg", devices=("cpu",))
def encode_jpeg(xp, image, *, format: Literal["", "grayscale", "rgb"] = "", quality: int = 95,
                progressive: bool = False, optimize_size: bool = False, chroma_downsampling: bool = True,
                density_unit: Literal["in", "cm"] = "in", x_density: int = 300, y_density: int = 300,
                xmp_metadata: str = ""):
    """JPEG bytes of a [height, width, 1 or 3] uint8 image; libjpeg's bytes, TensorFlow's settings."""
    if not 0 <= quality <= 100:
        raise ValueError(f"quality must be in [0,100], got {quality}")
    if image.ndim != 3:
        raise ValueError(f"image must be 3-dimensional{format_dims(image.shape)}")
    if image.size >= 2**31 - 1:
        raise ValueError(f"image too large to encode: {format_dims(image.shape)}")
    channels = image.shape[2]
    if format == "":
        if channels not in (1, 3):
            raise ValueError(f"image must have 1 or 3 channels, got {format_dims(image.shape)}")
    else:
        want = 1 if format == "grayscale" else 3
        if channels != want:
            raise ValueError(f"format {format} expects {want} channels, got {format_dims(image.shape)}")
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"Invalid image provided, size {format_dims(image.shape)}")
    data = jpeg_codec.encode(np.asarray(image, np.uint8), quality=quality, progressive=progressive,
                             optimize_size=optimize_size, chroma_downsampling=chroma_downsampling,
                             density_unit=density_unit, x_density=x_density, y_density=y_density,
                             xmp_metadata=xmp_metadata)
    out = np.empty((), dtype=object)
    out[()] = data
    return (out,)


@kernel("EncodePng", devices=("cpu",))
def encode_png(xp, image, *, compression: int = -1):
    """PNG bytes of a [height, width, 1..4] uint8 or uint16 image, as libpng writes it for TensorFlow."""
    if not -1 <= compression <= 9:
        raise ValueError(f"compression should be in [-1,9], got {compression}")
    if image.ndim != 3:
        raise ValueError(f"image must be 3-dimensional{format_dims(image.shape)}")
    if image.dtype not in (np.uint8, np.uint16):
        raise TypeError(f"EncodePng takes uint8 or uint16 images, got {image.dtype}")
    channels = image.shape[2]
    if not 1 <= channels <= 4:
        raise ValueError(f"image must have 1, 2, 3, or 4 channels, got {channels}")
    out = np.empty((), dtype=object)
    out[()] = b"" if image.size == 0 else png_codec.encode(np.asarray(image), compression=compression)
    return (out,)
