"""What passes can prove about shapes without running the graph: a tensor's rank, and the value of a small
integer shape computation in terms of another tensor's dims.

`rank(graph, ref, ctx)` follows the ops whose output rank follows from their inputs' ranks and attrs
(transposes, reshapes to a constant or packed shape, elementwise ops, products, Einsum, gathers ...) back
to where ranks are stated (constants, placeholders, feeds, `_output_shapes`). `symbolic_dims(graph, ref,
ctx)` evaluates a 1-D integer tensor computed from `Shape(x)` (strided slices, gathers, Pack, ConcatV2,
multiplication by constants) as a list of `Dim`s, each `coef * x.shape[axis]` or a constant; Keras'
`ops.repeat` builds its Reshape's target that way. Both answer None where they cannot prove the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.graph import Graph, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import constant_value, known_rank

__all__ = ["Dim", "rank", "symbolic_dims"]

_UNARY = frozenset({
    "Identity", "StopGradient", "Cast", "Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Square",
    "Tanh", "Sigmoid", "Relu", "Relu6", "Elu", "Softmax", "LogSoftmax", "Sin", "Cos", "Erf", "Erfc", "Floor",
    "LogicalNot", "ZerosLike", "OnesLike", "Round", "Sign", "_TensorgateGelu", "_TensorgateLayerNorm",
    "_TensorgateRmsNorm", "_TensorgateRotary", "BiasAdd", "Tile", "MatrixBandPart", "MatrixSetDiag",
})
_BINARY = frozenset({
    "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "Pow", "SquaredDifference", "Less",
    "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "SelectV2",
    "FloorDiv", "FloorMod",
})
_PRODUCTS = ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_DEPTH = 64  # how far back rank() follows a chain before giving up


def _ints(graph: Graph, ref: TensorRef, ctx: PassContext) -> list[int] | None:
    value = constant_value(graph, ref, ctx.fed)
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
        return None
    return [int(v) for v in np.reshape(value, -1)]


def _length(graph: Graph, ref: TensorRef, ctx: PassContext) -> int | None:
    """The number of elements of a 1-D shape tensor, where it is known."""
    value = constant_value(graph, ref, ctx.fed)
    if value is not None:
        return int(np.size(value)) if np.ndim(value) <= 1 else None
    dims = symbolic_dims(graph, ref, ctx)
    if dims is not None:
        return len(dims)
    if ref.node not in graph or ref in ctx.fed:
        return None
    node = graph.node(ref.node)
    if node.op == "Pack" and node.attrs.get("axis", 0) == 0:
        return len(node.inputs)
    if node.op == "Shape":
        return rank(graph, node.inputs[0], ctx)
    if node.op == "ConcatV2":
        parts = [_length(graph, r, ctx) for r in node.inputs[:-1]]
        return None if any(p is None for p in parts) else sum(parts)
    return None


def rank(graph: Graph, ref: TensorRef, ctx: PassContext, _depth: int = 0) -> int | None:
    """The rank of `ref` where the graph proves it, else None."""
    stated = known_rank(graph, ref, ctx)
    if stated is not None or ref in ctx.fed or ref.node not in graph or _depth > _DEPTH or ref.index != 0:
        return stated
    node = graph.node(ref.node)
    op, ins = node.op, node.inputs

    def of(i: int) -> int | None:
        return rank(graph, ins[i], ctx, _depth + 1) if i < len(ins) else None

    if op in _UNARY:
        return of(0)
    if op in _BINARY or op == "Select":
        ranks = [of(i) for i in range(len(ins))]
        return None if any(r is None for r in ranks) else max(ranks)
    if op in ("Transpose",):
        perm = _ints(graph, ins[1], ctx)
        return len(perm) if perm is not None else of(0)
    if op in ("Reshape", "Fill", "BroadcastTo", "Zeros", "Ones"):
        return _length(graph, ins[1] if op in ("Reshape", "BroadcastTo") else ins[0], ctx)
    if op == "ExpandDims":
        r = of(0)
        return None if r is None else r + 1
    if op == "Squeeze":
        r, dims = of(0), node.attrs.get("squeeze_dims") or ()
        return None if r is None or not dims else r - len({d % r for d in dims})
    if op in _PRODUCTS:
        a, b = of(0), of(1)
        return None if a is None or b is None else max(a, b)
    if op in ("MatMul", "_FusedMatMul"):
        return 2
    if op == "_TensorgateProjection":  # x's last `axes` axes contracted with w's first; a bias; an addend last
        x, w, axes = of(0), of(1), int(node.attrs.get("axes", 1))
        out = None if x is None or w is None else x + w - 2 * axes
        if out is None or not node.attrs.get("has_addend"):
            return out
        addend = of(len(ins) - 1)
        return None if addend is None else max(out, addend)
    if op == "_TensorgateDense":
        x, w = of(0), of(1)
        return None if x is None or w is None else x + w - 2
    if op == "_TensorgateGatedProjection":
        return of(0)
    if op == "Einsum":
        out = str(node.attrs.get("equation", "")).replace(" ", "").partition("->")[2]
        return len(out) if "." not in out and "->" in str(node.attrs.get("equation", "")) else None
    if op == "GatherV2":
        params, indices, batch_dims = of(0), of(1), int(node.attrs.get("batch_dims", 0))
        return None if params is None or indices is None else params + indices - 1 - batch_dims
    if op == "Pack":
        r = of(0)
        return None if r is None else r + 1
    if op == "ConcatV2":
        return of(0)
    if op in ("Shape", "Range"):
        return 1
    if op == "StridedSlice":
        # Each new axis adds a dim and each shrunk one removes one; an ellipsis or plain slices keep the rest.
        r, length = of(0), _length(graph, ins[1], ctx)
        if r is None or length is None:
            return None
        bits = (1 << length) - 1
        new = node.attrs.get("new_axis_mask", 0) & bits
        return r + new.bit_count() - (node.attrs.get("shrink_axis_mask", 0) & bits & ~new).bit_count()
    if op in ("Mean", "Sum", "Max", "Min", "Prod", "All", "Any"):
        r = of(0)
        if r is None or node.attrs.get("keep_dims"):
            return r
        axes = _ints(graph, ins[1], ctx)
        return None if axes is None else r - len({a % r for a in axes}) if r else None
    return None


@dataclass(frozen=True)
class Dim:
    """coef * shape(source)[axis], or the constant coef when source is None."""

    coef: int
    source: TensorRef | None = None
    axis: int = 0


def _scalar_or_vector(graph: Graph, ref: TensorRef, ctx: PassContext, depth: int) -> tuple[bool, list[Dim]] | None:
    """(is_scalar, dims) of a small integer tensor, or None."""
    if depth > _DEPTH or ref in ctx.fed or ref.node not in graph or ref.index != 0:
        return None
    value = constant_value(graph, ref, ctx.fed)
    if value is not None:
        if value.dtype.kind not in "iu" or value.ndim > 1:
            return None
        return value.ndim == 0, [Dim(int(v)) for v in np.reshape(value, -1)]
    node = graph.node(ref.node)
    op, ins = node.op, node.inputs

    def sub(i: int) -> tuple[bool, list[Dim]] | None:
        return _scalar_or_vector(graph, ins[i], ctx, depth + 1)

    if op == "Shape":
        r = rank(graph, ins[0], ctx)
        return None if r is None else (False, [Dim(1, ins[0], i) for i in range(r)])
    if op in ("Cast", "Identity"):
        return sub(0)
    if op == "Pack" and node.attrs.get("axis", 0) == 0:
        parts = [sub(i) for i in range(len(ins))]
        if any(p is None or not p[0] for p in parts):
            return None
        return False, [p[1][0] for p in parts]
    if op == "ConcatV2":
        if _ints(graph, ins[-1], ctx) not in ([0], [-1]):
            return None
        parts = [sub(i) for i in range(len(ins) - 1)]
        if any(p is None or p[0] for p in parts):
            return None
        return False, [d for p in parts for d in p[1]]
    if op == "Mul":
        a, b = sub(0), sub(1)
        if a is None or b is None or not (a[0] and b[0]):
            return None
        (x,), (y,) = a[1], b[1]
        if x.source is not None and y.source is not None:
            return None
        const, other = (x, y) if x.source is None else (y, x)
        return True, [Dim(const.coef * other.coef, other.source, other.axis)]
    if op == "GatherV2":
        found, indices = sub(0), _ints(graph, ins[1], ctx)
        if found is None or found[0] or indices is None or _ints(graph, ins[2], ctx) != [0]:
            return None
        dims = found[1]
        if any(not -len(dims) <= i < len(dims) for i in indices):
            return None
        scalar = np.ndim(constant_value(graph, ins[1], ctx.fed)) == 0
        return scalar, [dims[i] for i in indices]
    if op == "StridedSlice":
        return _strided_slice(graph, node, sub(0), ctx)
    return None


def _strided_slice(graph: Graph, node, found, ctx: PassContext) -> tuple[bool, list[Dim]] | None:
    if found is None or found[0]:
        return None
    if node.attrs.get("ellipsis_mask", 0) or node.attrs.get("new_axis_mask", 0):
        return None
    begin, end, strides = (_ints(graph, r, ctx) for r in node.inputs[1:4])
    if begin is None or end is None or strides is None or not (len(begin) == len(end) == len(strides) == 1):
        return None
    dims = found[1]
    b = None if node.attrs.get("begin_mask", 0) & 1 else begin[0]
    e = None if node.attrs.get("end_mask", 0) & 1 else end[0]
    if node.attrs.get("shrink_axis_mask", 0) & 1:
        if not -len(dims) <= begin[0] < len(dims):
            return None
        return True, [dims[begin[0]]]
    return False, dims[slice(b, e, strides[0])]


def symbolic_dims(graph: Graph, ref: TensorRef, ctx: PassContext) -> list[Dim] | None:
    """The value of the 1-D integer tensor `ref` as Dims, where it is computed from shapes and constants."""
    found = _scalar_or_vector(graph, ref, ctx, 0)
    return None if found is None or found[0] else found[1]
