"""Placement: which device each node of a signature runs on, the way TensorFlow's placer decides it.

A session has a device (`cpu:0`, `cpu:1`, `gpu:0`, ...) and a set of devices it may use (its logical
CPUs, plus its GPU). Each pruned, optimized node is placed by these rules, first match wins:

1. Its NodeDef `device` field, when that names a device the session has and the op has a kernel of
   that kind there (TensorFlow names such as `/job:localhost/replica:0/task:0/device:CPU:1` included).
   Anything else in the field is ignored, as TensorFlow's soft placement does.
2. Identity-like ops forward a value without computing: they stay with their input, so that a
   pass-through never costs a transfer.
3. The session's device, when the op has a kernel of its kind there. A call op (If, While,
   PartitionedCall) counts as having one when every node of every function it (indirectly) calls
   has one and no body has v1 control flow; string tensors never go to a GPU.
4. Otherwise `cpu:0`, which has every kernel.

Constants have no device of their own: engine.devices.partition gives every partition that reads a Const its
own copy (TensorFlow colocates a Const with its consumer), so constants never cross devices. Fed
tensors likewise go straight to each partition that reads them.

A signature with v1 control flow (Switch, Merge, Enter, Exit, NextIteration) is not split: the
dataflow executor's frames, iterations and dead values do not cross a rendezvous here, so the whole
signature runs on one device, the session's when it is a CPU (a logical CPU included) and cpu:0 on
a GPU session (the frame executor reads predicates and Merge indices on the host).

    >>> placement = place(nodes, device="gpu:0", devices=("cpu:0", "gpu:0"), library=graph.library)
    >>> placement["lookup/StringToHashBucketFast"]
    'cpu:0'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import kernels
from engine import devices as dev
from engine.graph import Node, TensorRef
from engine.graph.functions import FUNCTION_ATTRS
from kernels.array.identity import IDENTITY_OPS
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS
from kernels.control_flow.functional import CALL_OPS

__all__ = ["HOST_MEMORY_INPUTS", "Placement", "dataflow_device", "host_memory_nodes", "is_replicable", "place"]

# Node name -> canonical device.
Placement = dict[str, str]

_ANYWHERE = frozenset({"NoOp", "Placeholder", "PlaceholderV2", "Const"})
_FORWARDING = IDENTITY_OPS | {"IdentityN"}


def is_replicable(node: Node) -> bool:
    """A Const with nothing to wait for: every partition that reads it gets its own copy."""
    return node.op == "Const" and not node.inputs and not node.control_inputs


def _has_strings(node: Node) -> bool:
    for value in node.attrs.values():
        if isinstance(value, np.dtype) and value == np.dtype(object):
            return True
        if isinstance(value, tuple) and any(isinstance(v, np.dtype) and v == np.dtype(object) for v in value):
            return True
    return False


class _Support:
    """Whether a node can run on a device kind; call ops are judged by their functions' bodies."""

    def __init__(self, library: Mapping[str, Any]):
        self.library = library
        self._functions: dict[tuple[str, str], bool] = {}

    def node(self, node: Node, kind: str) -> bool:
        if node.op in _ANYWHERE or node.op in _FORWARDING:
            return True
        if kind == "gpu" and _has_strings(node):
            return False
        if node.op in CALL_OPS:
            return self._call(node, kind)
        return kernels.has_op(node.op, kind)

    def _call(self, node: Node, kind: str) -> bool:
        for attr in FUNCTION_ATTRS.get(node.op, ()):
            name = getattr(node.attrs.get(attr), "name", None)
            if not name or name not in self.library or not self._function(name, kind):
                return False
        return True

    def _function(self, name: str, kind: str) -> bool:
        key = (name, kind)
        if key not in self._functions:
            self._functions[key] = False  # a recursive call is refused elsewhere; do not loop here
            body = self.library[name].graph.nodes
            ok = all(self.node(n, kind) for n in body)
            if kind != "cpu" and any(n.op in CONTROL_FLOW_OPS for n in body):
                ok = False
            self._functions[key] = ok
        return self._functions[key]


def dataflow_device(device: str) -> str:
    """Where a signature run by the dataflow executor (v1 control flow, partial runs) goes: the
    session's device when it is a CPU, else cpu:0 (frames read predicates and Merge indices on the host)."""
    return device if dev.device_kind(device) == "cpu" else "cpu:0"


