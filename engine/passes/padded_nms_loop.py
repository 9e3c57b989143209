"""The padded, tiled non-max suppression loop, recognised in a While so that the whole loop runs as one kernel
(`_TensorgatePaddedNms`: kernels/image/padded_nms.py), in the two spellings TensorFlow code writes it:
Model Garden's `sorted_non_max_suppression_padded` (official/vision/ops/nms.py, which RetinaNet and Mask R-CNN
exports run once per class) and `tf.image.non_max_suppression_padded` (its v2 path).

The loop is recognised by what it computes, proven with canonical digests (engine.passes.canonical): the
condition is `min(output_size) < max_output_size and idx < limit` (`limit` a loop constant, or one divided by
the tile size), and the body's results are exactly those of `_suppression_loop_body`: the tile `idx` of the
boxes sliced out, a While over the earlier tiles zeroing its boxes whose IoU with one of theirs is not below
the threshold, the tile's IoU matrix above the diagonal kept where at or above the threshold, a While
iterating the self-suppression, the suppressed boxes zeroed and written back into the boxes, output_size
counting the tile's boxes with a coordinate above 0, idx plus one. Every other loop variable is returned
unchanged or counts iterations. The two spellings differ in the IoU (Model Garden's is -1 for boxes whose
largest coordinate is negative), in the self-suppression's constants (Model Garden compares with 0.5 and
`<=`, TensorFlow with the IoU threshold and `<`), in whether the tile size is a Const or a loop constant and
in how the boxes are reshaped back. Anything else leaves the While as it is.

`PaddedNmsLoop` runs a recognised loop: called with the loop's inputs it returns its outputs, or None where
they are not what the kernel takes (boxes not float32 [B, N, 4] with finite coordinates within 2**60, scalars
of other types, and what the kernel declines: see its docstring); the loop then runs as it is, with its own
errors.

    >>> fused = PaddedNmsLoop.recognise(while_node, cond, body, bind_kernel, max_iterations)  # or None
    >>> outputs = fused(loop_vars)   # None: run the loop
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.graph import Node, TensorRef, parse_tensor_name
from engine.graph.functions import Function
from engine.passes.canonical import Digest, FunctionDigests, NotCanonical
from engine.passes.loop_trace import resolve
from kernels.image.padded_nms import COORDINATE_LIMIT, OP

__all__ = ["PaddedNms", "PaddedNmsLoop", "recognise"]

_F32, _I32 = np.dtype(np.float32), np.dtype(np.int32)
D = Digest


def _c(value: Any, dtype: Any = np.int32) -> bytes:
    return D.const(np.asarray(value, dtype))


def _add_one(x: bytes) -> bytes:
    return D.op("AddV2", x, _c(1))


def _dim(shape: bytes, k: int) -> bytes:
    """`tf.shape(x)[k]`."""
    return D.op("StridedSlice", shape, _c([k]), _c([k + 1]), _c([1]), shrink_axis_mask=1)


# --- the computation, as the TensorFlow code writes it ------------------------------------------------------


def _bbox_overlap(a: bytes, b: bytes, model_garden: bool) -> bytes:
    """IoU [B, Na, Nb] of boxes a with b: TensorFlow's `_bbox_overlap`, Model Garden's `box_ops.bbox_overlap`."""
    ay1, ax1, ay2, ax2 = (D.op("Split", _c(2), a, index=k, num_split=4) for k in range(4))
    by1, bx1, by2, bx2 = (D.op("Split", _c(2), b, index=k, num_split=4) for k in range(4))

    def t(x: bytes) -> bytes:
        return D.op("Transpose", x, _c([0, 2, 1]))

    zero = _c(0.0, np.float32)
    i_area = D.op("Mul", D.op("Maximum", D.op("Sub", D.op("Minimum", ax2, t(bx2)), D.op("Maximum", ax1, t(bx1))), zero),
                  D.op("Maximum", D.op("Sub", D.op("Minimum", ay2, t(by2)), D.op("Maximum", ay1, t(by1))), zero))
    a_area = D.op("Mul", D.op("Sub", ay2, ay1), D.op("Sub", ax2, ax1))
    b_area = D.op("Mul", D.op("Sub", by2, by1), D.op("Sub", bx2, bx1))
    union = D.op("AddV2", D.op("Sub", D.op("AddV2", a_area, t(b_area)), i_area), _c(1e-8, np.float32))
    iou = D.op("RealDiv", i_area, union)
    if model_garden:  # -1 where a box of b, then of a, has a negative largest coordinate
        b_invalid = D.op("Less", D.op("Max", b, _c(-1), keep_dims=True), zero)
        padding = D.op("LogicalOr", D.op("Fill", D.op("Shape", ax1), _c(False, np.bool_)), t(b_invalid))
        iou = D.op("SelectV2", padding, D.op("Neg", D.op("OnesLike", iou)), iou)
        a_invalid = D.op("Less", D.op("Max", a, _c(-1), keep_dims=True), zero)
        iou = D.op("SelectV2", a_invalid, D.op("Neg", D.op("OnesLike", iou)), iou)
    return iou


def _slice(boxes: bytes, index: bytes, tile: bytes) -> bytes:
    """`tf.slice(boxes, [0, index * tile, 0], [batch, tile, 4])`."""
    batch = _dim(D.op("Shape", boxes), 0)
    return D.op("Slice", boxes, D.op("Pack", _c(0), D.op("Mul", index, tile), _c(0)), D.op("Pack", batch, tile, _c(4)))


def _cross_suppression(model_garden: bool) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(cond rets, body rets) of the While over the earlier tiles: loop vars (counter, maximum_iterations, boxes,
    box_slice, iou_threshold, inner_idx, idx, and tf.image's tile size)."""
    arg = D.arg
    tile = _c(512) if model_garden else arg(7)
    boxes, box_slice, threshold, inner = arg(2), arg(3), arg(4), arg(5)
    iou = _bbox_overlap(_slice(boxes, inner, tile), box_slice, model_garden)
    keep = D.op("Cast", D.op("All", D.op("Less", iou, threshold), _c([1])), DstT=_F32)
    new_slice = D.op("Mul", D.op("ExpandDims", keep, _c(2)), box_slice)
    body = (_add_one(arg(0)), arg(1), boxes, new_slice, threshold, _add_one(inner), arg(6))
    return (D.op("Less", inner, arg(6)),), body + (() if model_garden else (arg(7),))


