"""Functions: the bodies of a graph's FunctionDefLibrary, and the call ops that name them.

A `Function` is one FunctionDef decoded into a Graph of its own, whose input args are Placeholder nodes
named after the args. Functional control flow (If, While) and calls (PartitionedCall, ...) name
functions in attrs; `reachable_functions` finds and checks every function a graph calls, at load time.
Running a call op is engine.runtime.calls' business.

Inside a FunctionDef, a node input reads `arg` or `node:output_arg:index`; decoding turns both into the
graph form `node:flat_index` with the op's output arg list (engine.graph.op_outputs).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import GraphError, InvalidAttrError, InvalidInputError
from engine.graph import Graph, Node, TensorRef, dtypes, validate
from engine.graph.attrs import decode_node_attrs
from engine.graph.op_outputs import OUTPUT_ARGS
from engine.proto import function_pb2
from kernels.control_flow.functional import CALL_OPS, IF_OPS, WHILE_OPS

__all__ = [
    "FUNCTION_ATTRS",
    "Function",
    "FunctionLibrary",
    "call_types_attr",
    "called_function",
    "check_call_signature",
    "load_library",
    "reachable_functions",
]

# Attrs naming the functions each call op runs.
FUNCTION_ATTRS: dict[str, tuple[str, ...]] = {
    "If": ("then_branch", "else_branch"),
    "StatelessIf": ("then_branch", "else_branch"),
    "While": ("cond", "body"),
    "StatelessWhile": ("cond", "body"),
    "PartitionedCall": ("f",),
    "StatefulPartitionedCall": ("f",),
}


@dataclass(frozen=True, eq=False)
class Function:
    """One FunctionDef, decoded and validated.

    `args` are the tensors to feed, in input-arg order (each arg's Placeholder, `"x:0"`); `rets` the
    tensors to fetch, in output-arg order; `control_rets` the nodes that must run for effect;
    `stateful` the signature's is_stateful flag.

    >>> double = engine.load_graph("cond.pb").library["double"]  # y = x * 2
    >>> double.args, double.rets
    (('x:0',), ('mul:0',))
    """

    name: str
    graph: Graph
    args: tuple[str, ...]
    rets: tuple[str, ...]
    control_rets: tuple[str, ...]
    stateful: bool
    arg_dtypes: tuple[np.dtype, ...]
    ret_dtypes: tuple[np.dtype, ...]


class FunctionLibrary(Mapping[str, Function]):
    """A graph's functions by name, each decoded and validated on first access (a FunctionDef that
    does not decode raises its GraphError there).

    >>> sorted(graph.library)
    ['decrement', 'double']
    """

    def __init__(self, function_defs: Mapping[str, function_pb2.FunctionDef]):
        self._defs = dict(function_defs)
        self._decoded: dict[str, Function] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Function:
        function = self._decoded.get(name)
        if function is None:
            function = _decode_function(self._defs[name], self)
            with self._lock:
                function = self._decoded.setdefault(name, function)
        return function

    def __contains__(self, name: object) -> bool:
        return name in self._defs

    def __iter__(self) -> Iterator[str]:
        return iter(self._defs)

    def __len__(self) -> int:
        return len(self._defs)


def load_library(library: function_pb2.FunctionDefLibrary) -> FunctionLibrary:
    """The functions of a FunctionDefLibrary; each is decoded when first looked up (see
    `reachable_functions` for the ones a graph calls). GraphError for a name defined twice differently."""
    defs: dict[str, function_pb2.FunctionDef] = {}
    for fdef in library.function:
        name = fdef.signature.name
        if name in defs and defs[name] != fdef:
            raise GraphError(f"the function library defines '{name}' twice, differently")
        defs[name] = fdef
    return FunctionLibrary(defs)


# --- decoding a FunctionDef ---------------------------------------------------------------------------


@contextmanager
def _in_function(name: str) -> Iterator[None]:
    """Errors about a function body say which function they concern, keeping their type."""
    try:
        yield
    except GraphError as e:
        if e.args and isinstance(e.args[0], str):
            e.args = (f"in function '{name}': {e.args[0]}",) + e.args[1:]
        raise


def _output_size(attrs: Mapping[str, Any], count_attr: str | None) -> int:
    if count_attr is None:
        return 1
    value = attrs[count_attr]
    return value if isinstance(value, int) else len(value)


def _flat_input(text: str, producers: Mapping[str, Node]) -> str:
    """`node:output_arg:index` -> `node:flat_index`; an arg name `x` -> `x:0`; control inputs unchanged.
    ValueError for an output arg the producing op does not have."""
    if text.startswith("^"):
        return text
    parts = text.split(":")
    if len(parts) == 1:
        return f"{text}:0"
    if len(parts) == 2 and parts[1].isdigit():  # already flat
        return text
    node, arg = parts[0], parts[1]
    index = parts[2] if len(parts) == 3 else None  # `node:output_arg` names the whole arg
    if len(parts) > 3 or (index is not None and not index.isdigit()):
        raise ValueError("expected 'arg' or 'node:output_arg:index'")
    producer = producers.get(node)
    if producer is None or producer.op not in OUTPUT_ARGS:
        return f"{node}:{index or 0}"  # an unknown node or op: check_inputs or check_supported reports it
    offset = 0
    for name, count_attr in OUTPUT_ARGS[producer.op]:
        try:
            size = _output_size(producer.attrs, count_attr)
        except (KeyError, TypeError):
            raise ValueError(f"node '{node}' lacks attr '{count_attr}', which sizes its output '{name}'") from None
        if name == arg:
            if index is None and size != 1:
                raise ValueError(f"output '{arg}' of node '{node}' is a list of {size}; name one with ':index'")
            if int(index or 0) >= size:
                raise ValueError(f"output '{arg}' of node '{node}' ({producer.op}) has {size} tensor(s)")
            return f"{node}:{offset + int(index or 0)}"
        offset += size
    raise ValueError(f"op {producer.op} has no output named '{arg}'")


def _is_concrete(arg) -> bool:
    return bool(arg.type) and not arg.number_attr and not arg.type_list_attr


def _arg_placeholder(arg) -> Node:
    if not _is_concrete(arg):
        raise GraphError(f"input '{arg.name}' has a polymorphic type; only concrete functions (as "
                         "tf.function writes them) are supported")
    return Node(arg.name, "Placeholder", (), (), "", {"dtype": dtypes.to_numpy(arg.type), "shape": None})


def _decode_body(fdef: function_pb2.FunctionDef) -> list[Node]:
    nodes = [_arg_placeholder(arg) for arg in fdef.signature.input_arg]
    body = [(nd, decode_node_attrs(nd)) for nd in fdef.node_def]
    producers = {nd.name: Node(nd.name, nd.op, (), (), "", attrs) for nd, attrs in body}
    for nd, attrs in body:
        inputs, controls = [], []
        for text in nd.input:
            try:
                flat = _flat_input(text, producers)
            except ValueError as e:
                raise InvalidInputError(nd.name, text, str(e)) from None
            if flat.startswith("^"):
                controls.append(flat[1:])
            elif controls:
                raise InvalidInputError(nd.name, text, "data inputs must come before control inputs")
            else:
                node, _, index = flat.rpartition(":")
                inputs.append(TensorRef(node, int(index)))
        nodes.append(Node(nd.name, nd.op, tuple(inputs), tuple(controls), nd.device, attrs))
    return nodes


def _decode_function(fdef: function_pb2.FunctionDef, library: Mapping[str, Function]) -> Function:
    signature = fdef.signature
    fname = signature.name
    with _in_function(fname):
        if signature.attr:
            raise GraphError(f"the function is polymorphic (attrs {[a.name for a in signature.attr]}); only "
                             "concrete functions (as tf.function writes them) are supported")
        nodes = _decode_body(fdef)
        validate.check_unique_names(nodes)
        counts = validate.output_counts(nodes)
        validate.check_inputs(nodes, counts)
        validate.check_attrs(nodes)
        validate.check_acyclic(nodes)
        graph = Graph(nodes=tuple(nodes), output_counts=counts, library=library)
        producers = {nd.name: n for nd, n in zip(fdef.node_def, nodes[len(signature.input_arg):])}
        rets = []
        for arg in signature.output_arg:
            if not _is_concrete(arg):
                raise GraphError(f"output '{arg.name}' has a polymorphic type")
            if arg.name not in fdef.ret:
                raise GraphError(f"output '{arg.name}' is not bound to a tensor (FunctionDef.ret)")
            try:
                ret = _flat_input(fdef.ret[arg.name], producers)
            except ValueError as e:
                raise GraphError(f"output '{arg.name}' reads '{fdef.ret[arg.name]}': {e}") from None
            node, _, index = ret.rpartition(":")
            if not graph.has_tensor(TensorRef(node, int(index))):
                raise GraphError(f"output '{arg.name}' reads '{fdef.ret[arg.name]}', which the body does not define")
            rets.append(ret)
        control_rets = []
        for name in signature.control_output:
            node = fdef.control_ret.get(name, "")
            if node not in graph:
                raise GraphError(f"control output '{name}' names no node of the body")
            control_rets.append(node)
    return Function(
        name=fname,
        graph=graph,
        args=tuple(f"{arg.name}:0" for arg in signature.input_arg),
        rets=tuple(rets),
        control_rets=tuple(control_rets),
        stateful=signature.is_stateful,
        arg_dtypes=tuple(dtypes.to_numpy(arg.type) for arg in signature.input_arg),
        ret_dtypes=tuple(dtypes.to_numpy(arg.type) for arg in signature.output_arg),
    )


# --- which functions a graph calls, checked at load time ---------------------------------------------------


def called_function(node: Node, attr: str, library: Mapping[str, Function], where: str) -> Function:
    ref = node.attrs.get(attr)
    name = getattr(ref, "name", None)
    if not name:
        raise InvalidAttrError(where, node.op, attr, "must name a function")
    if name not in library:
        raise InvalidAttrError(where, node.op, attr, f"names function '{name}', which the graph's library lacks")
    return library[name]


def call_types_attr(op: str) -> str:
    """The attr listing what a call op returns: a While's loop variables (`T`), else `Tout`."""
    return "T" if op in WHILE_OPS else "Tout"


