"""JPEG decoding and encoding as TensorFlow's libjpeg-turbo calls do it, through Pillow's libjpeg-turbo.

Decoding drives Pillow's JPEG decoder directly (Image.frombytes with the "jpeg" decoder and explicit
arguments), which exposes two of libjpeg's settings at once: its default (accurate integer IDCT with
fancy upsampling, TensorFlow's dct_method="INTEGER_ACCURATE") and its draft mode (fast integer IDCT with
plain upsampling). TensorFlow's default, dct_method="" (fast IDCT) with fancy upsampling, is rebuilt
exactly from the draft decode: asked for YCbCr, draft mode hands back each chroma sample replicated, so
the chroma planes come back bit for bit and libjpeg's fancy (triangle) upsampling and YCbCr->RGB tables
are applied here in integer arithmetic. The one pairing that stays approximate is the accurate IDCT with
plain upsampling, and only for chroma-subsampled colour images (measured: up to 37 levels at chroma
edges, as plain and fancy upsampling differ); grayscale, 4:4:4 and scaled decodes whose chroma needs no
upsampling are exact either way.

Truncated data follows TensorFlow: the rows decoded before the data ran out are kept and the rest are
black when at least `acceptable_fraction` of the rows were read, else it is an error (always, for a
progressive file). With `try_recover_truncated` an end-of-image marker is appended, as TensorFlow inserts
one, and libjpeg-turbo 3.2 decodes everything past the truncation as mid-gray; the libjpeg-turbo inside
TensorFlow 2.21 instead turns the missing bits into coefficients for a stretch of the image, so there the
pixels past the truncation point differ (the rows before it match). Encoding goes
through Pillow's encoder with TensorFlow's settings and writes TensorFlow's JFIF density: the bytes equal
TensorFlow's.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image, JpegImagePlugin

from kernels.image.limits import check_image_size

__all__ = ["JpegHeader", "JpegError", "read_header", "decode", "encode"]

INVALID = "jpeg::Uncompress failed. Invalid JPEG data or crop window."


class JpegError(ValueError):
    """Data libjpeg refuses; the message is TensorFlow's."""

    def __init__(self, message: str = INVALID):
        super().__init__(message)


@dataclass(frozen=True)
class JpegHeader:
    """What the JPEG's header declares: size, components and their sampling, colour space."""

    width: int
    height: int
    components: int  # 1, 3 or 4
    sampling: tuple[tuple[int, int], ...]  # (h, v) per component
    ycbcr: bool  # three components in YCbCr (libjpeg's guess from JFIF/Adobe markers and component ids)
    adobe: bool  # an Adobe APP14 marker (inverted CMYK)
    progressive: bool


def read_header(data: bytes) -> JpegHeader:
    """The header of `data`; JpegError when Pillow cannot parse one."""
    try:
        im = JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001  (Pillow raises SyntaxError, OSError, ValueError, struct.error...)
        raise JpegError() from e
    sampling = tuple((h, v) for _, h, v, _ in im.layer)
    ids = tuple(cid for cid, _, _, _ in im.layer)
    ycbcr = False
    if len(sampling) == 3:
        if "jfif" in im.info:
            ycbcr = True
        elif "adobe" in im.info:
            ycbcr = im.info.get("adobe_transform", 1) != 0
        else:
            ycbcr = ids != (82, 71, 66)  # 'R', 'G', 'B'
    width, height = im.size
    if width <= 0 or height <= 0 or not sampling:
        raise JpegError()
    return JpegHeader(width, height, len(sampling), sampling, ycbcr, "adobe" in im.info,
                      bool(im.info.get("progressive")))


# --- libjpeg's integer colour conversion and fancy upsampling ------------------------------------------------

def _fix(x: float) -> int:
    return int(x * 65536 + 0.5)


_CENTERED = np.arange(256, dtype=np.int64) - 128
_CR_R = (_fix(1.40200) * _CENTERED + 32768) >> 16
_CB_B = (_fix(1.77200) * _CENTERED + 32768) >> 16
_CR_G = -_fix(0.71414) * _CENTERED
_CB_G = -_fix(0.34414) * _CENTERED + 32768


