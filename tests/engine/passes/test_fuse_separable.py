"""fuse_separable: a depthwise convolution and the 1x1 convolution reading it (as Keras' SeparableConv2D freezes, and
as fuse_activation leaves MobileNet's depthwise + pointwise pairs) become one _TensorgateSeparableConv2D with the
same results; pairs that do not fit stay as they are."""

import numpy as np
import pytest

import engine
from engine.passes import PassContext, optimize
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, compare, fixture_signature, ops_of, rng
from tests.golden import FIXTURES, assert_matches, load_case

X = rng.standard_normal((2, 10, 9, 6)).astype(np.float32)
OP = "_TensorgateSeparableConv2D"


def pair(*, dw_bias=False, dw_act=None, pw_bias=True, pw_act=None, residual=False, input_relu=True, dw_mult=1,
         pw_kernel=1, pw_strides=(1, 1, 1, 1), dw_strides=(1, 1, 1, 1), extra_reader=None) -> engine.Graph:
    """x -> [Relu] -> depthwise 3x3 [+ bias [+ act]] -> Conv2D (-> 8) [+ bias] [+ x'] [+ act], as Keras freezes a
    SeparableConv2D (no depthwise bias, a bias or folded batch norm after the 1x1 step) or a MobileNet pair."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 10, 9, 6))
    src = "x"
    if input_relu:
        g.node("relu_in", "Relu", ["x"], T=F32)
        src = "relu_in"
    g.const("dw/w", rng.standard_normal((3, 3, 6, dw_mult)).astype(np.float32))
    g.node("dw/conv", "DepthwiseConv2dNative", [src, "dw/w"], T=F32, strides=list(dw_strides), padding="SAME")
    h = "dw/conv"
    if dw_bias:
        g.const("dw/b", rng.standard_normal(6 * dw_mult).astype(np.float32))
        g.node("dw/bias", "BiasAdd", [h, "dw/b"], T=F32)
        h = "dw/bias"
        if dw_act:
            g.node("dw/act", dw_act, [h], T=F32)
            h = "dw/act"
    g.const("pw/w", rng.standard_normal((pw_kernel, pw_kernel, 6 * dw_mult, 8)).astype(np.float32))
    g.node("pw/conv", "Conv2D", [h, "pw/w"], T=F32, strides=list(pw_strides), padding="VALID")
    h = "pw/conv"
    if pw_bias:
        g.const("pw/b", rng.standard_normal(8).astype(np.float32))
        g.node("pw/bias", "BiasAdd", [h, "pw/b"], T=F32)
        h = "pw/bias"
    if residual:
        g.const("other/w", rng.standard_normal((1, 1, 6, 8)).astype(np.float32))
        g.node("other", "Conv2D", ["x", "other/w"], T=F32, strides=[1, 1, 1, 1], padding="SAME")
        g.node("add", "AddV2", [h, "other"], T=F32)
        h = "add"
    if pw_act:
        g.node("pw/act", pw_act, [h], T=F32)
        h = "pw/act"
    g.node("out", "Identity", [h], T=F32)
    if extra_reader:
        g.node("tap", "Identity", [extra_reader], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # Keras' SeparableConv2D: no depthwise bias, a bias after the 1x1 step
        {"pw_bias": False},  # a plain Conv2D after it
        {"dw_bias": True, "dw_act": "Relu6", "pw_act": "Relu6"},  # MobileNet's pair
        {"dw_bias": True, "dw_act": "Relu", "pw_act": "Relu", "residual": True},
        {"dw_bias": True, "pw_act": "LeakyRelu"},
        {"dw_mult": 2, "dw_strides": (1, 2, 2, 1)},
    ],
    ids=str,
)
def test_pair_becomes_one_op_with_the_same_results(kwargs):
    graph = pair(**kwargs)
    ops = ops_of(engine.Session(graph), ["x:0"], ["out:0"])
    assert ops.count(OP) == 1 and not {"DepthwiseConv2dNative", "_FusedDepthwiseConv2dNative"} & set(ops)
    compare(graph, {"x:0": X}, ["out:0"])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pw_kernel": 3},  # not a pointwise convolution
        {"pw_strides": (1, 2, 2, 1)},  # a strided 1x1 convolution
        {"extra_reader": "dw/conv"},  # the depthwise output is read elsewhere too
        {"dw_bias": True, "dw_act": "Sigmoid"},  # a depthwise activation its loop does not apply
        {"pw_act": "Sigmoid"},  # a pointwise activation with a compiled epilogue of its own
    ],
    ids=str,
)
def test_pairs_that_do_not_fit_stay(kwargs):
    graph = pair(**kwargs)
    fetches = ["out:0"] + (["tap:0"] if "extra_reader" in kwargs else [])
    assert OP not in ops_of(engine.Session(graph), ["x:0"], fetches)
    compare(graph, {"x:0": X}, fetches)


def test_the_relu_before_the_depthwise_step_joins_when_the_pairs_are_its_only_readers():
    graph = pair()
    assert "Relu" not in ops_of(engine.Session(graph), ["x:0"], ["out:0"])
    # Read elsewhere too: it stays, and the pair reads it.
    graph = pair(extra_reader="relu_in")
    ops = ops_of(engine.Session(graph), ["x:0"], ["out:0", "tap:0"])
    assert "Relu" in ops and OP in ops
    compare(graph, {"x:0": X}, ["out:0", "tap:0"])


def test_one_relu_read_by_two_separable_convolutions():
    """NASNet's cells: one ReLU feeds several separable convolutions; each fused op applies it."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 10, 9, 6))
    g.node("relu", "Relu6", ["x"], T=F32)
    outs = []
    for i, k in enumerate((3, 5)):
        g.const(f"dw{i}", rng.standard_normal((k, k, 6, 1)).astype(np.float32))
        g.node(f"depthwise{i}", "DepthwiseConv2dNative", ["relu", f"dw{i}"], T=F32, strides=[1, 1, 1, 1],
               padding="SAME")
        g.const(f"pw{i}", rng.standard_normal((1, 1, 6, 8)).astype(np.float32))
        g.node(f"pointwise{i}", "Conv2D", [f"depthwise{i}", f"pw{i}"], T=F32, strides=[1, 1, 1, 1], padding="VALID")
        outs.append(f"pointwise{i}")
    g.node("out", "AddV2", outs, T=F32)
    graph = engine.load_graph(g.bytes())
    ops = ops_of(engine.Session(graph), ["x:0"], ["out:0"])
    assert ops.count(OP) == 2 and "Relu6" not in ops
    compare(graph, {"x:0": X * 3}, ["out:0"])


