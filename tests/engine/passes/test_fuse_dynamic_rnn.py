"""tf.compat.v1.nn.dynamic_rnn's loops, raised into While calls, recognised (engine.passes.fuse_dynamic_rnn) and
run as one recurrent kernel: the TF1 cells' spellings are recognised, other cells are not, and the fused loop
gives the loop's results (the golden fixtures in tests/fixtures/tf1_loops hold both to TensorFlow), falling back
to the loop itself wherever its inputs are not what the kernel takes."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import errors
from engine.compile.plan import prepare_signature
from engine.graph.functions import called_function
from engine.passes.dynamic_rnn_loop import DynamicRnnLoop
from engine.passes.fuse_dynamic_rnn import recognise
from tests.engine.passes.checks import UNOPTIMIZED
from tests.golden import FIXTURES, load_case

# fixture -> (kind, with sequence_length, with every step's output) of its loops
CELLS = {
    "tf1_loops/dynamic_rnn_lstm_lengths": ("lstm", True, True),
    "tf1_loops/dynamic_rnn_lstm_short": ("lstm", True, True),
    "tf1_loops/dynamic_rnn_gru_lengths": ("gru", True, True),
    "tf1_loops/dynamic_rnn_basic_lstm": ("lstm", False, True),
    "tf1_loops/bidirectional_dynamic_rnn_lstm": ("lstm", True, True),
    "tf1_loops/gru_batch_norm_training_conds": ("gru", True, False),
}
NOT_RECURRENCES = ["tf1_loops/dynamic_rnn_lstm_peephole_projection", "tf1_loops/dynamic_rnn_stacked_cells",
                   "tf1_loops/while_nested_tensor_arrays_cond", "control_flow/tf1_control_flow"]


def _recognised(name: str) -> list:
    case = load_case(FIXTURES / name)
    prepared = prepare_signature(engine.load_graph(case.model), list(case.feeds), list(case.fetches))
    whiles = [node for node in prepared.nodes if node.op == "While"]
    assert whiles, f"{name}: no loop was raised"
    library = prepared.graph.library
    return [recognise(called_function(w, "cond", library, w.name), called_function(w, "body", library, w.name),
                      w.attrs["T"]) for w in whiles]


@pytest.mark.parametrize("name", CELLS)
def test_every_tf1_cell_is_recognised(name):
    kind, lengths, output = CELLS[name]
    for rnn in _recognised(name):
        assert rnn is not None
        assert (rnn.kind, rnn.lengths is not None, rnn.output is not None) == (kind, lengths, output)
        assert (rnn.c is not None) == (kind == "lstm") and (rnn.zeros is not None) == (lengths and output)


@pytest.mark.parametrize("name", NOT_RECURRENCES)
def test_other_loops_are_left_as_they_are(name):
    assert all(rnn is None for rnn in _recognised(name))


@pytest.fixture
def fused_calls(monkeypatch) -> list[bool]:
    """Whether each dynamic_rnn loop run while the test runs took the recurrent kernel (True) or ran as the loop."""
    calls: list[bool] = []
    original = DynamicRnnLoop.__call__

    def recording(self, values):
        result = original(self, values)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(DynamicRnnLoop, "__call__", recording)
    return calls


def _compare(name: str, feeds: dict | None = None, **options) -> list:
    case = load_case(FIXTURES / name)
    graph = engine.load_graph(case.model)
    feeds = {**case.feeds, **(feeds or {})}
    fused = engine.Session(graph, options=engine.SessionOptions(plan=engine.PlanOptions(**options)))
    looped = engine.Session(graph, options=engine.SessionOptions(plan=engine.PlanOptions(optimize=False, **options)))
    got = fused.run(list(case.fetches), feeds)
    want = looped.run(list(case.fetches), feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return got


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("name", CELLS)
def test_the_fused_loop_computes_what_the_loop_does(name, compiled, fused_calls):
    _compare(name, compiled_kernels=compiled)
    assert fused_calls and all(fused_calls)


def test_a_loop_starting_past_its_first_step_is_fused_from_there(fused_calls):
    # Feeding the time counter's start: steps 2 to 6 run, outputs 0 and 1 read as zeros from the array.
    got = _compare("tf1_loops/dynamic_rnn_basic_lstm", {"rnn/time:0": np.int32(2)})
    assert fused_calls == [True]
    np.testing.assert_array_equal(got[0][:, :2], 0)


def test_finished_rows_that_output_something_else_than_zeros_run_the_loop(fused_calls):
    # dynamic_rnn's output for finished rows is a Fill of zeros made before the loop; fed ones instead, the
    # fused loop sees it when it starts and runs the loop as it is.
    batch_ones = {"rnn/zeros:0": np.ones((3, 6), np.float32)}
    got = _compare("tf1_loops/dynamic_rnn_lstm_lengths", batch_ones)
    assert fused_calls == [False]
    np.testing.assert_array_equal(got[0][2], 1)  # the row of length 0 outputs the ones


def test_a_bound_past_the_sequence_fails_as_the_loop_does(fused_calls):
    case = load_case(FIXTURES / "tf1_loops/dynamic_rnn_gru_lengths")
    graph = engine.load_graph(case.model)
    # The bounds fed: 9 steps over 7 items (the iteration counter starts at -5, and time stops at 9).
    feeds = {**case.feeds, "rnn/Minimum:0": np.int32(9), "rnn/while/iteration_counter:0": np.int32(-5)}
    messages = []
    for options in (engine.SessionOptions(), UNOPTIMIZED):
        with pytest.raises(errors.ExecutionError) as info:
            engine.Session(graph, options=options).run(list(case.fetches), feeds)
        messages.append(str(info.value).split("\n")[0])
    assert messages[0] == messages[1] and "index 7" in messages[0]
    assert fused_calls == [False]


def test_the_iteration_limit_stops_a_fused_loop_too():
    case = load_case(FIXTURES / "tf1_loops/dynamic_rnn_lstm_lengths")
    graph = engine.load_graph(case.model)
    for optimize in (True, False):
        options = engine.SessionOptions(plan=engine.PlanOptions(optimize=optimize, max_loop_iterations=5))
        with pytest.raises(errors.LoopLimitError, match="limit of 5 iterations"):
            engine.Session(graph, options=options).run(list(case.fetches), case.feeds)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("name", ["tf1_loops/dynamic_rnn_lstm_lengths", "tf1_loops/dynamic_rnn_gru_lengths"])
def test_a_large_batch_of_uneven_lengths_computes_what_the_loop_does(name, compiled, fused_calls):
    # 40 rows: the fused loop runs over fewer rows as they end, each piece's rows split over the kernel pool.
    rng = np.random.default_rng(5)
    feeds = {"x:0": rng.standard_normal((40, 7, 5)).astype(np.float32),
             "lengths:0": rng.integers(0, 8, 40).astype(np.int32)}
    _compare(name, feeds, compiled_kernels=compiled)
    assert fused_calls == [True]
