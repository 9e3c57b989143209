"""TensorFlow's v1 control flow on the dataflow executor, with hand-built graphs shaped the way
tf.compat.v1.cond and tf.compat.v1.while_loop build them (golden fixtures from real TensorFlow are in
tests/fixtures/control_flow and run by test_golden)."""

from collections.abc import Callable

import numpy as np
import pytest

import engine
from engine.errors import DeadTensorError, GraphError, LoopLimitError
from tests.engine.graphs import GraphBuilder

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
UNOPTIMIZED = engine.SessionOptions(plan=engine.PlanOptions(optimize=False))


def cond_graph(const_branches: bool = False) -> engine.Graph:
    """out = pred ? x * 2 : x + 10 (or the constants 1 and 2, with control edges from the pivots)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None,))
    g.placeholder("pred", np.bool_, ())
    g.node("cond/Switch", "Switch", ["x", "pred"], T=F32)
    g.node("cond/switch_t", "Identity", ["cond/Switch:1"], T=F32)
    g.node("cond/switch_f", "Identity", ["cond/Switch:0"], T=F32)
    if const_branches:
        g.node("cond/one", "Const", ["^cond/switch_t"], dtype=F32, value=np.array(1, np.float32))
        g.node("cond/two", "Const", ["^cond/switch_f"], dtype=F32, value=np.array(2, np.float32))
        # Constant folding must keep the control edges, or both branches would look live.
        g.const("cond/three", np.float32(3))
        g.node("cond/t", "Mul", ["cond/one", "cond/three"], T=F32)
        g.node("cond/f", "Identity", ["cond/two"], T=F32)
    else:
        g.const("cond/c2", np.float32(2))
        g.const("cond/c10", np.float32(10))
        g.node("cond/t", "Mul", ["cond/switch_t", "cond/c2"], T=F32)
        g.node("cond/f", "AddV2", ["cond/switch_f", "cond/c10"], T=F32)
    g.node("cond/Merge", "Merge", ["cond/f", "cond/t"], T=F32, N=2)
    g.node("out", "Identity", ["cond/Merge"], T=F32)
    return engine.load_graph(g.bytes())


def while_loop(
    g: GraphBuilder,
    name: str,
    loop_vars: list[tuple[str, np.dtype]],
    cond: Callable[[list[str]], str],
    body: Callable[[list[str], str], list[str]],
    invariants: list[tuple[str, np.dtype]] = (),
) -> tuple[list[str], list[str]]:
    """A v1 while loop: Enter -> Merge -> LoopCond/Switch -> body -> NextIteration, and Exit.

    `cond(merged)` and `body(vars, pivot)` add nodes and return tensor names; body nodes without data
    inputs from the loop must take a control input from `pivot`. Returns (exits, invariant enters)."""
    frame = f"{name}/{name}_context"
    enters_inv = [g.node(f"{name}/Enter_inv_{i}", "Enter", [src], T=dt, frame_name=frame, is_constant=True)
                  for i, (src, dt) in enumerate(invariants)]
    merged = []
    for i, (src, dt) in enumerate(loop_vars):
        g.node(f"{name}/Enter_{i}", "Enter", [src], T=dt, frame_name=frame, is_constant=False)
        # The back edge is filled in below, once NextIteration exists (GraphDef order does not matter).
        merged.append(g.node(f"{name}/Merge_{i}", "Merge", [f"{name}/Enter_{i}", f"{name}/NextIteration_{i}"], T=dt, N=2))
    pred = g.node(f"{name}/LoopCond", "LoopCond", [cond(merged, enters_inv)])
    exits, bodies = [], []
    for i, (_, dt) in enumerate(loop_vars):
        g.node(f"{name}/Switch_{i}", "Switch", [merged[i], pred], T=dt)
        exits.append(g.node(f"{name}/Exit_{i}", "Exit", [f"{name}/Switch_{i}:0"], T=dt))
        bodies.append(g.node(f"{name}/Identity_{i}", "Identity", [f"{name}/Switch_{i}:1"], T=dt))
    new = body(bodies, bodies[0], enters_inv)
    for i, (_, dt) in enumerate(loop_vars):
        g.node(f"{name}/NextIteration_{i}", "NextIteration", [new[i]], T=dt)
    return exits, enters_inv


def counting_loop(limit_fed: bool = True) -> engine.Graph:
    """i, acc = 0, 0; while i < n: i += 1; acc += x  ->  (i, acc) = (n, n * x)."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.placeholder("x", np.float32, (None,))
    g.const("i0", np.int32(0))
    g.node("acc0", "ZerosLike", ["x"], T=F32)

    def cond(merged, inv):
        return g.node("w/Less", "Less", [merged[0], inv[0]], T=I32)

    def body(vars_, pivot, inv):
        g.node("w/one", "Const", [f"^{pivot}"], dtype=I32, value=np.array(1, np.int32))
        return [g.node("w/i_next", "AddV2", [vars_[0], "w/one"], T=I32),
                g.node("w/acc_next", "AddV2", [vars_[1], inv[1]], T=F32)]

    exits, _ = while_loop(g, "w", [("i0", I32), ("acc0", F32)], cond, body, [("n", I32), ("x", F32)])
    g.node("i_out", "Identity", [exits[0]], T=I32)
    g.node("acc_out", "Identity", [exits[1]], T=F32)
    return engine.load_graph(g.bytes())


