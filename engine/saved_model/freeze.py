"""Freezing variables: a graph whose variables become constants, as TensorFlow's own freezing
(`convert_variables_to_constants_v2`) does.

- A variable node (VarHandleOp, VariableV2) becomes a Const of its value, under the same name, so
  TF1's `var/read` Identity keeps working.
- A ReadVariableOp of it becomes an Identity; a ResourceGather a GatherV2 (with its axis as a new
  Const).
- A variable passed as a resource into functional control flow (While, If, or a call not inlined)
  is passed as its value instead: the called functions are copied with that argument's type changed
  from resource to the value's dtype, their reads turned into identities the same way (and so on into
  the calls they make); a While's body must hand the variable back unchanged, and the While's
  matching output becomes the value too. The copies are named `<function>_frozen_<arg indices>`.

A variable that something else uses (an assignment, a scatter: a counter, Keras' seed-generator
state) stays *live*: `written_variables` finds them, and freezing leaves their VarHandleOp in place
with the checkpoint's value in its `_tensorgate_initial_value` attr, which the VarHandleOp kernel
(kernels.state.variables) uses to initialise the session's variable.

    >>> live = written_variables(graph_def)
    >>> frozen = freeze_variables(graph_def, {"dense/kernel": kernel_proto, "counter": counter_proto}, live)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from engine.errors import SavedModelError
from engine.graph import TensorRef, dtypes, parse_tensor_name
from engine.graph.functions import Function, load_library
from engine.graph.graph_def import decode_graph
from engine.proto import function_pb2, graph_pb2, node_def_pb2, tensor_pb2, types_pb2
from engine.saved_model.inline import tensor_input
from engine.saved_model.restore import VARIABLE_OPS
from kernels.control_flow.functional import IF_OPS, PARTITIONED_CALL_OPS, WHILE_OPS
from kernels.state.variables import INITIAL_VALUE_ATTR

__all__ = ["freeze_variables", "replace_with_const", "written_variables"]

_RESOURCE_VARIABLE_OPS = frozenset({"VarHandleOp"})
_READ_OPS = frozenset({"ReadVariableOp"})
# Uses of a variable handle that only read it: they never make a variable live.
_READING_OPS = frozenset({"ReadVariableOp", "ResourceGather", "VariableShape", "VarIsInitializedOp"})


@dataclass(frozen=True)
class _Value:
    """What a frozen resource tensor now carries: the value's dtype (enum) and shape."""

    dtype: int
    shape: tuple[int, ...]


class _Body:
    """The nodes of the graph or of one function body, with data inputs as flat tensors and the
    readers of each tensor; edits go to the NodeDefs in place."""

    def __init__(self, node_defs, flat_inputs: Mapping[str, list[TensorRef]], where: str,
                 fdef: function_pb2.FunctionDef | None = None):
        # `where` is "" for the graph, " in function 'f'" for a function body (for messages).
        self.node_defs = node_defs
        self.by_name = {nd.name: nd for nd in node_defs}
        self.where = where
        self.fdef = fdef
        self.flat = dict(flat_inputs)
        self.readers: dict[TensorRef, list[str]] = defaultdict(list)
        for name, refs in flat_inputs.items():
            for ref in refs:
                self.readers[ref].append(name)

    def input_text(self, ref: TensorRef) -> str:
        if self.fdef is None:
            return tensor_input(ref)
        return f"{ref.node}:output:{ref.index}"  # only for the Consts this module adds

    def rename_output_arg(self, node: str, old: str, new: str) -> None:
        """Inside a function, readers name outputs by arg (`read:value:0`); an op swap renames them."""
        if self.fdef is None or old == new:
            return
        before = f"{node}:{old}:"
        for nd in self.fdef.node_def:
            for i, text in enumerate(nd.input):
                if text.startswith(before):
                    nd.input[i] = f"{node}:{new}:" + text[len(before):]
        for key, text in self.fdef.ret.items():
            if text.startswith(before):
                self.fdef.ret[key] = f"{node}:{new}:" + text[len(before):]


