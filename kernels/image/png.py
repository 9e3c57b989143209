"""PNG decoding and encoding as TensorFlow's libpng calls do it.

Decoding parses the chunks here (with libpng's CRC rules and limits), lets Pillow's C decoder inflate,
unfilter and de-interlace the image data, and applies libpng's transformations in numpy in libpng's
order: palette and tRNS expansion, alpha stripping, RGB->gray (libpng's truncating fixed-point weights
for 8 bits, rounding ones for 16), gray->RGB, 16->8 bits by keeping the high byte, the alpha filler
TensorFlow asks for ((1 << bit_depth) - 1, so 1 for a 1-bit file), and 8->16 bits as v * 257. Pillow
returns 16-bit colour samples only as 8-bit halves, so those are decoded twice (high bytes, then low).

Encoding is written here: libpng's default row filter choice (per row the filter whose bytes, read as
signed, sum smallest in absolute value; ties to the earlier filter), zlib with libpng's settings
(TensorFlow's level, memLevel 9, the filtered strategy, a window shrunk to the data) and 8192-byte IDAT
chunks, so the bytes equal TensorFlow's where the zlib library is the same.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from kernels.image.limits import check_image_size

__all__ = ["PngError", "PngHeader", "read_header", "decode", "encode", "SIGNATURE"]

SIGNATURE = b"\x89PNG\r\n\x1a\n"
INIT_FAILED = "Invalid PNG. Failed to initialize decoder."
_USER_LIMIT = 1_000_000  # libpng's default user width/height limit
_VALID_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


class PngError(ValueError):
    """Data libpng refuses; the message is TensorFlow's."""


@dataclass
class PngHeader:
    """IHDR and the chunks that shape decoding, up to the image data."""

    width: int
    height: int
    bit_depth: int
    color_type: int
    interlace: int
    palette: np.ndarray | None = None  # [n, 3] uint8
    trns: bytes | None = None
    idat: bytes = b""
    complete: bool = False  # IEND seen with everything before it valid
    text: list[tuple[str, str]] = field(default_factory=list)


def _chunks(data: bytes):
    pos = 8
    while True:
        if pos + 8 > len(data):
            yield None, b"", False  # ran out
            return
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if length > 0x7FFFFFFF or len(body) < length or len(crc) < 4:
            yield None, b"", False
            return
        ok = zlib.crc32(kind + body) == struct.unpack(">I", crc)[0]
        yield kind, body, ok
        pos += 12 + length


def read_header(data: bytes) -> PngHeader:
    """Parse the chunks of `data`. PngError(INIT_FAILED) for what libpng's png_read_info refuses; an error
    in the image data or after it leaves `complete` False (TensorFlow fails later, naming the size)."""
    if not data.startswith(SIGNATURE):
        raise PngError(INIT_FAILED)
    header = None
    seen_idat = False
    idat = []
    for kind, body, crc_ok in _chunks(data):
        if kind is None:
            if not seen_idat:
                raise PngError(INIT_FAILED)
            break
        critical = not (kind[0] & 0x20)
        if not crc_ok:
            if critical:
                if not seen_idat:
                    raise PngError(INIT_FAILED)
                break
            continue  # libpng drops an ancillary chunk with a bad CRC, with a warning
        if header is None:
            if kind != b"IHDR" or len(body) != 13:
                raise PngError(INIT_FAILED)
            width, height, depth, color, comp, filt, interlace = struct.unpack(">IIBBBBB", body)
            if (not 0 < width <= _USER_LIMIT or not 0 < height <= _USER_LIMIT or color not in _VALID_DEPTHS
                    or depth not in _VALID_DEPTHS[color] or comp != 0 or filt != 0 or interlace > 1):
                raise PngError(INIT_FAILED)
            header = PngHeader(width, height, depth, color, interlace)
            continue
        if kind == b"IDAT":
            if header.color_type == 3 and header.palette is None:
                raise PngError(INIT_FAILED)
            seen_idat = True
            idat.append(body)
        elif kind == b"IEND":
            header.complete = seen_idat
            break
        elif not seen_idat and kind == b"PLTE":
            if len(body) % 3 or not body or len(body) > 768:
                if header.color_type == 3:
                    raise PngError(INIT_FAILED)
                continue
            header.palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif not seen_idat and kind == b"tRNS":
            header.trns = body
        elif critical and kind not in (b"PLTE",):
            if not seen_idat:
                raise PngError(INIT_FAILED)
            break
    if header is None or not seen_idat:
        raise PngError(INIT_FAILED)
    header.idat = b"".join(idat)
    return header


