"""The winograd pass: a convolution with a constant 3x3 filter, stride 1 and dilation 1 (plain or fused)
becomes `_TensorgateWinogradConv2D` with the filter's transform as a constant; others are left alone; the
results stay those of the unoptimized graph, and the golden fixtures' convolutions, run by Winograd,
stay within TensorFlow's tolerances with compiled kernels on and off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import engine
from engine.graph import Graph
from engine.passes import PassContext, optimize
from engine.passes.rewrite import const_node, rebuild
from kernels.nn import winograd
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, UNOPTIMIZED, ops_of, rng
from tests.golden import FIXTURES, assert_matches, case_dirs, load_case

OP = "_TensorgateWinogradConv2D"
# Big enough for the kernel to pick Winograd: 200 tiles x 64 x 64 channels (kernels.nn.winograd.prefers_winograd).
X = rng.standard_normal((2, 20, 20, 64)).astype(np.float32)


def compare(graph: Graph, feeds: dict, fetches: list[str]) -> None:
    """Optimized results equal unoptimized ones within the golden fixtures' tolerance: Winograd sums in
    another order than the direct convolution, so its errors are relative to the output's scale."""
    got = engine.Session(graph).run(fetches, feeds)
    want = engine.Session(graph, options=UNOPTIMIZED).run(fetches, feeds)
    for name, g_, w_ in zip(fetches, got, want):
        assert_matches(name, g_, w_, rtol=1e-5, atol=1e-5)


def conv_net(*, shape=(3, 3, 64, 64), strides=(1, 1, 1, 1), dilations=(1, 1, 1, 1), padding="SAME",
             dtype=np.float32, fed_filter=False, bias_relu=True) -> Graph:
    """x -> Conv2D(w) [-> BiasAdd -> Relu] -> out."""
    g = GraphBuilder()
    g.placeholder("x", dtype, (None, 20, 20, shape[2]))
    if fed_filter:
        g.placeholder("w", dtype, shape)
    else:
        g.const("w", (rng.standard_normal(shape) / np.sqrt(np.prod(shape[:3]))).astype(dtype))
    g.node("conv", "Conv2D", ["x", "w"], T=np.dtype(dtype), strides=list(strides), padding=padding,
           dilations=list(dilations))
    if bias_relu:
        g.const("b", rng.standard_normal(shape[3]).astype(dtype))
        g.node("biased", "BiasAdd", ["conv", "b"], T=np.dtype(dtype))
        g.node("out", "Relu", ["biased"], T=np.dtype(dtype))
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("bias_relu", [True, False], ids=["fused", "plain"])
def test_a_3x3_stride_1_convolution_becomes_winograd(bias_relu):
    assert winograd.prefers_winograd(2, 20, 20, 64, 64)
    graph = conv_net(bias_relu=bias_relu)
    fetch = "out:0" if bias_relu else "conv:0"
    assert ops_of(engine.Session(graph), ["x:0"], [fetch]) == [OP]
    compare(graph, {"x:0": X}, [fetch])


def test_the_transform_is_a_constant_computed_once_per_filter():
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 20, 20, 64))
    g.const("w", (rng.standard_normal((3, 3, 64, 64)) / 24).astype(np.float32))
    g.node("a", "Conv2D", ["x", "w"], T=F32, strides=[1, 1, 1, 1], padding="SAME")
    g.node("b", "Conv2D", ["a", "w"], T=F32, strides=[1, 1, 1, 1], padding="VALID")
    graph = engine.load_graph(g.bytes())
    ctx = PassContext(fed=frozenset({engine.parse_tensor_name("x:0")}), preserve=frozenset({"b"}))
    optimized = optimize(graph, ctx)
    convs = [n for n in optimized.nodes if n.op == OP]
    assert [n.name for n in convs] == ["a", "b"]
    assert convs[0].inputs[2] == convs[1].inputs[2]
    transform = optimized.node(convs[0].inputs[2].node)
    np.testing.assert_array_equal(transform.attrs["value"], winograd.winograd_filter(np, graph.node("w").attrs["value"]))
    compare(graph, {"x:0": X}, ["b:0"])


