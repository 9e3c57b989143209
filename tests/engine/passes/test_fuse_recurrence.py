"""Keras' LSTM and GRU loops recognised in While bodies (engine.passes.fuse_recurrence) and run as one
recurrent kernel: every spelling Keras 2 and Keras 3 write is recognised, other cells are not, and a fused
loop gives the loop's results (the golden fixtures hold both to TensorFlow), falling back to the loop
itself, with its errors, wherever its inputs are not what the kernel takes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import engine
from engine import errors
from engine.graph import Graph
from engine.graph.functions import called_function
from engine.passes.fuse_recurrence import recognise
from engine.passes.loop_trace import Bound, loop_bounds
from tests.golden import FIXTURES, load_case

# fixture -> (kind, reset_after, masked) of its While loops
SPELLINGS = {
    "recurrent/keras2_lstm": ("lstm", False, False),
    "recurrent/keras2_gru": ("gru", True, False),
    "recurrent/keras2_gru_reset_before": ("gru", False, False),
    "recurrent/keras2_bidirectional_lstm": ("lstm", False, False),
    "recurrent/keras2_lstm_sequences_backwards": ("lstm", False, False),
    "recurrent/keras2_lstm_masked": ("lstm", False, True),
    "recurrent/keras2_gru_masked": ("gru", True, True),
    "recurrent/keras3_lstm": ("lstm", False, False),
    "recurrent/keras3_gru": ("gru", True, False),
    "recurrent/keras3_gru_reset_before": ("gru", False, False),
    "recurrent/keras3_lstm_masked": ("lstm", False, True),
    "recurrent/keras2_bidirectional_lstm_sequences_masked": ("lstm", False, True),
    "recurrent/keras2_gru_sequences_zero_masked": ("gru", True, True),
    "recurrent/keras3_bidirectional_gru_sequences_masked": ("gru", True, True),
    "recurrent/keras3_lstm_sequences_zero_masked_backwards": ("lstm", False, True),
    "recurrent/keras2_lstm_sequences_masked": ("lstm", False, True),
    "recurrent/keras2_bidirectional_gru_reset_before_sequences_masked": ("gru", False, True),
    "recurrent/keras3_bidirectional_lstm_sequences_masked": ("lstm", False, True),
    "recurrent/keras3_gru_sequences_masked_backwards": ("gru", True, True),
    "control_flow/keras_lstm_stacked_functional": ("lstm", False, False),
}
# Those whose masked steps output zeros (Keras' zero_output_for_mask, which Bidirectional sets over sequences)
# rather than the previous output.
ZERO_MASKED = {name for name in SPELLINGS if "sequences" in name and ("zero_masked" in name or "bidirectional" in name)}
NOT_RECURRENCES = ["recurrent/keras2_lstm_relu", "control_flow/dynamic_trip_count_functional",
                   "control_flow/cond_nested_while_functional"]


def _whiles(name: str) -> tuple[Graph, list]:
    graph = engine.load_graph(load_case(FIXTURES / name).model)
    found = [node for node in graph.nodes if node.op in ("While", "StatelessWhile")]
    for function in graph.library.values():
        found += [node for node in function.graph.nodes if node.op in ("While", "StatelessWhile")]
    assert found, f"{name} has no While"
    return graph, found


def _recognised(graph: Graph, node, body=None):
    cond = called_function(node, "cond", graph.library, node.name)
    body = body or called_function(node, "body", graph.library, node.name)
    return recognise(cond, body, node.attrs["T"])


@pytest.mark.parametrize("name", SPELLINGS)
def test_every_keras_spelling_is_recognised(name):
    kind, reset_after, masked = SPELLINGS[name]
    graph, whiles = _whiles(name)
    for node in whiles:
        recurrence = _recognised(graph, node)
        assert recurrence is not None, node.name
        assert (recurrence.kind, recurrence.reset_after, recurrence.mask is not None) == (kind, reset_after, masked)
        assert (recurrence.c is not None) == (kind == "lstm")
        assert (recurrence.output_state is not None) == masked
        assert recurrence.zero_masked == (name in ZERO_MASKED)


@pytest.mark.parametrize("name", NOT_RECURRENCES)
def test_other_loops_are_left_as_they_are(name):
    graph, whiles = _whiles(name)
    assert all(_recognised(graph, node) is None for node in whiles)


def test_the_conditions_keras_writes_are_read_as_bounds():
    graph, (node,) = _whiles("recurrent/keras2_lstm")
    assert loop_bounds(called_function(node, "cond", graph.library, node.name)) == (Bound(2, 6, None),)
    graph, (node,) = _whiles("recurrent/keras3_lstm")
    # loop_counter < maximum_iterations and time < 7, the steps Keras 3 knew when it traced
    assert loop_bounds(called_function(node, "cond", graph.library, node.name)) == (Bound(0, 1, None),
                                                                                     Bound(2, None, 7))


def _edited_body(graph: Graph, node, op: str, replace: str, **changes):
    """The While's body with the first node of `op` changed (op `replace`, attrs updated)."""
    body = called_function(node, "body", graph.library, node.name)
    target = next(n for n in body.graph.nodes if n.op == op)
    edited = dataclasses.replace(target, op=replace, attrs={**target.attrs, **changes})
    nodes = tuple(edited if n is target else n for n in body.graph.nodes)
    return dataclasses.replace(body, graph=dataclasses.replace(body.graph, nodes=nodes))