# (color_type, bit_depth) -> passes of (Pillow mode, rawmode) whose output bytes are the samples
_PILLOW_MODES = {
    (0, 1): [("1", "1")], (0, 2): [("L", "L;2")], (0, 4): [("L", "L;4")], (0, 8): [("L", "L")],
    (0, 16): [("I;16", "I;16B")], (2, 8): [("RGB", "RGB")], (2, 16): [("RGB", "RGB;16B"), ("RGB", "RGB;16L")],
    (3, 1): [("P", "P;1")], (3, 2): [("P", "P;2")], (3, 4): [("P", "P;4")], (3, 8): [("P", "P")],
    (4, 8): [("LA", "LA")], (4, 16): [("RGBA", "RGBA")], (6, 8): [("RGBA", "RGBA")],
    (6, 16): [("RGBA", "RGBA;16B"), ("RGBA", "RGBA;16L")],
}


def _samples(header: PngHeader, size: int) -> np.ndarray:
    """[h, w, channels] samples (uint16 for 16-bit files; palette indices for palette files)."""
    passes = []
    for mode, rawmode in _PILLOW_MODES[(header.color_type, header.bit_depth)]:
        image = Image.new(mode, (header.width, header.height))
        try:
            image.frombytes(header.idat, "zip", rawmode, header.interlace)
        except ValueError as e:
            raise PngError(f"Invalid PNG data, size {size}") from e
        passes.append(np.asarray(image))
    out = passes[0]
    if header.bit_depth == 16 and header.color_type == 4:  # RGBA bytes [Ghi, Glo, Ahi, Alo]
        b = out.astype(np.uint16)
        out = np.stack([b[..., 0] << 8 | b[..., 1], b[..., 2] << 8 | b[..., 3]], axis=-1)
    elif len(passes) == 2:
        out = passes[0].astype(np.uint16) << 8 | passes[1].astype(np.uint16)
    if out.dtype == bool:
        out = out.astype(np.uint8) * 255
    if out.ndim == 2:
        out = out[:, :, None]
    return out


