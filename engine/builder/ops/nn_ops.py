"""Neural-network op functions: activations, softmax, bias_add, 2-D convolution and pooling.

Images are NHWC ([batch, height, width, channels]), convolution filters HWIO ([height, width, in,
out]), depthwise filters [height, width, in, multiplier]. `strides`, `dilations` and pooling's
`ksize` are an int (both spatial axes), two ints (height, width) or TensorFlow's four NHWC ints.
`padding` is "SAME", "VALID", or explicit [[top, bottom], [left, right]] rows (conv2d only); output
sizes follow TensorFlow (SAME: ceil(in / stride); VALID: ceil((in - k + 1) / stride), with the
effective kernel (k - 1) * dilation + 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.builder.dtypes import FLOATS, INTEGERS, NUMBERS
from engine.builder.ops.math_ops import unary
from engine.builder.ops.scope import OpScope, op_scope
from engine.builder.shapes import Shape, format_shape, merge_dims, window_output_size
from engine.builder.tensor import Tensor

__all__ = [
    "relu",
    "relu6",
    "leaky_relu",
    "elu",
    "softmax",
    "log_softmax",
    "bias_add",
    "conv2d",
    "depthwise_conv2d",
    "max_pool",
    "avg_pool",
]

_CONV_TYPES = FLOATS | {np.dtype(np.int32)}
_MAX_POOL_TYPES = FLOATS | {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16)}


# --- activations ----------------------------------------------------------------------------------------


def relu(features: Any, name: str | None = None) -> Tensor:
    """max(features, 0) (Relu)."""
    return unary("Relu", FLOATS | INTEGERS, features, name)


def relu6(features: Any, name: str | None = None) -> Tensor:
    """min(max(features, 0), 6) (Relu6)."""
    return unary("Relu6", FLOATS | INTEGERS, features, name)


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Tensor:
    """features where positive, alpha * features elsewhere (LeakyRelu)."""
    return unary("LeakyRelu", FLOATS, features, name, alpha=float(alpha))


def elu(features: Any, name: str | None = None) -> Tensor:
    """features where positive, exp(features) - 1 elsewhere (Elu)."""
    return unary("Elu", FLOATS, features, name)


def _over_last_axis(op_type: str, logits: Any, axis: int, name: str | None) -> Tensor:
    with op_scope(op_type, name, op_type, [logits]) as scope:
        x = scope.tensor(logits, "logits")
        scope.check_dtype("logits", x, FLOATS)
        scope.check_rank("logits", x, at_least=1)
        if axis != -1 and (x.ndim is None or axis != x.ndim - 1):
            raise scope.fail(f"{op_type} works over the last axis; got axis={axis} (transpose the input first)")
        return scope.emit_one([x], {"T": x.dtype}, x.dtype, x.shape)


def softmax(logits: Any, axis: int = -1, name: str | None = None) -> Tensor:
    """exp(logits) / sum(exp(logits)) over the last axis (Softmax)."""
    return _over_last_axis("Softmax", logits, axis, name)


def log_softmax(logits: Any, axis: int = -1, name: str | None = None) -> Tensor:
    """logits - log(sum(exp(logits))) over the last axis (LogSoftmax)."""
    return _over_last_axis("LogSoftmax", logits, axis, name)


def bias_add(value: Any, bias: Any, data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """value + bias, with the 1-D `bias` along the channel dimension: the last one (NHWC, and any
    rank >= 2), or dimension 1 (NCHW) (BiasAdd)."""
    with op_scope("BiasAdd", name, "BiasAdd", [value, bias]) as scope:
        x = scope.tensor(value, "value")
        b = scope.tensor(bias, "bias", dtype_hint=x.dtype)
        dtype = scope.check_same_dtype({"value": x, "bias": b})
        scope.check_dtype("value", x, NUMBERS)
        scope.check_rank("value", x, at_least=2)
        scope.check_rank("bias", b, 1)
        if data_format not in ("NHWC", "NCHW"):
            raise scope.fail(f"data_format must be NHWC or NCHW, not {data_format!r}")
        out_shape = x.shape
        if x.shape is not None and b.shape is not None:
            channel = len(x.shape) - 1 if data_format == "NHWC" else 1
            try:
                size = merge_dims(x.shape[channel], b.shape[0])
            except ValueError as e:
                raise scope.fail(f"the bias must match the channel dimension {channel}: {e} "
                                 f"(shapes {format_shape(x.shape)}, {format_shape(b.shape)})") from None
            out_shape = (*x.shape[:channel], size, *x.shape[channel + 1:])
        return scope.emit_one([x, b], {"T": dtype, "data_format": data_format}, dtype, out_shape)


# --- windows: strides, dilations, padding ----------------------------------------------------------------


def _nhwc_ints(scope: OpScope, value: int | Sequence[int], arg: str) -> list[int]:
    """An int, (h, w) or (1, h, w, 1) as TensorFlow's four NHWC ints."""
    values = [int(value)] * 2 if isinstance(value, (int, np.integer)) else [int(v) for v in value]
    if len(values) == 2:
        values = [1, *values, 1]
    if len(values) != 4 or any(v < 1 for v in values):
        raise scope.fail(f"{arg} must be a positive int, [h, w] or [1, h, w, 1], got {value!r}")
    if values[0] != 1 or values[3] != 1:
        raise scope.fail(f"{arg} must be 1 in the batch and channel dimensions, got {values}")
    return values