def _self_suppression(model_garden: bool) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(cond rets, body rets) of the self-suppression While: loop vars (counter, maximum_iterations, iou,
    changed, iou_sum, and tf.image's iou_threshold)."""
    arg = D.arg
    iou, iou_sum = arg(2), arg(4)
    limit, compare = (_c(0.5, np.float32), "LessEqual") if model_garden else (arg(5), "Less")
    shape = D.op("Pack", _dim(D.op("Shape", iou), 0), _c(-1), _c(1))
    can_suppress = D.op("Cast", D.op("Reshape", D.op(compare, D.op("Max", iou, _c(1)), limit), shape), DstT=_F32)
    kept = D.op(compare, D.op("Max", D.op("Mul", can_suppress, iou), _c(1)), limit)
    new_iou = D.op("Mul", D.op("Reshape", D.op("Cast", kept, DstT=_F32), shape), iou)
    new_sum = D.op("Sum", new_iou, _c([1, 2]))
    changed = D.op("Any", D.op("Greater", D.op("Sub", iou_sum, new_sum), limit), _c([0]))
    body = (_add_one(arg(0)), arg(1), new_iou, changed, new_sum)
    return (arg(3),), body + (() if model_garden else (arg(5),))


@dataclass(frozen=True)
class _Roles:
    """Which loop var is what, and the tile size (a Const's value, or a loop var)."""

    boxes: int
    threshold: int
    output_size: int
    idx: int
    tile_const: int | None
    tile_var: int | None

    def tile(self) -> bytes:
        return _c(self.tile_const) if self.tile_const is not None else D.arg(self.tile_var)


def _loop_body(roles: _Roles, model_garden: bool) -> dict[int, bytes]:
    """The digests of `_suppression_loop_body`'s results, by loop var."""
    boxes, threshold, size, idx = (D.arg(i) for i in (roles.boxes, roles.threshold, roles.output_size, roles.idx))
    tile = roles.tile()
    shape = D.op("Shape", boxes)
    batch = _dim(shape, 0)
    num_tiles = D.op("FloorDiv", _dim(shape, 1), tile)
    cross_cond, cross_body = _cross_suppression(model_garden)
    cross_inputs = (_c(0), _c(-1), boxes, _slice(boxes, idx, tile), threshold, _c(0), idx)
    cross_inputs += () if model_garden else (tile,)
    box_slice = D.call("While", cross_inputs, {"cond": cross_cond, "body": cross_body}, index=3)

    iou = _bbox_overlap(box_slice, box_slice, model_garden)
    tile_range = D.op("Range", _c(0), tile, _c(1))
    later = D.op("ExpandDims", D.op("Greater", D.op("Reshape", tile_range, _c([1, -1])),
                                    D.op("Reshape", tile_range, _c([-1, 1]))), _c(0))
    iou = D.op("Mul", iou, D.op("Cast", D.op("LogicalAnd", later, D.op("GreaterEqual", iou, threshold)), DstT=_F32))
    self_cond, self_body = _self_suppression(model_garden)
    self_inputs = (_c(0), _c(-1), iou, _c(True, np.bool_), D.op("Sum", iou, _c([1, 2])))
    self_inputs += () if model_garden else (threshold,)
    suppressed_iou = D.call("While", self_inputs, {"cond": self_cond, "body": self_body}, index=2)
    suppressed = D.op("Cast", D.op("Greater", D.op("Sum", suppressed_iou, _c(1)), _c(0.0, np.float32)), DstT=_F32)
    box_slice = D.op("Mul", box_slice, D.op("ExpandDims", D.op("Sub", _c(1.0, np.float32), suppressed), _c(2)))

    mask = D.op("Reshape", D.op("Cast", D.op("Equal", D.op("Range", _c(0), num_tiles, _c(1)), idx), DstT=_F32),
                _c([1, -1, 1, 1]))
    tiled = D.op("Tile", D.op("ExpandDims", box_slice, _c([1])), D.op("Pack", _c(1), num_tiles, _c(1), _c(1)))
    rest = D.op("Mul", D.op("Reshape", boxes, D.op("Pack", batch, num_tiles, tile, _c(4))),
                D.op("Sub", _c(1.0, np.float32), mask))
    merged = D.op("AddV2", D.op("Mul", tiled, mask), rest)
    new_boxes = D.op("Reshape", merged, shape if model_garden else D.op("Pack", batch, _c(-1), _c(4)))
    counted = D.op("Any", D.op("Greater", box_slice, _c(0.0, np.float32)), _c([2]))
    new_size = D.op("AddV2", size, D.op("Sum", D.op("Cast", counted, DstT=_I32), _c([1])))
    return {roles.boxes: new_boxes, roles.threshold: threshold, roles.output_size: new_size, roles.idx: _add_one(idx)}


# --- reading the loop ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Operand:
    """A loop constant of the condition: loop var `var`, or the Const `value`; divided by `divisor` if set."""

    var: int | None
    value: int | None
    divisor: int | None = None

    def get(self, values: Sequence[Any]) -> np.ndarray | None:
        v = np.asarray(self.value, np.int32) if self.var is None else values[self.var]
        if not (isinstance(v, np.ndarray) and v.shape == () and v.dtype == _I32):
            return None
        if self.divisor is None:
            return v
        return None if self.divisor == 0 else np.floor_divide(v, np.int32(self.divisor))


@dataclass(frozen=True)
class PaddedNms:
    """A While recognised as a padded NMS loop, by loop var index; `counters` gain the iterations, every other
    loop var not named is returned unchanged."""

    spelling: str
    roles: _Roles
    max_output_size: _Operand
    limit: _Operand
    counters: tuple[int, ...]


def _scalar_int(nodes: dict[str, Node], ref: TensorRef, args: dict[str, int]) -> _Operand | None:
    ref = resolve(nodes, ref)
    if ref.node in args:
        return _Operand(args[ref.node], None)
    node = nodes.get(ref.node)
    value = node.attrs.get("value") if node is not None and node.op == "Const" else None
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype == _I32:
        return _Operand(None, int(value))
    return None


def _read_condition(cond: Function) -> tuple[int, int, _Operand, _Operand] | None:
    """(output_size, idx, max_output_size, limit) of `min(output_size) < max and idx < limit`, or None."""
    nodes = {n.name: n for n in cond.graph.nodes}
    args = {parse_tensor_name(a).node: i for i, a in enumerate(cond.args)}
    top = nodes.get(resolve(nodes, parse_tensor_name(cond.rets[0])).node) if len(cond.rets) == 1 else None
    if top is None or top.op != "LogicalAnd":
        return None
    for first, second in (top.inputs, top.inputs[::-1]):
        size_less, idx_less = nodes.get(resolve(nodes, first).node), nodes.get(resolve(nodes, second).node)
        if size_less is None or idx_less is None or size_less.op != "Less" or idx_less.op != "Less":
            continue
        minimum = nodes.get(resolve(nodes, size_less.inputs[0]).node)
        size = resolve(nodes, minimum.inputs[0]).node if minimum is not None and minimum.op == "Min" else None
        idx = resolve(nodes, idx_less.inputs[0]).node
        most = _scalar_int(nodes, size_less.inputs[1], args)
        bound = resolve(nodes, idx_less.inputs[1])
        divide = nodes.get(bound.node)
        if divide is not None and divide.op == "FloorDiv":
            limit, divisor = _scalar_int(nodes, divide.inputs[0], args), _scalar_int(nodes, divide.inputs[1], args)
            limit = None if limit is None or divisor is None or divisor.var is not None else \
                _Operand(limit.var, limit.value, divisor.value)
        else:
            limit = _scalar_int(nodes, bound, args)
        if size in args and idx in args and most is not None and limit is not None:
            return args[size], args[idx], most, limit
    return None


def _condition_digest(size: int, idx: int, most: _Operand, limit: _Operand) -> bytes:
    def operand(o: _Operand) -> bytes:
        return D.arg(o.var) if o.var is not None else _c(o.value)

    bound = operand(limit)
    if limit.divisor is not None:
        bound = D.op("FloorDiv", bound, _c(limit.divisor))
    return D.op("LogicalAnd", D.op("Less", D.op("Min", D.arg(size), _c([0])), operand(most)),
                D.op("Less", D.arg(idx), bound))


def _tiles(body: Function) -> list[tuple[int, int | None, int | None]]:
    """(boxes var, tile Const, tile var) candidates: the body's `tf.shape(boxes)[1] // tile`."""
    nodes = {n.name: n for n in body.graph.nodes}
    args = {parse_tensor_name(a).node: i for i, a in enumerate(body.args)}
    found = []
    for node in body.graph.nodes:
        if node.op != "FloorDiv":
            continue
        dim = nodes.get(resolve(nodes, node.inputs[0]).node)
        shape = nodes.get(resolve(nodes, dim.inputs[0]).node) if dim is not None and dim.op == "StridedSlice" else None
        boxes = resolve(nodes, shape.inputs[0]).node if shape is not None and shape.op == "Shape" else None
        tile = _scalar_int(nodes, node.inputs[1], args)
        if boxes in args and tile is not None:
            found.append((args[boxes], tile.value, tile.var))
    return found


def recognise(cond: Function, body: Function, library: Any) -> PaddedNms | None:
    """The padded NMS loop a While calling `cond` and `body` runs, or None (see the module docstring)."""
    condition = _read_condition(cond)
    if condition is None or len(body.args) != len(body.rets) or len(cond.args) != len(body.args):
        return None
    size, idx, most, limit = condition
    types = body.arg_dtypes
    try:
        if FunctionDigests(cond, library).ret(0) != _condition_digest(size, idx, most, limit):
            return None
        digests = FunctionDigests(body, library)
        rets = digests.rets()
    except NotCanonical:
        return None
    if types[size] != _I32 or types[idx] != _I32:
        return None
    for boxes, tile_const, tile_var in _tiles(body):
        for threshold in (i for i, t in enumerate(types) if t == _F32 and i != boxes):
            roles = _Roles(boxes, threshold, size, idx, tile_const, tile_var)
            if types[boxes] != _F32 or (tile_var is not None and types[tile_var] != _I32):
                continue
            for spelling, model_garden in (("model_garden", True), ("tf_image", False)):
                if (tile_const is not None) != model_garden or (model_garden and tile_const != 512):
                    continue  # Model Garden's NMS_TILE_SIZE is a Python constant; tf.image's a tensor
                expected = _loop_body(roles, model_garden)
                if any(rets[i] != d for i, d in expected.items()):
                    continue
                counters = tuple(i for i in range(len(rets)) if i not in expected and types[i] == _I32
                                 and rets[i] == D.op("AddV2", D.arg(i), _c(1)))
                constants = [o.var for o in (most, limit) if o.var is not None] + ([tile_var] if tile_var is not None else [])
                if any(rets[i] != D.arg(i) for i in range(len(rets)) if i not in expected and i not in counters) \
                        or any(i in expected or i in counters for i in constants):
                    continue
                return PaddedNms(spelling, roles, most, limit, counters)
    return None


# --- running it -------------------------------------------------------------------------------------------


class PaddedNmsLoop:
    """A While recognised as a padded NMS loop, run as `_TensorgatePaddedNms`: called with the loop's inputs,
    its outputs, or None where the loop must run as it is."""

    def __init__(self, node: Node, nms: PaddedNms, bind_kernel: Callable[[Node], Callable[..., tuple]],
                 max_iterations: int):
        attrs = {"spelling": nms.spelling, "max_iterations": max_iterations}
        self.kernel = bind_kernel(Node(node.name, OP, (), (), node.device, attrs))
        self.nms = nms

    @classmethod
    def recognise(cls, node: Node, cond: Function, body: Function, library: Any,
                  bind_kernel: Callable[[Node], Callable[..., tuple]], max_iterations: int) -> PaddedNmsLoop | None:
        """The fused loop for While `node` calling `cond` and `body`, or None when it is no padded NMS loop."""
        nms = recognise(cond, body, library)
        return None if nms is None else cls(node, nms, bind_kernel, max_iterations)

    def __call__(self, values: Sequence[Any]) -> tuple | None:
        r = self.nms.roles
        boxes, threshold, size, idx = (values[i] for i in (r.boxes, r.threshold, r.output_size, r.idx))
        tile = np.asarray(r.tile_const, np.int32) if r.tile_var is None else values[r.tile_var]
        most, limit = self.nms.max_output_size.get(values), self.nms.limit.get(values)
        scalars = (idx, tile, *(values[i] for i in self.nms.counters))
        if (most is None or limit is None or not isinstance(boxes, np.ndarray) or boxes.dtype != _F32
                or boxes.ndim != 3 or boxes.shape[2] != 4 or not isinstance(size, np.ndarray) or size.dtype != _I32
                or size.shape != boxes.shape[:1] or not isinstance(threshold, np.ndarray) or threshold.dtype != _F32
                or threshold.shape != () or any(not isinstance(s, np.ndarray) or s.dtype != _I32 or s.shape != ()
                                                for s in scalars)):
            return None
        if boxes.size and not bool(np.abs(boxes).max() <= COORDINATE_LIMIT):  # (NaN: the comparison is false)
            return None
        new_boxes, new_size, new_idx, iterations = self.kernel(boxes, size, idx, threshold, most, limit, tile)
        if iterations < 0:
            return None
        results = list(values)
        results[r.boxes], results[r.output_size], results[r.idx] = new_boxes, new_size, new_idx
        for i in self.nms.counters:
            results[i] = np.asarray(values[i] + int(iterations), values[i].dtype)
        return tuple(results)
