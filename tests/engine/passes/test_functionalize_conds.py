"""TensorFlow's v1 conds raised into If calls (engine.passes.functionalize_conds): a cond becomes one If whose
results are the dataflow executor's (value_index included), nested conds innermost first, a cond in a raised
loop's body as the body's own If; a cond that is not raised (a branch tensor fetched, a ControlTrigger, a Switch
read through a control edge) stays on the dataflow executor. The golden fixtures hold both to TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.compile.plan import compile_plan, prepare_signature
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, UNOPTIMIZED
from tests.engine.runtime.test_control_flow import cond_graph
from tests.golden import FIXTURES, load_case

X = np.array([1.0, -2.0, 3.5], np.float32)


def _ops(graph: engine.Graph, feeds: list[str], fetches: list[str]) -> list[str]:
    return [node.op for node in prepare_signature(graph, feeds, fetches).nodes]


def _same_as_dataflow(graph: engine.Graph, feeds: dict, fetches: list[str]) -> list:
    got = engine.Session(graph).run(fetches, feeds)
    want = engine.Session(graph, options=UNOPTIMIZED).run(fetches, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    return got


@pytest.mark.parametrize("const_branches", [False, True])
@pytest.mark.parametrize("pred", [True, False])
def test_a_cond_becomes_one_if(const_branches, pred):
    graph = cond_graph(const_branches)
    ops = _ops(graph, ["x:0", "pred:0"], ["out:0"])
    assert ops.count("If") == 1 and not set(ops) & CONTROL_FLOW_OPS
    _same_as_dataflow(graph, {"x:0": X[:2], "pred:0": pred}, ["out:0"])


@pytest.mark.parametrize("pred", [True, False])
def test_a_merges_value_index_says_which_branch_ran(pred):
    graph = cond_graph()
    assert "If" in _ops(graph, ["x:0", "pred:0"], ["out:0", "cond/Merge:1"])
    _, index = _same_as_dataflow(graph, {"x:0": X[:2], "pred:0": pred}, ["out:0", "cond/Merge:1"])
    assert index == int(pred) and index.dtype == np.int32


def _nested_conds() -> engine.Graph:
    """out = p ? (q ? x * 2 : x + 1) : -x, as tf.compat.v1.cond nests them (each branch's inputs switched in)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None,))
    g.placeholder("p", np.bool_, ())
    g.placeholder("q", np.bool_, ())
    g.node("outer/pred_id", "Identity", ["p"], T=np.dtype(np.bool_))
    g.node("outer/Switch_x", "Switch", ["x", "outer/pred_id"], T=F32)
    g.node("outer/Switch_q", "Switch", ["q", "outer/pred_id"], T=np.dtype(np.bool_))
    g.node("inner/Switch_x", "Switch", ["outer/Switch_x:1", "outer/Switch_q:1"], T=F32)
    g.node("inner/two", "Const", ["^inner/Switch_x"], dtype=F32, value=np.array(2, np.float32))
    g.node("inner/t_id", "Identity", ["inner/Switch_x:1"], T=F32)
    g.node("inner/one", "Const", ["^inner/t_id"], dtype=F32, value=np.array(1, np.float32))
    g.node("inner/t", "Mul", ["inner/Switch_x:1", "inner/one"], T=F32)
    g.node("inner/t2", "AddV2", ["inner/t", "inner/t"], T=F32)
    g.node("inner/f_id", "Identity", ["inner/Switch_x:0"], T=F32)
    g.node("inner/one_f", "Const", ["^inner/f_id"], dtype=F32, value=np.array(1, np.float32))
    g.node("inner/f", "AddV2", ["inner/Switch_x:0", "inner/one_f"], T=F32)
    g.node("inner/Merge", "Merge", ["inner/f", "inner/t2"], T=F32, N=2)
    g.node("outer/f", "Neg", ["outer/Switch_x:0"], T=F32)
    g.node("outer/Merge", "Merge", ["outer/f", "inner/Merge"], T=F32, N=2)
    g.node("out", "Identity", ["outer/Merge"], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("p", [True, False])
@pytest.mark.parametrize("q", [True, False])
def test_nested_conds_become_an_if_whose_branch_calls_an_if(p, q):
    graph = _nested_conds()
    prepared = prepare_signature(graph, ["x:0", "p:0", "q:0"], ["out:0"])
    (outer,) = [node for node in prepared.nodes if node.op == "If"]
    then = prepared.graph.library[outer.attrs["then_branch"].name]
    assert [node.op for node in then.graph.nodes].count("If") == 1
    (out,) = _same_as_dataflow(graph, {"x:0": X, "p:0": p, "q:0": q}, ["out:0"])
    np.testing.assert_array_equal(out, (X * 2 if q else X + 1) if p else -X)


def test_a_cond_with_a_fetched_branch_tensor_stays():
    graph = cond_graph()
    ops = _ops(graph, ["x:0", "pred:0"], ["out:0", "cond/t:0"])
    assert "If" not in ops and "Switch" in ops


def test_a_switch_read_through_a_control_edge_stays():
    """A control edge from a Switch is live on both branches: what it orders is no branch's."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None,))
    g.placeholder("pred", np.bool_, ())
    g.node("s", "Switch", ["x", "pred"], T=F32)
    g.node("t", "Neg", ["s:1"], T=F32)
    g.node("f", "Identity", ["s:0"], T=F32)
    g.node("m", "Merge", ["f", "t"], T=F32, N=2)
    g.node("after", "Const", ["^s"], dtype=F32, value=np.array(7, np.float32))
    g.node("out", "AddV2", ["m", "after"], T=F32)
    graph = engine.load_graph(g.bytes())
    assert "If" not in _ops(graph, ["x:0", "pred:0"], ["out:0"])
    for pred in (True, False):
        _same_as_dataflow(graph, {"x:0": X, "pred:0": pred}, ["out:0"])


def test_a_cond_in_a_loop_body_leaves_the_body_a_plain_plan():
    case = load_case(FIXTURES / "tf1_loops/while_nested_tensor_arrays_cond")
    graph = engine.load_graph(case.model)
    prepared = prepare_signature(graph, list(case.feeds), list(case.fetches))
    library = prepared.graph.library
    bodies = [library[name] for name in library if name.endswith("/body")]
    with_cond = [f for f in bodies if any(node.op in CONTROL_FLOW_OPS for node in f.graph.nodes)]
    assert with_cond, "the fixture's inner body holds a v1 cond"
    for body in with_cond:
        plan = compile_plan(body.graph, body.args, body.rets, body.control_rets)
        assert plan.dataflow is None and "If" in [ins.op for ins in plan.instructions]
    got = engine.Session(graph).run(list(case.fetches), case.feeds)
    want = engine.Session(graph, options=UNOPTIMIZED).run(list(case.fetches), case.feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_tf1_model_with_training_conds_beside_a_loop_runs_as_a_plain_plan():
    case = load_case(FIXTURES / "tf1_loops/gru_batch_norm_training_conds")
    graph = engine.load_graph(case.model)
    sess = engine.Session(graph)
    plan = sess.plan_for(list(case.feeds), list(case.fetches))
    assert plan.dataflow is None
    assert {"If", "While"} <= {ins.op for ins in plan.instructions}
    for training in (False, True):
        feeds = {**case.feeds, "training:0": np.bool_(training)}
        (got,) = sess.run(list(case.fetches), feeds)
        (want,) = engine.Session(graph, options=UNOPTIMIZED).run(list(case.fetches), feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # (the GRU runs as one kernel: rounding)