def _padding(scope: OpScope, padding: str | Sequence[Sequence[int]], explicit_ok: bool) -> tuple[str, list[tuple[int, int]] | None]:
    """("SAME" | "VALID" | "EXPLICIT", [(top, bottom), (left, right)] for EXPLICIT)."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode not in ("SAME", "VALID"):
            raise scope.fail(f"padding must be 'SAME', 'VALID' or explicit pairs, not {padding!r}")
        return mode, None
    if not explicit_ok:
        raise scope.fail(f"padding must be 'SAME' or 'VALID', not {padding!r}")
    rows = [tuple(int(v) for v in row) for row in padding]
    if len(rows) == 4:
        if rows[0] != (0, 0) or rows[3] != (0, 0):
            raise scope.fail(f"explicit padding of the batch and channel dimensions must be 0, got {rows}")
        rows = rows[1:3]
    if len(rows) != 2 or any(len(r) != 2 or min(r) < 0 for r in rows):
        raise scope.fail(f"explicit padding is [[top, bottom], [left, right]] (non-negative), got {padding!r}")
    return "EXPLICIT", rows


def _window_shape(scope: OpScope, x: Tensor, window: tuple[int, int], strides: list[int], dilations: list[int],
                  mode: str, explicit: list[tuple[int, int]] | None, channels: int | None) -> Shape:
    if x.shape is None:
        return None if channels is None else (None, None, None, channels)
    sizes = []
    for axis, k in zip((1, 2), window):
        pad = mode if explicit is None else explicit[axis - 1]
        try:
            sizes.append(window_output_size(x.shape[axis], k, strides[axis], dilations[axis], pad))
        except ValueError as e:
            raise scope.fail(f"{'height' if axis == 1 else 'width'}: {e} (input shape {format_shape(x.shape)})") from None
    return (x.shape[0], *sizes, channels)


def _image(scope: OpScope, input: Any, data_format: str, allowed) -> Tensor:
    if data_format != "NHWC":
        raise scope.fail(f"only data_format 'NHWC' is supported, not {data_format!r}")
    x = scope.tensor(input, "input")
    scope.check_dtype("input", x, allowed)
    scope.check_rank("input", x, 4)
    return x


# --- convolution ----------------------------------------------------------------------------------------


def conv2d(input: Any, filters: Any, strides: int | Sequence[int] = 1, padding: Any = "VALID",
           data_format: str = "NHWC", dilations: int | Sequence[int] = 1, name: str | None = None) -> Tensor:
    """2-D convolution of NHWC `input` with HWIO `filters` (Conv2D)."""
    with op_scope("Conv2D", name, "Conv2D", [input, filters]) as scope:
        x = _image(scope, input, data_format, _CONV_TYPES)
        f = scope.tensor(filters, "filter", dtype_hint=x.dtype)
        dtype = scope.check_same_dtype({"input": x, "filter": f})
        scope.check_rank("filter", f, 4)
        strides, dilations = _nhwc_ints(scope, strides, "strides"), _nhwc_ints(scope, dilations, "dilations")
        mode, explicit = _padding(scope, padding, explicit_ok=True)
        kh, kw, f_in, f_out = f.shape if f.shape is not None else (None, None, None, None)
        if x.shape is not None:
            try:
                merge_dims(x.shape[3], f_in)
            except ValueError as e:
                raise scope.fail(f"input channels and filter in-channels differ: {e} (input shape "
                                 f"{format_shape(x.shape)}, filter shape {format_shape(f.shape)})") from None
        if kh is None or kw is None:
            out_shape: Shape = None if x.shape is None else (x.shape[0], None, None, f_out)
        else:
            out_shape = _window_shape(scope, x, (kh, kw), strides, dilations, mode, explicit, f_out)
        attrs = {
            "T": dtype,
            "strides": strides,
            "use_cudnn_on_gpu": True,
            "padding": mode,
            "explicit_paddings": [0, 0, *explicit[0], *explicit[1], 0, 0] if explicit else [],
            "data_format": data_format,
            "dilations": dilations,
        }
        return scope.emit_one([x, f], attrs, dtype, out_shape)


def depthwise_conv2d(input: Any, filters: Any, strides: int | Sequence[int] = 1, padding: str = "VALID",
                     data_format: str = "NHWC", dilations: int | Sequence[int] = 1, name: str | None = None) -> Tensor:
    """Depthwise 2-D convolution (DepthwiseConv2dNative): each input channel c convolved with its own
    filters[:, :, c, m]; output channel c * multiplier + m."""
    with op_scope("DepthwiseConv2dNative", name, "depthwise", [input, filters]) as scope:
        x = _image(scope, input, data_format, FLOATS)
        f = scope.tensor(filters, "filter", dtype_hint=x.dtype)
        dtype = scope.check_same_dtype({"input": x, "filter": f})
        scope.check_rank("filter", f, 4)
        strides, dilations = _nhwc_ints(scope, strides, "strides"), _nhwc_ints(scope, dilations, "dilations")
        mode, _ = _padding(scope, padding, explicit_ok=False)
        kh, kw, f_in, multiplier = f.shape if f.shape is not None else (None, None, None, None)
        channels = None
        if x.shape is not None:
            try:
                channels = merge_dims(x.shape[3], f_in)
            except ValueError as e:
                raise scope.fail(f"input channels and filter in-channels differ: {e} (input shape "
                                 f"{format_shape(x.shape)}, filter shape {format_shape(f.shape)})") from None
        else:
            channels = f_in
        out_channels = None if channels is None or multiplier is None else channels * multiplier
        if kh is None or kw is None:
            out_shape: Shape = None if x.shape is None else (x.shape[0], None, None, out_channels)
        else:
            out_shape = _window_shape(scope, x, (kh, kw), strides, dilations, mode, None, out_channels)
        attrs = {"T": dtype, "strides": strides, "padding": mode, "explicit_paddings": [],
                 "data_format": data_format, "dilations": dilations}
        return scope.emit_one([x, f], attrs, dtype, out_shape)


# --- pooling --------------------------------------------------------------------------------------------


def _pool(op_type: str, default_name: str, allowed, input: Any, ksize: Any, strides: Any, padding: str,
          data_format: str, name: str | None, extra_attrs: dict) -> Tensor:
    with op_scope(op_type, name, default_name, [input]) as scope:
        x = _image(scope, input, data_format, allowed)
        ksize = _nhwc_ints(scope, ksize, "ksize")
        strides = _nhwc_ints(scope, ksize if strides is None else strides, "strides")
        mode, _ = _padding(scope, padding, explicit_ok=False)
        channels = None if x.shape is None else x.shape[3]
        out_shape = _window_shape(scope, x, (ksize[1], ksize[2]), strides, [1, 1, 1, 1], mode, None, channels)
        attrs = {"T": x.dtype, "ksize": ksize, "strides": strides, "padding": mode, **extra_attrs,
                 "data_format": data_format}
        return scope.emit_one([x], attrs, x.dtype, out_shape)


def max_pool(input: Any, ksize: int | Sequence[int], strides: int | Sequence[int] | None = None,
             padding: str = "VALID", data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """The maximum over each ksize window (MaxPool); strides default to ksize."""
    return _pool("MaxPool", "MaxPool", _MAX_POOL_TYPES, input, ksize, strides, padding, data_format, name,
                 {"explicit_paddings": []})


def avg_pool(input: Any, ksize: int | Sequence[int], strides: int | Sequence[int] | None = None,
             padding: str = "VALID", data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """The mean over each ksize window (AvgPool); with SAME padding, over the cells inside the input."""
    return _pool("AvgPool", "AvgPool", FLOATS, input, ksize, strides, padding, data_format, name, {})