class _Freezer:
    def __init__(self, graph_def: graph_pb2.GraphDef, library: Mapping[str, Function]):
        self.graph_def = graph_def
        self.library = library
        self.fdefs = {f.signature.name: f for f in graph_def.library.function}
        self.specialized: dict[tuple, tuple[str, dict[int, _Value]]] = {}

    # --- one body ------------------------------------------------------------------------------------

    def freeze_body(self, body: _Body, frozen: Mapping[TensorRef, _Value]) -> dict[TensorRef, _Value]:
        """Rewrite every reader of the frozen tensors; returns all tensors that now carry values
        (`frozen` plus the outputs of identities and control flow that pass them on)."""
        carried = dict(frozen)
        queue = list(frozen.items())
        calls: dict[str, dict[int, _Value]] = defaultdict(dict)
        done_calls: dict[str, dict[int, _Value]] = {}
        while queue or any(calls[c] != done_calls.get(c) for c in calls):
            if not queue:
                name = next(c for c in calls if calls[c] != done_calls.get(c))
                done_calls[name] = dict(calls[name])
                for ref, value in self.freeze_call(body, body.by_name[name], calls[name]).items():
                    if ref not in carried:
                        carried[ref] = value
                        queue.append((ref, value))
                continue
            ref, value = queue.pop()
            for reader in dict.fromkeys(body.readers.get(ref, ())):
                nd = body.by_name[reader]
                positions = [i for i, r in enumerate(body.flat.get(reader, ())) if r == ref]
                out = self.freeze_reader(body, nd, value)
                if out is _CALL:
                    calls[reader].update({p: value for p in positions})
                elif out is not None and out not in carried:
                    carried[out] = value
                    queue.append((out, value))
        return carried

    def freeze_reader(self, body: _Body, nd: node_def_pb2.NodeDef, value: _Value):
        """Rewrite one reader of a frozen resource; returns its output if that carries the value on,
        _CALL for a call op (handled once all its frozen inputs are known), None otherwise."""
        if nd.op in _READ_OPS:
            declared = nd.attr["dtype"].type
            if declared != value.dtype:
                raise SavedModelError(f"node '{nd.name}'{body.where} reads a variable as {dtypes.tf_name(declared)}"
                                      f", but its value is {dtypes.tf_name(value.dtype)}")
            nd.op = "Identity"
            del nd.attr["dtype"]
            nd.attr["T"].type = value.dtype
            body.rename_output_arg(nd.name, "value", "output")
            return None
        if nd.op == "Identity" and "T" in nd.attr and nd.attr["T"].type == types_pb2.DT_RESOURCE:
            nd.attr["T"].type = value.dtype
            return TensorRef(nd.name, 0)
        if nd.op == "ResourceGather":
            self.gather(body, nd, value)
            return None
        if nd.op in IF_OPS | WHILE_OPS | PARTITIONED_CALL_OPS:
            return _CALL
        raise SavedModelError(f"node '{nd.name}' ({nd.op}){body.where} uses a variable in a way that cannot be "
                              "frozen into a constant; serving graphs may only read their variables")

    def gather(self, body: _Body, nd: node_def_pb2.NodeDef, value: _Value) -> None:
        """ResourceGather(var, indices) -> GatherV2(value, indices, axis = batch_dims)."""
        batch_dims = nd.attr["batch_dims"].i if "batch_dims" in nd.attr else 0
        index_type = nd.attr["Tindices"].type
        axis_name = f"{nd.name}/axis"
        while axis_name in body.by_name:
            axis_name += "_"
        axis = body.node_defs.add(name=axis_name, op="Const", device=nd.device)
        axis.attr["dtype"].type = index_type
        axis.attr["value"].tensor.CopyFrom(_scalar(index_type, batch_dims))
        body.by_name[axis_name] = axis
        controls = [i for i in nd.input if i.startswith("^")]
        data = [i for i in nd.input if not i.startswith("^")]
        del nd.input[:]
        nd.input.extend(data[:2] + [body.input_text(TensorRef(axis_name, 0))] + controls)
        nd.op = "GatherV2"
        for attr in ("dtype", "validate_indices"):
            if attr in nd.attr:
                del nd.attr[attr]
        nd.attr["Tparams"].type = value.dtype
        nd.attr["Taxis"].type = index_type
        nd.attr["batch_dims"].i = batch_dims

    # --- control flow and calls ----------------------------------------------------------------------------

    def freeze_call(self, body: _Body, nd: node_def_pb2.NodeDef, frozen_inputs: Mapping[int, _Value]
                    ) -> dict[TensorRef, _Value]:
        """Pass values instead of resources into a call op; returns its outputs that carry values."""
        where = f"node '{nd.name}' ({nd.op}){body.where}"
        if nd.op in WHILE_OPS:
            cond, _ = self.specialize(nd.attr["cond"].func.name, frozen_inputs, where)
            body_fn, body_out = self.specialize(nd.attr["body"].func.name, frozen_inputs, where)
            if body_out != dict(frozen_inputs):
                raise SavedModelError(f"{where}: the loop body does not hand its variables back unchanged "
                                      "(it assigns or swaps them); such loops cannot be frozen")
            nd.attr["cond"].func.name, nd.attr["body"].func.name = cond, body_fn
            for k, value in frozen_inputs.items():
                nd.attr["T"].list.type[k] = value.dtype
                _set_output_shape(nd, k, value.shape)
            return {TensorRef(nd.name, k): v for k, v in frozen_inputs.items()}
        if nd.op in IF_OPS:
            if 0 in frozen_inputs:
                raise SavedModelError(f"{where}: its condition is a variable handle")
            args = {k - 1: v for k, v in frozen_inputs.items()}
            then_fn, then_out = self.specialize(nd.attr["then_branch"].func.name, args, where)
            else_fn, else_out = self.specialize(nd.attr["else_branch"].func.name, args, where)
            if then_out != else_out:
                raise SavedModelError(f"{where}: its branches return different variables")
            nd.attr["then_branch"].func.name, nd.attr["else_branch"].func.name = then_fn, else_fn
            for k, value in args.items():
                nd.attr["Tin"].list.type[k] = value.dtype
            return self.retype_outputs(nd, then_out)
        fn, outs = self.specialize(nd.attr["f"].func.name, frozen_inputs, where)
        nd.attr["f"].func.name = fn
        for k, value in frozen_inputs.items():
            nd.attr["Tin"].list.type[k] = value.dtype
        return self.retype_outputs(nd, outs)

    @staticmethod
    def retype_outputs(nd: node_def_pb2.NodeDef, outs: Mapping[int, _Value]) -> dict[TensorRef, _Value]:
        for k, value in outs.items():
            nd.attr["Tout"].list.type[k] = value.dtype
            _set_output_shape(nd, k, value.shape)
        return {TensorRef(nd.name, k): v for k, v in outs.items()}

    def specialize(self, name: str, args: Mapping[int, _Value], where: str) -> tuple[str, dict[int, _Value]]:
        """A copy of function `name` taking values for the resource arguments `args` (by position);
        returns its name and which of its outputs now carry values."""
        key = (name, tuple(sorted((k, v.dtype, v.shape) for k, v in args.items())))
        if key in self.specialized:
            return self.specialized[key]
        if name not in self.fdefs:
            raise SavedModelError(f"{where}: calls function '{name}', which the library lacks")
        function = self.library[name]
        fdef = function_pb2.FunctionDef()
        fdef.CopyFrom(self.fdefs[name])
        new_name = f"{name}_frozen_{'_'.join(str(k) for k in sorted(args))}"
        while new_name in self.fdefs:
            new_name += "_"
        fdef.signature.name = new_name
        self.specialized[key] = (new_name, {})  # a (recursive) call of itself sees the name
        for k, value in args.items():
            arg = fdef.signature.input_arg[k]
            if arg.type != types_pb2.DT_RESOURCE:
                raise SavedModelError(f"{where}: argument {k} of '{name}' is {dtypes.tf_name(arg.type)}, not a resource")
            arg.type = value.dtype
            del arg.handle_data[:]
            if k in fdef.arg_attr:
                del fdef.arg_attr[k]
            if k in fdef.resource_arg_unique_id:
                del fdef.resource_arg_unique_id[k]
        # The decoded body holds the same nodes (plus a Placeholder per argument), inputs already flat.
        args_names = {parse_tensor_name(a).node for a in function.args}
        flat = {n.name: list(n.inputs) for n in function.graph.nodes if n.name not in args_names}
        body = _Body(fdef.node_def, flat, f" in function '{name}'", fdef)
        frozen = {parse_tensor_name(function.args[k]): v for k, v in args.items()}
        carried = self.freeze_body(body, frozen)
        outs = {}
        for j, ret in enumerate(function.rets):
            value = carried.get(parse_tensor_name(ret))
            if value is not None:
                fdef.signature.output_arg[j].type = value.dtype
                del fdef.signature.output_arg[j].handle_data[:]
                outs[j] = value
        self.fdefs[new_name] = fdef
        self.graph_def.library.function.append(fdef)
        self.specialized[key] = (new_name, outs)
        return new_name, outs


