"""fuse_preactivation: a per-channel Mul, AddV2 and ReLU before 1x1 convolutions (a batch norm + ReLU as Keras 3
freezes it before a convolution) become _TensorgatePreactivatedConv2D ops with the same results; chains that do not
fit stay as they are."""

import numpy as np
import pytest

import engine
from engine.passes import PassContext, optimize
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, compare, fixture_signature, ops_of, rng
from tests.golden import FIXTURES, assert_matches, load_case

X = (rng.standard_normal((2, 7, 6, 5)) * 3).astype(np.float32)
OP = "_TensorgatePreactivatedConv2D"


def chain(*, act="Relu", scale_shape=(5,), shift_shape=(5,), swap=False, kernel=1, strides=(1, 1, 1, 1),
          readers=1, other_reader=None, bias=True, batch_norm=True) -> engine.Graph:
    """x -> [Mul(scale) -> AddV2(shift)] [-> act] -> `readers` Conv2D (+ bias + Relu)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 7, 6, 5))
    h = "x"
    if batch_norm:
        g.const("scale", rng.standard_normal(scale_shape).astype(np.float32))
        g.const("shift", rng.standard_normal(shift_shape).astype(np.float32))
        g.node("mul", "Mul", ["scale", "x"] if swap else ["x", "scale"], T=F32)
        g.node("add", "AddV2", ["shift", "mul"] if swap else ["mul", "shift"], T=F32)
        h = "add"
    if act:
        g.node("act", act, [h], T=F32)
        h = "act"
    outs = []
    for i in range(readers):
        g.const(f"w{i}", rng.standard_normal((kernel, kernel, 5, 4)).astype(np.float32))
        g.node(f"conv{i}", "Conv2D", [h, f"w{i}"], T=F32, strides=list(strides), padding="SAME")
        outs.append(f"conv{i}")
        if bias:
            g.const(f"b{i}", rng.standard_normal(4).astype(np.float32))
            g.node(f"bias{i}", "BiasAdd", [f"conv{i}", f"b{i}"], T=F32)
            g.node(f"relu{i}", "Relu", [f"bias{i}"], T=F32)
            outs[-1] = f"relu{i}"
    g.node("out", "AddN", outs, T=F32, N=len(outs)) if readers > 1 else g.node("out", "Identity", outs, T=F32)
    if other_reader:
        g.node("tap", "Identity", [other_reader], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"act": "Relu6", "swap": True},
        {"act": None},
        {"scale_shape": (1, 1, 1, 5), "shift_shape": (1,)},  # broadcasting constants on a 4-D input
        {"bias": False},  # a plain Conv2D
        {"readers": 2},  # one batch norm + ReLU read by two convolutions (ResNetV2's shortcut and first)
    ],
    ids=str,
)
def test_chain_becomes_the_fused_op_with_the_same_results(kwargs):
    graph = chain(**kwargs)
    ops = ops_of(engine.Session(graph), ["x:0"], ["out:0"])
    assert ops.count(OP) == kwargs.get("readers", 1) and not {"Mul", "AddV2", "Relu6"} & set(ops)
    compare(graph, {"x:0": X}, ["out:0"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel": 3},  # not a 1x1 convolution
        {"strides": (1, 2, 2, 1)},  # a strided one
        {"other_reader": "act"},  # the activated tensor is read elsewhere too
    ],
    ids=str,
)
def test_chains_that_do_not_fit_stay(kwargs):
    graph = chain(**kwargs)
    fetches = ["out:0"] + (["tap:0"] if "other_reader" in kwargs else [])
    assert OP not in ops_of(engine.Session(graph), ["x:0"], fetches)
    compare(graph, {"x:0": X}, fetches)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_shape": (7, 1, 5)},  # not one value per channel
        {"other_reader": "add"},  # the shifted tensor is read elsewhere too
    ],
    ids=str,
)
def test_a_batch_norm_that_does_not_fit_stays_and_the_relu_alone_joins(kwargs):
    graph = chain(**kwargs)
    fetches = ["out:0"] + (["tap:0"] if "other_reader" in kwargs else [])
    ops = ops_of(engine.Session(graph), ["x:0"], fetches)
    assert {"Mul", "AddV2", OP} <= set(ops) and "Relu" not in ops
    compare(graph, {"x:0": X}, fetches)


@pytest.mark.parametrize("act", ["Relu", "Relu6"])
def test_a_relu_alone_before_a_pointwise_convolution_joins(act):
    """NASNet's cells: relu(x) -> 1x1 convolution, no batch norm before it."""
    graph = chain(batch_norm=False, act=act, readers=2)
    ops = ops_of(engine.Session(graph), ["x:0"], ["out:0"])
    assert ops.count(OP) == 2 and act not in ops
    compare(graph, {"x:0": X * 3}, ["out:0"])


def test_fetched_or_fed_inner_tensors_keep_the_batch_norm():
    graph = chain()
    for feeds, fetches in ((["x:0"], ["out:0", "mul:0"]), (["mul:0"], ["out:0"])):
        ops = ops_of(engine.Session(graph), feeds, fetches)
        assert "AddV2" in ops and "Relu" not in ops  # the batch norm stays; the ReLU alone joins the convolution
    compare(graph, {"x:0": X}, ["out:0", "mul:0"])
    assert OP not in ops_of(engine.Session(graph), ["x:0"], ["out:0", "act:0"])


def test_only_on_the_cpu():
    graph = chain()
    fed = frozenset({engine.parse_tensor_name("x:0")})
    for device, fused in (("cpu", True), ("gpu", False)):
        ctx = PassContext(fed=fed, preserve=frozenset({"out"}), device=device)
        assert any(n.op == OP for n in optimize(graph, ctx).nodes) is fused


# Case -> its batch norm + ReLU chains before 1x1 convolutions: DenseNet's layers and transition (the batch norm
# between a layer's two convolutions folds into the first), ResNetV2's one read by two.
PREACTIVATION_CASES = {"densenet_keras3": 4, "resnet_v2_keras3": 2}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("case", list(PREACTIVATION_CASES))
def test_fixtures_fuse_their_chains_and_match_tensorflow(case, compiled):
    path = f"models/convnet_preactivation/{case}"
    graph, feeds, fetches = fixture_signature(path)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    sess = engine.Session(graph, options=options)
    assert ops_of(sess, list(feeds), fetches).count(OP) == PREACTIVATION_CASES[case]
    fixture = load_case(FIXTURES / path)
    for (name, want), got in zip(fixture.fetches.items(), sess.run(fetches, feeds)):
        assert_matches(name, got, want, fixture.rtol, fixture.atol)