def nested_loops() -> engine.Graph:
    """total = 0; for i in range(n): for j in range(m): total += i * m + j  (sum of 0..n*m-1)."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.placeholder("m", np.int32, ())
    g.const("zero", np.int32(0))

    def outer_cond(merged, inv):
        return g.node("outer/Less", "Less", [merged[0], inv[0]], T=I32)

    def outer_body(vars_, pivot, inv):
        g.node("outer/zero", "Const", [f"^{pivot}"], dtype=I32, value=np.array(0, np.int32))
        g.node("outer/i_times_m", "Mul", [vars_[0], inv[1]], T=I32)

        def inner_cond(merged, inner_inv):
            return g.node("inner/Less", "Less", [merged[0], inner_inv[0]], T=I32)

        def inner_body(ivars, ipivot, inner_inv):
            g.node("inner/one", "Const", [f"^{ipivot}"], dtype=I32, value=np.array(1, np.int32))
            g.node("inner/term", "AddV2", [inner_inv[1], ivars[0]], T=I32)
            return [g.node("inner/j_next", "AddV2", [ivars[0], "inner/one"], T=I32),
                    g.node("inner/total_next", "AddV2", [ivars[1], "inner/term"], T=I32)]

        inner_exits, _ = while_loop(g, "inner", [("outer/zero", I32), (vars_[1], I32)], inner_cond, inner_body,
                                    [(inv[1], I32), ("outer/i_times_m", I32)])
        g.node("outer/one", "Const", [f"^{pivot}"], dtype=I32, value=np.array(1, np.int32))
        return [g.node("outer/i_next", "AddV2", [vars_[0], "outer/one"], T=I32), inner_exits[1]]

    exits, _ = while_loop(g, "outer", [("zero", I32), ("zero", I32)], outer_cond, outer_body, [("n", I32), ("m", I32)])
    g.node("total", "Identity", [exits[1]], T=I32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("const_branches", [False, True])
@pytest.mark.parametrize("optimize", [True, False])
def test_cond_takes_one_branch(const_branches, optimize):
    options = engine.SessionOptions(plan=engine.PlanOptions(optimize=optimize, constant_folding=optimize))
    sess = engine.Session(cond_graph(const_branches), options=options)
    x = np.array([1.0, 2.0], np.float32)
    true_out, index = sess.run(["out:0", "cond/Merge:1"], {"x:0": x, "pred:0": True})
    false_out = sess.run("out:0", {"x:0": x, "pred:0": False})
    if const_branches:
        assert true_out == 3.0 and false_out == 2.0
    else:
        np.testing.assert_array_equal(true_out, x * 2)
        np.testing.assert_array_equal(false_out, x + 10)
    assert index == 1 and index.dtype == np.int32


def test_fetching_the_untaken_branch_is_an_error():
    sess = engine.Session(cond_graph())
    with pytest.raises(DeadTensorError, match="cond/t:0"):
        sess.run("cond/t:0", {"x:0": np.ones(2, np.float32), "pred:0": False})
    np.testing.assert_array_equal(sess.run("cond/t:0", {"x:0": np.ones(2, np.float32), "pred:0": True}), [2, 2])


# The optimizer raises well-formed loops into While calls (engine.passes.functionalize_loops); unoptimized, they
# run on the dataflow executor. Both are held to the same results.
LOOP_OPTIONS = {"optimize": engine.SessionOptions(), "dataflow": UNOPTIMIZED}


@pytest.mark.parametrize("how", LOOP_OPTIONS)
@pytest.mark.parametrize("n", [0, 1, 7])
def test_while_loop_runs_n_iterations(n, how):
    sess = engine.Session(counting_loop(), options=LOOP_OPTIONS[how])
    x = np.array([0.5, -1.0], np.float32)
    i, acc = sess.run(["i_out:0", "acc_out:0"], {"n:0": np.int32(n), "x:0": x})
    assert i == n
    np.testing.assert_allclose(acc, n * x)


@pytest.mark.parametrize("how", LOOP_OPTIONS)
@pytest.mark.parametrize("n,m", [(0, 3), (1, 1), (3, 4), (5, 0)])
def test_nested_loops(n, m, how):
    sess = engine.Session(nested_loops(), options=LOOP_OPTIONS[how])
    total = sess.run("total:0", {"n:0": np.int32(n), "m:0": np.int32(m)})
    assert total == sum(range(n * m))


@pytest.mark.parametrize("optimize", [True, False])
def test_runaway_loop_is_stopped_by_the_iteration_limit(optimize):
    options = engine.SessionOptions(plan=engine.PlanOptions(max_loop_iterations=50, optimize=optimize))
    sess = engine.Session(counting_loop(), options=options)
    assert sess.run("i_out:0", {"n:0": np.int32(50), "x:0": np.ones(1, np.float32)}) == 50
    with pytest.raises(LoopLimitError, match="w/w_context.*limit of 50"):
        sess.run("i_out:0", {"n:0": np.int32(2**31 - 1), "x:0": np.ones(1, np.float32)})


@pytest.mark.parametrize("how", LOOP_OPTIONS)
def test_loop_on_an_untaken_branch_is_dead_after_it(how):
    """A loop inside a conditional's untaken branch never iterates; its Exit is dead, and the
    conditional's Merge takes the other branch."""
    g = GraphBuilder()
    g.placeholder("n", np.int32, ())
    g.placeholder("pred", np.bool_, ())
    g.node("c/Switch", "Switch", ["n", "pred"], T=I32)
    g.node("c/t", "Identity", ["c/Switch:1"], T=I32)
    g.node("c/f", "Identity", ["c/Switch:0"], T=I32)
    g.node("c/zero", "Const", ["^c/t"], dtype=I32, value=np.array(0, np.int32))

    def cond(merged, inv):
        return g.node("w/Less", "Less", [merged[0], inv[0]], T=I32)

    def body(vars_, pivot, inv):
        g.node("w/one", "Const", [f"^{pivot}"], dtype=I32, value=np.array(1, np.int32))
        return [g.node("w/next", "AddV2", [vars_[0], "w/one"], T=I32)]

    exits, _ = while_loop(g, "w", [("c/zero", I32)], cond, body, [("c/t", I32)])
    g.node("c/neg", "Neg", ["c/f"], T=I32)
    g.node("c/Merge", "Merge", ["c/neg", exits[0]], T=I32, N=2)
    sess = engine.Session(engine.load_graph(g.bytes()), options=LOOP_OPTIONS[how])
    assert sess.run("c/Merge:0", {"n:0": np.int32(4), "pred:0": True}) == 4
    assert sess.run("c/Merge:0", {"n:0": np.int32(4), "pred:0": False}) == -4
    with pytest.raises(DeadTensorError):
        sess.run(exits[0] + ":0", {"n:0": np.int32(4), "pred:0": False})


