"""Function inlining: a call node (PartitionedCall, StatefulPartitionedCall) replaced by the body of
the function it calls, so that the graph runs, and is optimized, as one plain graph.

TensorFlow's SavedModels route every signature through such calls (a signature wrapper calling the
traced function), with variables passed in as resource arguments; inlined, a variable read sits next
to the variable and can be frozen into a constant (engine.saved_model.loader).

For a call node `C` calling `f`, inlining (like TensorFlow's `InlineFunctionBody`):

- copies each node of `f`'s body into the graph as `C/<node>`, its inputs rewired: an argument of `f`
  becomes the call's matching input, `node:output_arg:index` becomes `C/node:flat_index`;
- gives body nodes that depend on nothing else in the body the call's control inputs, so nothing of
  the body starts before them;
- rewires readers of `C:k` to the tensor `f` returns as its output k, and keeps a node named `C`
  (IdentityN of the returned tensors, NoOp for a call without outputs) with control inputs on `f`'s
  control outputs: `C:k` stays a valid name (signatures name it) and `^C` still waits for the body's
  effects.

Functional control flow (If, While) is left alone: its functions run as called, per iteration or
branch. Calls inside inlined bodies are inlined in turn.

    >>> flat = inline_calls(graph_def)   # a GraphDef without PartitionedCall nodes
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from engine.errors import GraphError
from engine.graph import TensorRef, parse_tensor_name
from engine.graph.functions import Function, load_library
from engine.proto import function_pb2, graph_pb2, node_def_pb2
from kernels.control_flow.functional import PARTITIONED_CALL_OPS

__all__ = ["inline_calls", "input_node", "tensor_input"]

# Calls nested deeper than this are taken for recursion (which a FunctionDef library may express).
MAX_INLINE_DEPTH = 64


def tensor_input(ref: TensorRef) -> str:
    """A flat tensor as a GraphDef input string: `node` for output 0, `node:i` otherwise."""
    return ref.node if ref.index == 0 else f"{ref.node}:{ref.index}"


def input_node(text: str) -> str:
    """The node behind a NodeDef input string: a data input `node` / `node:i`, or a control input
    `^node`; ValueError for a malformed one."""
    return text[1:] if text.startswith("^") else parse_tensor_name(text).node


class _Scopes:
    """Every scope (`a/`, `a/b/`) that a node name sits in: a body's prefix must be none of them, so
    that no copied node can take a name in use."""

    def __init__(self, names):
        self._scopes: set[str] = set()
        self.update(names)

    def update(self, names) -> None:
        for name in names:
            end = name.find("/")
            while end >= 0:
                self._scopes.add(name[: end + 1])
                end = name.find("/", end + 1)

    def unique_prefix(self, name: str) -> str:
        prefix = f"{name}/"
        n = 0
        while prefix in self._scopes:
            n += 1
            prefix = f"{name}/_inlined_{n}/"
        return prefix


class _Inliner:
    def __init__(self, graph_def: graph_pb2.GraphDef, library: Mapping[str, Function]):
        self.library = library
        self.fdefs: dict[str, function_pb2.FunctionDef] = {f.signature.name: f for f in graph_def.library.function}

    def expand(
        self, call: node_def_pb2.NodeDef, taken: _Scopes, keep_outputs: bool
    ) -> tuple[list[node_def_pb2.NodeDef], dict[str, str]]:
        """The body of `call` as new top-level nodes (its own replacement, named like the call, last),
        and where each of the call's outputs now comes from (`"C:k"` -> input string)."""
        fname = call.attr["f"].func.name
        if fname not in self.fdefs:
            raise GraphError(f"node '{call.name}' ({call.op}) calls function '{fname}', which the library lacks")
        function = self.library[fname]
        fdef = self.fdefs[fname]
        data_inputs = [i for i in call.input if not i.startswith("^")]
        call_controls = [i for i in call.input if i.startswith("^")]
        if len(data_inputs) != len(function.args):
            raise GraphError(f"node '{call.name}' passes {len(data_inputs)} inputs to '{fname}', which takes "
                             f"{len(function.args)}")
        args = {parse_tensor_name(a).node: text for a, text in zip(function.args, data_inputs)}
        prefix = taken.unique_prefix(call.name)

        def rewire(ref: TensorRef) -> str:
            if ref.node in args:
                return args[ref.node]
            return tensor_input(TensorRef(prefix + ref.node, ref.index))

        body = []
        for nd in fdef.node_def:
            decoded = function.graph.node(nd.name)
            new = node_def_pb2.NodeDef()
            new.CopyFrom(nd)
            new.name = prefix + nd.name
            if "_class" in new.attr:
                # Colocation hints name nodes of the graph the function was traced in, not of this one.
                del new.attr["_class"]
            del new.input[:]
            internal = False
            for ref in decoded.inputs:
                new.input.append(rewire(ref))
                internal |= ref.node not in args
            for ctrl in decoded.control_inputs:
                if ctrl in args:
                    new.input.append("^" + input_node(args[ctrl]))
                else:
                    new.input.append("^" + prefix + ctrl)
                    internal = True
            if not internal:
                new.input.extend(call_controls)
            body.append(new)

        rets = [rewire(parse_tensor_name(r)) for r in function.rets]
        replacement = node_def_pb2.NodeDef(name=call.name, device=call.device)
        if rets and keep_outputs:
            replacement.op = "IdentityN"
            replacement.input.extend(rets)
            replacement.attr["T"].list.type.extend(call.attr["Tout"].list.type)
        else:
            replacement.op = "NoOp"
        replacement.input.extend("^" + prefix + c for c in function.control_rets)
        body.append(replacement)
        outputs = {f"{call.name}:{k}": ret for k, ret in enumerate(rets)}
        return body, outputs


