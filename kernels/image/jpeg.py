"""JPEG decoding and encoding as TensorFlow's libjpeg-turbo calls do it, through Pillow's libjpeg-turbo.

Decoding drives Pillow's JPEG decoder directly (its "jpeg" decoder with explicit arguments, writing into a
numpy buffer that Pillow maps as the image's memory, as Image.frombuffer does), which exposes two of
libjpeg's settings at once: its default (accurate integer IDCT with fancy upsampling, TensorFlow's
dct_method="INTEGER_ACCURATE") and its draft mode (fast integer IDCT with plain upsampling). TensorFlow's
default, dct_method="" (fast IDCT) with fancy upsampling, is rebuilt exactly from the draft decode: asked
for YCbCr, draft mode hands back each chroma sample replicated, so the chroma planes come back bit for bit
and libjpeg's fancy (triangle) upsampling and YCbCr->RGB tables are applied here in integer arithmetic (on
the CPU as kernels.image.jpeg_upsample's compiled loop, whose twin this module holds). A plain header is
read by a marker scan of its own, equal to Pillow's parser, which reads the others. The one pairing that
stays approximate is the accurate IDCT with plain upsampling, and only for chroma-subsampled colour images
(measured: up to 37 levels at chroma edges, as plain and fancy upsampling differ); grayscale, 4:4:4 and
scaled decodes whose chroma needs no upsampling are exact either way.

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

from kernels.image import jpeg_upsample
from kernels.image.limits import check_image_size
from kernels.jit import use_compiled

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
    """The header of `data`; JpegError when Pillow cannot parse one. A plain header (the markers of
    nearly every file) is read by `_scan_header`; anything else by Pillow's parser."""
    header = _scan_header(data)
    if header is not None:
        return header
    try:
        im = JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001  (Pillow raises SyntaxError, OSError, ValueError, struct.error...)
        raise JpegError() from e
    return _header(im.size, im.layer, im.info)


def _header(size: tuple[int, int], layers: list[tuple[int, int, int, int]], info: dict) -> JpegHeader:
    """The JpegHeader of a parse: Pillow's size, layer tuples (id, h, v, table) and info keys."""
    sampling = tuple((h, v) for _, h, v, _ in layers)
    ids = tuple(cid for cid, _, _, _ in layers)
    ycbcr = False
    if len(sampling) == 3:
        if "jfif" in info:
            ycbcr = True
        elif "adobe" in info:
            ycbcr = info.get("adobe_transform", 1) != 0
        else:
            ycbcr = ids != (82, 71, 66)  # 'R', 'G', 'B'
    width, height = size
    if width <= 0 or height <= 0 or not sampling:
        raise JpegError()
    return JpegHeader(width, height, len(sampling), sampling, ycbcr, "adobe" in info, bool(info.get("progressive")))


_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_SKIPPED = frozenset({0xC4, 0xCC, 0xDC, 0xDD, 0xDF, 0xFE, *range(0xE2, 0xEE), 0xEF})  # DHT, DAC, DNL, DRI...


