"""While loops with independent iterations (tf.map_fn's), recognised (engine.passes.independent_iterations) and
run with their iterations on the kernel pool: map_fn loops are recognised (asserts in the body too), loops that
carry state are not, both ways of running them give TensorFlow's outputs, and a failing iteration fails the
loop with the error of the first one that fails, as running them in order does."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import errors
from engine.graph.functions import called_function
from engine.passes import independent_iterations
from engine.passes.independent_iterations import ParallelIterations, recognise
from kernels import pool
from tests.golden import FIXTURES, assert_matches, case_dirs, load_case

MAP_FN = case_dirs("control_flow/map_fn")
CARRYING_STATE = ["control_flow/dynamic_trip_count_functional", "control_flow/keras_lstm_functional",
                  "control_flow/keras_gru_functional", "control_flow/padded_nms/model_garden"]


def loops(name_or_dir) -> list:
    graph = engine.load_graph(load_case(FIXTURES / name_or_dir).model)
    library = graph.library
    whiles = [n for n in graph.nodes if n.op in ("While", "StatelessWhile")]
    assert whiles
    return [recognise(called_function(w, "cond", library, w.name), called_function(w, "body", library, w.name), library)
            for w in whiles]


@pytest.mark.parametrize("case_dir", MAP_FN, ids=lambda p: p.name)
def test_map_fn_loops_are_recognised(case_dir) -> None:
    (loop,) = loops(case_dir)
    assert loop is not None and loop.writes and len(loop.counters) == 2


@pytest.mark.parametrize("name", CARRYING_STATE)
def test_loops_carrying_state_are_not(name) -> None:
    assert all(loop is None for loop in loops(name))


@pytest.fixture
def parallel_calls(monkeypatch) -> list[bool]:
    """Whether each recognised loop run while the test runs was run by ParallelIterations."""
    calls: list[bool] = []
    original = ParallelIterations.__call__

    def recording(self, values, run_body, check):
        result = original(self, values, run_body, check)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(ParallelIterations, "__call__", recording)
    monkeypatch.setattr(pool, "pool_size", lambda: 2)  # (a machine with one core runs the tasks in order)
    return calls


@pytest.mark.parametrize("on_the_pool", [True, False])
@pytest.mark.parametrize("case_dir", MAP_FN, ids=lambda p: p.name)
def test_either_way_gives_tensorflows_outputs(case_dir, on_the_pool, parallel_calls, monkeypatch) -> None:
    monkeypatch.setattr(independent_iterations, "HEAVY_ITERATION_S", 0.0 if on_the_pool else float("inf"))
    case = load_case(case_dir)
    outs = engine.Session(engine.load_graph(case.model)).run(list(case.fetches), case.feeds)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, case.rtol, case.atol)
    assert parallel_calls == [True]


@pytest.mark.parametrize("on_the_pool", [True, False])
def test_the_first_failing_iteration_fails_the_loop(on_the_pool, parallel_calls, monkeypatch) -> None:
    monkeypatch.setattr(independent_iterations, "HEAVY_ITERATION_S", 0.0 if on_the_pool else float("inf"))
    case = load_case(FIXTURES / "control_flow/map_fn/asserts_two_outputs")
    (name,) = case.feeds
    rows = case.feeds[name].copy()
    rows[3, 0], rows[6, 0] = -3.5, -6.5  # two rows fail the non-negative assert; row 3's message is the one
    rows[7] = 400.0  # and one its sum assert, later still
    with pytest.raises(errors.ExecutionError, match=r"row has a negative value") as info:
        engine.Session(engine.load_graph(case.model)).run(list(case.fetches), {name: rows})
    assert "-3.5" in str(info.value) and "-6.5" not in str(info.value)


def test_a_loop_of_one_iteration_runs_as_the_loop(parallel_calls) -> None:
    case = load_case(FIXTURES / "control_flow/map_fn/asserts_two_outputs")
    (name,) = case.feeds
    rows = case.feeds[name][:1]
    outs = engine.Session(engine.load_graph(case.model)).run(list(case.fetches), {name: rows})
    np.testing.assert_allclose(outs[1], rows.sum(axis=1), rtol=1e-6)
    assert parallel_calls == [False]
