"""ScaleAndTranslate: resampling of NHWC batches with a separable filter kernel, the op `tf.image.resize`
(v2) lowers to for lanczos3/lanczos5/gaussian/mitchellcubic, and for bilinear/bicubic with antialias.

Each output pixel centre x + 0.5 maps back to the input at (x + 0.5) / scale - translate / scale; the
filter (widened by 1/scale when antialiasing a downscale) weighs the input pixels whose centres lie
within its radius, weights outside the image are dropped and the rest renormalised, and samples that map
outside the image are 0. Rows are filtered first into a float32 [batch, out_height, in_width, channels]
buffer, then columns, each a float32 sum started at 0 in TensorFlow's order; the weights are computed in
float32 as TensorFlow's `sampling_kernels.h` does, the Lanczos sines with the C library's sinf.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kernels.limits import check_elements
from kernels.registry import kernel

__all__ = ["scale_and_translate", "SAMPLING_KERNELS"]

_F = np.float32
_PI = _F(3.14159265359)


@functools.cache
def _libm_sinf() -> Callable[[float], float]:
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.sinf.restype, libm.sinf.argtypes = ctypes.c_float, [ctypes.c_float]
    return libm.sinf


def _sinf(x: np.ndarray) -> np.ndarray:
    """The C library's sinf, which TensorFlow's Lanczos kernel calls: glibc's is not correctly rounded
    (about 1% of float arguments differ from sin in double rounded to float, and numpy's float32 sin
    differs again), so only the same function gives the same weights. One call per weight, and the
    weights of a given size and scale are computed once (see `_spans`)."""
    sinf = _libm_sinf()
    flat = np.asarray(x, _F).ravel()
    return np.array([sinf(float(v)) for v in flat], _F).reshape(np.shape(x))


def _lanczos(radius: float) -> Callable[[np.ndarray], np.ndarray]:
    r = _F(radius)

    def weigh(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        with np.errstate(divide="ignore", invalid="ignore"):
            num = r * _sinf(_PI * x)
            num = num * _sinf(_PI * x / r)
            value = num / (_PI * _PI * x * x)
        # NOTE: TensorFlow compares with the double 1e-3.
        return np.where(x > r, _F(0), np.where(x.astype(np.float64) <= 1e-3, _F(1), value)).astype(_F)

    return weigh


def _gaussian(x: np.ndarray) -> np.ndarray:
    radius, sigma = _F(1.5), _F(1.5) / _F(3.0)
    x = np.abs(x)
    # NOTE: TensorFlow divides by 2.0 * sigma * sigma in double and takes a double exp.
    value = np.exp((-x * x).astype(np.float64) / (2.0 * float(sigma) * float(sigma))).astype(_F)
    return np.where(x >= radius, _F(0), value)


def _box(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < _F(0.5), _F(1), np.where(x == _F(0.5), _F(0.5), _F(0))).astype(_F)


def _triangle(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < _F(1), _F(1) - x, _F(0)).astype(_F)


def _keys_cubic(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    far = ((_F(-0.5) * x + _F(2.5)) * x - _F(4.0)) * x + _F(2.0)
    near = ((_F(1.5) * x - _F(2.5)) * x) * x + _F(1.0)
    return np.where(x >= _F(2), _F(0), np.where(x >= _F(1), far, near)).astype(_F)


def _mitchell_cubic(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    far = (((_F(-7.0) / _F(18.0)) * x + _F(2.0)) * x - _F(10.0) / _F(3.0)) * x + _F(16.0) / _F(9.0)
    near = (((_F(7.0) / _F(6.0)) * x - _F(2.0)) * x) * x + _F(8.0) / _F(9.0)
    return np.where(x >= _F(2), _F(0), np.where(x >= _F(1), far, near)).astype(_F)


# kernel_type -> (radius, weight function of a float32 distance)
SAMPLING_KERNELS: dict[str, tuple[float, Callable[[np.ndarray], np.ndarray]]] = {
    "lanczos1": (1.0, _lanczos(1.0)),
    "lanczos3": (3.0, _lanczos(3.0)),
    "lanczos5": (5.0, _lanczos(5.0)),
    "gaussian": (1.5, _gaussian),
    "box": (1.0, _box),
    "triangle": (1.0, _triangle),
    "keyscubic": (2.0, _keys_cubic),
    "mitchellcubic": (2.0, _mitchell_cubic),
}


@functools.lru_cache(maxsize=256)
def _spans(kernel_type: str, out_size: int, in_size: int, scale: float, translate: float, antialias: bool):
    """(starts [out], weights [out, span_size], taken [out, span_size]): the input rows or columns each
    output one sums, their float32 weights, and which of the span's slots TensorFlow reads at all."""
    radius, weigh = SAMPLING_KERNELS[kernel_type]
    radius = _F(radius)
    inv_scale = _F(1.0 / float(_F(scale)))
    inv_translate = -inv_scale * _F(translate)
    kernel_scale = max(inv_scale, _F(1)) if antialias else _F(1)
    span_size = min(2 * math.ceil(float(radius * kernel_scale)) + 1, in_size)
    one_over_kernel_scale = _F(1) / kernel_scale

    sample = (np.arange(out_size, dtype=_F) + _F(0.5)) * inv_scale + inv_translate
    inside = ~((sample < 0) | (sample > _F(in_size)))
    reach = radius * kernel_scale
    start = np.clip(np.ceil(sample - reach - _F(0.5)), 0, in_size - 1).astype(np.int64)
    end = np.clip(np.floor(sample + reach - _F(0.5)), 0, in_size - 1).astype(np.int64) + 1
    j = np.arange(span_size)
    source = start[:, None] + j
    in_span = source < end[:, None]
    position = (source.astype(_F) + _F(0.5)) - sample[:, None]
    weights = np.where(in_span, weigh(position * one_over_kernel_scale), _F(0)).astype(_F)
    total = np.zeros(out_size, _F)
    for k in range(span_size):  # float32 sum in TensorFlow's order
        total = total + weights[:, k]
    usable = inside & (np.abs(total) >= _F(1000.0) * np.finfo(_F).tiny)
    with np.errstate(divide="ignore"):
        inverse = _F(1) / total
    with np.errstate(invalid="ignore"):
        weights = np.where(usable[:, None], weights * inverse[:, None], _F(0)).astype(_F)
    start = np.where(inside, start, 0)
    taken = (start[:, None] + j) < in_size
    return start, weights, taken