def _scan_header(data: bytes) -> JpegHeader | None:
    """The header Pillow's parser reads (JpegImagePlugin's _open and marker handlers), for files made of
    length-prefixed segments up to the start of scan with one frame header; None for anything else (fill
    bytes, stand-alone markers, short or cut segments, Exif without JFIF density, Photoshop blocks, short
    ICC chunks: where Pillow's handlers could raise), which Pillow's parser then reads."""
    if not data.startswith(b"\xff\xd8\xff"):
        return None
    pos, end = 2, len(data)
    frame = None
    info: dict = {}
    dpi = exif = False
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        length = (data[pos + 2] << 8) | data[pos + 3]
        body, pos = pos + 4, pos + 2 + length
        if length < 2 or pos > end:
            return None
        segment = data[body:pos]
        if marker == 0xDA:  # start of scan: the header is complete
            if frame is None or (exif and not dpi):
                return None
            return _header(*frame, info)
        if marker in _SOF:
            if frame is not None or len(segment) < 6 or segment[0] != 8 or segment[5] not in (1, 3, 4) or (
                    len(segment) - 6) % 3:
                return None
            layers = [(segment[i], segment[i + 1] // 16, segment[i + 1] & 15, segment[i + 2])
                      for i in range(6, len(segment), 3)]
            frame = (((segment[3] << 8) | segment[4], (segment[1] << 8) | segment[2]), layers)
            if marker in _PROGRESSIVE:
                info["progressive"] = 1
        elif marker == 0xDB:  # DQT: Pillow checks that each table is whole
            while segment:
                table_length = 65 if segment[0] < 16 else 129
                if len(segment) < table_length:
                    return None
                segment = segment[table_length:]
        elif marker == 0xE0:
            if segment.startswith(b"JFIF"):
                if len(segment) < 7:
                    return None
                info["jfif"] = True
                dpi = dpi or (len(segment) >= 12 and segment[7] in (1, 2))
        elif marker == 0xE1:
            exif = exif or segment.startswith(b"Exif\0\0")
        elif marker == 0xE2:
            if segment.startswith(b"ICC_PROFILE\0") and len(segment) < 14:
                return None
        elif marker == 0xED:
            if segment.startswith(b"Photoshop 3.0\x00"):
                return None
        elif marker == 0xEE:
            if segment.startswith(b"Adobe"):
                if len(segment) < 7:
                    return None
                info["adobe"] = True
                if len(segment) > 11:
                    info["adobe_transform"] = segment[11]
        elif marker not in _SKIPPED:
            return None
    return None


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

# The channels of each mode's pixels (Pillow keeps every mode but L in 4 bytes a pixel, the last unused).
_CHANNELS = {"L": 1, "RGB": 3, "YCbCr": 3, "CMYK": 4}


def _decode_into(data: bytes, mode: str, rawmode: str, size: tuple[int, int], ratio: int, draft: bool,
                 background: int | tuple[int, ...] | None) -> tuple[np.ndarray, tuple[int, int]]:
    """Pillow's libjpeg decoder run straight into a numpy buffer (mapped as the image's memory: no copy
    after decoding), over `background` (None: left uninitialised). Returns the pixels [h, w, channels]
    (2-D for L) and the decoder's status (bytes consumed or -1, error code), as Image.frombytes reads it."""
    width, height = size
    buffer = np.empty((height, width) if mode == "L" else (height, width, 4), np.uint8)
    pixels = buffer if mode == "L" else buffer[:, :, :_CHANNELS[mode]]
    if background is not None:
        pixels[...] = background
    image = Image.core.map_buffer(buffer, size, "raw", 0, (mode, 0, 1))
    decoder = Image.core.jpeg_decoder(mode, rawmode, "", ratio, int(draft))
    decoder.setimage(image, (0, 0, width, height))
    return pixels, decoder.decode(data)


def _decode_rows(data: bytes, mode: str, rawmode: str, size: tuple[int, int], ratio: int,
                 draft: bool) -> tuple[np.ndarray, int]:
    """Pillow's libjpeg decode of `data` into a `mode` image of `size`: (pixels, rows decoded)."""
    pixels, (consumed, error) = _decode_into(data, mode, rawmode, size, ratio, draft, None)
    if consumed < 0:
        if error != 0:  # Image.frombytes' "cannot decode image data"
            raise JpegError()
        return pixels, size[1]
    # Data ran out: count the rows written by decoding again over two backgrounds.
    first, _ = _decode_into(data, mode, rawmode, size, ratio, draft, 0)
    second, _ = _decode_into(data, mode, rawmode, size, ratio, draft, 255 if mode != "YCbCr" else (255, 0, 0))
    same = (first == second).reshape(size[1], -1).all(axis=1)
    rows = int(np.argmin(same)) if not same.all() else size[1]
    return first, rows


def decode(data: bytes, *, channels: int = 0, ratio: int = 1, fancy_upscaling: bool = True,
           try_recover_truncated: bool = False, acceptable_fraction: float = 1.0, dct_method: str = "",
           crop: tuple[int, int, int, int] | None = None, header: JpegHeader | None = None,
           compiled: bool = False) -> np.ndarray:
    """[height, width, channels] uint8 pixels of a JPEG, as tf.io.decode_jpeg gives them. `crop` is
    (y, x, height, width) in the (scaled) output image, as DecodeAndCropJpeg's crop_window. `header` is
    read_header(data) where the caller has it; `compiled`, whether compiled loops may run (kernels.jit)."""
    header = header or read_header(data)
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
    pixels, rows = _decode_rows(data, mode, rawmode, (out_w, out_h), ratio, draft)
    if rows < out_h and emulate:
        # Fancy upsampling needs the next iMCU row's chroma before it emits a row, so it stops earlier
        # than the draft decode: count the rows a fancy decode (same row logic, other IDCT) gets.
        rows = _decode_rows(data, "RGB", "RGB", (out_w, out_h), ratio, False)[1]
    if rows < out_h and (header.progressive or rows / out_h < min(1.0, acceptable_fraction)):
        raise JpegError()
    if emulate:
        align = (8 // ratio) * max(h for h, _ in header.sampling)  # an iMCU's width in output pixels
        pixels = _fancy_rgb(pixels, factors, crop, align, use_compiled(np, compiled))
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


def _fancy(fh: int, fv: int, columns: int) -> bool:
    """Whether libjpeg upsamples chroma by (fh, fv) fancily over `columns` samples a row (else it replicates)."""
    return (fh, fv) in ((2, 1), (2, 2)) and columns > 2 or (fh, fv) == (1, 2)


def _fancy_rgb(ycc: np.ndarray, factors: list[tuple[int, int]], crop: tuple[int, int, int, int] | None,
               align: int, compiled: bool = False) -> np.ndarray:
    """RGB from a draft-mode YCbCr decode, with the chroma upsampled as fancy upsampling does. Under a
    crop, libjpeg-turbo (jpeg_crop_scanline) decodes only the columns from the iMCU boundary at or left of
    the crop to its right end, and upsamples them as if their ends were the image's edges. With `compiled`,
    the common factors run as kernels.image.jpeg_upsample's loop (this is its twin)."""
    height, width = ycc.shape[:2]
    lo, hi = (0, width) if crop is None else ((crop[1] // align) * align, crop[1] + crop[3])
    fh, fv = factors[0]
    if (compiled and factors[1] == factors[0] and factors[0] in jpeg_upsample.FANCY_FACTORS
            and _fancy(fh, fv, -(-(hi - lo) // fh))):
        rgb = np.empty((height, hi - lo, 3), np.uint8)
        jpeg_upsample.fancy_ycc_to_rgb(ycc, lo, fh, fv, rgb)
    else:
        planes = [ycc[:, lo:hi, 0]]
        for index, (fh, fv) in enumerate(factors, start=1):
            plane = ycc[::fv, lo:hi:fh, index]
            if _fancy(fh, fv, plane.shape[1]):
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
