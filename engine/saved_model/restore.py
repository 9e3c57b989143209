"""Where a SavedModel's variables get their values, traced through its restore op and init ops.

A loader (TensorFlow Serving's, or TensorFlow's own TF1 loader) brings a SavedModel's variables to life
in two steps: it runs the restore op named by the SaverDef, with the checkpoint prefix fed, then the
init op (the `saved_model_main_op` / `legacy_init_op` collections, or the `__saved_model_init_op`
signature). tensorgate runs neither; it reads the same wiring:

- an assignment (`AssignVariableOp` for resource variables, `Assign` for TF1's VariableV2) whose
  target traces back to a variable node and whose value traces back to output i of a `RestoreV2`
  takes the checkpoint key at position i of RestoreV2's `tensor_names` constant;
- TF2 writes the restore op as a call of a `__inference__traced_restore_*` function taking the
  variables as resource arguments: tracing goes into called functions, following each argument back
  to the call's input, through Identity nodes on the way;
- init-op assignments (TF2 puts asset paths into string variables so) take their value from an
  asset's placeholder (the asset's path), a constant, or another variable; they run after the restore,
  so they win.

Tracing the restore op rather than the object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`): the restore op
is what TensorFlow Serving itself runs, so it is the one description that always agrees with what a
server restores; it covers TF1 savers and TF2 functions alike; and it names the variable *nodes*
that the signatures read, which the object graph does not (its variables are Python objects, tied to
graph nodes only through the functions' captured inputs).

    >>> sources = trace_variable_sources(graph, restore_op="StatefulPartitionedCall_3", init_ops=["NoOp"])
    >>> sources["dense/kernel"]
    Checkpointed(key='dense/kernel/.ATTRIBUTES/VARIABLE_VALUE', full_shape=None, part=None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.errors import SavedModelError
from engine.graph import Graph, Node, TensorRef, parse_tensor_name
from engine.saved_model.inline import input_node
from kernels.control_flow.functional import PARTITIONED_CALL_OPS

__all__ = [
    "VARIABLE_OPS",
    "VARIABLE_WRITE_OPS",
    "Checkpointed",
    "Constant",
    "FromVariable",
    "Untraceable",
    "VariableSource",
    "parse_slice_spec",
    "trace_variable_sources",
]

# Ops that are variables: resource variables (VarHandleOp) and TF1's reference variables.
VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
ASSIGN_OPS = frozenset({"AssignVariableOp", "Assign"})
# Every op that changes a variable's value in place.
VARIABLE_WRITE_OPS = ASSIGN_OPS | frozenset({
    "AssignAddVariableOp", "AssignSubVariableOp", "AssignAdd", "AssignSub",
    "ResourceScatterUpdate", "ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterMul",
    "ResourceScatterDiv", "ResourceScatterMin", "ResourceScatterMax",
    "ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterMul", "ScatterDiv", "ScatterMin", "ScatterMax",
})
# Checkpoint formats before V2 (a Saver with write_version=V1): their restore ops read other files.
_V1_RESTORE_OPS = frozenset({"Restore", "RestoreSlice"})
_PASS_THROUGH = frozenset({"Identity", "Snapshot", "StopGradient"})


@dataclass(frozen=True)
class Checkpointed:
    """The variable is restored from the checkpoint entry `key`; a partition of a TF1 partitioned
    variable from the region `part` ((start, length) per dimension, length -1 for all of it) of the
    entry, whose full shape is `full_shape`."""

    key: str
    full_shape: tuple[int, ...] | None = None
    part: tuple[tuple[int, int], ...] | None = None


def parse_slice_spec(spec: str) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """A RestoreV2 slice spec, `"4 2 0,2:-"` (full shape, then start,length or `-` per dimension), as
    (full shape, extents); ValueError when malformed."""
    *shape_text, extents_text = spec.split(" ")
    shape = tuple(int(d) for d in shape_text)
    extents = []
    for part in extents_text.split(":"):
        if part == "-":
            extents.append((0, -1))
        else:
            start, length = part.split(",")
            extents.append((int(start), int(length)))
    if len(extents) != len(shape):
        raise ValueError(f"{len(extents)} extents for a shape of rank {len(shape)}")
    return shape, tuple(extents)


@dataclass(frozen=True)
class Constant:
    """The init op assigns a known value: a constant, or an asset's path (`asset` names the file)."""

    value: np.ndarray = field(compare=False)
    asset: str | None = None


@dataclass(frozen=True)
class FromVariable:
    """The init op assigns the value of another variable."""

    variable: str


@dataclass(frozen=True)
class Untraceable:
    """An assignment whose value comes from something else (a computation, a table, ...): `why` says
    what. An error only if a signature reads the variable."""

    why: str


VariableSource = Checkpointed | Constant | FromVariable | Untraceable


@dataclass(frozen=True)
class _Scope:
    """A graph being traced: the top-level graph, or a function body entered through a call, whose
    arguments (by placeholder name) resolve to the caller's tensors."""

    graph: Graph
    where: str
    args: Mapping[str, tuple[_Scope, TensorRef]] = field(default_factory=dict)
    parent: _Scope | None = None


def _origin(scope: _Scope, ref: TensorRef) -> tuple[_Scope, Node, TensorRef]:
    """The node a tensor really comes from: through Identity nodes and out of function arguments."""
    for _ in range(10_000):
        node = scope.graph.node(ref.node)
        if node.op in _PASS_THROUGH and node.inputs:
            ref = node.inputs[0]
        elif node.op == "Placeholder" and node.name in scope.args:
            scope, ref = scope.args[node.name]
        else:
            return scope, node, ref
    raise SavedModelError(f"{scope.where}: tensor '{ref}' passes through a cycle of identities")