def _gather(xp: Any, x: Any, axis: int, starts: np.ndarray, weights: np.ndarray, taken: np.ndarray) -> Any:
    """sum_k weights[o, k] * x[..., starts[o] + k, ...] along `axis`, in float32 from 0, k in order."""
    out_size, span = weights.shape
    shape = [1] * x.ndim
    shape[axis] = out_size
    out = None
    for k in range(span):
        index = xp.asarray(np.minimum(starts + k, x.shape[axis] - 1))
        term = xp.take(x, index, axis=axis) * xp.asarray(weights[:, k]).reshape(shape)
        term = xp.where(xp.asarray(taken[:, k]).reshape(shape), term, xp.float32(0))
        out = xp.zeros_like(term) + term if out is None else out + term
    if out is None:
        out_shape = list(x.shape)
        out_shape[axis] = out_size
        return xp.zeros(out_shape, dtype=xp.float32)
    return out


def _pair(t: Any, name: str) -> tuple[float, float]:
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional{list(t.shape)}")
    if t.shape[0] != 2:
        raise ValueError(f"{name} must have two elements{list(t.shape)}")
    a, b = t.tolist()
    return a, b


@kernel("ScaleAndTranslate")
def scale_and_translate(xp, images, size, scale, translation, *, kernel_type: str = "lanczos3",
                        antialias: bool = True, memory_limit: int | None = None):
    """Resample `images` [batch, h, w, c] to `size` with `kernel_type`; float32 out."""
    if kernel_type not in SAMPLING_KERNELS:
        raise ValueError(f"Unrecognized kernel type: {kernel_type}")
    if images.ndim != 4:
        raise ValueError(f"input must be 4-dimensional{list(images.shape)}")
    out_h, out_w = (int(v) for v in _pair(size, "output_shape_t"))
    _, in_h, in_w, channels = images.shape
    if out_h <= 0 or out_w <= 0:
        raise ValueError("output dimensions must be positive")
    if channels <= 0:
        raise ValueError("image must have at least one channel")
    if in_h <= 0 or in_w <= 0:
        raise ValueError("input image must be of non-zero size")
    row_scale, col_scale = _pair(scale, "t")
    if not (row_scale > 0 and col_scale > 0):
        raise ValueError("Scale must be greater than zero.")
    row_shift, col_shift = _pair(translation, "t")
    # The output size is a value a client may send; the rows pass holds [batch, out_h, in_w, c] too.
    shape = (images.shape[0], out_h, out_w, channels)
    check_elements(math.prod(shape) + images.shape[0] * out_h * in_w * channels, np.float32, memory_limit,
                   "ScaleAndTranslate output", shape)
    if images.shape[0] == 0:
        return (xp.zeros((0, out_h, out_w, channels), dtype=xp.float32),)
    col = _spans(kernel_type, out_w, in_w, col_scale, col_shift, bool(antialias))
    row = _spans(kernel_type, out_h, in_h, row_scale, row_shift, bool(antialias))
    x = images.astype(xp.float32, copy=False)
    rows = _gather(xp, x, 1, *row)
    return (_gather(xp, rows, 2, *col),)
