"""TensorFlow's v1 while loops raised into While calls (engine.passes.functionalize_loops): a well-formed frame
becomes one While whose results are the dataflow executor's, nested frames innermost first; a frame that is not
well-formed (and every frame around it) stays on the dataflow executor, with the same results. The golden
fixtures (tests/fixtures/tf1_loops, control_flow) hold both to TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.compile.plan import prepare_signature
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import I32, UNOPTIMIZED
from tests.engine.runtime.test_control_flow import counting_loop, nested_loops, while_loop
from tests.golden import FIXTURES, load_case


def _ops(graph: engine.Graph, feeds: list[str], fetches: list[str]) -> list[str]:
    return [node.op for node in prepare_signature(graph, feeds, fetches).nodes]


def _same_as_dataflow(graph: engine.Graph, feeds: dict, fetches: list[str]) -> list:
    got = engine.Session(graph).run(fetches, feeds)
    want = engine.Session(graph, options=UNOPTIMIZED).run(fetches, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    return got


@pytest.mark.parametrize("n", [0, 1, 5])
def test_a_well_formed_loop_becomes_one_while(n):
    graph = counting_loop()
    ops = _ops(graph, ["n:0", "x:0"], ["i_out:0", "acc_out:0"])
    assert ops.count("While") == 1 and not set(ops) & CONTROL_FLOW_OPS
    x = np.array([0.5, -1.0], np.float32)
    i, acc = _same_as_dataflow(graph, {"n:0": np.int32(n), "x:0": x}, ["i_out:0", "acc_out:0"])
    assert i == n
    np.testing.assert_allclose(acc, n * x)


@pytest.mark.parametrize("n, m", [(0, 3), (3, 4), (5, 0)])
def test_nested_loops_become_a_while_whose_body_calls_a_while(n, m):
    graph = nested_loops()
    prepared = prepare_signature(graph, ["n:0", "m:0"], ["total:0"])
    (outer,) = [node for node in prepared.nodes if node.op == "While"]
    body = prepared.graph.library[outer.attrs["body"].name]
    assert [node.op for node in body.graph.nodes].count("While") == 1
    assert not {node.op for node in body.graph.nodes} & CONTROL_FLOW_OPS
    (total,) = _same_as_dataflow(graph, {"n:0": np.int32(n), "m:0": np.int32(m)}, ["total:0"])
    assert total == sum(range(n * m))


def test_an_exit_is_fetched_by_its_name():
    graph = counting_loop()
    i, = _same_as_dataflow(graph, {"n:0": np.int32(3), "x:0": np.ones(1, np.float32)}, ["w/Exit_0:0"])
    assert i == 3


def test_partial_runs_keep_the_loop():
    # Parts of a loop may run before the feeds of others arrive (tests/engine/runtime/test_partial_run.py).
    sess = engine.Session(counting_loop())
    handle = sess.prun_setup(["n:0", "x:0"], ["i_out:0", "acc_out:0"])
    assert sess.prun(handle, {"n:0": np.int32(2)}, "i_out:0") == 2
    np.testing.assert_array_equal(sess.prun(handle, {"x:0": np.array([1.5], np.float32)}, "acc_out:0"), [3.0])


def _loop_reading_its_merge() -> engine.Graph:
    """i < n: i += 1, the increment reading the Merge rather than the Switch's true output (not well-formed:
    a body reading the condition's side)."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.const("i0", np.int32(0))

    def cond(merged, inv):
        return g.node("w/Less", "Less", [merged[0], inv[0]], T=I32)

    def body(vars_, pivot, inv):
        g.node("w/one", "Const", [f"^{pivot}"], dtype=I32, value=np.array(1, np.int32))
        return [g.node("w/from_merge", "AddV2", ["w/Merge_0", "w/one"], T=I32)]

    exits, _ = while_loop(g, "w", [("i0", I32)], cond, body, [("n", I32)])
    g.node("i_out", "Identity", [exits[0]], T=I32)
    return engine.load_graph(g.bytes())


