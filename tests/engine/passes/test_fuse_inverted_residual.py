"""fuse_inverted_residual: MobileNetV2's expand -> depthwise -> project chains (as fuse_activation leaves them)
become one _TensorgateInvertedResidual with the same results; chains that do not fit stay as they are."""

import numpy as np
import pytest

import engine
from engine.passes import PassContext, optimize
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, compare, fixture_signature, ops_of, rng
from tests.golden import FIXTURES, assert_matches, load_case

X = rng.standard_normal((2, 8, 9, 6)).astype(np.float32)
OP = "_TensorgateInvertedResidual"


def block(*, expand_act="Relu6", dw_act="Relu6", project_act=None, residual=True, stride=1, dw_mult=1,
          extra_reader=None, expand_kernel=1, expand=True) -> engine.Graph:
    """x -> Conv2D 1x1 (6 -> 24) + bias + act -> depthwise 3x3 + bias + act -> Conv2D 1x1 (-> 6) + bias
    (+ x), the way Keras freezes it (after batch-norm folding: convolutions, BiasAdd, activations)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 8, 9, 6))

    def conv(name, src, op, shape, act, strides=(1, 1, 1, 1)):
        g.const(f"{name}/w", rng.standard_normal(shape).astype(np.float32))
        channels = shape[2] * shape[3] if op != "Conv2D" else shape[3]
        g.const(f"{name}/b", rng.standard_normal(channels).astype(np.float32))
        g.node(f"{name}/conv", op, [src, f"{name}/w"], T=F32, strides=list(strides), padding="SAME")
        g.node(f"{name}/bias", "BiasAdd", [f"{name}/conv", f"{name}/b"], T=F32)
        if act is None:
            return f"{name}/bias"
        g.node(f"{name}/act", act, [f"{name}/bias"], T=F32)
        return f"{name}/act"

    mid = 24 if expand else 6
    h = conv("expand", "x", "Conv2D", (expand_kernel, expand_kernel, 6, 24), expand_act) if expand else "x"
    h = conv("dw", h, "DepthwiseConv2dNative", (3, 3, mid, dw_mult), dw_act, (1, stride, stride, 1))
    h = conv("project", h, "Conv2D", (1, 1, mid * dw_mult, 6), project_act)
    if residual:
        g.node("add", "AddV2", [h, "x"], T=F32)
        h = "add"
    g.node("out", "Identity", [h], T=F32)
    if extra_reader:
        g.node("tap", "Identity", [extra_reader], T=F32)
    return engine.load_graph(g.bytes())


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("acts", [("Relu6", "Relu6"), ("Relu", "Relu"), (None, "Relu6"), ("Relu6", None)])
def test_block_becomes_one_op_with_the_same_results(residual, acts):
    graph = block(residual=residual, expand_act=acts[0], dw_act=acts[1])
    assert ops_of(engine.Session(graph), ["x:0"], ["out:0"]) == [OP]
    compare(graph, {"x:0": X}, ["out:0"])


def test_stride_two_block():
    graph = block(residual=False, stride=2)
    assert ops_of(engine.Session(graph), ["x:0"], ["out:0"]) == [OP]
    compare(graph, {"x:0": X}, ["out:0"])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(project_act="Relu"),  # a projection with an activation
        dict(dw_mult=2),  # a depthwise multiplier
        dict(extra_reader="dw/act"),  # the depthwise output is read elsewhere too
    ],
    ids=str,
)
def test_chains_that_do_not_fit_stay(kwargs):
    graph = block(**kwargs)
    fetches = ["out:0"] + (["tap:0"] if "extra_reader" in kwargs else [])
    assert OP not in ops_of(engine.Session(graph), ["x:0"], fetches)
    compare(graph, {"x:0": X}, fetches)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(expand_act="Tanh"),  # an activation the fused op does not apply
        dict(expand_kernel=3),  # an expansion that is not 1x1
        dict(extra_reader="expand/act"),  # the expanded tensor is read elsewhere too
        dict(expand=False),  # no expansion at all (MobileNetV2's first block)
    ],
    ids=str,
)
def test_without_a_fusable_expansion_depthwise_and_project_fuse(kwargs):
    graph = block(**kwargs)
    fetches = ["out:0"] + (["tap:0"] if "extra_reader" in kwargs else [])
    plan = engine.Session(graph).plan_for(["x:0"], fetches)
    (fused,) = [ins for ins in plan.instructions if ins.op == OP]
    assert fused.fn.keywords["expand"] is False
    assert len(plan.instructions) > 1 or kwargs == dict(expand=False)
    compare(graph, {"x:0": X}, fetches)


def test_fetched_or_fed_inner_tensors_keep_the_chain():
    graph = block()
    # The expansion fetched: it stays a node of its own; depthwise and project still fuse.
    assert ops_of(engine.Session(graph), ["x:0"], ["out:0", "expand/act:0"]) == ["_FusedConv2D", OP]
    compare(graph, {"x:0": X}, ["out:0", "expand/act:0"])
    assert OP not in ops_of(engine.Session(graph), ["x:0"], ["out:0", "dw/act:0"])
    assert OP not in ops_of(engine.Session(graph), ["dw/act:0", "x:0"], ["out:0"])


def test_only_on_the_cpu():
    graph = block()
    fed = frozenset({engine.parse_tensor_name("x:0")})
    for device, fused in (("cpu", True), ("gpu", False)):
        ctx = PassContext(fed=fed, preserve=frozenset({"out"}), device=device)
        optimized = optimize(graph, ctx)
        assert any(n.op == OP for n in optimized.nodes) is fused


@pytest.mark.parametrize("compiled", [True, False])
def test_mobilenet_fixture_fuses_its_blocks_and_matches_tensorflow(compiled):
    graph, feeds, fetches = fixture_signature("models/mobilenet_block")
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    sess = engine.Session(graph, options=options)
    assert ops_of(sess, list(feeds), fetches).count(OP) == 3
    case = load_case(FIXTURES / "models/mobilenet_block")
    for (name, want), got in zip(case.fetches.items(), sess.run(fetches, feeds)):
        assert_matches(name, got, want, case.rtol, case.atol)