_CALL = object()


def _scalar(dtype: int, value: int) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=dtype)
    if dtype == types_pb2.DT_INT64:
        proto.int64_val.append(value)
    else:
        proto.int_val.append(value)
    return proto


def _set_output_shape(nd: node_def_pb2.NodeDef, k: int, shape: tuple[int, ...]) -> None:
    """Output k's declared shape, where the node declares shapes (TensorFlow checks them on import)."""
    for attr in ("output_shapes", "_output_shapes"):
        if attr in nd.attr and len(nd.attr[attr].list.shape) > k:
            proto = nd.attr[attr].list.shape[k]
            proto.Clear()
            for size in shape:
                proto.dim.add().size = size


def replace_with_const(nd: node_def_pb2.NodeDef, value: tensor_pb2.TensorProto) -> None:
    """Turn `nd` in place into a Const holding `value`, keeping its name, device and control inputs."""
    controls = [i for i in nd.input if i.startswith("^")]
    name, device = nd.name, nd.device
    nd.Clear()
    nd.name, nd.op, nd.device = name, "Const", device
    nd.input.extend(controls)
    nd.attr["dtype"].type = value.dtype
    nd.attr["value"].tensor.CopyFrom(value)


class _Uses:
    """Walks where resource handles flow, into function bodies too, to find non-reading uses."""

    def __init__(self, graph_def: graph_pb2.GraphDef):
        self.library = load_library(graph_def.library)
        self.memo: dict[tuple[str, int], bool] = {}

    @staticmethod
    def readers(nodes) -> dict[TensorRef, list]:
        out: dict[TensorRef, list] = defaultdict(list)
        for node in nodes:
            for position, ref in enumerate(node.inputs):
                out[ref].append((node, position))
        return out

    def writes(self, start: TensorRef, readers: Mapping[TensorRef, list]) -> bool:
        """Whether the handle `start` reaches a use other than a read."""
        pending, seen = [start], {start}
        while pending:
            ref = pending.pop()
            for node, position in readers.get(ref, ()):
                if node.op in _READING_OPS:
                    continue
                if node.op in ("Identity", "IdentityN"):
                    follow = [TensorRef(node.name, position if node.op == "IdentityN" else 0)]
                elif node.op in WHILE_OPS:
                    if self.argument_writes(node, "cond", position) or self.argument_writes(node, "body", position):
                        return True
                    follow = [TensorRef(node.name, position)]
                elif node.op in IF_OPS:
                    if position == 0 or any(self.argument_writes(node, f, position - 1)
                                            for f in ("then_branch", "else_branch")):
                        return True
                    follow = []
                elif node.op in PARTITIONED_CALL_OPS:
                    if self.argument_writes(node, "f", position):
                        return True
                    follow = []
                else:
                    return True
                for out in follow:
                    if out not in seen:
                        seen.add(out)
                        pending.append(out)
        return False

    def argument_writes(self, node, attr: str, position: int) -> bool:
        name = getattr(node.attrs.get(attr), "name", None)
        if name not in self.library:
            return True  # nothing to look into: assume the worst
        key = (name, position)
        if key not in self.memo:
            self.memo[key] = True  # a recursive call sees "writes" until proven otherwise
            function = self.library[name]
            self.memo[key] = self.writes(parse_tensor_name(function.args[position]), self.readers(function.graph.nodes))
        return self.memo[key]