def _expand_trns_key(header: PngHeader, samples: np.ndarray) -> np.ndarray:
    """The alpha channel libpng's tRNS_to_alpha gives a gray or RGB image: 0 where the key matches."""
    full = 0xFFFF if header.bit_depth == 16 else 0xFF
    if header.color_type == 0:
        if len(header.trns) < 2:
            return np.full(samples.shape[:2] + (1,), full, samples.dtype)
        key = struct.unpack(">H", header.trns[:2])[0]
        if header.bit_depth < 8:
            key = (key & ((1 << header.bit_depth) - 1)) * (255 // ((1 << header.bit_depth) - 1))
        elif header.bit_depth == 8:
            key &= 0xFF
        hit = samples[..., 0] == key
    else:
        if len(header.trns) < 6:
            return np.full(samples.shape[:2] + (1,), full, samples.dtype)
        key = np.array(struct.unpack(">HHH", header.trns[:6]))
        if header.bit_depth == 8:
            key &= 0xFF
        hit = (samples == key).all(axis=-1)
    return np.where(hit, 0, full).astype(samples.dtype)[..., None]


def _rgb_to_gray(rgb: np.ndarray, sixteen: bool) -> np.ndarray:
    """libpng's png_do_rgb_to_gray with TensorFlow's (0.299, 0.587): weights 9797/19234/3737 of 32768."""
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    mixed = 9797 * r + 19234 * g + 3737 * b
    gray = (mixed + 16384) >> 15 if sixteen else mixed >> 15
    same = (r == g) & (r == b)
    return np.where(same, r, gray).astype(rgb.dtype)[..., None]


def decode(data: bytes, *, channels: int = 0, sixteen_bits: bool = False) -> np.ndarray:
    """[height, width, channels] uint8 (or uint16 with `sixteen_bits`) pixels of a PNG, as TensorFlow's
    png::CommonInitDecode / CommonFinishDecode give them."""
    header = read_header(data)
    width, height = header.width, header.height
    if width >= 1 << 27 or height >= 1 << 27 or width * height >= 1 << 29:
        raise PngError(f"PNG size too large for int: {width} by {height}")
    check_image_size("PNG", height, width)
    if not header.complete:
        raise PngError(f"Invalid PNG data, size {len(data)}")
    palette_type = header.color_type == 3
    if channels == 0:
        channels = (4 if header.trns else 3) if palette_type else _CHANNELS[header.color_type]
    want_alpha = channels % 2 == 0
    want_gray = channels < 3
    samples = _samples(header, len(data))
    depth = 16 if header.bit_depth == 16 else 8
    # 1. expansion: palette to RGB(A), tRNS to alpha
    if palette_type:
        palette = np.zeros((256, 3), np.uint8)
        palette[:len(header.palette)] = header.palette
        idx = samples[..., 0]
        pixels = palette[idx]
        if header.trns:
            alpha = np.full(256, 255, np.uint8)
            alpha[:min(len(header.trns), 256)] = np.frombuffer(header.trns[:256], np.uint8)
            pixels = np.concatenate([pixels, alpha[idx][..., None]], axis=-1)
    elif header.trns is not None and want_alpha and header.color_type in (0, 2):
        pixels = np.concatenate([samples, _expand_trns_key(header, samples)], axis=-1)
    else:
        pixels = samples
    has_alpha = pixels.shape[-1] in (2, 4)
    # 2. strip alpha, 3. rgb -> gray, 4. gray -> rgb
    if has_alpha and not want_alpha:
        pixels, has_alpha = pixels[..., :-1], False
    color = pixels.shape[-1] >= 3
    if want_gray and color:
        gray = _rgb_to_gray(pixels[..., :3], depth == 16)
        pixels = np.concatenate([gray, pixels[..., 3:]], axis=-1)
    elif not want_gray and not color:
        pixels = np.concatenate([pixels[..., :1]] * 3 + [pixels[..., 1:]], axis=-1)
    # 5. 16 -> 8 bits: the high byte
    if depth == 16 and not sixteen_bits:
        pixels, depth = (pixels >> 8).astype(np.uint8), 8
    # 6. the alpha filler TensorFlow asks for: (1 << bit_depth) - 1, in the row's sample size
    if want_alpha and not has_alpha:
        filler = ((1 << header.bit_depth) - 1) & (0xFFFF if depth == 16 else 0xFF)
        pixels = np.concatenate([pixels, np.full(pixels.shape[:2] + (1,), filler, pixels.dtype)], axis=-1)
    # 7. 8 -> 16 bits
    if sixteen_bits and depth == 8:
        pixels = pixels.astype(np.uint16) * 257
    return np.ascontiguousarray(pixels.astype(np.uint16 if sixteen_bits else np.uint8, copy=False))


# --- encoding ----------------------------------------------------------------------------------------------

def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _signed_sum(rows: np.ndarray) -> np.ndarray:
    """Per row, sum of bytes read as signed magnitudes (v < 128 ? v : 256 - v), libpng's filter cost."""
    v = rows.astype(np.int64)
    return np.where(v < 128, v, 256 - v).sum(axis=1)


def _filtered_rows(raw: np.ndarray, bpp: int, filters: tuple[int, ...]) -> np.ndarray:
    """[h, 1 + row_bytes] rows, each prefixed with the filter libpng's heuristic picks for it."""
    h, n = raw.shape
    x = raw.astype(np.int16)
    prior = np.vstack([np.zeros((1, n), np.int16), x[:-1]])
    left = np.hstack([np.zeros((h, bpp), np.int16), x[:, :-bpp]]) if n > bpp else np.zeros_like(x)
    upper_left = np.hstack([np.zeros((h, bpp), np.int16), prior[:, :-bpp]]) if n > bpp else np.zeros_like(x)
    p = left + prior - upper_left
    pa, pb, pc = np.abs(p - left), np.abs(p - prior), np.abs(p - upper_left)
    paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prior, upper_left))
    candidates = {0: x, 1: x - left, 2: x - prior, 3: x - (left + prior) // 2, 4: x - paeth}
    options = [(f, (candidates[f] & 0xFF).astype(np.uint8)) for f in filters]
    if len(options) == 1:
        choice = np.zeros(h, np.int64)
    else:
        costs = np.stack([_signed_sum(rows) for _, rows in options])
        choice = np.argmin(costs, axis=0)  # first minimum: ties to the earlier filter
    stacked = np.stack([rows for _, rows in options])
    chosen = stacked[choice, np.arange(h)]
    kinds = np.array([f for f, _ in options], np.uint8)[choice]
    return np.hstack([kinds[:, None], chosen])


def _optimize_cmf(stream: bytes, data_size: int) -> bytes:
    """libpng's optimize_cmf: shrink the window the zlib header declares to the smallest that holds the
    data (zlib itself needs 262 bytes more, so its header can claim a window twice too large)."""
    cmf = stream[0]
    if data_size > 16384 or (cmf & 0x0F) != 8 or (cmf & 0xF0) > 0x70:
        return stream
    cinfo = cmf >> 4
    half = 1 << (cinfo + 7)
    if data_size > half:
        return stream
    while True:
        half >>= 1
        cinfo -= 1
        if not (cinfo > 0 and data_size <= half):
            break
    cmf = (cmf & 0x0F) | (cinfo << 4)
    flg = stream[1] & 0xE0
    flg += 0x1F - ((cmf << 8) + flg) % 0x1F
    return bytes([cmf, flg]) + stream[2:]


def encode(image: np.ndarray, *, compression: int = -1) -> bytes:
    """PNG bytes of a [height, width, 1..4] uint8 or uint16 image, written as TensorFlow's libpng does."""
    height, width, channels = image.shape
    depth = 16 if image.dtype == np.uint16 else 8
    color_type = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    raw = image.astype(">u2" if depth == 16 else np.uint8).reshape(height, -1).view(np.uint8)
    bpp = channels * depth // 8
    filters = [0, 1, 2, 3, 4]
    if height == 1:
        filters = [f for f in filters if f not in (2, 3, 4)]
    if width == 1:
        filters = [f for f in filters if f not in (1, 3, 4)]
    rows = _filtered_rows(raw, bpp, tuple(filters))
    data_size = rows.size
    window_bits = 15
    if data_size <= 16384:
        half = 1 << (window_bits - 1)
        while data_size + 262 <= half:
            half >>= 1
            window_bits -= 1
    strategy = zlib.Z_FILTERED if filters != [0] else zlib.Z_DEFAULT_STRATEGY
    compressor = zlib.compressobj(compression, zlib.DEFLATED, window_bits, 9, strategy)
    stream = _optimize_cmf(compressor.compress(rows.tobytes()) + compressor.flush(), data_size)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    idats = b"".join(_chunk(b"IDAT", stream[i:i + 8192]) for i in range(0, len(stream), 8192))
    return SIGNATURE + _chunk(b"IHDR", ihdr) + idats + _chunk(b"IEND", b"")