def test_control_trigger_fires_after_either_branch():
    g = GraphBuilder()
    g.placeholder("x", np.float32, ())
    g.placeholder("pred", np.bool_, ())
    g.node("s", "Switch", ["x", "pred"], T=F32)
    g.node("t", "Identity", ["s:1"], T=F32)
    g.node("f", "Identity", ["s:0"], T=F32)
    g.node("trigger", "ControlTrigger", ["^t", "^f"])
    g.node("after", "Const", ["^trigger"], dtype=F32, value=np.array(7, np.float32))
    sess = engine.Session(engine.load_graph(g.bytes()))
    for pred in (True, False):
        assert sess.run("after:0", {"x:0": np.float32(1), "pred:0": pred}) == 7


def test_tensors_inside_a_loop_cannot_be_fetched():
    sess = engine.Session(counting_loop())
    with pytest.raises(GraphError, match="inside loop frame 'w/w_context'"):
        sess.run("w/i_next:0", {"n:0": np.int32(2), "x:0": np.ones(1, np.float32)})


def test_plan_prints_frames():
    # (Unoptimized: the optimizer raises a well-formed loop into a While, tests/engine/passes/test_functionalize_loops.py.)
    text = str(engine.Session(counting_loop(), options=UNOPTIMIZED).plan_for(["n:0", "x:0"], ["i_out:0"]))
    assert "loop frame(s)" in text and "frame 'w/w_context'" in text


