"""Array op functions: graph inputs, identity and control, and ops that move data without arithmetic
(reshape, transpose, concat, stack, squeeze, expand_dims, gather, fill, pad, cast).

Each checks its inputs as TensorFlow's shape functions do and computes its output's static shape.
Index arguments (shapes, axes, permutations, paddings) are Python ints or lists, written as int32
Const inputs named after the argument (`Reshape/shape`), as TensorFlow writes them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.builder.attr_values import shape_attr
from engine.builder.dtypes import INDEX, DTypeLike, as_dtype, dtype_name
from engine.builder.ops.constants import constant_value
from engine.builder.ops.scope import OpScope, op_scope
from engine.builder.shapes import (
    Shape,
    as_shape,
    format_shape,
    merge_dims,
    normalize_axis,
)
from engine.builder.tensor import Operation, Tensor

__all__ = [
    "placeholder",
    "placeholder_with_default",
    "identity",
    "no_op",
    "group",
    "cast",
    "reshape",
    "transpose",
    "concat",
    "stack",
    "squeeze",
    "expand_dims",
    "gather",
    "fill",
    "pad",
]


def _axis(scope: OpScope, axis: int, ndim: int | None, extra: int = 0) -> int:
    try:
        return normalize_axis(axis, ndim, extra=extra)
    except ValueError as e:
        raise scope.fail(str(e)) from None


def _index_list(scope: OpScope, value: Any, arg: str) -> Tensor:
    """An index argument (Python ints, or a Tensor) as an int32/int64 Tensor named `arg`."""
    tensor = scope.tensor(value, arg)
    scope.check_dtype(arg, tensor, INDEX)
    return tensor


# --- inputs, identity, control -------------------------------------------------------------------------


def placeholder(dtype: DTypeLike, shape: Any = None, name: str | None = None) -> Tensor:
    """A graph input to feed at run time; `shape` may leave sizes unknown (`[None, 4]`) or be None
    (any shape). The engine checks feeds against both."""
    with op_scope("Placeholder", name, "Placeholder") as scope:
        dtype = as_dtype(dtype)
        try:
            static = as_shape(shape)
        except ValueError as e:
            raise scope.fail(str(e)) from None
        return scope.emit_one([], {"dtype": dtype, "shape": shape_attr(static)}, dtype, static)


def _fits(shape: Shape, declared: Shape) -> bool:
    """Whether a tensor of static shape `shape` can have the `declared` shape."""
    if shape is None or declared is None:
        return True
    return len(shape) == len(declared) and all(a is None or b is None or a == b for a, b in zip(shape, declared))


def placeholder_with_default(value: Any, shape: Any, name: str | None = None) -> Tensor:
    """A graph input that takes `value` (a tensor or constant) when it is not fed."""
    with op_scope("PlaceholderWithDefault", name, "PlaceholderWithDefault", [value]) as scope:
        value = scope.tensor(value, "input")
        try:
            static = as_shape(shape)
        except ValueError as e:
            raise scope.fail(str(e)) from None
        if not _fits(value.shape, static):
            raise scope.fail(f"the default's shape {format_shape(value.shape)} does not fit shape {format_shape(static)}")
        attrs = {"dtype": value.dtype, "shape": shape_attr(static)}
        return scope.emit_one([value], attrs, value.dtype, static)


def identity(input: Any, name: str | None = None) -> Tensor:
    """The same value under another name (handy for naming outputs, and with control_dependencies)."""
    with op_scope("Identity", name, "Identity", [input]) as scope:
        x = scope.tensor(input, "input")
        return scope.emit_one([x], {"T": x.dtype}, x.dtype, x.shape)


def no_op(name: str | None = None) -> Operation:
    """An op that does nothing: a target to run, or a point to hang control dependencies on."""
    with op_scope("NoOp", name, "NoOp") as scope:
        return scope.emit([], {}, [])


def group(*inputs: Tensor | Operation, name: str | None = None) -> Operation:
    """A NoOp that runs after all of `inputs`: run it as a target to run them all."""
    with op_scope("NoOp", name, "group_deps", list(inputs)) as scope, scope.graph.control_dependencies(inputs):
        return scope.emit([], {}, [])


def cast(x: Any, dtype: DTypeLike, name: str | None = None) -> Tensor:
    """`x` converted to `dtype` (floats to integers truncate toward zero). As in TensorFlow, a tensor
    that already has the dtype is returned as it is, without a new op."""
    dtype = as_dtype(dtype)
    if isinstance(x, Tensor) and x.dtype == dtype:
        return x
    with op_scope("Cast", name, "Cast", [x]) as scope:
        x = scope.tensor(x, "x")
        if (x.dtype == np.dtype(object)) != (dtype == np.dtype(object)):
            raise scope.fail(f"cannot cast {dtype_name(x.dtype)} to {dtype_name(dtype)}")
        attrs = {"SrcT": x.dtype, "DstT": dtype, "Truncate": False}
        return scope.emit_one([x], attrs, dtype, x.shape)


# --- shapes ----------------------------------------------------------------------------------------------


def _reshaped(scope: OpScope, in_shape: Shape, target: list[int]) -> Shape:
    """The output shape of Reshape to `target` (ints, one of them may be -1)."""
    if sum(1 for d in target if d == -1) > 1:
        raise scope.fail(f"only one dimension of the new shape may be -1, got {target}")
    if any(d < -1 for d in target):
        raise scope.fail(f"sizes in the new shape must be >= -1, got {target}")
    known = math.prod(d for d in target if d != -1)
    count = None if in_shape is None or None in in_shape else math.prod(in_shape)
    if -1 not in target:
        if count is not None and count != known:
            raise scope.fail(f"cannot reshape a tensor with {count} elements to shape {target} ({known} elements)")
        return tuple(target)
    if known == 0:
        raise scope.fail(f"cannot infer the -1 in {target}: the other sizes multiply to 0")
    if count is None:
        return tuple(None if d == -1 else d for d in target)
    if count % known:
        raise scope.fail(f"cannot reshape a tensor with {count} elements to shape {target}: "
                         f"{count} is not a multiple of {known}")
    return tuple(count // known if d == -1 else d for d in target)


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """`tensor` with its elements laid out in `shape` (row-major); one size may be -1 (inferred).
    `shape` is a list of ints or a 1-D int32/int64 tensor."""
    with op_scope("Reshape", name, "Reshape", [tensor, shape]) as scope:
        x = scope.tensor(tensor, "tensor")
        target = _index_list(scope, shape, "shape")
        scope.check_rank("shape", target, 1)
        value = constant_value(target)
        if value is not None:
            out_shape = _reshaped(scope, x.shape, [int(d) for d in value])
        elif target.shape is not None and target.shape[0] is not None:
            out_shape = (None,) * target.shape[0]
        else:
            out_shape = None
        attrs = {"T": x.dtype, "Tshape": target.dtype}
        return scope.emit_one([x, target], attrs, x.dtype, out_shape)


def transpose(a: Any, perm: Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """`a` with its dimensions permuted: output dim i is input dim perm[i]; by default reversed."""
    with op_scope("Transpose", name, "transpose", [a]) as scope:
        x = scope.tensor(a, "x")
        if perm is None:
            if x.ndim is None:
                raise scope.fail("perm is required when the input's rank is unknown")
            perm = list(range(x.ndim - 1, -1, -1))
        perm = [int(p) for p in perm]
        if sorted(perm) != list(range(len(perm))):
            raise scope.fail(f"perm {perm} is not a permutation of 0..{len(perm) - 1}")
        if x.ndim is not None and x.ndim != len(perm):
            raise scope.fail(f"perm {perm} has {len(perm)} entries for an input of shape {format_shape(x.shape)}")
        perm_tensor = _index_list(scope, perm, "perm")
        out_shape = None if x.shape is None else tuple(x.shape[p] for p in perm)
        attrs = {"T": x.dtype, "Tperm": perm_tensor.dtype}
        return scope.emit_one([x, perm_tensor], attrs, x.dtype, out_shape)


def _joined_shape(scope: OpScope, values: list[Tensor], axis: int) -> Shape:
    """Concatenation: equal ranks, equal sizes except along `axis`, which adds up."""
    known = [v for v in values if v.shape is not None]
    if not known:
        return None
    ndim = len(known[0].shape)
    for i, v in enumerate(known):
        if len(v.shape) != ndim:
            raise scope.fail(f"values must have the same rank, but values[0] has shape {format_shape(known[0].shape)} "
                             f"and '{v.name}' {format_shape(v.shape)}")
    axis = _axis(scope, axis, ndim)
    out: list[int | None] = list(known[0].shape)
    for v in known[1:]:
        for d in range(ndim):
            if d == axis:
                continue
            try:
                out[d] = merge_dims(out[d], v.shape[d])
            except ValueError as e:
                raise scope.fail(f"dimension {d} of '{v.name}': {e} (shapes "
                                 f"{', '.join(format_shape(t.shape) for t in values)})") from None
    sizes = [v.shape[axis] if v.shape is not None else None for v in values]
    out[axis] = None if None in sizes else sum(sizes)
    return tuple(out)


def _tensor_list(scope: OpScope, values: Sequence[Any], arg: str) -> list[Tensor]:
    if isinstance(values, Tensor) or not isinstance(values, (list, tuple)) or not values:
        raise scope.fail(f"'{arg}' must be a non-empty list of tensors")
    tensors = [scope.tensor(v, f"{arg}_{i}" if i else arg) for i, v in enumerate(values)]
    scope.check_same_dtype({f"{arg}[{i}]": t for i, t in enumerate(tensors)})
    return tensors


def concat(values: Sequence[Any], axis: int, name: str | None = None) -> Tensor:
    """`values` joined along `axis` (ConcatV2; the axis is its last input)."""
    with op_scope("ConcatV2", name, "concat", list(values) if isinstance(values, (list, tuple)) else [values]) as scope:
        tensors = _tensor_list(scope, values, "values")
        out_shape = _joined_shape(scope, tensors, int(axis))
        if len(tensors) == 1:
            # NOTE: ConcatV2 needs N >= 2; TensorFlow turns a one-value concat into an Identity too.
            scope.op_type = "Identity"
            return scope.emit_one(tensors, {"T": tensors[0].dtype}, tensors[0].dtype, out_shape)
        axis_tensor = scope.tensor(int(axis), "axis")
        attrs = {"N": len(tensors), "T": tensors[0].dtype, "Tidx": axis_tensor.dtype}
        return scope.emit_one([*tensors, axis_tensor], attrs, tensors[0].dtype, out_shape)


def stack(values: Sequence[Any], axis: int = 0, name: str | None = None) -> Tensor:
    """`values` (all of one shape) stacked along a new dimension `axis` (Pack)."""
    with op_scope("Pack", name, "stack", list(values) if isinstance(values, (list, tuple)) else [values]) as scope:
        tensors = _tensor_list(scope, values, "values")
        shape: Shape = None
        for t in tensors:
            if t.shape is None:
                continue
            if shape is None:
                shape = t.shape
                continue
            if len(t.shape) != len(shape):
                raise scope.fail(f"values must have one shape, but have {format_shape(shape)} and {format_shape(t.shape)}")
            try:
                shape = tuple(merge_dims(a, b) for a, b in zip(shape, t.shape))
            except ValueError as e:
                raise scope.fail(f"values must have one shape: {e}") from None
        ndim = None if shape is None else len(shape)
        axis = _axis(scope, axis, ndim, extra=1)
        out_shape = None if shape is None else (*shape[:axis], len(tensors), *shape[axis:])
        attrs = {"N": len(tensors), "T": tensors[0].dtype, "axis": axis}
        return scope.emit_one(tensors, attrs, tensors[0].dtype, out_shape)


def squeeze(input: Any, axis: int | Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """`input` without its size-1 dimensions (all of them, or those in `axis`, which must be 1)."""
    with op_scope("Squeeze", name, "Squeeze", [input]) as scope:
        x = scope.tensor(input, "input")
        axes = [] if axis is None else [axis] if isinstance(axis, int) else list(axis)
        if x.shape is None:
            out_shape = None
        elif axes:
            chosen = {_axis(scope, a, x.ndim) for a in axes}
            for a in sorted(chosen):
                if x.shape[a] not in (1, None):
                    raise scope.fail(f"cannot squeeze dimension {a}: it has size {x.shape[a]}, not 1 "
                                     f"(input shape {format_shape(x.shape)})")
            out_shape = tuple(d for i, d in enumerate(x.shape) if i not in chosen)
        elif None in x.shape:
            out_shape = None  # an unknown size may or may not be 1
        else:
            out_shape = tuple(d for d in x.shape if d != 1)
        attrs = {"T": x.dtype, "squeeze_dims": [int(a) for a in axes]}
        return scope.emit_one([x], attrs, x.dtype, out_shape)


def expand_dims(input: Any, axis: int, name: str | None = None) -> Tensor:
    """`input` with a size-1 dimension inserted at `axis` (-1 appends one)."""
    with op_scope("ExpandDims", name, "ExpandDims", [input]) as scope:
        x = scope.tensor(input, "input")
        position = _axis(scope, axis, x.ndim, extra=1)
        dim = scope.tensor(int(axis), "dim")
        out_shape = None if x.shape is None else (*x.shape[:position], 1, *x.shape[position:])
        attrs = {"T": x.dtype, "Tdim": dim.dtype}
        return scope.emit_one([x, dim], attrs, x.dtype, out_shape)


def gather(params: Any, indices: Any, axis: int = 0, batch_dims: int = 0, name: str | None = None) -> Tensor:
    """Slices of `params` along `axis` at `indices` (GatherV2): the output's shape is
    params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis+1:]."""
    with op_scope("GatherV2", name, "GatherV2", [params, indices]) as scope:
        p = scope.tensor(params, "params")
        idx = scope.tensor(indices, "indices")
        scope.check_dtype("indices", idx, {np.dtype(np.int16)} | INDEX)
        axis = _axis(scope, axis, p.ndim)
        if batch_dims < 0 and idx.ndim is not None:
            batch_dims += idx.ndim
        if batch_dims < 0 or (idx.ndim is not None and batch_dims > idx.ndim) or batch_dims > axis:
            raise scope.fail(f"batch_dims {batch_dims} must be in [0, min(rank(indices), axis)]")
        if p.shape is None or idx.shape is None:
            out_shape = None
        else:
            batch = []
            for d in range(batch_dims):
                try:
                    batch.append(merge_dims(p.shape[d], idx.shape[d]))
                except ValueError as e:
                    raise scope.fail(f"batch dimension {d} of params and indices: {e}") from None
            out_shape = (*batch, *p.shape[batch_dims:axis], *idx.shape[batch_dims:], *p.shape[axis + 1:])
        axis_tensor = scope.tensor(axis, "axis")
        attrs = {"Tparams": p.dtype, "Tindices": idx.dtype, "Taxis": axis_tensor.dtype, "batch_dims": int(batch_dims)}
        return scope.emit_one([p, idx, axis_tensor], attrs, p.dtype, out_shape)


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape `dims` (ints, or a 1-D int tensor known only at run time) filled with the
    scalar `value`. For a shape known now, `constant(value, shape=dims)` needs no op at run time."""
    with op_scope("Fill", name, "Fill", [dims, value]) as scope:
        dims_tensor = _index_list(scope, dims, "dims")
        scope.check_rank("dims", dims_tensor, 1)
        v = scope.tensor(value, "value")
        scope.check_rank("value", v, 0)
        known = constant_value(dims_tensor)
        if known is not None:
            if (known < 0).any():
                raise scope.fail(f"dims cannot be negative, got {known.tolist()}")
            out_shape: Shape = tuple(int(d) for d in known)
        elif dims_tensor.shape is not None and dims_tensor.shape[0] is not None:
            out_shape = (None,) * dims_tensor.shape[0]
        else:
            out_shape = None
        attrs = {"T": v.dtype, "index_type": dims_tensor.dtype}
        return scope.emit_one([dims_tensor, v], attrs, v.dtype, out_shape)


def pad(tensor: Any, paddings: Sequence[Sequence[int]], name: str | None = None) -> Tensor:
    """`tensor` padded with zeros: `paddings[i] = [before, after]` for dimension i."""
    with op_scope("Pad", name, "Pad", [tensor]) as scope:
        x = scope.tensor(tensor, "input")
        pads = np.asarray(paddings)
        if pads.ndim != 2 or pads.shape[1] != 2 or pads.dtype.kind not in "iu":
            raise scope.fail(f"paddings must be [[before, after], ...] ints, got {paddings!r}")
        if (pads < 0).any():
            raise scope.fail(f"paddings cannot be negative, got {pads.tolist()}")
        if x.ndim is not None and x.ndim != len(pads):
            raise scope.fail(f"paddings has {len(pads)} rows for an input of shape {format_shape(x.shape)}")
        pad_tensor = _index_list(scope, pads.tolist(), "paddings")
        out_shape = None if x.shape is None else tuple(
            None if d is None else d + int(before) + int(after) for d, (before, after) in zip(x.shape, pads))
        attrs = {"T": x.dtype, "Tpaddings": pad_tensor.dtype}
        return scope.emit_one([x, pad_tensor], attrs, x.dtype, out_shape)

