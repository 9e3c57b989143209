"""fuse_swish: swish and hard swish in every spelling TensorFlow freezes them to (tf.nn.silu's custom-gradient
IdentityN as Keras 2 and 3 write it, raw Mul(x, Sigmoid(x)) in either order, hard swish as Keras 3's RealDiv,
Keras 2's Mul by 1/6, or grouped the other way) become one op, which fuse_activation then takes into a
convolution's, a depthwise convolution's or a dense layer's epilogue; chains that are not exactly a swish
stay as they are. Built with engine.builder; results are held to the unoptimized graph's."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import builder as gb
from tests.engine.passes.checks import compare, ops_of

rng = np.random.default_rng(31)
F32 = np.dtype(np.float32)
IMAGES = (rng.standard_normal((2, 6, 6, 3)) * 3).astype(np.float32)


def _silu_identity_n(h, beta=1.0, identity=False):
    """tf.nn.silu as TensorFlow freezes it: features * sigmoid(beta * features) inside a custom gradient, whose
    IdentityN passes the product on (Keras 3 writes Identity for the Mul by beta once it is 1)."""
    graph = gb.get_default_graph()
    b = gb.constant(np.float32(beta), name="beta")
    scaled = gb.identity(h, name="mul") if identity else gb.multiply(b, h, name="mul")
    product = gb.multiply(h, gb.sigmoid(scaled, name="Sigmoid"), name="mul_1")
    op = graph.create_op("IdentityN", [product, h, b], attrs={"T": [F32, F32, F32], "_gradient_op_type":
                         "CustomGradient-7"}, outputs=[(F32, product.shape), (F32, h.shape), (F32, ())], name="IdentityN")
    return op.outputs[0]


def _hard_sigmoid_keras3(h):
    return gb.divide(gb.relu6(gb.add(h, 3.0)), 6.0)


SPELLINGS = {
    "raw": lambda h: gb.multiply(h, gb.sigmoid(h)),
    "raw_swapped": lambda h: gb.multiply(gb.sigmoid(h), h),
    "silu_keras2": lambda h: _silu_identity_n(h),
    "silu_keras3": lambda h: _silu_identity_n(h, identity=True),
    "hard_keras3": lambda h: gb.multiply(h, _hard_sigmoid_keras3(h)),
    "hard_keras2": lambda h: gb.multiply(h, gb.multiply(gb.relu6(gb.add(h, 3.0)), 1 / 6)),
    "hard_grouped": lambda h: gb.divide(gb.multiply(h, gb.relu6(gb.add(3.0, h))), 6.0),
    "hard_grouped_mul": lambda h: gb.multiply(1 / 6, gb.multiply(gb.relu6(gb.add(h, 3.0)), h)),
}
FUSED_NAME = {k: ("HardSwish" if k.startswith("hard") else "Swish") for k in SPELLINGS}


def _build(producer: str, activation) -> tuple[engine.Graph, str]:
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 6, 6, 3], name="x")
        if producer == "conv":
            h = gb.layers.conv2d(x, rng.standard_normal((3, 3, 3, 4)).astype(np.float32),
                                 rng.standard_normal(4).astype(np.float32), padding="SAME")
        elif producer == "depthwise":
            h = gb.bias_add(gb.depthwise_conv2d(x, rng.standard_normal((3, 3, 3, 2)).astype(np.float32), strides=2,
                                                padding="SAME"), rng.standard_normal(6).astype(np.float32))
        elif producer == "dense":
            h = gb.layers.dense(gb.reshape(x, [-1, 108]), rng.standard_normal((108, 5)).astype(np.float32),
                                rng.standard_normal(5).astype(np.float32))
        else:
            h = x
        # The next layer reads the activation (a fetched IdentityN keeps its meaning, and so its inputs).
        y = gb.identity(activation(h), name="y")
    return engine.load_graph(graph.as_graph_def().SerializeToString()), y.name


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling_becomes_one_op(spelling):
    graph, y = _build("none", SPELLINGS[spelling])
    op = "_TensorgateHardSwish" if FUSED_NAME[spelling] == "HardSwish" else "_TensorgateSwish"
    assert ops_of(engine.Session(graph), ["x:0"], [y]) == [op]
    compare(graph, {"x:0": IMAGES}, [y])


@pytest.mark.parametrize("producer, fused", [("conv", "_FusedConv2D"), ("depthwise", "_FusedDepthwiseConv2dNative")])
@pytest.mark.parametrize("spelling", ["raw_swapped", "silu_keras2", "silu_keras3", "hard_keras3", "hard_keras2"])
def test_swish_joins_the_producers_epilogue(producer, fused, spelling):
    graph, y = _build(producer, SPELLINGS[spelling])
    sess = engine.Session(graph)
    ops = ops_of(sess, ["x:0"], [y])
    assert ops[-1] == fused and not {"Sigmoid", "Mul", "Relu6", "_TensorgateSwish", "_TensorgateHardSwish"} & set(ops)
    plan = sess.plan_for(["x:0"], [y])
    node = next(ins.node for ins in plan.instructions if ins.op == fused)
    assert optimized_fused_ops(graph, y, node)[-1] == FUSED_NAME[spelling]
    compare(graph, {"x:0": IMAGES}, [y])


@pytest.mark.parametrize("spelling", ["silu_keras3", "hard_keras2"])
def test_swish_after_a_dense_layer_is_one_op(spelling):
    # fuse_dense (which runs first) writes the dense layer's _FusedMatMul with the activations it knows.
    graph, y = _build("dense", SPELLINGS[spelling])
    ops = ops_of(engine.Session(graph), ["x:0"], [y])
    assert ops[-2:] == ["_FusedMatMul", "_TensorgateHardSwish" if spelling.startswith("hard") else "_TensorgateSwish"]
    compare(graph, {"x:0": IMAGES}, [y])


def optimized_fused_ops(graph, fetch, node):
    from tests.engine.passes.checks import optimized

    return tuple(optimized(graph, ["x:0"], [fetch]).node(node).attrs["fused_ops"])


@pytest.mark.parametrize("case", ["beta_2", "plus_2", "sixth_wrong", "other_tensor"])
def test_near_misses_stay(case):
    def build(h):
        if case == "beta_2":
            return _silu_identity_n(h, beta=2.0)
        if case == "plus_2":
            return gb.multiply(h, gb.divide(gb.relu6(gb.add(h, 2.0)), 6.0))
        if case == "sixth_wrong":
            return gb.multiply(h, gb.multiply(gb.relu6(gb.add(h, 3.0)), 0.17))
        return gb.multiply(h, gb.sigmoid(gb.negative(h)))

    graph, y = _build("conv", build)
    ops = ops_of(engine.Session(graph), ["x:0"], [y])
    assert not {"_TensorgateSwish", "_TensorgateHardSwish"} & set(ops)
    compare(graph, {"x:0": IMAGES}, [y])


def test_an_inner_node_read_elsewhere_keeps_the_chain():
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 6, 6, 3], name="x")
        s = gb.sigmoid(x)
        y = gb.multiply(x, s)
    graph = engine.load_graph(graph.as_graph_def().SerializeToString())
    ops = ops_of(engine.Session(graph), ["x:0"], [y.name, s.name])
    assert "_TensorgateSwish" not in ops and "Sigmoid" in ops
    compare(graph, {"x:0": IMAGES}, [y.name, s.name])


def test_identity_n_with_other_readers_stays_and_the_product_fuses():
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 6, 6, 3], name="x")
        y = _silu_identity_n(x)
        passed = gb.add(y.op.outputs[1], 1.0)  # the wrapper's second output read
    graph = engine.load_graph(graph.as_graph_def().SerializeToString())
    fetches = [y.name, passed.name]
    ops = ops_of(engine.Session(graph), ["x:0"], fetches)
    assert "_TensorgateSwish" in ops and "Sigmoid" not in ops
    compare(graph, {"x:0": IMAGES}, fetches)
