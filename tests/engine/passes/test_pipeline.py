"""The optimizer's pipeline: which passes the plan options select, and what no pass may touch: v1 control
flow (with the control edges that keep a folded constant in its branch or loop frame) and opaque nodes."""

import numpy as np
import pytest

import engine
from engine.graph import TensorRef
from engine.passes import PIPELINE, PassContext, optimize, pipeline_names
from engine.passes.guards import is_opaque
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, I32, UNOPTIMIZED, conv_bn_relu, ops_of, optimized

# -- the pipeline and its switches ---------------------------------------------------------------------


def test_plan_options_select_the_passes():
    assert pipeline_names() == [name for name, _ in PIPELINE]
    assert pipeline_names(optimize=False) == ["fold_constants"]
    assert "fold_constants" not in pipeline_names(constant_folding=False)
    with pytest.raises(ValueError, match="unknown optimization passes"):
        optimize(conv_bn_relu(), PassContext(frozenset(), frozenset({"relu"})), ["fold_everything"])


def test_optimize_false_keeps_every_op_but_folds_constants():
    graph = conv_bn_relu()
    only_folding = engine.Session(graph, options=UNOPTIMIZED)
    assert ops_of(only_folding, ["x:0"], ["relu:0"]) == ["Conv2D", "Mul", "AddV2", "Relu"]
    nothing = engine.Session(graph, options=engine.SessionOptions(plan=engine.PlanOptions(optimize=False, constant_folding=False)))
    assert ops_of(nothing, ["x:0"], ["relu:0"]) == ["Conv2D", "Mul", "AddV2", "Relu"]
    assert ops_of(engine.Session(graph), ["x:0"], ["relu:0"]) == ["_FusedConv2D"]


# -- control flow: what no pass touches, and the control edges folding keeps -------------------------------


def cond_with_constant_branches():
    """out = pred ? x * (one + three) * four : x + two, with branch constants guarded by the pivots."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None,))
    g.placeholder("pred", np.bool_, ())
    g.node("cond/Switch", "Switch", ["x", "pred"], T=F32)
    g.node("cond/switch_t", "Identity", ["cond/Switch:1"], T=F32)
    g.node("cond/switch_f", "Identity", ["cond/Switch:0"], T=F32)
    g.node("cond/one", "Const", ["^cond/switch_t"], dtype=F32, value=np.array(1, np.float32))
    g.node("cond/two", "Const", ["^cond/switch_f"], dtype=F32, value=np.array(2, np.float32))
    g.const("three", np.float32(3))
    g.const("four", np.float32(4))
    g.node("cond/sum", "AddV2", ["cond/one", "three"], T=F32)
    g.node("cond/k", "Mul", ["cond/sum", "four"], T=F32)  # folds from a folded constant: ^switch_t is inherited
    g.node("cond/t", "Mul", ["cond/switch_t", "cond/k"], T=F32)
    g.node("cond/f", "AddV2", ["cond/switch_f", "cond/two"], T=F32)
    g.node("cond/Merge", "Merge", ["cond/f", "cond/t"], T=F32, N=2)
    g.node("out", "Identity", ["cond/Merge"], T=F32)
    return engine.load_graph(g.bytes())


def counting_loop():
    """i = 0; while i < n: i += one + one (the increment folds inside the loop frame)."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.const("i0", np.int32(0))
    frame = "w/w_context"
    g.node("w/Enter", "Enter", ["i0"], T=I32, frame_name=frame, is_constant=False)
    g.node("w/Enter_n", "Enter", ["n"], T=I32, frame_name=frame, is_constant=True)
    g.node("w/Merge", "Merge", ["w/Enter", "w/NextIteration"], T=I32, N=2)
    g.node("w/Less", "Less", ["w/Merge", "w/Enter_n"], T=I32)
    g.node("w/LoopCond", "LoopCond", ["w/Less"])
    g.node("w/Switch", "Switch", ["w/Merge", "w/LoopCond"], T=I32)
    g.node("w/Identity", "Identity", ["w/Switch:1"], T=I32)
    g.node("w/one", "Const", ["^w/Identity"], dtype=I32, value=np.array(1, np.int32))
    g.node("w/one_again", "Const", ["^w/Identity"], dtype=I32, value=np.array(1, np.int32))
    g.node("w/step", "AddV2", ["w/one", "w/one_again"], T=I32)
    g.node("w/next", "AddV2", ["w/Identity", "w/step"], T=I32)
    g.node("w/NextIteration", "NextIteration", ["w/next"], T=I32)
    g.node("w/Exit", "Exit", ["w/Switch:0"], T=I32)
    g.node("i", "Identity", ["w/Exit"], T=I32)
    return engine.load_graph(g.bytes())


