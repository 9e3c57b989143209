"""Slicing: `tensor[...]` and `strided_slice`, as TensorFlow's StridedSlice op and its masks define them.

`x[1]`, `x[:, 1:3]`, `x[::-1]`, `x[..., 0]`, `x[:, None]` work as in numpy, with Python ints as
indices: an int drops its dimension (shrink_axis_mask), `None` inserts a size-1 one (new_axis_mask),
`...` stands for as many full dimensions as needed (ellipsis_mask), and an omitted start or stop means
"from the edge" (begin_mask / end_mask). Indexing with tensors is `gather`'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.builder.ops.scope import OpScope, op_scope
from engine.builder.shapes import Shape, format_shape
from engine.builder.tensor import Tensor

__all__ = ["strided_slice", "slice_tensor"]


def _bit(mask: int, i: int) -> bool:
    return bool(mask >> i & 1)


def _sliced_shape(scope: OpScope, shape: Shape, begin: list[int], end: list[int], strides: list[int],
                  masks: dict[str, int]) -> Shape:
    """The static output shape of StridedSlice (its "sparse spec" expanded over the input's dims)."""
    if shape is None:
        return None
    entries = list(range(len(begin)))
    ellipses = [i for i in entries if _bit(masks["ellipsis_mask"], i)]
    if len(ellipses) > 1:
        raise scope.fail("at most one ellipsis (...) is allowed")
    consumed = sum(1 for i in entries if not _bit(masks["ellipsis_mask"], i) and not _bit(masks["new_axis_mask"], i))
    if consumed > len(shape):
        raise scope.fail(f"{consumed} indices for an input of shape {format_shape(shape)}")
    fill = len(shape) - consumed
    if not ellipses:
        entries.append(None)  # an implicit trailing ellipsis
    out: list[int | None] = []
    axis = 0
    for i in entries:
        if i is None or _bit(masks["ellipsis_mask"], i):
            out.extend(shape[axis:axis + fill])
            axis += fill
            continue
        if _bit(masks["new_axis_mask"], i):
            out.append(1)
            continue
        size, stride = shape[axis], strides[i]
        axis += 1
        if _bit(masks["shrink_axis_mask"], i):
            if size is not None and not -size <= begin[i] < size:
                raise scope.fail(f"index {begin[i]} is out of bounds for dimension {axis - 1} of size {size}")
            continue
        if size is None:
            out.append(None)
            continue
        start = None if _bit(masks["begin_mask"], i) else begin[i]
        stop = None if _bit(masks["end_mask"], i) else end[i]
        # Python's slice clamps out-of-range bounds exactly as StridedSlice does.
        out.append(len(range(*slice(start, stop, stride).indices(size))))
    return tuple(out)


def strided_slice(input_: Any, begin: Sequence[int], end: Sequence[int], strides: Sequence[int] | None = None,
                  begin_mask: int = 0, end_mask: int = 0, ellipsis_mask: int = 0, new_axis_mask: int = 0,
                  shrink_axis_mask: int = 0, name: str | None = None) -> Tensor:
    """TensorFlow's StridedSlice with Python int begin/end/strides; `tensor[...]` is the friendly form."""
    with op_scope("StridedSlice", name, "strided_slice", [input_]) as scope:
        x = scope.tensor(input_, "input")
        strides = [1] * len(begin) if strides is None else list(strides)
        begin, end = [int(b) for b in begin], [int(e) for e in end]
        strides = [int(s) for s in strides]
        if not len(begin) == len(end) == len(strides) or not begin:
            raise scope.fail(f"begin, end and strides must have one equal, non-zero length; got {begin}, {end}, {strides}")
        if 0 in strides:
            raise scope.fail(f"strides cannot be 0, got {strides}")
        masks = {"begin_mask": begin_mask, "end_mask": end_mask, "ellipsis_mask": ellipsis_mask,
                 "new_axis_mask": new_axis_mask, "shrink_axis_mask": shrink_axis_mask}
        out_shape = _sliced_shape(scope, x.shape, begin, end, strides, masks)
        wide = max(abs(v) for v in begin + end + strides) > np.iinfo(np.int32).max
        index_type = np.dtype(np.int64 if wide else np.int32)
        tensors = [scope.tensor(values, arg, index_type) for arg, values in
                   (("begin", begin), ("end", end), ("strides", strides))]
        attrs = {"T": x.dtype, "Index": index_type, **masks}
        return scope.emit_one([x, *tensors], attrs, x.dtype, out_shape)


def _index(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"slice bounds must be Python ints or None, not {value!r}; index with tensors through gather()")
    return int(value)


def slice_tensor(tensor: Tensor, key: Any) -> Tensor:
    """`tensor[key]`: the key as begin/end/strides and masks, the way TensorFlow's `__getitem__` writes them."""
    items = key if isinstance(key, tuple) else (key,)
    begin, end, strides = [], [], []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}

    def entry(b: int, e: int, s: int, *set_masks: str) -> None:
        begin.append(b)
        end.append(e)
        strides.append(s)
        for mask in set_masks:
            masks[mask] |= 1 << (len(begin) - 1)

    for item in items:
        if isinstance(item, slice):
            start, stop, step = _index(item.start), _index(item.stop), _index(item.step)
            edges = [m for m, v in (("begin_mask", start), ("end_mask", stop)) if v is None]
            entry(start or 0, stop or 0, 1 if step is None else step, *edges)
        elif item is Ellipsis:
            entry(0, 0, 1, "ellipsis_mask")
        elif item is None:
            entry(0, 0, 1, "new_axis_mask")
        else:
            index = _index(item)
            # NOTE: end = index + 1 even for -1 (end 0): under shrink_axis_mask only begin counts.
            entry(index, index + 1, 1, "shrink_axis_mask")
    return strided_slice(tensor, begin, end, strides, **masks)
