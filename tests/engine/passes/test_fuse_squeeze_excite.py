"""fuse_squeeze_excite: squeeze-and-excitation blocks as Keras 2 and 3 freeze them (MobileNetV3's keep-dims mean,
ReLU and hard-sigmoid gate; EfficientNet's mean, reshape through Shape/StridedSlice/Pack, swish and sigmoid
gate), and as raw ops write them (a constant reshape, a RealDiv gate, the Mul's operands swapped), become
one `_TensorgateSqueezeExcite` with the 1x1 projection after them (and its residual add) when there is
one; blocks that are not exactly that stay as they are. Built with engine.builder; results are held to the
unoptimized graph's."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import builder as gb
from tests.engine.passes.checks import compare, ops_of

rng = np.random.default_rng(37)
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
C, R, OUT = 8, 4, 6
IMAGES = rng.standard_normal((2, 7, 7, 3)).astype(np.float32)


def _weights(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def _keras_reshape(m):
    """Keras' Reshape((1, 1, C)) of the [N, C] mean: Reshape(m, Pack(StridedSlice(Shape(m), [0], [1]), 1, 1, C))."""
    graph = gb.get_default_graph()
    shape = graph.create_op("Shape", [m], attrs={"T": F32, "out_type": I32}, outputs=[(I32, (2,))], name="Shape")
    batch = gb.strided_slice(shape.outputs[0], [0], [1], [1], shrink_axis_mask=1)
    return gb.reshape(m, gb.stack([batch, 1, 1, C]))


def _swish(h):
    return gb.multiply(h, gb.sigmoid(h))


def _se(h, style, swapped=False):
    """The excitation of h in one of the spellings."""
    if style == "mobilenet_v3":  # Keras 2 and 3: keep-dims mean, ReLU, Relu6(z + 3) * (1 / 6)
        m = gb.reduce_mean(h, [1, 2], keepdims=True)
        r = gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), padding="SAME", activation="relu")
        z = gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C), padding="SAME")
        gate = gb.multiply(gb.relu6(gb.add(z, 3.0)), 1 / 6)
    elif style == "efficientnet":  # Keras 2 and 3: mean, Keras' reshape, swish, sigmoid
        m = _keras_reshape(gb.reduce_mean(h, [1, 2]))
        r = _swish(gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), padding="SAME"))
        gate = gb.sigmoid(gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C), padding="SAME"))
    else:  # raw ops: a constant reshape, a RealDiv hard sigmoid
        m = gb.reshape(gb.reduce_mean(h, [2, 1]), [-1, 1, 1, C])
        r = gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), activation="relu6")
        gate = gb.divide(gb.relu6(gb.add(gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C)), 3.0)), 6.0)
    return gb.multiply(gate, h) if swapped else gb.multiply(h, gate)


def _mbconv_head(x, expand=True, activation=_swish):
    """MBConv's first half: a 1x1 expansion (without one: a 3x3 convolution's output) and a depthwise step,
    each with bias and activation."""
    h = activation(gb.layers.conv2d(x, _weights(1 if expand else 3, 1 if expand else 3, 3, C), _weights(C),
                                    padding="SAME"))
    return activation(gb.bias_add(gb.depthwise_conv2d(h, _weights(3, 3, C, 1), strides=2, padding="SAME"),
                                  _weights(C)))


def _build(style, *, project="residual", swapped=False, extra=None, head=None):
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 7, 7, 3], name="x")
        if head is not None:
            x = gb.layers.conv2d(x, _weights(1, 1, 3, 3), _weights(3))  # the block's input (fetched below)
            h = head(x)
        else:
            h = _swish(gb.layers.conv2d(x, _weights(3, 3, 3, C), _weights(C), padding="SAME"))
        shortcut = gb.layers.conv2d(x, _weights(1, 1, 3, OUT), _weights(OUT), strides=2 if head else 1)
        y = _se(h, style, swapped) if extra is None else extra(h)
        if project:
            y = gb.layers.conv2d(y, _weights(1, 1, C, OUT), _weights(OUT), padding="SAME",
                                 activation="relu" if project == "activated" else None)
            if project == "residual":
                y = gb.add(y, shortcut)
        y = gb.identity(y, name="y")
    return engine.load_graph(graph.as_graph_def().SerializeToString()), y.name


STYLES = ["mobilenet_v3", "efficientnet", "raw"]


@pytest.mark.parametrize("project", ["residual", "plain", None])
@pytest.mark.parametrize("style", STYLES)
def test_block_becomes_one_op(style, project):
    graph, y = _build(style, project=project)
    ops = ops_of(engine.Session(graph), ["x:0"], [y])
    assert ops.count("_TensorgateSqueezeExcite") == 1
    assert not {"Mean", "Mul", "Sigmoid", "Reshape", "Pack", "AddV2"} & set(ops), ops
    # The projection (and its residual add) is inside the op: only the block's input convolutions remain.
    assert ops.count("_FusedConv2D") == (2 if project == "residual" else 1)
    compare(graph, {"x:0": IMAGES}, [y])


