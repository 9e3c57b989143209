"""GraphDef readers (engine.load_graph): binary and text GraphDefs, random and mutated, give a loaded
graph or a GraphError (GraphParseError for bytes that are no GraphDef, the validation errors for one
that does not hold together), never another exception, and allocate in proportion to the input."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from engine import load_graph
from engine.errors import GraphError
from engine.graph.graph_def import parse_graph_def
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated
from tests.fuzz.seeds import graph_defs, graph_texts


def _limit(data: bytes) -> int:
    # Decoding makes Python objects per node and attr: tens of bytes of IR per byte of proto.
    return 64 * len(data) + 16 * MiB


def check_graph(data: bytes) -> None:
    call_parser(load_graph, data, allowed=(GraphError,), memory_limit=_limit(data))


@fuzz_settings()
@given(st.binary(max_size=512))
@example(b"\n\x00")  # a NodeDef without a name or op
@example(b"node { attr { key: 'x' value { func { attr { key: 'y' value {" * 200 + b"} } } } }" * 200)
def test_random_bytes_are_a_graph_or_a_graph_error(data: bytes) -> None:
    check_graph(data)


@fuzz_settings()
@given(mutated(graph_defs()))
def test_mutated_binary_graph_defs_are_a_graph_or_a_graph_error(data: bytes) -> None:
    check_graph(data)


@fuzz_settings(0.5)
@given(mutated(graph_texts()))
def test_mutated_text_graph_defs_are_a_graph_or_a_graph_error(data: bytes) -> None:
    check_graph(data)


@fuzz_settings(0.5)
@given(st.binary(max_size=256))
def test_text_parsing_of_random_bytes_raises_graph_parse_error_only(data: bytes) -> None:
    # parse_graph_def alone (no validation): a text-looking file suffix puts the text parser first.
    call_parser(parse_graph_def, b"node {" + data, allowed=(GraphError,), memory_limit=_limit(data))
