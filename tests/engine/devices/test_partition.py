"""Placement and partitioning across devices, exercised with two logical CPUs (cpu:0 and cpu:1).

Nodes are pinned by their NodeDef `device` field, as TensorFlow graphs pin them. A signature spread
over two devices runs as two partitions joined by _Send/_Recv pairs through a per-run rendezvous.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

import engine
from engine.compile.plan import Plan
from engine.devices import DeviceError, gpu_available
from engine.devices.partition import PartitionedPlan
from engine.errors import ExecutionError, RendezvousAbortedError
from engine.proto import graph_pb2
from engine.runtime.session import Session, SessionOptions
from kernels.registry import register
from tests.engine.graphs import GraphBuilder
from tests.golden import FIXTURES, assert_matches, case_dirs, load_case

F32 = np.float32
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def two_cpus(**kwargs) -> SessionOptions:
    return SessionOptions(logical_cpus=2, **kwargs)


def pin(g: GraphBuilder, devices: dict[str, str]) -> GraphBuilder:
    for nd in g.graph_def.node:
        if nd.name in devices:
            nd.device = devices[nd.name]
    return g


def session(g: GraphBuilder, **kwargs) -> Session:
    return Session(engine.load_graph(g.bytes()), options=two_cpus(**kwargs))


@pytest.fixture
def test_ops(monkeypatch):
    """Two CPU-only test ops: _TestRecord logs its label (after `delay` seconds), _TestMeet waits
    at a two-party barrier (it only passes when two of them run at the same time)."""
    from kernels import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # keep test ops out of the real one
    log: list[str] = []
    barrier = threading.Barrier(2, timeout=5)

    def record(xp, x, *, label, delay=0.0):
        time.sleep(delay)
        log.append(label.decode() if isinstance(label, bytes) else label)
        return (x,)

    def meet(xp, x):
        barrier.wait()
        return (x,)

    register("_TestRecord", record, devices=("cpu",), stateful=True)
    register("_TestMeet", meet, devices=("cpu",), stateful=True)
    return SimpleNamespace(log=log, barrier=barrier)


# --- devices of a session --------------------------------------------------------------------------------


def small_graph() -> GraphBuilder:
    g = GraphBuilder()
    g.placeholder("x", F32, (None, 4))
    g.node("y", "Neg", ["x"], T=F32)
    return g


def test_session_device_names_are_canonical() -> None:
    graph = engine.load_graph(small_graph().bytes())
    assert Session(graph).device == "cpu:0"
    assert Session(graph, device="/device:CPU:0").device == "cpu:0"
    sess = Session(graph, device="/job:localhost/replica:0/task:0/device:CPU:1", options=two_cpus())
    assert sess.device == "cpu:1"
    plan = sess.plan_for(["x:0"], ["y:0"])
    assert isinstance(plan, Plan) and plan.device == "cpu:1"
    np.testing.assert_array_equal(sess.run("y:0", {"x:0": np.ones((1, 4), F32)}), -np.ones((1, 4), F32))


@pytest.mark.parametrize("device", ["tpu", "cpu:2", "/device:TPU:0", ""])
def test_unknown_or_unavailable_devices_are_refused(device: str) -> None:
    with pytest.raises(DeviceError):
        Session(engine.load_graph(small_graph().bytes()), device=device, options=two_cpus())


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
def test_gpu_without_backend_is_refused() -> None:
    with pytest.raises(DeviceError, match="not available"):
        Session(engine.load_graph(small_graph().bytes()), device="gpu")


# --- placement --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["/device:GPU:0", "/job:worker/task:3", "cpu:7", "/device:CPU:5", "not a device"])
def test_unknown_device_in_node_def_falls_back(spec: str) -> None:
    g = pin(small_graph(), {"y": spec})
    sess = session(g)
    plan = sess.plan_for(["x:0"], ["y:0"])
    assert isinstance(plan, Plan) and plan.device == "cpu:0"  # soft placement: ignored, one device
    np.testing.assert_array_equal(sess.run("y:0", {"x:0": np.ones((2, 4), F32)}), -np.ones((2, 4), F32))


def test_everything_pinned_to_one_other_cpu_runs_there_without_partitions() -> None:
    g = pin(small_graph(), {"y": CPU1})
    plan = session(g).plan_for(["x:0"], ["y:0"])
    assert isinstance(plan, Plan) and plan.device == "cpu:1"


def test_single_logical_cpu_ignores_pins_to_cpu1() -> None:
    g = pin(small_graph(), {"y": CPU1})
    plan = Session(engine.load_graph(g.bytes())).plan_for(["x:0"], ["y:0"])
    assert isinstance(plan, Plan) and plan.device == "cpu:0"


# --- partitions, sends and receives --------------------------------------------------------------------------


def fan_graph() -> GraphBuilder:
    """a on cpu:0 is read by b and c on cpu:1; d, e on cpu:0 read them back; k is read on both."""
    g = GraphBuilder()
    g.placeholder("x", F32, (None, 4))
    g.const("k", np.full((4,), 2.0, F32))
    g.node("a", "Relu", ["x"], T=F32)
    g.node("b", "Mul", ["a", "k"], T=F32)
    g.node("c", "Exp", ["a"], T=F32)
    g.node("d", "AddV2", ["b", "c"], T=F32)
    g.node("e", "Mul", ["d", "k"], T=F32)
    return pin(g, {"b": CPU1, "c": "/device:CPU:1", "a": "cpu:0"})


def test_cross_device_edges_become_send_recv_pairs() -> None:
    sess = session(fan_graph())
    plan = sess.plan_for(["x:0"], ["e:0", "x:0"])
    assert isinstance(plan, PartitionedPlan)
    p0, p1 = plan.partitions
    assert (p0.device, p1.device) == ("cpu:0", "cpu:1")
    # One Send of a:0 to cpu:1, shared by its two readers there.
    assert p0.sends == ("cpu:0;cpu:1;a:0;0:0",) and p1.recvs == ("cpu:0;cpu:1;a:0;0:0",)
    assert sorted(p1.sends) == ["cpu:1;cpu:0;b:0;0:0", "cpu:1;cpu:0;c:0;0:0"]
    assert sorted(p0.recvs) == sorted(p1.sends)
    text = str(plan)
    assert text.count("_Send(") == 3 and text.count("_Recv(") == 3
    assert "cpu:0;cpu:1;a:0;0:0" in text and "partition 1 on cpu:1" in text
    # Constants are copied into each partition that reads them; fed tensors go straight to readers.
    assert not any("k:0" in key or "x:0" in key for p in plan.partitions for key in p.sends)

    x = np.array([[-1.0, 0.5, 2.0, -3.0]], F32)
    e, x_back = sess.run(["e:0", "x:0"], {"x:0": x})
    a = np.maximum(x, 0)
    np.testing.assert_allclose(e, (a * 2 + np.exp(a)) * 2, rtol=1e-6)
    np.testing.assert_array_equal(x_back, x)


def test_control_edge_across_devices_orders_the_reader(test_ops) -> None:
    g = GraphBuilder()
    g.placeholder("x", F32, (2,))
    g.node("slow", "_TestRecord", ["x"], label="slow", delay=0.2)
    g.node("after", "_TestRecord", ["x", "^slow"], label="after")
    g.node("out", "AddV2", ["slow", "after"], T=F32)
    sess = session(pin(g, {"after": CPU1}))
    plan = sess.plan_for(["x:0"], ["out:0"])
    assert "cpu:0;cpu:1;^slow;0:0" in plan.partitions[1].recvs
    out = sess.run("out:0", {"x:0": np.ones(2, F32)})
    np.testing.assert_array_equal(out, [2.0, 2.0])
    assert test_ops.log == ["slow", "after"]  # without the control edge, cpu:1 would log first


@pytest.mark.timeout(20)
def test_partitions_run_at_the_same_time(test_ops) -> None:
    g = GraphBuilder()
    g.placeholder("x", F32, (2,))
    g.node("m0", "_TestMeet", ["x"])
    g.node("m1", "_TestMeet", ["x"])
    g.node("out", "AddV2", ["m0", "m1"], T=F32)
    sess = session(pin(g, {"m1": CPU1}))
    # Each _TestMeet waits at a two-party barrier: the run only succeeds if both partitions are
    # running at once (run one after the other, the first would time out and fail).
    for _ in range(3):
        np.testing.assert_array_equal(sess.run("out:0", {"x:0": np.ones(2, F32)}), [2.0, 2.0])


def failing_graph(bad_on: str, reader_on: str) -> GraphBuilder:
    g = GraphBuilder()
    g.placeholder("x", F32, (None,))
    g.const("shape", np.array([5], np.int32))
    g.node("r", "Reshape", ["x", "shape"], T=F32, Tshape=np.int32)
    g.node("reader", "Neg", ["r"], T=F32)
    g.node("other", "Exp", ["x"], T=F32)
    return pin(g, {"r": bad_on, "reader": reader_on, "other": reader_on})


@pytest.mark.timeout(10)
@pytest.mark.parametrize("bad_on, reader_on", [(CPU1, "cpu:0"), ("cpu:0", CPU1)], ids=["worker fails", "caller fails"])
def test_error_in_one_partition_aborts_the_other(bad_on: str, reader_on: str) -> None:
    sess = session(failing_graph(bad_on, reader_on))
    bad_device = "cpu:1" if bad_on == CPU1 else "cpu:0"
    with pytest.raises(ExecutionError) as info:
        sess.run(["reader:0", "other:0"], {"x:0": np.ones(4, F32)})  # 4 values cannot become [5]
    error = info.value
    assert not isinstance(error, RendezvousAbortedError)  # the original error, not the receiver's
    assert error.node == "r" and error.device == bad_device and f"Reshape on {bad_device}" in str(error)
    assert "[[{{node r}}]]" in str(error)
    # Nothing hangs or stays broken: the next run works.
    reader, _ = sess.run(["reader:0", "other:0"], {"x:0": np.ones(5, F32)})
    np.testing.assert_array_equal(reader, -np.ones(5, F32))


@pytest.mark.timeout(30)
def test_concurrent_runs_of_a_partitioned_plan() -> None:
    sess = session(fan_graph())
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                x = rng.standard_normal((3, 4)).astype(F32)
                a = np.maximum(x, 0)
                np.testing.assert_allclose(sess.run("e:0", {"x:0": x}), (a * 2 + np.exp(a)) * 2, rtol=1e-5)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# --- golden fixtures, half of each model moved to cpu:1 ----------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case_dir", case_dirs("models"), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_golden_models_split_across_two_cpus(case_dir) -> None:
    case = load_case(case_dir)
    graph_def = graph_pb2.GraphDef.FromString(case.model.read_bytes()) if case.model.suffix == ".pb" else None
    if graph_def is None:
        graph_def = engine.graph.graph_def.load_graph(case.model).graph_def
    for i, node in enumerate(graph_def.node):
        node.device = CPU1 if i % 2 else "/device:CPU:0"
    split = Session(engine.load_graph(graph_def), options=two_cpus())
    single = Session(engine.load_graph(case.model))
    fetches, feeds = list(case.fetches), case.feeds

    plan = split.plan_for(list(feeds), fetches)
    if not isinstance(plan, PartitionedPlan):
        # A small model the optimizer fuses into a few kernels, each taking the device of the node it ends
        # with, can end up wholly on one device (transformer_patterns/gated_feed_forward: three gated
        # projections): partition it unoptimized, node by node.
        split = Session(engine.load_graph(graph_def), options=two_cpus(plan=engine.PlanOptions(optimize=False)))
        plan = split.plan_for(list(feeds), fetches)
    assert isinstance(plan, PartitionedPlan) and len(plan.partitions) == 2
    assert sorted(k for p in plan.partitions for k in p.sends) == sorted(k for p in plan.partitions for k in p.recvs)
    outs = split.run(fetches, feeds)
    for (name, want), got, same in zip(case.fetches.items(), outs, single.run(fetches, feeds)):
        assert_matches(name, got, want, case.rtol, case.atol)
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64) if got.dtype.kind in "fc" else got,
                                   np.asarray(same, dtype=np.float64) if same.dtype.kind in "fc" else same,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case_dir", case_dirs("control_flow"), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_control_flow_split_across_two_cpus(case_dir) -> None:
    """v1 control flow keeps its signature on one device; functional If/While calls are placed as
    single nodes (their bodies run on the call's device)."""
    case = load_case(case_dir)
    graph_def = engine.load_graph(case.model).graph_def
    for i, node in enumerate(graph_def.node):
        node.device = CPU1 if i % 2 else ""
    sess = Session(engine.load_graph(graph_def), options=two_cpus())
    plan = sess.plan_for(list(case.feeds), list(case.fetches))
    if plan.dataflow is not None:
        assert isinstance(plan, Plan) and plan.device == "cpu:0"
    outs = sess.run(list(case.fetches), case.feeds)
    for (name, want), got in zip(case.fetches.items(), outs):
        assert_matches(name, got, want, case.rtol, case.atol)