def test_identity_and_noop_waiting_on_control_edges_forward_liveness():
    """An Identity kept for its control input forwards its value when that input is live and is dead
    when it is dead; a NoOp gathering control edges is dead when any of them is (as in lowered Keras
    loops, where such nodes sit on every loop variable)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None,))
    g.placeholder("pred", np.bool_, ())
    g.node("s", "Switch", ["x", "pred"], T=F32)
    g.node("t", "Identity", ["s:1"], T=F32)
    g.node("f", "Identity", ["s:0"], T=F32)
    g.node("gate_t", "NoOp", ["^t", "^s"])
    g.node("x_if_t", "Identity", ["x", "^gate_t"], T=F32)
    g.node("x_if_f", "StopGradient", ["x", "^f"], T=F32)
    g.node("m", "Merge", ["x_if_f", "x_if_t"], T=F32, N=2)
    sess = engine.Session(engine.load_graph(g.bytes()))
    x = np.array([1.0, -2.0], np.float32)
    for pred in (True, False):
        value, index = sess.run(["m:0", "m:1"], {"x:0": x, "pred:0": pred})
        np.testing.assert_array_equal(value, x)
        assert index == int(pred)
        with pytest.raises(DeadTensorError, match="x_if_f" if pred else "x_if_t"):
            sess.run("x_if_f:0" if pred else "x_if_t:0", {"x:0": x, "pred:0": pred})


@pytest.mark.parametrize("partial", [False, True])
def test_a_control_edge_from_a_fed_placeholder_is_satisfied_by_its_feed(partial):
    """`with tf.control_dependencies([x])` on a fed placeholder: the feed stands in for the node."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, ())
    g.placeholder("pred", np.bool_, ())
    g.node("s", "Switch", ["x", "pred"], T=F32)
    g.node("after", "Const", ["^x", "^s"], dtype=F32, value=np.array(7, np.float32))
    g.node("out", "Merge", ["s:0", "after"], T=F32, N=2)
    sess = engine.Session(engine.load_graph(g.bytes()))
    feeds = {"x:0": np.float32(1), "pred:0": True}
    if partial:
        handle = sess.prun_setup(list(feeds), ["after:0"])
        assert sess.prun(handle, feeds, "after:0") == 7
    else:
        assert sess.run("after:0", feeds) == 7
