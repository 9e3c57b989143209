"""Kernels of the fake-quantization ops: float tensors rounded to the grid of a num_bits integer type and
back, as quantization-aware training leaves them in exported graphs.

    FakeQuantWithMinMaxArgs / Vars / VarsPerChannel   range [min, max] nudged so that 0.0 is on the grid
    QuantizeAndDequantizeV2 / V3 / V4                 a symmetric or unsigned grid through 0, per tensor
                                                      or per channel (`axis`), range given or measured

The formulas are TensorFlow's (core/kernels/fake_quant_ops_functor.h, quantize_and_dequantize_op.h),
evaluated in the input's float type, step by step in the same order, so results match bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from kernels.host import format_dims, host, host_scalar
from kernels.registry import kernel

__all__ = [
    "fake_quant_with_min_max_args",
    "fake_quant_with_min_max_vars",
    "fake_quant_with_min_max_vars_per_channel",
    "quantize_and_dequantize_v2",
    "quantize_and_dequantize_v3",
    "quantize_and_dequantize_v4",
]

F32 = np.float32


# ---------------------------------------------------------------------------------------------------
# FakeQuantWithMinMax*


def _quant_range(num_bits: int, narrow_range: bool) -> tuple[int, int]:
    if not 2 <= num_bits <= 16:
        raise ValueError(f"num_bits must be between 2 and 16, inclusive, got {num_bits}")
    return (1 if narrow_range else 0), (1 << num_bits) - 1


def _nudge(lo: float, hi: float, quant_min: int, quant_max: int) -> tuple[Any, Any, Any, Any]:
    """(nudged_min, nudged_max, scale, inverse scale) in float32: the range moved so that real 0.0 falls
    on a grid point (the zero point rounds half away from zero, as std::round)."""
    lo, hi, qmin, qmax = F32(lo), F32(hi), F32(quant_min), F32(quant_max)
    scale = (hi - lo) / (qmax - qmin)
    inv_scale = (qmax - qmin) / (hi - lo)
    zero_from_min = qmin - lo / scale
    if zero_from_min < qmin:
        zero = F32(quant_min)
    elif zero_from_min > qmax:
        zero = F32(quant_max)
    else:
        zero = _round_half_away(zero_from_min)
    return (qmin - zero) * scale, (qmax - zero) * scale, scale, inv_scale


def _round_half_away(x: Any) -> Any:
    """std::round of a float32: halves away from zero (floor(x + 0.5) would be wrong for 0.49999997)."""
    whole = np.trunc(x)
    return F32(whole + np.sign(x)) if abs(x - whole) >= F32(0.5) else F32(whole)


def _fake_quant(xp: Any, x: Any, lo: float, hi: float, quant_min: int, quant_max: int, divide: bool) -> Any:
    if lo == 0.0 and hi == 0.0:
        return xp.zeros_like(x)
    nudged_min, nudged_max, scale, inv_scale = _nudge(lo, hi, quant_min, quant_max)
    quant_zero = F32(np.floor(-nudged_min * inv_scale + F32(0.5)))
    shifted = xp.minimum(x, nudged_max)
    shifted = xp.maximum(shifted, nudged_min) - nudged_min
    # NOTE: FakeQuantWithMinMaxVars divides by the scale where the other two multiply by its inverse.
    steps = shifted / scale if divide else shifted * inv_scale
    return (xp.floor(steps - quant_zero + F32(0.5)) * scale).astype(F32, copy=False)


def _check_float32(x: Any, op: str) -> None:
    if x.dtype != np.float32:
        raise TypeError(f"{op} takes float32 inputs, got {x.dtype}")


@kernel("FakeQuantWithMinMaxArgs")
def fake_quant_with_min_max_args(xp: Any, inputs: Any, *, min: float = -6.0, max: float = 6.0, num_bits: int = 8,
                                 narrow_range: bool = False) -> tuple:
    """`inputs` clamped to the nudged [min, max] and rounded to its grid of 2^num_bits (-1 if narrow) steps."""
    _check_float32(inputs, "FakeQuantWithMinMaxArgs")
    quant_min, quant_max = _quant_range(num_bits, narrow_range)
    if not min < max:
        raise ValueError(f"min has to be smaller than max, was: {min} >= {max}")
    return (_fake_quant(xp, inputs, min, max, quant_min, quant_max, divide=False),)


@kernel("FakeQuantWithMinMaxVars")
def fake_quant_with_min_max_vars(xp: Any, inputs: Any, min: Any, max: Any, *, num_bits: int = 8,
                                 narrow_range: bool = False) -> tuple:
    """FakeQuantWithMinMaxArgs with the range from scalar tensors; a [0, 0] range gives zeros. Unlike the
    Args form, a reversed range is not refused (TensorFlow computes with it, and so does this kernel)."""
    _check_float32(inputs, "FakeQuantWithMinMaxVars")
    quant_min, quant_max = _quant_range(num_bits, narrow_range)
    lo, hi = host_scalar(min, "min must be a scalar"), host_scalar(max, "max must be a scalar")
    return (_fake_quant(xp, inputs, lo, hi, quant_min, quant_max, divide=True),)


@kernel("FakeQuantWithMinMaxVarsPerChannel")
def fake_quant_with_min_max_vars_per_channel(xp: Any, inputs: Any, min: Any, max: Any, *, num_bits: int = 8,
                                             narrow_range: bool = False) -> tuple:
    """FakeQuantWithMinMaxVars per channel of the last dim, with min and max vectors of that size."""
    _check_float32(inputs, "FakeQuantWithMinMaxVarsPerChannel")
    quant_min, quant_max = _quant_range(num_bits, narrow_range)
    if inputs.ndim < 1:
        raise ValueError("inputs must be at least 1-D")
    depth = inputs.shape[-1]
    for name, t in (("min", min), ("max", max)):
        if t.shape != (depth,):
            raise ValueError(f"{name} has incorrect size, expected {depth} was {format_dims(t.shape)}")
    lows, highs = host(min), host(max)
    channels = []
    for c in range(depth):
        channels.append(_fake_quant(xp, inputs[..., c], lows[c], highs[c], quant_min, quant_max, divide=False))
    return (xp.stack(channels, axis=-1) if channels else inputs.copy(),)


# ---------------------------------------------------------------------------------------------------
# QuantizeAndDequantize*


def _grid(signed: bool, num_bits: int, narrow_range: bool) -> tuple[int, int]:
    """The integer range simulated: [-127, 127] for signed narrow 8 bits, [-128, 127] signed, [0, 255] unsigned."""
    if signed:
        return -(1 << (num_bits - 1)) + (1 if narrow_range else 0), (1 << (num_bits - 1)) - 1
    return 0, (1 << num_bits) - 1


def _scale(lo: Any, hi: Any, qmin: int, qmax: int, t: Any) -> tuple[Any, Any, Any, Any]:
    """TensorFlow's ComputeQuantizationRange in type t: the largest scale mapping [lo, hi] into [qmin, qmax]
    while keeping 0 fixed, and the range adjusted on the side that did not decide it."""
    biggest = t(np.finfo(t).max)
    from_min = t(qmin) / lo if qmin * lo > 0 else biggest
    from_max = t(qmax) / hi if qmax * hi > 0 else biggest
    if from_min < from_max:
        inverse = lo / t(qmin)
        return from_min, inverse, lo, t(qmax) * inverse
    inverse = hi / t(qmax)
    return from_max, inverse, t(qmin) * inverse, hi


def _round(xp: Any, x: Any, round_mode: str) -> Any:
    if round_mode == "HALF_TO_EVEN":
        return xp.rint(x)
    return xp.floor(x + x.dtype.type(0.5))  # HALF_UP


def _quantize_dequantize(xp: Any, x: Any, input_min: Any, input_max: Any, *, signed_input: bool, num_bits: int,
                         range_given: bool, round_mode: str, narrow_range: bool, axis: int,
                         scalar_range_only: bool = False) -> Any:
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"QuantizeAndDequantize has CPU kernels for float and double only, got {x.dtype}")
    if not 0 < num_bits < (62 if signed_input else 63):
        raise ValueError(f"num_bits is out of range: {num_bits} with signed_input_ {int(signed_input)}")
    if axis < -1:
        raise ValueError(f"Axis must be at least -1. Found {axis}")
    if axis != -1 and axis >= x.ndim:
        raise ValueError(f"Shape must be at least rank {axis + 1} but is rank {x.ndim}")
    t = x.dtype.type
    qmin, qmax = _grid(signed_input, num_bits, narrow_range)
    # Channels on axis 1 of a [outer, depth, inner] view; one channel for the whole tensor when axis = -1.
    depth = 1 if axis == -1 else x.shape[axis]
    shape = (1, 1, x.size) if axis == -1 else (math.prod(x.shape[:axis]), depth, math.prod(x.shape[axis + 1 :]))
    view = x.reshape(shape)
    if range_given:
        lows, highs = _given_range(input_min, input_max, axis, depth, scalar_range_only)
    elif view.size == 0:
        return x.copy()
    else:
        lows, highs = host(view.min(axis=(0, 2))), host(view.max(axis=(0, 2)))
    out = xp.empty_like(view)
    # A one-sided range (all values >= 0 on a signed grid, say) leaves one side's scale at the type's
    # maximum: products may overflow to inf exactly as they do in TensorFlow, without numpy's warning.
    with np.errstate(over="ignore", invalid="ignore"):
        for c in range(depth):
            scale, inverse, lo, hi = _scale(t(lows[c]), t(highs[c]), qmin, qmax, t)
            channel = view[:, c]
            if range_given:  # clamped to avoid overflow in the simulated integer type
                channel = xp.maximum(xp.minimum(channel, hi), lo)
            out[:, c] = _round(xp, channel * scale, round_mode) * inverse
    return out.reshape(x.shape)


def _given_range(input_min: Any, input_max: Any, axis: int, depth: int, scalar_only: bool) -> tuple[list, list]:
    if axis == -1:
        lo = host_scalar(input_min, "input_min must be a scalar")
        hi = host_scalar(input_max, "input_max must be a scalar")
        if lo > hi:
            raise ValueError(f"Invalid range: input_min {lo} > input_max {hi}")
        return [lo], [hi]
    if input_min.ndim != 1:
        raise ValueError("Shape must be rank 1 for input_min_tensor when the axis is specified")
    if scalar_only:
        # NOTE: TensorFlow 2.21's V2/V4 kernels then also require input_min to be a scalar, so a range given
        # per channel is refused whatever its shape; only V3 accepts one.
        raise ValueError("input_min must be a scalar.")
    for name, t in (("input_min_tensor", input_min), ("input_max_tensor", input_max)):
        if t.ndim != 1 or t.shape[0] != depth:
            raise ValueError(f"{name} has incorrect size, was {t.shape[0] if t.ndim else 0} expected {depth} to "
                             f"match dim {axis} of the input {format_dims(t.shape)}")
    return host(input_min), host(input_max)


RoundMode = Literal["HALF_TO_EVEN", "HALF_UP"]


@kernel("QuantizeAndDequantizeV2")
def quantize_and_dequantize_v2(xp: Any, input: Any, input_min: Any, input_max: Any, *, signed_input: bool = True,
                               num_bits: int = 8, range_given: bool = False, round_mode: RoundMode = "HALF_TO_EVEN",
                               narrow_range: bool = False, axis: int = -1) -> tuple:
    """`input` rounded to the grid of a num_bits integer through 0, scaled to cover [input_min, input_max]
    (or the values' own range unless range_given), per channel of `axis` unless it is -1."""
    return (_quantize_dequantize(xp, input, input_min, input_max, signed_input=signed_input, num_bits=num_bits,
                                 range_given=range_given, round_mode=round_mode, narrow_range=narrow_range,
                                 axis=axis, scalar_range_only=True),)


@kernel("QuantizeAndDequantizeV3")
def quantize_and_dequantize_v3(xp: Any, input: Any, input_min: Any, input_max: Any, num_bits: Any, *,
                               signed_input: bool = True, range_given: bool = True, narrow_range: bool = False,
                               axis: int = -1) -> tuple:
    """QuantizeAndDequantizeV2 with num_bits from a scalar tensor and ties rounded to even."""
    bits = host_scalar(num_bits, "num_bits must be a scalar")
    return (_quantize_dequantize(xp, input, input_min, input_max, signed_input=signed_input, num_bits=bits,
                                 range_given=range_given, round_mode="HALF_TO_EVEN", narrow_range=narrow_range,
                                 axis=axis),)


@kernel("QuantizeAndDequantizeV4")
def quantize_and_dequantize_v4(xp: Any, input: Any, input_min: Any, input_max: Any, *, signed_input: bool = True,
                               num_bits: int = 8, range_given: bool = False, round_mode: RoundMode = "HALF_TO_EVEN",
                               narrow_range: bool = False, axis: int = -1) -> tuple:
    """QuantizeAndDequantizeV2 under the name tf.quantization.quantize_and_dequantize_v2 emits (its
    gradient differs, its forward pass does not)."""
    return (_quantize_dequantize(xp, input, input_min, input_max, signed_input=signed_input, num_bits=num_bits,
                                 range_given=range_given, round_mode=round_mode, narrow_range=narrow_range,
                                 axis=axis, scalar_range_only=True),)