@pytest.mark.parametrize("kwargs", [
    dict(strides=(1, 2, 2, 1)),
    dict(dilations=(1, 2, 2, 1)),
    dict(shape=(1, 1, 64, 64)),
    dict(shape=(5, 5, 64, 64)),
    dict(fed_filter=True),
    dict(dtype=np.float64),
    dict(shape=(3, 3, 64, 8)),  # too few output channels for Winograd ever to pay
], ids=["stride2", "dilation2", "1x1", "5x5", "fed_filter", "float64", "few_channels"])
def test_other_convolutions_are_left_alone(kwargs):
    graph = conv_net(**kwargs)
    feeds = ["x:0", "w:0"] if kwargs.get("fed_filter") else ["x:0"]
    assert OP not in ops_of(engine.Session(graph), feeds, ["out:0"])


def test_gpu_plans_are_left_alone():
    graph = conv_net()
    ctx = PassContext(fed=frozenset({engine.parse_tensor_name("x:0")}), preserve=frozenset({"out"}), device="gpu")
    assert OP not in {n.op for n in optimize(graph, ctx).nodes}


# --- golden fixtures, run by Winograd --------------------------------------------------------------------


def _with_constant_filters(graph: Graph, feeds: dict) -> tuple[Graph, dict]:
    """The graph with each fed convolution filter made a Const (of its fed value), so that the pass can
    transform it; the remaining feeds."""
    filters = {n.inputs[1].node for n in graph.nodes if n.op in ("Conv2D", "_FusedConv2D")}
    consts = {name: const_node(name, feeds[f"{name}:0"]) for name in filters if f"{name}:0" in feeds}
    remaining = {k: v for k, v in feeds.items() if k.split(":")[0] not in consts}
    return (rebuild(graph, consts) if consts else graph), remaining


def _convolution_cases() -> list[Path]:
    cases = []
    for case_dir in case_dirs("models") + case_dirs("ops/conv2d") + case_dirs("ops/conv2d_grouped"):
        text = (case_dir / "model.pb").read_bytes() if (case_dir / "model.pb").exists() else b""
        if b"Conv2D" in text or (case_dir / "model.pbtxt").exists() and "Conv2D" in (case_dir / "model.pbtxt").read_text():
            cases.append(case_dir)
    return cases


@pytest.fixture
def winograd_everywhere(monkeypatch):
    """Winograd for every qualifying convolution, however small (the fixtures are far below the sizes
    where it pays, where the kernel would pick the direct convolution)."""
    monkeypatch.setattr(winograd, "_MIN_CHANNELS", 1)
    monkeypatch.setattr(winograd, "_MIN_SMALL_CHANNELS", 1)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("case_dir", _convolution_cases(), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_golden_convolutions_by_winograd(case_dir, compiled, winograd_everywhere):
    case = load_case(case_dir)
    graph, feeds = _with_constant_filters(engine.load_graph(case.model), case.feeds)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    sess = engine.Session(graph, device="cpu", options=options)
    outs = sess.run(list(case.fetches), feeds)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, case.rtol, case.atol)


def test_golden_cases_include_winograd_convolutions(winograd_everywhere):
    """The cases above do run the op: every fixture with a 3x3, stride-1 convolution."""
    used = []
    for case_dir in _convolution_cases():
        case = load_case(case_dir)
        graph, feeds = _with_constant_filters(engine.load_graph(case.model), case.feeds)
        if OP in ops_of(engine.Session(graph, device="cpu"), list(feeds), list(case.fetches)):
            used.append(case_dir.relative_to(FIXTURES).as_posix())
    assert {"models/resnet_block", "models/cnn_fused_bn", "models/cnn_keras_bn", "ops/conv2d/valid_stride1"} <= set(used)