@pytest.mark.parametrize("style", STYLES)
def test_operand_order_of_the_excitation(style):
    graph, y = _build(style, swapped=True)
    assert "_TensorgateSqueezeExcite" in ops_of(engine.Session(graph), ["x:0"], [y])
    compare(graph, {"x:0": IMAGES}, [y])


def test_projection_with_an_activation_stays_outside():
    graph, y = _build("efficientnet", project="activated")
    ops = ops_of(engine.Session(graph), ["x:0"], [y])
    assert ops[-2:] == ["_TensorgateSqueezeExcite", "_FusedConv2D"]
    compare(graph, {"x:0": IMAGES}, [y])


def _mean_over_one_axis(h):
    m = gb.reduce_mean(h, [1], keepdims=True)
    r = gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), activation="relu")
    return gb.multiply(h, gb.sigmoid(gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C))))


def _gate_of_another_tensor(h):
    m = gb.reduce_mean(h, [1, 2], keepdims=True)
    r = gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), activation="relu")
    gate = gb.sigmoid(gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C)))
    return gb.multiply(gb.add(h, 1.0), gate)


def _reshape_to_the_wrong_layout(h):
    m = gb.reshape(gb.reduce_mean(h, [1, 2]), [1, -1, 1, C])
    r = gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), activation="relu")
    return gb.multiply(h, gb.sigmoid(gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C))))


def _gate_not_sigmoid(h):
    m = gb.reduce_mean(h, [1, 2], keepdims=True)
    r = gb.layers.conv2d(m, _weights(1, 1, C, R), _weights(R), activation="relu")
    return gb.multiply(h, gb.layers.conv2d(r, _weights(1, 1, R, C), _weights(C), activation="tanh"))


@pytest.mark.parametrize("extra", [_mean_over_one_axis, _gate_of_another_tensor, _reshape_to_the_wrong_layout,
                                   _gate_not_sigmoid], ids=lambda f: f.__name__)
def test_near_misses_stay(extra):
    graph, y = _build("raw", project="plain", extra=extra)
    feeds = {"x:0": IMAGES[:1] if extra is _reshape_to_the_wrong_layout else IMAGES}
    assert "_TensorgateSqueezeExcite" not in ops_of(engine.Session(graph), ["x:0"], [y])
    compare(graph, feeds, [y])


def test_a_fetched_gate_keeps_the_block():
    graph, y = _build("mobilenet_v3", project="plain")
    relu6 = next(n.name for n in graph.nodes if n.op == "Relu6")
    gate = next(n.name for n in graph.nodes if n.op == "Mul" and any(ref.node == relu6 for ref in n.inputs))
    ops = ops_of(engine.Session(graph), ["x:0"], [y, f"{gate}:0"])
    assert "_TensorgateSqueezeExcite" not in ops
    compare(graph, {"x:0": IMAGES}, [y, f"{gate}:0"])


def _hard_swish(h):
    return gb.multiply(h, gb.divide(gb.relu6(gb.add(h, 3.0)), 6.0))


@pytest.mark.parametrize("expand, activation", [(True, _swish), (True, _hard_swish), (False, _swish)],
                         ids=["swish", "hard_swish", "no_expansion"])
@pytest.mark.parametrize("style", STYLES)
def test_expansion_and_depthwise_step_become_the_banded_op(style, expand, activation):
    graph, y = _build(style, head=lambda x: _mbconv_head(x, expand, activation))
    ops = ops_of(engine.Session(graph), ["x:0"], [y])
    assert ops.count("_TensorgateExpandDepthwise") == 1 and ops.count("_TensorgateSqueezeExcite") == 1
    assert "_FusedDepthwiseConv2dNative" not in ops and "Mean" not in ops
    # Left: the block input's convolution, the shortcut's, and without an expansion the 3x3 one before the block.
    assert ops.count("_FusedConv2D") + ops.count("_TensorgateWinogradConv2D") == (2 if expand else 3)
    compare(graph, {"x:0": IMAGES}, [y])


def test_depthwise_output_read_elsewhere_keeps_it():
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 7, 7, 3], name="x")
        h = _mbconv_head(x)
        y = gb.identity(gb.add(_se(h, "mobilenet_v3"), gb.reduce_max(h, [3], keepdims=True)), name="y")
    graph = engine.load_graph(graph.as_graph_def().SerializeToString())
    ops = ops_of(engine.Session(graph), ["x:0"], [y.name])
    assert "_TensorgateSqueezeExcite" in ops and "_TensorgateExpandDepthwise" not in ops
    compare(graph, {"x:0": IMAGES}, [y.name])
