"""Sliding-window geometry over the spatial axes of NHWC images, shared by the convolutions, pooling and the
GPU kernels.

A sliding window is described by a `Window2D`: output size and padding per axis, computed by TensorFlow's
SAME / VALID / EXPLICIT rules. Rather than materialising a padded copy of the input, kernels walk the
window's taps (kh * kw of them): for each tap, `Window2D.tap` gives the block of output positions whose
input cell lies inside the image and the strided input slice that feeds it. Padded cells thus contribute
nothing (zero for convolution and sums, ignored for max), with no extra pass.

`window_from_attrs` reads a node's strides/ksize/dilations/paddings attrs in either data format;
`to_nhwc` / `from_nhwc` move NCHW tensors to the channels-last layout the kernels compute in and back.
An `Epilogue` finishes one output block in place while it is in cache (bias, batch-norm scaling,
activation): the fused ops pass one to the convolution bodies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DataFormat", "Epilogue", "Padding", "Window2D", "axis_geometry", "from_nhwc", "tap_span", "to_nhwc",
           "window_from_attrs"]

Padding = Literal["SAME", "VALID", "EXPLICIT"]
DataFormat = Literal["NHWC", "NCHW"]

# Finishes an output block in place: called as epilogue(block, (images, rows)), where block is the NHWC
# output of images[images] and output rows[rows] (slices of the whole output), e.g. to add a bias.
Epilogue = Callable[[Any, tuple[slice, slice]], None]


def axis_geometry(
    in_size: int, k: int, stride: int, dilation: int, padding: str, explicit: Sequence[int] = (0, 0)
) -> tuple[int, int, int]:
    """(out_size, pad_before, pad_after) of one spatial axis, by TensorFlow's padding rules."""
    k_eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-in_size // stride)
        total = max((out - 1) * stride + k_eff - in_size, 0)
        # NOTE: TensorFlow puts the extra SAME padding cell after, not before.
        return out, total // 2, total - total // 2
    if padding == "VALID":
        return max(-(-(in_size - k_eff + 1) // stride), 0), 0, 0
    before, after = int(explicit[0]), int(explicit[1])
    return max((in_size + before + after - k_eff) // stride + 1, 0), before, after


def tap_span(offset: int, stride: int, in_size: int, lo: int, hi: int) -> tuple[int, int, slice]:
    """Output indices [a, b) within [lo, hi) whose input index o*stride+offset is inside the image, and
    the input slice they read."""
    a = max(lo, -(offset // stride))  # ceil(-offset / stride)
    b = min(hi, (in_size - 1 - offset) // stride + 1)
    if b <= a:
        return a, a, slice(0, 0)
    start = a * stride + offset
    return a, b, slice(start, start + (b - a - 1) * stride + 1, stride)


@dataclass(frozen=True)
class Window2D:
    """A kh x kw sliding window over an in_h x in_w image (NHWC spatial axes 1 and 2).

    >>> w = Window2D.make((5, 5), (3, 3), (2, 2), (1, 1), "SAME")
    >>> (w.out_h, w.out_w, w.pad_top, w.pad_left)
    (3, 3, 1, 1)
    """

    in_h: int
    in_w: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    out_h: int
    out_w: int
    pad_top: int
    pad_left: int

    @classmethod
    def make(
        cls,
        in_hw: Sequence[int],
        k_hw: Sequence[int],
        strides_hw: Sequence[int],
        dilations_hw: Sequence[int],
        padding: str,
        explicit_hw: Sequence[Sequence[int]] = ((0, 0), (0, 0)),
    ) -> Window2D:
        oh, pt, _ = axis_geometry(in_hw[0], k_hw[0], strides_hw[0], dilations_hw[0], padding, explicit_hw[0])
        ow, pl, _ = axis_geometry(in_hw[1], k_hw[1], strides_hw[1], dilations_hw[1], padding, explicit_hw[1])
        return cls(*in_hw, *k_hw, *strides_hw, *dilations_hw, oh, ow, pt, pl)

    def tap(self, i: int, j: int, rows: tuple[int, int] | None = None) -> tuple[slice, slice, slice, slice]:
        """For tap (i, j) and output rows [r0, r1) (all by default): (out_rows, out_cols, in_rows, in_cols)
        slices, output rows relative to r0. Empty slices when the tap reads only padding."""
        r0, r1 = rows if rows is not None else (0, self.out_h)
        a, b, in_rows = tap_span(i * self.dilation_h - self.pad_top, self.stride_h, self.in_h, r0, r1)
        c, d, in_cols = tap_span(j * self.dilation_w - self.pad_left, self.stride_w, self.in_w, 0, self.out_w)
        return slice(a - r0, b - r0), slice(c, d), in_rows, in_cols

    def covers(self, i: int, j: int, rows: tuple[int, int] | None = None) -> bool:
        """Whether tap (i, j) reads a real input cell for every output position (in rows [r0, r1))."""
        r0, r1 = rows if rows is not None else (0, self.out_h)
        out_rows, out_cols, _, _ = self.tap(i, j, rows)
        return out_rows == slice(0, r1 - r0) and out_cols == slice(0, self.out_w)

    def taps(self) -> Iterator[tuple[int, int]]:
        for i in range(self.kh):
            for j in range(self.kw):
                yield i, j

    def row_counts(self) -> tuple[list[int], list[int]]:
        """How many taps of each output row (column) read real cells: AvgPool's divisor is their product."""
        rows, cols = [0] * self.out_h, [0] * self.out_w
        for i in range(self.kh):
            a, b, _ = tap_span(i * self.dilation_h - self.pad_top, self.stride_h, self.in_h, 0, self.out_h)
            for r in range(a, b):
                rows[r] += 1
        for j in range(self.kw):
            c, d, _ = tap_span(j * self.dilation_w - self.pad_left, self.stride_w, self.in_w, 0, self.out_w)
            for col in range(c, d):
                cols[col] += 1
        return rows, cols


def _hw(values: Sequence[int], data_format: str) -> tuple[int, int]:
    """The H and W entries of a 4-element strides/ksize/dilations attr in data_format order."""
    values = tuple(int(v) for v in values)
    return (values[1], values[2]) if data_format == "NHWC" else (values[2], values[3])


def window_from_attrs(
    in_hw: Sequence[int],
    k_hw: Sequence[int],
    strides: Sequence[int],
    padding: str,
    explicit_paddings: Sequence[int],
    data_format: str,
    dilations: Sequence[int] = (1, 1, 1, 1),
) -> Window2D:
    """A Window2D from a node's attrs, which list batch/channel entries too, in data_format order."""
    explicit = ((0, 0), (0, 0))
    if padding == "EXPLICIT":
        pairs = [tuple(explicit_paddings[2 * d : 2 * d + 2]) for d in range(4)]
        explicit = (pairs[1], pairs[2]) if data_format == "NHWC" else (pairs[2], pairs[3])
    return Window2D.make(in_hw, k_hw, _hw(strides, data_format), _hw(dilations, data_format), padding, explicit)


def to_nhwc(x: Any, data_format: str) -> Any:
    """A view of a data_format tensor with channels last."""
    return x if data_format == "NHWC" else x.transpose(0, 2, 3, 1)


def from_nhwc(xp: Any, y: Any, data_format: str) -> Any:
    """An NHWC result in data_format, contiguous so later kernels read it fast."""
    return y if data_format == "NHWC" else xp.ascontiguousarray(y.transpose(0, 3, 1, 2))