def check_call_signature(node: Node, attr: str, function: Function, where: str) -> None:
    """The call passes as many values as `function` takes and expects the types it returns."""
    passed = len(node.inputs) - 1 if node.op in IF_OPS else len(node.inputs)
    expected = None if attr == "cond" else node.attrs.get(call_types_attr(node.op))
    if passed != len(function.args):
        raise InvalidAttrError(where, node.op, attr, f"names function '{function.name}', which takes "
                               f"{len(function.args)} input(s); the node passes {passed}")
    if attr == "cond" and len(function.rets) != 1:
        raise InvalidAttrError(where, node.op, attr, f"names function '{function.name}', which returns "
                               f"{len(function.rets)} values; a loop condition returns one")
    if not isinstance(expected, tuple):
        return  # no or a malformed type list: validate.check_attrs reports it
    count_attr = call_types_attr(node.op)
    if len(function.rets) != len(expected):
        raise InvalidAttrError(where, node.op, attr, f"names function '{function.name}', which returns "
                               f"{len(function.rets)} value(s); {count_attr} lists {len(expected)}")
    got = tuple(dtypes.tf_name_of_numpy(t) for t in function.ret_dtypes)
    want = tuple(dtypes.tf_name_of_numpy(t) for t in expected)
    if got != want:
        raise InvalidAttrError(where, node.op, attr, f"names function '{function.name}', which returns "
                               f"({', '.join(got)}); {count_attr} says ({', '.join(want)})")


def reachable_functions(nodes: Sequence[Node], library: Mapping[str, Function]) -> dict[str, Function]:
    """Every function the call ops among `nodes` run, directly or through calls in function bodies,
    decoded and validated, each call checked against its function's signature. Call ops lacking a
    function attr are left to validate.check_attrs."""
    found: dict[str, Function] = {}
    pending: list[tuple[str, Sequence[Node]]] = [("", nodes)]
    while pending:
        owner, body = pending.pop()
        for node in body:
            if node.op not in CALL_OPS:
                continue
            where = f"{owner}/{node.name}" if owner else node.name
            for attr in FUNCTION_ATTRS[node.op]:
                if attr not in node.attrs:
                    continue
                function = called_function(node, attr, library, where)
                check_call_signature(node, attr, function, where)
                if function.name not in found:
                    found[function.name] = function
                    pending.append((function.name, function.graph.nodes))
    return found