def _const_value(scope: _Scope, ref: TensorRef, what: str) -> np.ndarray:
    _, node, _ = _origin(scope, ref)
    if node.op != "Const":
        raise SavedModelError(f"{scope.where}: the {what} come from node '{node.name}' ({node.op}), not a "
                              "constant; this restore structure is not supported")
    if "value" not in node.attrs:
        raise SavedModelError(f"{scope.where}: the {what} come from Const '{node.name}', which has no value")
    return node.attrs["value"]


def _text(value: bytes | str) -> str:
    """An element of a string constant as text."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class _Tracer:
    def __init__(self, graph: Graph, assets: Mapping[str, str]):
        self.top = _Scope(graph, "the graph")
        self.assets = assets  # asset placeholder tensor name -> the asset's path
        self.sources: dict[str, VariableSource] = {}

    def variable(self, scope: _Scope, ref: TensorRef) -> str | None:
        scope, node, _ = _origin(scope, ref)
        if node.op in VARIABLE_OPS:
            if scope.parent is not None:
                raise SavedModelError(f"{scope.where}: variable '{node.name}' ({node.op}) is created inside a "
                                      "function; only variables of the graph itself are supported")
            return node.name
        return None

    def restored(self, scope: _Scope, restore: Node, index: int) -> Checkpointed:
        if len(restore.inputs) < 3:
            raise SavedModelError(f"{scope.where}: '{restore.name}' (RestoreV2) has {len(restore.inputs)} inputs; it "
                                  "takes three (prefix, tensor names, slice specs)")
        names = _const_value(scope, restore.inputs[1], f"tensor names of '{restore.name}'").reshape(-1)
        slices = _const_value(scope, restore.inputs[2], f"slice specs of '{restore.name}'").reshape(-1)
        if index >= names.size:
            raise SavedModelError(f"{scope.where}: '{restore.name}' output {index} has no tensor name")
        key = _text(names[index])
        spec = _text(slices[index]) if index < slices.size else ""
        if not spec:
            return Checkpointed(key)
        try:
            shape, extents = parse_slice_spec(spec)
        except ValueError as e:
            raise SavedModelError(f"{scope.where}: '{restore.name}' restores '{key}' with slice spec '{spec}': "
                                  f"{e}") from None
        return Checkpointed(key, shape, extents)

    def value_source(self, scope: _Scope, ref: TensorRef) -> VariableSource:
        origin_scope, node, ref = _origin(scope, ref)
        if node.op == "RestoreV2":
            return self.restored(origin_scope, node, ref.index)
        # An asset tensor (a placeholder, or in TF1 a Const) is fed the asset's path when the init op runs.
        if origin_scope.parent is None and str(ref) in self.assets:
            path = self.assets[str(ref)]
            return Constant(np.array(path.encode("utf-8"), dtype=object), asset=path)
        if node.op == "Const":
            return Constant(np.asarray(node.attrs["value"]))
        if node.op == "ReadVariableOp":
            source = self.variable(origin_scope, node.inputs[0])
            if source is not None:
                return FromVariable(source)
        return Untraceable(f"it is assigned the output of node '{node.name}' ({node.op}) in {origin_scope.where}")

    def walk(self, scope: _Scope, roots: Sequence[str]) -> None:
        """Every assignment among the ancestors of `roots`, in called functions too."""
        for node in _ancestors(scope.graph, roots):
            if node.op in _V1_RESTORE_OPS:
                raise SavedModelError(f"{scope.where}: node '{node.name}' ({node.op}) restores from a V1 checkpoint; "
                                      "only V2 checkpoints (tensor bundles) are supported")
            if node.op in ASSIGN_OPS and len(node.inputs) >= 2:
                target = self.variable(scope, node.inputs[0])
                if target is None:
                    continue  # not one of the graph's variables (a function-local resource)
                self.sources[target] = self.value_source(scope, node.inputs[1])
            elif node.op in PARTITIONED_CALL_OPS:
                self.enter(scope, node)

    def enter(self, scope: _Scope, call: Node) -> None:
        function = scope.graph.library[call.attrs["f"].name]
        args = {parse_tensor_name(arg).node: (scope, ref) for arg, ref in zip(function.args, call.inputs)}
        inner = _Scope(function.graph, f"function '{function.name}' (called by '{call.name}')", args, scope)
        roots = [parse_tensor_name(r).node for r in function.rets] + list(function.control_rets)
        self.walk(inner, roots)


def _ancestors(graph: Graph, roots: Sequence[str]) -> list[Node]:
    seen: set[str] = set()
    stack = [r for r in roots if r in graph]
    order = []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = graph.node(name)
        order.append(node)
        stack.extend(ref.node for ref in node.inputs)
        stack.extend(node.control_inputs)
    return order


def trace_variable_sources(
    graph: Graph,
    restore_op: str | None,
    init_ops: Sequence[str] = (),
    assets: Mapping[str, str] | None = None,
) -> dict[str, VariableSource]:
    """Variable node name -> where its value comes from, for every variable that the restore op or an
    init op assigns (see the module docstring). `graph` is the SavedModel's graph decoded without
    checking for kernels; `assets` maps each asset's placeholder tensor (`"name:0"`) to its path.
    SavedModelError for a restore structure that cannot be read (V1 checkpoints, malformed slice specs,
    tensor names that are not constants)."""
    tracer = _Tracer(graph, assets or {})
    if restore_op:
        name = input_node(restore_op)
        if name not in graph:
            raise SavedModelError(f"the SaverDef's restore op '{restore_op}' is not a node of the graph")
        tracer.walk(tracer.top, [name])
    for op in init_ops:
        name = input_node(op)
        if name in graph:
            tracer.walk(tracer.top, [name])
    return tracer.sources