def _ycc_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """jdcolor.c's ycc_rgb_convert on uint8 planes."""
    y = y.astype(np.int64)
    r = y + _CR_R[cr]
    g = y + ((_CB_G[cb] + _CR_G[cr]) >> 16)
    b = y + _CB_B[cb]
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def _neighbours(plane: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The plane shifted by one along `axis` both ways, edges replicated (libjpeg's edge handling)."""
    n = plane.shape[axis]
    before = np.take(plane, np.maximum(np.arange(n) - 1, 0), axis=axis)
    after = np.take(plane, np.minimum(np.arange(n) + 1, n - 1), axis=axis)
    return before, after


def _interleave(even: np.ndarray, odd: np.ndarray, axis: int) -> np.ndarray:
    out = np.stack([even, odd], axis=axis + 1)
    shape = list(even.shape)
    shape[axis] *= 2
    return out.reshape(shape)


def _fancy_upsample(plane: np.ndarray, fh: int, fv: int) -> np.ndarray:
    """jdsample.c's h2v1/h1v2/h2v2 fancy upsampling of one downsampled component (int arithmetic)."""
    p = plane.astype(np.int64)
    if fv == 2 and fh == 2:
        above, below = _neighbours(p, 0)
        rows = _interleave(3 * p + above, 3 * p + below, 0)  # column sums, x16 scale after the next step
        left, right = _neighbours(rows, 1)
        return _interleave((3 * rows + left + 8) >> 4, (3 * rows + right + 7) >> 4, 1).astype(np.uint8)
    if fh == 2:
        left, right = _neighbours(p, 1)
        return _interleave((3 * p + left + 1) >> 2, (3 * p + right + 2) >> 2, 1).astype(np.uint8)
    above, below = _neighbours(p, 0)
    return _interleave((3 * p + above + 1) >> 2, (3 * p + below + 2) >> 2, 0).astype(np.uint8)


def _chroma_factors(header: JpegHeader, ratio: int) -> list[tuple[int, int]]:
    """Per chroma component, the (horizontal, vertical) factor libjpeg-turbo upsamples it by at this
    ratio, after it has moved what it can of the upsampling into a larger scaled IDCT (jdmaster.c)."""
    min_size = 8 // ratio
    max_h = max(h for h, _ in header.sampling)
    max_v = max(v for _, v in header.sampling)
    factors = []
    for h, v in header.sampling[1:]:
        size = min_size
        while size < 8 and (max_h * min_size) % (h * size * 2) == 0 and (max_v * min_size) % (v * size * 2) == 0:
            size *= 2
        in_h, in_v = h * size // min_size, v * size // min_size
        factors.append((max_h // in_h if in_h and max_h % in_h == 0 else 1,
                        max_v // in_v if in_v and max_v % in_v == 0 else 1))
    return factors


# --- decoding ----------------------------------------------------------------------------------------------

def _decode_rows(data: bytes, mode: str, rawmode: str, size: tuple[int, int], ratio: int, draft: bool,
                 truncated_ok: bool) -> tuple[np.ndarray, int]:
    """Pillow's libjpeg decode of `data` into a `mode` image of `size`: (pixels, rows decoded)."""
    args = (rawmode, "", ratio, int(draft))
    image = Image.new(mode, size, 0)
    try:
        image.frombytes(data, "jpeg", *args)
        return np.asarray(image), size[1]
    except ValueError as e:
        if "not enough image data" not in str(e):
            raise JpegError() from e
        if not truncated_ok:
            raise JpegError() from e
    # Data ran out: count the rows written by decoding again over a different background.
    other = Image.new(mode, size, 255 if mode != "YCbCr" else (255, 0, 0))
    try:
        other.frombytes(data, "jpeg", *args)
    except ValueError:
        pass
    first, second = np.asarray(image), np.asarray(other)
    same = (first == second).reshape(size[1], -1).all(axis=1)
    rows = int(np.argmin(same)) if not same.all() else size[1]
    return first, rows


def decode(data: bytes, *, channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
           try_recover_truncated: bool = False, acceptable_fraction: float = 1.0, dct_method: str = "",
           crop: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """[height, width, channels] uint8 pixels of a JPEG, as tf.io.decode_jpeg gives them. `crop` is
    (y, x, height, width) in the (scaled) output image, as DecodeAndCropJpeg's crop_window."""
    header = read_header(data)
    components = channels or min(header.components, 3)
    out_w, out_h = -(-header.width // ratio), -(-header.height // ratio)
    if out_w * out_h * components >= 1 << 29:  # TensorFlow's own limit ("Image too large")
        check_image_size("JPEG", out_h, out_w, frames=4)
        raise JpegError()
    check_image_size("JPEG", out_h, out_w)
    if crop is not None:
        cy, cx, ch, cw = crop
        if not (cw > 0 and ch > 0 and cx >= 0 and cy >= 0 and cy + ch <= out_h and cx + cw <= out_w):
            raise JpegError()
    fast = dct_method in ("", "INTEGER_FAST")
    cmyk = header.components == 4 and components == 3
    factors = _chroma_factors(header, ratio) if header.components == 3 else []
    upsampled = any(f != (1, 1) for f in factors) and ratio != 8
    emulate = components == 3 and fast and fancy_upscaling and header.ycbcr and upsampled
    # Draft mode is the fast IDCT with plain upsampling; without it, the accurate IDCT with fancy upsampling.
    draft = fast if (not upsampled or components == 1 or emulate) else not fancy_upscaling
    if emulate:
        mode = rawmode = "YCbCr"
    elif components == 1:
        mode = rawmode = "L"
    elif cmyk:
        mode = rawmode = "CMYK"
    else:
        mode, rawmode = "RGB", "RGB"
    if try_recover_truncated:
        data = data + b"\xff\xd9"
    pixels, rows = _decode_rows(data, mode, rawmode, (out_w, out_h), ratio, draft, truncated_ok=True)
    if rows < out_h and emulate:
        # Fancy upsampling needs the next iMCU row's chroma before it emits a row, so it stops earlier
        # than the draft decode: count the rows a fancy decode (same row logic, other IDCT) gets.
        rows = _decode_rows(data, "RGB", "RGB", (out_w, out_h), ratio, False, truncated_ok=True)[1]
    if rows < out_h and (header.progressive or rows / out_h < min(1.0, acceptable_fraction)):
        raise JpegError()
    if emulate:
        align = (8 // ratio) * max(h for h, _ in header.sampling)  # an iMCU's width in output pixels
        pixels = _fancy_rgb(pixels, factors, crop, align)
    elif cmyk:
        pixels = _cmyk_to_rgb(pixels, header.adobe)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if rows < out_h:
        pixels = pixels.copy()
        pixels[rows:] = 0
    if crop is not None:
        cy, cx, ch, cw = crop
        pixels = pixels[cy:cy + ch, cx:cx + cw]
    return np.ascontiguousarray(pixels)


def _fancy_rgb(ycc: np.ndarray, factors: list[tuple[int, int]], crop: tuple[int, int, int, int] | None,
               align: int) -> np.ndarray:
    """RGB from a draft-mode YCbCr decode, with the chroma upsampled as fancy upsampling does. Under a
    crop, libjpeg-turbo (jpeg_crop_scanline) decodes only the columns from the iMCU boundary at or left of
    the crop to its right end, and upsamples them as if their ends were the image's edges."""
    height, width = ycc.shape[:2]
    lo, hi = (0, width) if crop is None else ((crop[1] // align) * align, crop[1] + crop[3])
    planes = [ycc[:, lo:hi, 0]]
    for index, (fh, fv) in enumerate(factors, start=1):
        plane = ycc[::fv, lo:hi:fh, index]
        if (fh, fv) in ((2, 1), (2, 2)) and plane.shape[1] > 2 or (fh, fv) == (1, 2):
            up = _fancy_upsample(plane, fh, fv)
        else:  # libjpeg replicates: other factors, or two columns or fewer
            up = np.repeat(np.repeat(plane, fv, axis=0), fh, axis=1)
        planes.append(up[:height, :hi - lo])
    rgb = _ycc_to_rgb(*planes)
    if crop is None:
        return rgb
    out = np.zeros((height, width, 3), np.uint8)
    out[:, lo:hi] = rgb
    return out


def _cmyk_to_rgb(cmyk: np.ndarray, adobe: bool) -> np.ndarray:
    """TensorFlow's CMYK -> RGB (integer division by 255; Adobe files store CMYK inverted)."""
    c, m, y, k = (cmyk[..., i].astype(np.int32) for i in range(4))
    if adobe:
        rgb = [k * c // 255, k * m // 255, k * y // 255]
    else:
        rgb = [(255 - k) * (255 - c) // 255, (255 - k) * (255 - m) // 255, (255 - k) * (255 - y) // 255]
    return np.stack(rgb, axis=-1).astype(np.uint8)


# --- encoding ----------------------------------------------------------------------------------------------

DENSITY_UNITS = {"in": 1, "cm": 2}


def encode(image: np.ndarray, *, quality: int = 95, progressive: bool = False, optimize_size: bool = False,
           chroma_downsampling: bool = True, density_unit: str = "in", x_density: int = 300,
           y_density: int = 300, xmp_metadata: str = "") -> bytes:
    """JPEG bytes of a [height, width, 1 or 3] uint8 image with TensorFlow's libjpeg settings."""
    gray = image.shape[2] == 1
    pil = Image.fromarray(np.ascontiguousarray(image[:, :, 0] if gray else image), "L" if gray else "RGB")
    options = {"quality": int(quality), "progressive": bool(progressive), "optimize": bool(optimize_size),
               # NOTE: TensorFlow keeps libjpeg's 2x2 luma sampling unless told not to; grayscale is 1x1.
               "subsampling": 2 if chroma_downsampling and not gray else 0}
    if xmp_metadata:
        options["xmp"] = xmp_metadata.encode("utf-8")
    out = io.BytesIO()
    pil.save(out, "JPEG", **options)
    data = bytearray(out.getvalue())
    # Pillow writes JFIF density only in dots per inch; TensorFlow's units and densities go in directly.
    if data[6:11] == b"JFIF\x00":
        data[13] = DENSITY_UNITS[density_unit]
        data[14:16] = int(x_density).to_bytes(2, "big")
        data[16:18] = int(y_density).to_bytes(2, "big")
    return bytes(data)