# Every pass but the two that raise v1 control flow into While and If calls (their own tests are in
# test_functionalize_loops.py and test_functionalize_conds.py).
KEEPING_CONTROL_FLOW = [name for name, _ in PIPELINE if name not in ("functionalize_loops", "functionalize_conds")]


@pytest.mark.parametrize("passes", [KEEPING_CONTROL_FLOW, *[[name] for name in KEEPING_CONTROL_FLOW]],
                         ids=lambda p: "pipeline" if len(p) > 1 else p[0])
def test_control_flow_nodes_are_never_rewritten(passes):
    for graph, feeds, fetches in ((cond_with_constant_branches(), ["x:0", "pred:0"], ["out:0"]), (counting_loop(), ["n:0"], ["i:0"])):
        after = optimized(graph, feeds, fetches, passes)
        for node in graph.nodes:
            if node.op in CONTROL_FLOW_OPS:
                kept = after.node(node.name)
                assert (kept.op, kept.inputs, kept.control_inputs, dict(kept.attrs)) == (
                    node.op, node.inputs, node.control_inputs, dict(node.attrs))


def test_folded_constant_keeps_the_control_inputs_it_inherits():
    after = optimized(cond_with_constant_branches(), ["x:0", "pred:0"], ["out:0"], ["fold_constants"])
    k = after.node("cond/k")
    assert k.op == "Const" and float(k.attrs["value"]) == 16.0
    # From cond/one, through the folded cond/sum: without it the constant would be live on both branches.
    assert k.control_inputs == ("cond/switch_t",)
    assert after.node("cond/sum").control_inputs == ("cond/switch_t",)
    step = optimized(counting_loop(), ["n:0"], ["i:0"], ["fold_constants"]).node("w/step")
    assert step.op == "Const" and step.control_inputs == ("w/Identity",)  # stays in the loop frame


def test_simplified_nodes_keep_the_dependencies_of_what_they_bypass():
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 6))
    g.placeholder("pred", np.bool_, ())
    g.node("s", "Switch", ["x", "pred"], T=F32)
    g.node("t", "Identity", ["s:1"], T=F32)
    g.node("one", "Const", ["^t"], dtype=F32, value=np.array(1, np.float32))
    g.node("y", "Mul", ["x", "one"], T=F32)  # x from outside the branch: only ^t makes y dead when not taken
    g.node("shape", "Shape", ["t"], T=F32, out_type=I32)
    g.node("r1", "Reshape", ["y", "shape"], T=F32)
    g.node("s2", "Const", ["^t"], dtype=I32, value=np.array([-1], np.int32))
    g.node("r2", "Reshape", ["r1", "s2"], T=F32)
    after = optimized(engine.load_graph(g.bytes()), ["x:0", "pred:0"], ["r2:0"], ["simplify_arithmetic"])
    assert after.node("y").op == "Identity" and after.node("y").control_inputs == ("t",)
    assert after.node("r2").inputs[0] == TensorRef("y") and "shape" in after.node("r2").control_inputs


@pytest.mark.parametrize("optimize_on", [True, False])
def test_control_flow_graphs_give_the_same_results_optimized(optimize_on):
    options = engine.SessionOptions(plan=engine.PlanOptions(optimize=optimize_on, constant_folding=optimize_on))
    sess = engine.Session(cond_with_constant_branches(), options=options)
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_array_equal(sess.run("out:0", {"x:0": x, "pred:0": True}), x * 16)
    np.testing.assert_array_equal(sess.run("out:0", {"x:0": x, "pred:0": False}), x + 2)
    loop = engine.Session(counting_loop(), options=options)
    assert loop.run("i:0", {"n:0": np.int32(7)}) == 8


def test_opaque_nodes():
    graph = cond_with_constant_branches()
    assert is_opaque(graph.node("cond/Switch")) and is_opaque(graph.node("cond/Merge")) and is_opaque(graph.node("x"))
    assert not is_opaque(graph.node("cond/t"))
    # Stateful in TensorFlow whatever a kernel registration says; function calls; ops without a kernel.
    for op in ("RandomUniform", "StatefulPartitionedCall", "StatelessIf", "While", "Assert", "TensorListReserve", "FancyOp"):
        assert is_opaque(engine.Node("n", op, (), (), "", {})), op

