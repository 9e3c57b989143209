"""PlanOptions.max_request_memory_bytes: a kernel asked to allocate past it fails with ResourceLimitError (an
ExecutionError naming the node, the op, the size and the limit) before allocating, on every executor: the
straight-line loop, the dataflow executor (v1 control flow), partial runs and function bodies. A
MemoryError inside a kernel becomes OutOfMemoryError, naming the node."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import engine
import kernels
from engine import errors
from engine.runtime.executor import execute
from kernels import registry
from tests.engine.graph.test_functions import FunctionBuilder, add, call
from tests.engine.graphs import GraphBuilder

F32, I32, BOOL = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)
LIMIT = 1 << 20
BOMB = np.int32([30000, 30000])  # 3.6 GB of float32
SMALL = np.int32([2, 3])


def fill_graph() -> bytes:
    g = GraphBuilder()
    g.placeholder("dims", np.int32, (None,))
    g.const("one", np.float32(1))
    g.node("big", "Fill", ["dims", "one"], T=F32, index_type=I32)
    g.node("out", "Identity", ["big"], T=F32)
    return g.bytes()


def cond_fill_graph() -> bytes:
    """out = pred ? Fill(dims, 1) : zeros(2): the Fill sits on a branch of a v1 conditional."""
    g = GraphBuilder()
    g.placeholder("dims", np.int32, (None,))
    g.placeholder("pred", np.bool_, ())
    g.node("cond/Switch", "Switch", ["dims", "pred"], T=I32)
    g.node("cond/switch_t", "Identity", ["cond/Switch:1"], T=I32)
    g.node("cond/one", "Const", ["^cond/switch_t"], dtype=F32, value=np.array(1, np.float32))
    g.node("cond/big", "Fill", ["cond/switch_t", "cond/one"], T=F32, index_type=I32)
    g.node("cond/flat", "Reshape", ["cond/big", "cond/minus_one"], T=F32, Tshape=I32)
    g.node("cond/minus_one", "Const", ["^cond/switch_t"], dtype=I32, value=np.array([-1], np.int32))
    g.node("cond/switch_f", "Identity", ["cond/Switch:0"], T=I32)
    g.node("cond/zeros", "Const", ["^cond/switch_f"], dtype=F32, value=np.zeros(2, np.float32))
    g.node("cond/Merge", "Merge", ["cond/zeros", "cond/flat"], T=F32, N=2)
    g.node("out", "Identity", ["cond/Merge"], T=F32)
    return g.bytes()


def session(graph: bytes, limit: int | None = LIMIT) -> engine.Session:
    options = engine.SessionOptions(plan=engine.PlanOptions(max_request_memory_bytes=limit))
    return engine.Session(graph, options=options)


def check_names_everything(error: errors.ResourceLimitError, node: str) -> None:
    assert isinstance(error, errors.ExecutionError)
    assert error.node == node and error.op == "Fill"
    assert error.requested == 30000 * 30000 * 4 and error.limit == LIMIT
    message = str(error)
    for part in (f"{{{{node {node}}}}}", "Fill", "3600000000 bytes", f"limit of {LIMIT} bytes",
                 "TENSORGATE_MAX_REQUEST_MEMORY_BYTES", "PlanOptions.max_request_memory_bytes"):
        assert part in message, part


def test_execute_refuses_a_fill_past_the_limit_naming_the_node():
    graph = engine.load_graph(fill_graph())
    plan = engine.compile_plan(graph, ["dims:0"], ["out:0"],
                               options=engine.PlanOptions(max_request_memory_bytes=LIMIT))
    assert plan.dataflow is None
    with pytest.raises(errors.ResourceLimitError) as info:
        execute(plan, [BOMB])
    check_names_everything(info.value, "big")
    assert execute(plan, [SMALL])[0].shape == (2, 3)


def test_a_session_with_the_option_refuses_and_goes_on_serving():
    sess = session(fill_graph())
    with pytest.raises(errors.ResourceLimitError) as info:
        sess.run("out:0", {"dims:0": BOMB})
    check_names_everything(info.value, "big")
    np.testing.assert_array_equal(sess.run("out:0", {"dims:0": SMALL}), np.ones((2, 3), np.float32))


def test_without_the_option_there_is_no_limit():
    assert engine.PlanOptions().max_request_memory_bytes is None
    sess = session(fill_graph(), None)
    assert sess.run("out:0", {"dims:0": np.int32([600, 600])}).shape == (600, 600)  # 1.4 MB > LIMIT


def test_the_dataflow_executor_refuses_on_a_taken_branch_only():
    sess = session(cond_fill_graph())
    with pytest.raises(errors.ResourceLimitError) as info:
        sess.run("out:0", {"dims:0": BOMB, "pred:0": True})
    check_names_everything(info.value, "cond/big")
    np.testing.assert_array_equal(sess.run("out:0", {"dims:0": BOMB, "pred:0": False}), np.zeros(2, np.float32))


def test_a_partial_run_refuses_the_same():
    sess = session(cond_fill_graph())
    handle = sess.prun_setup(["dims:0", "pred:0"], ["out:0"])
    with pytest.raises(errors.ResourceLimitError) as info:
        sess.prun(handle, {"dims:0": BOMB, "pred:0": True}, "out:0")
    check_names_everything(info.value, "cond/big")


def test_a_function_body_refuses_the_same_naming_its_own_node():
    f = FunctionBuilder("make_big", {"dims": I32}, {"y": F32})
    f.const("one", np.float32(1))
    f.node("big", "Fill", ["dims", "one:output:0"], T=F32, index_type=I32)
    g = GraphBuilder()
    g.placeholder("dims", np.int32, (None,))
    call(g, "call", "StatefulPartitionedCall", ["dims"], {"f": "make_big"}, Tin=[I32], Tout=[F32])
    add(g, f.fdef({"y": "big:output:0"}))
    sess = session(g.bytes())
    with pytest.raises(errors.ResourceLimitError) as info:
        sess.run("call:0", {"dims:0": BOMB})
    check_names_everything(info.value, "big")
    assert sess.run("call:0", {"dims:0": SMALL}).shape == (2, 3)


def test_constant_folding_does_not_compute_a_huge_constant(monkeypatch):
    """A graph's own Fill of constants past the folding cap is left to run (and to be limited), never
    computed while the plan is built: folding binds kernels with its size cap as their memory limit."""
    kdef = kernels.lookup("Fill", "cpu")
    limits_seen = []

    def recording_fill(xp, dims, value, *, memory_limit=None):
        limits_seen.append(memory_limit)
        return kdef.fn(xp, dims, value, memory_limit=memory_limit)

    monkeypatch.setitem(registry._REGISTRY, ("Fill", "cpu"), dataclasses.replace(kdef, fn=recording_fill))
    g = GraphBuilder()
    g.const("dims", np.int32([30000, 30000]))
    g.const("one", np.float32(1))
    g.node("big", "Fill", ["dims", "one"], T=F32, index_type=I32)
    sess = session(g.bytes())
    with pytest.raises(errors.ResourceLimitError):
        sess.run("big:0")
    assert limits_seen == [engine.PlanOptions().constant_folding_max_bytes, LIMIT]


@pytest.fixture
def fill_runs_out_of_memory(monkeypatch):
    """Fill's CPU kernel raising MemoryError, as numpy does when malloc fails."""

    def out_of_memory(xp, dims, value, *, memory_limit=None):
        raise MemoryError("Unable to allocate 3.35 GiB for an array with shape (30000, 30000)")

    kdef = kernels.lookup("Fill", "cpu")
    monkeypatch.setitem(registry._REGISTRY, ("Fill", "cpu"), dataclasses.replace(kdef, fn=out_of_memory))


@pytest.mark.parametrize("graph, feeds, node", [
    (fill_graph, {"dims:0": SMALL}, "big"),
    (cond_fill_graph, {"dims:0": SMALL, "pred:0": True}, "cond/big"),
])
def test_a_memory_error_in_a_kernel_is_out_of_memory_naming_the_node(fill_runs_out_of_memory, graph, feeds, node):
    sess = session(graph())
    with pytest.raises(errors.OutOfMemoryError) as info:
        sess.run("out:0", feeds)
    assert isinstance(info.value, errors.ExecutionError)
    assert info.value.node == node
    assert "out of memory" in str(info.value) and f"{{{{node {node}}}}}" in str(info.value)
    assert "Unable to allocate 3.35 GiB" in str(info.value)
