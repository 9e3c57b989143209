"""Optimization passes: they fire where they should, never where a fetch or feed needs the original
tensor, and never change results beyond float32 rounding."""

import json
from pathlib import Path

import numpy as np
import pytest

import engine
from tests.engine.graphs import GraphBuilder

F32 = np.dtype(np.float32)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UNOPTIMIZED = engine.SessionOptions(plan=engine.PlanOptions(optimize=False))
rng = np.random.default_rng(7)


def conv_bn_relu(op="Conv2D", *, per_channel=True, mul_first=False) -> engine.Graph:
    """x -> conv -> Mul(scale) -> AddV2(shift) -> Relu, the shape Keras 3 batch norm freezes to."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 9, 9, 3))
    if op == "Conv2D":
        g.const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
        g.node("conv", "Conv2D", ["x", "w"], T=F32, strides=[1, 2, 2, 1], padding="SAME")
        channels = 4
    else:
        g.const("w", rng.standard_normal((3, 3, 3, 2)).astype(np.float32))
        g.node("conv", "DepthwiseConv2dNative", ["x", "w"], T=F32, strides=[1, 1, 1, 1], padding="VALID")
        channels = 6
    shape = (channels,) if per_channel else (1, 5, 5, channels)
    g.const("gamma", rng.standard_normal(shape).astype(np.float32))
    g.const("beta", rng.standard_normal((1, 1, 1, channels)).astype(np.float32))
    g.node("bn/mul", "Mul", ["gamma", "conv"] if mul_first else ["conv", "gamma"], T=F32)
    g.node("bn/add", "AddV2", ["bn/mul", "beta"], T=F32)
    g.node("relu", "Relu", ["bn/add"], T=F32)
    return engine.load_graph(g.bytes())


def ops_of(sess, feeds, fetches):
    return [ins.op for ins in sess.plan_for(feeds, fetches).instructions]


def compare(graph, feeds, fetches):
    got = engine.Session(graph).run(fetches, feeds)
    want = engine.Session(graph, options=UNOPTIMIZED).run(fetches, feeds)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-5)


X = rng.standard_normal((2, 9, 9, 3)).astype(np.float32)


@pytest.mark.parametrize("op", ["Conv2D", "DepthwiseConv2dNative"])
@pytest.mark.parametrize("mul_first", [False, True])
def test_batch_norm_chain_folds_into_weights(op, mul_first):
    graph = conv_bn_relu(op, mul_first=mul_first)
    ops = ops_of(engine.Session(graph), ["x:0"], ["relu:0"])
    assert "Mul" not in ops and "AddV2" not in ops
    compare(graph, {"x:0": X}, ["relu:0"])


def test_fetched_intermediate_is_preserved():
    graph = conv_bn_relu()
    plan = engine.Session(graph).plan_for(["x:0"], ["relu:0", "bn/mul:0"])
    # bn/mul is fetched: the chain may fold into it, but never past it, so it is still computed by name.
    assert "bn/mul" in [ins.node for ins in plan.instructions]
    assert "bn/add" in [ins.node for ins in plan.instructions]
    compare(graph, {"x:0": X}, ["relu:0", "bn/mul:0", "conv:0"])


def test_fed_intermediate_is_respected():
    graph = conv_bn_relu()
    fed = rng.standard_normal((2, 5, 5, 4)).astype(np.float32)
    compare(graph, {"bn/mul:0": fed}, ["relu:0"])
    compare(graph, {"x:0": X, "bn/add:0": fed}, ["relu:0", "conv:0"])


def test_non_per_channel_constants_are_not_folded():
    graph = conv_bn_relu(per_channel=False)
    assert "Mul" in ops_of(engine.Session(graph), ["x:0"], ["relu:0"])
    compare(graph, {"x:0": X}, ["relu:0"])


@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_scale_and_shift_fold(transpose_b):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 5))
    w = rng.standard_normal((5, 3)).astype(np.float32)
    g.const("w", w.T.copy() if transpose_b else w)
    g.const("b", rng.standard_normal(3).astype(np.float32))
    g.const("s", np.float32(0.5))
    g.node("mm", "MatMul", ["x", "w"], T=F32, transpose_b=transpose_b)
    g.node("biased", "BiasAdd", ["mm", "b"], T=F32)
    g.node("scaled", "Mul", ["biased", "s"], T=F32)
    g.node("shifted", "Sub", ["scaled", "b"], T=F32)
    graph = engine.load_graph(g.bytes())
    assert "Mul" not in ops_of(engine.Session(graph), ["x:0"], ["shifted:0"])
    compare(graph, {"x:0": rng.standard_normal((4, 5)).astype(np.float32)}, ["shifted:0"])


def test_constant_subgraphs_fold_once_per_plan():
    # Keras' batch-norm scale: Rsqrt(variance + epsilon) * gamma, all constants.
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 2))
    g.const("var", np.array([4.0, 16.0], np.float32))
    g.const("eps", np.float32(0.0))
    g.const("gamma", np.array([2.0, 3.0], np.float32))
    g.node("v", "AddV2", ["var", "eps"], T=F32)
    g.node("r", "Rsqrt", ["v"], T=F32)
    g.node("scale", "Mul", ["r", "gamma"], T=F32)
    g.node("y", "Mul", ["x", "scale"], T=F32)
    sess = engine.Session(engine.load_graph(g.bytes()))
    assert ops_of(sess, ["x:0"], ["y:0"]) == ["Mul"]
    np.testing.assert_allclose(sess.run("y", {"x": np.ones((1, 2), np.float32)}), [[1.0, 0.75]])


@pytest.mark.parametrize("case", ["models/cnn_keras_bn", "models/mobilenet_block", "models/resnet_block"])
def test_passes_shrink_real_keras_graphs_without_changing_results(case):
    directory = FIXTURES / case
    spec = json.loads((directory / "case.json").read_text())
    data = np.load(directory / "data.npz")
    graph = engine.load_graph(directory / "model.pb")
    feeds = {f["name"]: data[f["key"]] for f in spec["feeds"]}
    fetches = [f["name"] for f in spec["fetches"]]
    optimized = engine.Session(graph).plan_for(list(feeds), fetches)
    plain = engine.Session(graph, options=UNOPTIMIZED).plan_for(list(feeds), fetches)
    assert len(optimized.instructions) < len(plain.instructions)
    assert "Mul" not in [ins.op for ins in optimized.instructions]
    compare(graph, feeds, fetches)


@pytest.mark.parametrize("shortcut_shape", [(2, 5, 5, 4), (4,), (1, 5, 1, 4)], ids=["same", "vector", "broadcast"])
def test_residual_add_fuses_into_the_convolution(shortcut_shape):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 9, 9, 3))
    g.placeholder("shortcut", np.float32, shortcut_shape)
    g.const("w", rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
    g.const("b", rng.standard_normal(4).astype(np.float32))
    g.node("conv", "Conv2D", ["x", "w"], T=F32, strides=[1, 2, 2, 1], padding="SAME")
    g.node("biased", "BiasAdd", ["conv", "b"], T=F32)
    g.node("sum", "AddV2", ["shortcut", "biased"], T=F32)
    g.node("out", "Relu", ["sum"], T=F32)
    graph = engine.load_graph(g.bytes())
    assert ops_of(engine.Session(graph), ["x:0", "shortcut:0"], ["out:0"]) == ["_FusedConv2D"]
    feeds = {"x:0": X, "shortcut:0": rng.standard_normal(shortcut_shape).astype(np.float32)}
    compare(graph, feeds, ["out:0"])