def written_variables(graph_def: graph_pb2.GraphDef) -> set[str]:
    """The resource variables (VarHandleOp) of `graph_def` that some node uses other than by reading
    them (an assignment, a scatter, an op tensorgate does not know), following handles through
    identities and into the functions of While, If and calls: they must stay live."""
    graph = decode_graph(graph_def, check_ops=False)
    uses = _Uses(graph_def)
    readers = uses.readers(graph.nodes)
    return {node.name for node in graph.nodes
            if node.op in _RESOURCE_VARIABLE_OPS and uses.writes(TensorRef(node.name, 0), readers)}


def freeze_variables(
    graph_def: graph_pb2.GraphDef,
    values: Mapping[str, tensor_pb2.TensorProto],
    live: frozenset[str] | set[str] = frozenset(),
) -> graph_pb2.GraphDef:
    """A copy of `graph_def` with each variable node named in `values` replaced by a Const of that
    value, and its uses rewritten (see the module docstring); the variables in `live` keep their
    VarHandleOp, their value becoming its initial value. SavedModelError for a use that cannot be
    frozen."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    freezer = _Freezer(out, load_library(graph_def.library))
    frozen: dict[TensorRef, _Value] = {}
    for nd in out.node:
        if nd.name not in values:
            continue
        if nd.op not in VARIABLE_OPS:
            raise SavedModelError(f"node '{nd.name}' ({nd.op}) is not a variable")
        if nd.name in live:
            if nd.op not in _RESOURCE_VARIABLE_OPS:
                raise SavedModelError(f"variable '{nd.name}' ({nd.op}) is written by a signature; only resource "
                                      "variables (VarHandleOp) can stay live, TF1 reference variables cannot")
            nd.attr[INITIAL_VALUE_ATTR].tensor.CopyFrom(values[nd.name])
            continue
        value = values[nd.name]
        declared = nd.attr["dtype"].type
        if dtypes.base_type(declared) != value.dtype:
            raise SavedModelError(f"variable '{nd.name}' is {dtypes.tf_name(declared)}, but its value is "
                                  f"{dtypes.tf_name(value.dtype)}")
        shape = tuple(int(d.size) for d in value.tensor_shape.dim)
        if "shape" in nd.attr and nd.attr["shape"].HasField("shape"):
            declared_shape = nd.attr["shape"].shape
            if not declared_shape.unknown_rank and (
                len(declared_shape.dim) != len(shape)
                or any(d.size >= 0 and d.size != s for d, s in zip(declared_shape.dim, shape))
            ):
                want = [d.size if d.size >= 0 else None for d in declared_shape.dim]
                raise SavedModelError(f"variable '{nd.name}' has shape {want}, but its value has shape {list(shape)}")
        if nd.op in _RESOURCE_VARIABLE_OPS:
            frozen[TensorRef(nd.name, 0)] = _Value(value.dtype, shape)
        replace_with_const(nd, value)
    if frozen:
        flat = {nd.name: [parse_tensor_name(i) for i in nd.input if not i.startswith("^")] for nd in out.node}
        body = _Body(out.node, flat, "")
        freezer.freeze_body(body, frozen)
    return out