@pytest.mark.parametrize("name", ["recurrent/keras2_lstm", "recurrent/keras3_gru", "recurrent/keras2_gru_reset_before"])
@pytest.mark.parametrize("op, replace", [("Sigmoid", "Relu"), ("Tanh", "Softsign"), ("Sigmoid", "Tanh"),
                                         ("Tanh", "Sigmoid"), ("Mul", "AddV2"), ("MatMul", "Sub")])
def test_a_cell_with_another_activation_or_operation_is_not_recognised(name, op, replace):
    graph, (node,) = _whiles(name)
    assert _recognised(graph, node) is not None
    assert _recognised(graph, node, _edited_body(graph, node, op, replace)) is None


def test_a_product_transposing_the_step_is_not_recognised():
    graph, (node,) = _whiles("recurrent/keras2_lstm")
    assert _recognised(graph, node, _edited_body(graph, node, "MatMul", "MatMul", transpose_a=True)) is None


# --- running: the fused loop against the loop ----------------------------------------------------------------


def _sessions(name: str, **options):
    graph = engine.load_graph(load_case(FIXTURES / name).model)
    fused = engine.Session(graph, options=engine.SessionOptions(plan=engine.PlanOptions(**options)))
    looped = engine.Session(graph, options=engine.SessionOptions(plan=engine.PlanOptions(optimize=False, **options)))
    return fused, looped


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("name", ["recurrent/keras2_lstm_masked", "recurrent/keras3_gru_reset_before",
                                  "recurrent/keras2_bidirectional_lstm_sequences_masked",
                                  "recurrent/keras3_bidirectional_gru_sequences_masked",
                                  "recurrent/keras2_lstm_sequences_masked",
                                  "recurrent/keras2_bidirectional_gru_reset_before_sequences_masked",
                                  "recurrent/keras3_bidirectional_lstm_sequences_masked",
                                  "recurrent/keras3_gru_sequences_masked_backwards"])
def test_the_fused_loop_computes_what_the_loop_does(name, compiled):
    case = load_case(FIXTURES / name)
    fused, looped = _sessions(name, compiled_kernels=compiled)
    (want,) = looped.run(list(case.fetches), case.feeds)
    (got,) = fused.run(list(case.fetches), case.feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _loop_input(name: str, role) -> str:
    """The tensor the fixture's While takes as the loop var `role(recurrence)` picks."""
    graph, (node,) = _whiles(name)
    return str(node.inputs[role(_recognised(graph, node))])


def test_a_loop_starting_past_its_first_step_is_fused_from_there():
    # Feeding the time counter's start: the loop runs steps 3 to 6 and writes those outputs.
    case = load_case(FIXTURES / "recurrent/keras2_lstm_sequences_backwards")
    feeds = {**case.feeds, _loop_input("recurrent/keras2_lstm_sequences_backwards", lambda r: r.time): np.int32(3)}
    fused, looped = _sessions("recurrent/keras2_lstm_sequences_backwards")
    (want,) = looped.run(list(case.fetches), feeds)
    (got,) = fused.run(list(case.fetches), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["recurrent/keras2_gru_sequences_zero_masked",
                                  "recurrent/keras3_lstm_sequences_zero_masked_backwards"])
def test_masked_steps_output_the_loops_constant_when_it_is_not_zeros(name):
    # The constant masked steps output (Keras' zeros_like of the first output, a While input) is checked when
    # the loop starts: fed ones instead, the loop runs as it is, and the fused While gives the loop's results.
    case = load_case(FIXTURES / name)
    graph, (node,) = _whiles(name)
    producers = {n.name: n.op for n in graph.nodes}
    zeros = {str(t) for t in node.inputs if producers.get(t.node) == "ZerosLike"}
    assert zeros, "the fixture's While takes no zeros_like"
    feeds = {**case.feeds, **{name: np.ones((3, 6), np.float32) for name in zeros}}  # batch 3, 6 units
    fused, looped = _sessions(name)
    (golden,) = fused.run(list(case.fetches), case.feeds)
    (want,) = looped.run(list(case.fetches), feeds)
    (got,) = fused.run(list(case.fetches), feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, golden)  # the ones reached the padded steps


def test_a_condition_past_the_sequence_fails_as_the_loop_does():
    # time < 9 over 7 items: the loop's TensorListGetItem fails at item 7, fused or not.
    case = load_case(FIXTURES / "recurrent/keras2_lstm")
    feeds = {**case.feeds, _loop_input("recurrent/keras2_lstm", lambda r: r.bounds[0].var): np.int32(9)}
    messages = []
    for sess in _sessions("recurrent/keras2_lstm"):
        with pytest.raises(errors.ExecutionError) as info:
            sess.run(list(case.fetches), feeds)
        messages.append(str(info.value))
    assert "Trying to access element 7 in a list with 7 elements" in messages[0]
    assert messages[0] == messages[1]


def test_the_iteration_limit_stops_a_fused_loop_too():
    case = load_case(FIXTURES / "recurrent/keras3_gru")
    for sess in _sessions("recurrent/keras3_gru", max_loop_iterations=5):
        with pytest.raises(errors.LoopLimitError, match="limit of 5 iterations") as info:
            sess.run(list(case.fetches), case.feeds)
        assert info.value.node == _whiles("recurrent/keras3_gru")[1][0].name
