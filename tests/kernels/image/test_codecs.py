"""Image codec kernels: round trips, TensorFlow's errors for wrong or hostile input, and decompression bombs
refused before anything is allocated. tests/fixtures/ops/images/ holds TensorFlow's outputs for real files."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from kernels.image import png as png_codec
from kernels.image.limits import MAX_IMAGE_PIXELS, ImageTooLargeError


def s(data: bytes) -> np.ndarray:
    out = np.empty((), dtype=object)
    out[()] = data
    return out


def picture(h=21, w=30, c=3, seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    planes = [128 + 90 * np.sin(x / 4.0 + k) * np.cos(y / 5.0) for k in range(c)]
    return np.clip(np.stack(planes, -1) + rng.normal(0, 5, (h, w, c)), 0, 255).astype(np.uint8)


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def run(run_kernel, op, *inputs, **attrs):
    return run_kernel(op, *inputs, **attrs)[0]


def test_png_round_trip_is_lossless_for_every_channel_count_and_depth(run_kernel):
    for c in (1, 2, 3, 4):
        for dtype in (np.uint8, np.uint16):
            image = picture(c=c).astype(dtype) * (257 if dtype == np.uint16 else 1)
            encoded = run(run_kernel, "EncodePng", image, compression=9)
            decoded = run(run_kernel, "DecodePng", encoded, dtype=np.dtype(dtype))
            np.testing.assert_array_equal(decoded, image)


def test_jpeg_round_trip_is_close_and_keeps_shape(run_kernel):
    image = picture()
    encoded = run(run_kernel, "EncodeJpeg", image, quality=95)
    assert encoded.item().startswith(b"\xff\xd8\xff")
    decoded = run(run_kernel, "DecodeJpeg", encoded)
    assert decoded.shape == image.shape and decoded.dtype == np.uint8
    assert np.abs(decoded.astype(int) - image).mean() < 8
    np.testing.assert_array_equal(run(run_kernel, "ExtractJpegShape", encoded), [21, 30, 3])


def test_decode_image_converts_dtypes_as_tensorflow(run_kernel):
    encoded = run(run_kernel, "EncodePng", picture())
    as_u8 = run(run_kernel, "DecodeImage", encoded)
    as_f = run(run_kernel, "DecodeImage", encoded, dtype=np.dtype(np.float32))
    np.testing.assert_array_equal(as_f, as_u8.astype(np.uint16) * 257 * np.float32(1 / 65535))
    jpeg = run(run_kernel, "EncodeJpeg", picture())
    jpeg_u8 = run(run_kernel, "DecodeImage", jpeg)
    np.testing.assert_array_equal(run(run_kernel, "DecodeImage", jpeg, dtype=np.dtype(np.uint16)),
                                  jpeg_u8.astype(np.uint16) * 256)


@pytest.mark.parametrize("op, data, attrs, message", [
    ("DecodePng", b"not an image", {}, "Unknown image file format"),
    ("DecodeJpeg", b"", {}, "Input is empty."),
    ("DecodeJpeg", b"\xff\xd8\xff\xe0garbage", {}, "Invalid JPEG data or crop window"),
    ("DecodePng", png_codec.SIGNATURE + b"\x00\x00", {}, "Invalid PNG. Failed to initialize decoder."),
    ("DecodeGif", b"GIF89a\x05\x00", {}, "failed to open gif file"),
    ("DecodeBmp", b"BM" + b"\x00" * 10, {}, "Incomplete bmp content"),
    ("DecodeJpeg", None, {"channels": 4}, "JPEG does not support 4 channels"),
    ("DecodeBmp", None, {}, "Trying to decode JPEG format using DecodeBmp op"),
    ("DecodeJpeg", None, {"ratio": 3}, "ratio must be 1, 2, 4, or 8, got 3"),
    ("DecodeJpeg", None, {"dct_method": "FLOAT"}, "dct_method must be one of"),
])
def test_bad_input_is_tensorflows_error(run_kernel, op, data, attrs, message):
    data = run(run_kernel, "EncodeJpeg", picture()).item() if data is None else data
    with pytest.raises(ValueError, match=message):
        run(run_kernel, op, s(data), **attrs)


def test_truncated_jpeg_is_an_error_unless_a_fraction_is_acceptable(run_kernel):
    data = run(run_kernel, "EncodeJpeg", picture(64, 48)).item()
    cut = data[: len(data) // 2]
    with pytest.raises(ValueError, match="Invalid JPEG data"):
        run(run_kernel, "DecodeJpeg", s(cut))
    partial = run(run_kernel, "DecodeJpeg", s(cut), acceptable_fraction=0.01)
    assert partial.shape == (64, 48, 3) and not partial[-1].any()
    recovered = run(run_kernel, "DecodeJpeg", s(cut), try_recover_truncated=True)
    assert recovered.shape == (64, 48, 3)


def test_truncated_and_corrupt_png_are_errors(run_kernel):
    data = run(run_kernel, "EncodePng", picture()).item()
    with pytest.raises(ValueError, match="Invalid PNG"):
        run(run_kernel, "DecodePng", s(data[:-30]))
    corrupt = bytearray(data)
    corrupt[40] ^= 0xFF  # inside IDAT: its CRC no longer matches
    with pytest.raises(ValueError, match="Invalid PNG"):
        run(run_kernel, "DecodePng", s(bytes(corrupt)))


def test_decompression_bombs_are_refused_before_decoding(run_kernel):
    # A PNG declaring 60000 x 60000 pixels with almost no data: TensorFlow's own limit names the size.
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    bomb = png_codec.SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b"")
    with pytest.raises(ValueError, match="PNG size too large for int: 60000 by 60000"):
        run(run_kernel, "DecodePng", s(bomb))
    # 20000 x 20000 passes TensorFlow's checks but not ours (4e8 > 2**28 pixels).
    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0)
    bomb = png_codec.SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b"")
    with pytest.raises(ImageTooLargeError, match=f"20000x20000 pixels .* limit of {MAX_IMAGE_PIXELS}"):
        run(run_kernel, "DecodePng", s(bomb))
    # A JPEG header declaring 65000 x 65000.
    jpeg = bytearray(run(run_kernel, "EncodeJpeg", picture()).item())
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5:sof + 9] = struct.pack(">HH", 65000, 65000)
    with pytest.raises(ValueError, match="65000x65000 pixels"):
        run(run_kernel, "DecodeJpeg", s(bytes(jpeg)))
    # A GIF of 300 frames of 1000 x 1000.
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1000, 1000, 0) + b"\x08\x01\x00\x00"
    gif = b"GIF89a" + struct.pack("<HHBBB", 1000, 1000, 0x80, 0, 0) + b"\0" * 6 + frame * 300 + b"\x3b"
    with pytest.raises(ImageTooLargeError, match="300 frames of 1000x1000"):
        run(run_kernel, "DecodeGif", s(gif))


def test_animated_gif_needs_decode_gif_or_decode_image(run_kernel):
    lzw = b"\x08\x03\x00\x02\x06\x00"  # two 9-bit codes: clear, end (an all-black frame is not needed)
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    gif = b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x10\x20\x30\x40\x50\x60" + frame * 2 + b"\x3b"
    del lzw
    frames = run(run_kernel, "DecodeGif", s(gif))
    assert frames.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(frames[0, 0, 0], [0x10, 0x20, 0x30])
    assert run(run_kernel, "DecodeImage", s(gif), expand_animations=False).shape == (1, 1, 3)
    with pytest.raises(ValueError, match="Got 2 frames, but animated gifs can only be decoded by"):
        run(run_kernel, "DecodePng", s(gif))