def _rewire_outputs(nodes: list[node_def_pb2.NodeDef], outputs: Mapping[str, str]) -> None:
    """Point readers of an inlined call's outputs at the returned tensors."""
    for nd in nodes:
        for i, text in enumerate(nd.input):
            if text.startswith("^"):
                continue
            ref = parse_tensor_name(text)
            target = outputs.get(f"{ref.node}:{ref.index}")
            if target is not None:
                nd.input[i] = target


def _resolve(outputs: dict[str, str]) -> None:
    """Follow chains: a call whose output is another inlined call's output reads the final tensor."""
    for key, target in outputs.items():
        seen = {key}
        while True:
            ref = parse_tensor_name(target)
            nxt = outputs.get(f"{ref.node}:{ref.index}")
            if nxt is None or nxt in seen:
                break
            seen.add(nxt)
            target = nxt
        outputs[key] = target


def inline_calls(
    graph_def: graph_pb2.GraphDef,
    keep_outputs: Callable[[str], bool] | None = None,
) -> graph_pb2.GraphDef:
    """A copy of `graph_def` with its PartitionedCall/StatefulPartitionedCall nodes replaced by their
    functions' bodies, and so on for the calls those bodies hold. The library is kept whole.

    Readers inside the graph are rewired to the returned tensors; a call named `C` leaves a stand-in
    that keeps `C:k` valid for readers outside it (fetches), unless `keep_outputs(C)` is false: then
    the stand-in is a NoOp that only keeps `^C` meaningful.

    GraphError for a call nested deeper than MAX_INLINE_DEPTH (recursion) or a missing function."""
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    inliner = _Inliner(graph_def, load_library(graph_def.library))
    nodes = list(out.node)
    outputs: dict[str, str] = {}
    for _depth in range(MAX_INLINE_DEPTH + 1):
        calls = [nd for nd in nodes if nd.op in PARTITIONED_CALL_OPS]
        if not calls:
            break
        taken = _Scopes(nd.name for nd in nodes)
        expanded: dict[str, list[node_def_pb2.NodeDef]] = {}
        for call in calls:
            body, call_outputs = inliner.expand(call, taken, keep_outputs is None or keep_outputs(call.name))
            taken.update(nd.name for nd in body)
            expanded[call.name] = body
            outputs.update(call_outputs)
        nodes = [new for nd in nodes for new in expanded.get(nd.name, [nd])]
    else:
        deepest = sorted({nd.attr["f"].func.name for nd in nodes if nd.op in PARTITIONED_CALL_OPS})
        raise GraphError(f"function calls nest deeper than {MAX_INLINE_DEPTH} levels (recursion?) through "
                         f"{', '.join(deepest[:5])}")
    _resolve(outputs)
    _rewire_outputs(nodes, outputs)
    del out.node[:]
    out.node.extend(nodes)
    return out