def test_fetched_or_fed_depthwise_output_keeps_the_pair_apart():
    graph = pair()
    assert OP not in ops_of(engine.Session(graph), ["x:0"], ["out:0", "dw/conv:0"])
    compare(graph, {"x:0": X}, ["out:0", "dw/conv:0"])
    assert OP not in ops_of(engine.Session(graph), ["dw/conv:0"], ["out:0"])


def test_only_on_the_cpu():
    graph = pair()
    fed = frozenset({engine.parse_tensor_name("x:0")})
    for device, fused in (("cpu", True), ("gpu", False)):
        ctx = PassContext(fed=fed, preserve=frozenset({"out"}), device=device)
        assert any(n.op == OP for n in optimize(graph, ctx).nodes) is fused


# Case -> its pairs. A dilated separable convolution as TensorFlow writes it (SpaceToBatchND, depthwise,
# BatchToSpaceND, then the 1x1 step) is no pair: its depthwise output is BatchToSpaceND's.
SEPARABLE_CASES = {"keras3_separable": 5, "tf_keras_separable": 1, "mobilenet_v1_keras3": 3, "raw_separable_ops": 2}


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("case", list(SEPARABLE_CASES))
def test_fixtures_fuse_their_pairs_and_match_tensorflow(case, compiled):
    path = f"models/convnet_separable/{case}"
    graph, feeds, fetches = fixture_signature(path)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    sess = engine.Session(graph, options=options)
    assert ops_of(sess, list(feeds), fetches).count(OP) == SEPARABLE_CASES[case]
    fixture = load_case(FIXTURES / path)
    for (name, want), got in zip(fixture.fetches.items(), sess.run(fetches, feeds)):
        assert_matches(name, got, want, fixture.rtol, fixture.atol)