def place(
    nodes: Sequence[Node],
    *,
    device: str,
    devices: Sequence[str],
    library: Mapping[str, Any],
    fed: frozenset[TensorRef] = frozenset(),
) -> Placement:
    """Each node's device by the rules of the module docstring. `nodes` are topologically ordered."""
    device = dev.canonical_device(device)
    support = _Support(library)
    kind = dev.device_kind(device)
    host = "cpu:0"
    if any(node.op in CONTROL_FLOW_OPS for node in nodes):
        single = dataflow_device(device)
        return {node.name: single for node in nodes}

    available = frozenset(devices)
    placement: Placement = {}
    consts: list[Node] = []
    for node in nodes:
        if is_replicable(node):
            consts.append(node)
            continue
        pinned = dev.try_parse_device(node.device)
        if pinned in available and support.node(node, dev.device_kind(pinned)):
            placement[node.name] = pinned
        elif node.op in _FORWARDING and node.inputs and node.inputs[0] not in fed and node.inputs[0].node in placement:
            placement[node.name] = placement[node.inputs[0].node]
        elif support.node(node, kind):
            placement[node.name] = device
        else:
            placement[node.name] = host
    # A Const sits with its first reader (each other reader's partition gets a copy); one nobody
    # reads (it is fetched) sits on the session's device, or where its device field pins it.
    first_reader: dict[str, str] = {}
    for node in nodes:
        for ref in node.inputs:
            if ref.node not in first_reader and node.name in placement:
                first_reader[ref.node] = placement[node.name]
    for node in consts:
        pinned = dev.try_parse_device(node.device)
        placement[node.name] = first_reader.get(node.name) or (pinned if pinned in available else device)
    return placement


# Inputs that kernels read as host values (shapes, axes, permutations, sizes): on a GPU they stay
# in host memory, as TensorFlow's HostMemory kernel registrations keep them.
HOST_MEMORY_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "ExpandDims": (1,), "Transpose": (1,), "Tile": (1,), "BroadcastTo": (1,),
    "Fill": (0,), "Pad": (1,), "PadV2": (1,), "MirrorPad": (1,), "ConcatV2": (-1,), "Concat": (0,),
    "Sum": (1,), "Mean": (1,), "Max": (1,), "Min": (1,), "Prod": (1,), "All": (1,), "Any": (1,),
    "ArgMax": (1,), "ArgMin": (1,), "Slice": (1, 2), "StridedSlice": (1, 2, 3), "Split": (0,),
    "SplitV": (1, 2), "GatherV2": (2,), "Range": (0, 1, 2), "Cumsum": (1,), "ResizeBilinear": (1,),
    "ResizeNearestNeighbor": (1,), "OneHot": (1,), "Reverse": (1,), "ReverseV2": (1,), "Squeeze": (),
    "ZerosLike": (), "TopKV2": (1,), "Roll": (1, 2), "EmptyTensorList": (0, 1), "TensorListReserve": (0, 1),
    "_Send": (0,),  # the receiving side moves the value to its own device
}
_SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
# Ops that, on host int inputs, compute more shape arithmetic on the host.
_SHAPE_ARITHMETIC = frozenset({
    "Pack", "Unpack", "StridedSlice", "Slice", "ConcatV2", "Concat", "GatherV2", "Gather", "Cast", "Mul", "Add",
    "AddV2", "Sub", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Prod", "Sum", "Range", "Fill", "Reshape",
    "ExpandDims", "Squeeze", "BroadcastArgs", "Equal", "Less", "Greater", "Select", "SelectV2",
})
_INT_KINDS = "iub"


def _is_int_const(node: Node) -> bool:
    value = node.attrs.get("value")
    return isinstance(value, np.ndarray) and value.dtype.kind in _INT_KINDS and value.size <= 64


def _int_typed(node: Node) -> bool:
    for attr in ("T", "DstT", "Tidx", "out_type", "dtype", "N"):
        value = node.attrs.get(attr)
        if isinstance(value, np.dtype) and value.kind not in _INT_KINDS:
            return False
    return True


def host_memory_nodes(nodes: Sequence[Node], fetched: frozenset[str] = frozenset()) -> frozenset[str]:
    """Among the nodes of one GPU partition, those whose values should stay on the host: Shape-like
    ops, small int constants, and int arithmetic over them, when every reader reads them as a host
    input (HOST_MEMORY_INPUTS) or is itself such a node. Everything else runs on the device.

    Sets only shrink until stable: a node leaves when one of its inputs or readers leaves.
    """
    by_name = {n.name: n for n in nodes}
    candidates = set()
    for node in nodes:
        if node.op in _SHAPE_OPS or (node.op == "Const" and _is_int_const(node)) or node.op in _SHAPE_ARITHMETIC and _int_typed(node) and node.inputs and all(
            ref.node in candidates for ref in node.inputs
        ):
            candidates.add(node.name)
    readers: dict[str, list[tuple[Node, int]]] = {}
    for node in nodes:
        for i, ref in enumerate(node.inputs):
            readers.setdefault(ref.node, []).append((node, i))

    def host_read(reader: Node, index: int) -> bool:
        positions = HOST_MEMORY_INPUTS.get(reader.op, ())
        return index in positions or (index == len(reader.inputs) - 1 and -1 in positions)

    changed = True
    while changed:
        changed = False
        for name in list(candidates):
            node = by_name[name]
            ok = name not in fetched and node.op not in _FORWARDING
            ok = ok and all(r.name in candidates or host_read(r, i) for r, i in readers.get(name, ()))
            if ok and node.op not in _SHAPE_OPS and node.op != "Const":
                ok = all(ref.node in candidates for ref in node.inputs)
            if not ok:
                candidates.discard(name)
                changed = True
    return frozenset(candidates)
