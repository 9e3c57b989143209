"""Reading and writing GraphDefs: binary (`.pb`) and text (`.pbtxt`) in TensorFlow's wire format.

`load_graph` accepts a path, the serialized bytes, or a GraphDef message (ours, or any message with
`SerializeToString`, such as TensorFlow's own), decodes it into the IR and validates it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import message as _message
from google.protobuf import text_format

from engine.errors import GraphParseError, InvalidInputError, UnsupportedOpError
from engine.graph import Graph, Node, functions, parse_tensor_name, validate
from engine.graph.attrs import decode_node_attrs
from engine.graph.functions import Function
from engine.graph.op_origin import origins
from engine.proto import graph_pb2, node_def_pb2

__all__ = ["GraphSource", "TEXT_SUFFIXES", "parse_graph_def", "decode_graph", "load_graph", "save_graph"]

GraphSource = str | os.PathLike | bytes | graph_pb2.GraphDef | Any

# File suffixes that mean text format.
TEXT_SUFFIXES = frozenset({".pbtxt", ".txt", ".prototxt"})


def _parse_binary(data: bytes) -> graph_pb2.GraphDef:
    graph_def = graph_pb2.GraphDef()
    graph_def.ParseFromString(data)
    return graph_def


def _parse_text(data: bytes) -> graph_pb2.GraphDef:
    return text_format.Parse(data.decode("utf-8"), graph_pb2.GraphDef())


def parse_graph_def(source: GraphSource) -> graph_pb2.GraphDef:
    """The GraphDef message behind `source`; GraphParseError when it is not one."""
    if isinstance(source, graph_pb2.GraphDef):
        return source
    text_first = False
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise GraphParseError(f"cannot read graph file '{path}': {e.strerror or e}") from e
        text_first = path.suffix.lower() in TEXT_SUFFIXES
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif hasattr(source, "SerializeToString"):
        # Another library's GraphDef (TensorFlow's): the wire format is the same.
        data = source.SerializeToString()
    else:
        raise GraphParseError(f"cannot load a graph from {type(source).__name__}")

    parsers = [_parse_text, _parse_binary] if text_first else [_parse_binary, _parse_text]
    errors = []
    for parse in parsers:
        try:
            return parse(data)
        except (_message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError) as e:
            errors.append(f"{'text' if parse is _parse_text else 'binary'}: {e}")
    raise GraphParseError("not a GraphDef in binary or text format (" + "; ".join(errors) + ")")


def _decode_node(node_def: node_def_pb2.NodeDef) -> Node:
    inputs, controls = [], []
    for name in node_def.input:
        if name.startswith("^"):
            controls.append(name[1:])
            continue
        if controls:
            raise InvalidInputError(node_def.name, name, "data inputs must come before control inputs")
        try:
            inputs.append(parse_tensor_name(name))
        except ValueError as e:
            raise InvalidInputError(node_def.name, name, str(e)) from None
    return Node(node_def.name, node_def.op, tuple(inputs), tuple(controls), node_def.device, decode_node_attrs(node_def))


def _check_supported(nodes: tuple[Node, ...], called: Mapping[str, Function]) -> None:
    """One UnsupportedOpError for the graph and the functions it calls (their nodes named `function/node`)."""
    missing = validate.find_unsupported_ops(nodes)
    for function in called.values():
        for op, names in validate.find_unsupported_ops(function.graph.nodes).items():
            missing.setdefault(op, []).extend(f"{function.name}/{name}" for name in names)
    if missing:
        raise UnsupportedOpError(missing, origins=origins(missing))


def decode_graph(graph_def: graph_pb2.GraphDef, *, check_ops: bool = True) -> Graph:
    """Decode and validate a GraphDef. With `check_ops=False` unsupported ops are tolerated (for
    inspection); structure, attrs of known ops and acyclicity are always checked.

    The function library is decoded lazily: the functions that the graph's call ops reach are decoded
    and validated here like the graph itself; the others only if someone looks them up.
    """
    nodes = tuple(_decode_node(nd) for nd in graph_def.node)
    validate.check_unique_names(nodes)
    counts = validate.output_counts(nodes)
    validate.check_inputs(nodes, counts)
    library = functions.load_library(graph_def.library)
    called = functions.reachable_functions(nodes, library)
    if check_ops:
        _check_supported(nodes, called)
    validate.check_attrs(nodes)
    validate.check_acyclic(nodes)
    return Graph(nodes=nodes, output_counts=counts, graph_def=graph_def, library=library)


def load_graph(source: GraphSource) -> Graph:
    """Load a GraphDef from a path (`.pb` binary or `.pbtxt` text), bytes, or a GraphDef message.

    >>> graph = engine.load_graph("model.pb")

    Raises a `GraphError` subclass naming the problem: unparseable input, duplicate names, missing
    inputs, unsupported ops (all listed, in called functions too), bad attrs, a cycle outside a loop, or
    a call op whose function is missing or does not fit it.
    """
    if isinstance(source, Graph):
        return source
    return decode_graph(parse_graph_def(source))


def save_graph(graph: Graph | graph_pb2.GraphDef, path: str | os.PathLike, *, as_text: bool = False) -> None:
    """Write a graph as a binary (default) or text GraphDef that TensorFlow reads."""
    graph_def = graph.graph_def if isinstance(graph, Graph) else parse_graph_def(graph)
    if as_text:
        Path(path).write_text(text_format.MessageToString(graph_def))
    else:
        Path(path).write_bytes(graph_def.SerializeToString(deterministic=True))