def _loop_in_loop(inner_reads_its_merge: bool) -> engine.Graph:
    """for i < n: total += (for j < i: j) — the inner loop well-formed, or its body reading its own Merge."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.const("zero", np.int32(0))

    def outer_cond(merged, inv):
        return g.node("outer/Less", "Less", [merged[0], inv[0]], T=I32)

    def outer_body(vars_, pivot, inv):
        g.node("outer/zero", "Const", [f"^{pivot}"], dtype=I32, value=np.array(0, np.int32))

        def inner_cond(merged, inner_inv):
            return g.node("inner/Less", "Less", [merged[0], inner_inv[0]], T=I32)

        def inner_body(ivars, ipivot, inner_inv):
            g.node("inner/one", "Const", [f"^{ipivot}"], dtype=I32, value=np.array(1, np.int32))
            j = "inner/Merge_0" if inner_reads_its_merge else ivars[0]
            return [g.node("inner/j_next", "AddV2", [j, "inner/one"], T=I32),
                    g.node("inner/t_next", "AddV2", [ivars[1], ivars[0]], T=I32)]

        inner_exits, _ = while_loop(g, "inner", [("outer/zero", I32), (vars_[1], I32)], inner_cond, inner_body,
                                    [(vars_[0], I32)])
        g.node("outer/one", "Const", [f"^{pivot}"], dtype=I32, value=np.array(1, np.int32))
        return [g.node("outer/i_next", "AddV2", [vars_[0], "outer/one"], T=I32), inner_exits[1]]

    exits, _ = while_loop(g, "outer", [("zero", I32), ("zero", I32)], outer_cond, outer_body, [("n", I32)])
    g.node("total", "Identity", [exits[1]], T=I32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("n", [0, 4])
def test_a_body_reading_the_merge_stays_on_the_dataflow_executor(n):
    graph = _loop_reading_its_merge()
    assert "While" not in _ops(graph, ["n:0"], ["i_out:0"])
    (i,) = _same_as_dataflow(graph, {"n:0": np.int32(n)}, ["i_out:0"])
    assert i == n


@pytest.mark.parametrize("n", [0, 5])
def test_a_frame_around_one_left_as_it_is_stays_too(n):
    well_formed, reading_merge = _loop_in_loop(False), _loop_in_loop(True)
    assert _ops(well_formed, ["n:0"], ["total:0"]).count("While") == 1
    ops = _ops(reading_merge, ["n:0"], ["total:0"])
    assert "While" not in ops and "Enter" in ops
    want = sum(j for i in range(n) for j in range(i))
    for graph in (well_formed, reading_merge):
        (total,) = _same_as_dataflow(graph, {"n:0": np.int32(n)}, ["total:0"])
        assert total == want


def test_a_switch_read_past_its_exit_stays_on_the_dataflow_executor():
    """The loop's false output read by something other than its Exit: not the structure raised."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.const("i0", np.int32(0))

    def cond(merged, inv):
        return g.node("w/Less", "Less", [merged[0], inv[0]], T=I32)

    def body(vars_, pivot, inv):
        g.node("w/one", "Const", [f"^{pivot}"], dtype=I32, value=np.array(1, np.int32))
        return [g.node("w/next", "AddV2", [vars_[0], "w/one"], T=I32)]

    exits, _ = while_loop(g, "w", [("i0", I32)], cond, body, [("n", I32)])
    g.node("w/last", "Identity", ["w/Switch_0:0"], T=I32)
    g.node("w/Exit_last", "Exit", ["w/last"], T=I32)
    g.node("out", "AddV2", [exits[0], "w/Exit_last"], T=I32)
    graph = engine.load_graph(g.bytes())
    assert "While" not in _ops(graph, ["n:0"], ["out:0"])
    (out,) = _same_as_dataflow(graph, {"n:0": np.int32(3)}, ["out:0"])
    assert out == 6


@pytest.mark.parametrize("name", ["tf1_loops/while_nested_tensor_arrays_cond", "control_flow/tf1_control_flow",
                                  "control_flow/keras_lstm", "control_flow/cond_nested_while"])
def test_tensorflow_written_loops_are_raised_and_agree_with_the_dataflow_executor(name):
    case = load_case(FIXTURES / name)
    graph = engine.load_graph(case.model)
    ops = _ops(graph, list(case.feeds), list(case.fetches))
    # (cond_nested_while's loops sit in conds' branches, raised into Ifs by functionalize_conds.)
    assert {"While", "If"} & set(ops) and not set(ops) & CONTROL_FLOW_OPS
    got = engine.Session(graph).run(list(case.fetches), case.feeds)
    want = engine.Session(graph, options=UNOPTIMIZED).run(list(case.fetches), case.feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
