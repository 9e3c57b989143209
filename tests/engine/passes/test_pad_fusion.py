"""fuse_pad: a zero Pad read only by VALID (or EXPLICIT) convolutions becomes their EXPLICIT padding, with
the same results; any other Pad (a non-zero value, padded batch or channels, another reader) stays."""

import numpy as np
import pytest

import engine
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, I32, compare, ops_of, optimized, rng
from tests.golden import FIXTURES, assert_matches, load_case

X = rng.standard_normal((2, 8, 9, 6)).astype(np.float32)
SPATIAL = [[0, 0], [0, 1], [1, 2], [0, 0]]  # asymmetric, as Keras' correct_pad writes it


def padded_conv(op="DepthwiseConv2dNative", *, paddings=SPATIAL, pad_op="Pad", value=0.0, padding="VALID",
                explicit=(), data_format="NHWC", strides=(1, 2, 2, 1)) -> engine.Graph:
    """x -> Pad(paddings) -> a 3x3 convolution of the padded tensor."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 8, 9, 6))
    g.const("paddings", np.array(paddings, np.int32))
    if pad_op == "PadV2":
        g.const("value", np.float32(value))
        g.node("pad", "PadV2", ["x", "paddings", "value"], T=F32, Tpaddings=I32)
    else:
        g.node("pad", "Pad", ["x", "paddings"], T=F32, Tpaddings=I32)
    channels = 6 + sum(paddings[3]) if data_format == "NHWC" else 8 + sum(paddings[1])  # after padding
    shape = (3, 3, channels, 2 if op == "DepthwiseConv2dNative" else 4)
    g.const("w", rng.standard_normal(shape).astype(np.float32))
    g.node("conv", op, ["pad", "w"], T=F32, strides=list(strides), padding=padding, explicit_paddings=list(explicit),
           data_format=data_format)
    return engine.load_graph(g.bytes())


def conv_node(graph, feeds=("x:0",), fetches=("conv:0",), passes=("fuse_pad",)):
    return optimized(graph, list(feeds), list(fetches), list(passes)).node("conv")


@pytest.mark.parametrize("op", ["Conv2D", "DepthwiseConv2dNative"])
@pytest.mark.parametrize("pad_op", ["Pad", "PadV2"])
def test_zero_pad_becomes_the_convolutions_explicit_padding(op, pad_op):
    graph = padded_conv(op, pad_op=pad_op)
    conv = conv_node(graph)
    assert conv.inputs[0].node == "x"
    assert (conv.attrs["padding"], conv.attrs["explicit_paddings"]) == ("EXPLICIT", (0, 0, 0, 1, 1, 2, 0, 0))
    assert "Pad" not in ops_of(engine.Session(graph), ["x:0"], ["conv:0"])
    compare(graph, {"x:0": X}, ["conv:0"])


def test_explicit_padding_adds_to_the_pads():
    graph = padded_conv("Conv2D", padding="EXPLICIT", explicit=(0, 0, 2, 0, 1, 1, 0, 0))
    assert conv_node(graph).attrs["explicit_paddings"] == (0, 0, 2, 1, 2, 3, 0, 0)
    compare(graph, {"x:0": X}, ["conv:0"])


def test_channels_first_pads_its_spatial_axes():
    # NCHW: axes 2 and 3 are spatial; x, [2, 8, 9, 6], is 8 channels of 9x6 images.
    graph = padded_conv("Conv2D", paddings=[[0, 0], [0, 0], [0, 1], [1, 1]], data_format="NCHW", strides=(1, 1, 2, 2))
    assert conv_node(graph).attrs["explicit_paddings"] == (0, 0, 0, 0, 0, 1, 1, 1)
    compare(graph, {"x:0": X}, ["conv:0"])


@pytest.mark.parametrize(
    "variant",
    [
        dict(pad_op="PadV2", value=1.5),
        dict(paddings=[[1, 0], [0, 1], [0, 1], [0, 0]]),  # the batch axis
        dict(paddings=[[0, 0], [0, 1], [0, 1], [0, 2]]),  # the channels
        dict(padding="SAME"),
    ],
    ids=["nonzero_value", "padded_batch", "padded_channels", "same_padding"],
)
def test_other_pads_stay(variant):
    graph = padded_conv("DepthwiseConv2dNative", **variant)
    conv = conv_node(graph)
    assert conv.inputs[0].node == "pad" and conv.attrs["padding"] == variant.get("padding", "VALID")
    compare(graph, {"x:0": X}, ["conv:0"])


def shared_pad(second: str) -> engine.Graph:
    """One Pad read by a depthwise convolution and by `second` (another convolution, a Relu or a MaxPool)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 8, 9, 6))
    g.const("paddings", np.array(SPATIAL, np.int32))
    g.node("pad", "Pad", ["x", "paddings"], T=F32, Tpaddings=I32)
    g.const("w", rng.standard_normal((3, 3, 6, 1)).astype(np.float32))
    g.const("w2", rng.standard_normal((1, 1, 6, 5)).astype(np.float32))
    g.node("conv", "DepthwiseConv2dNative", ["pad", "w"], T=F32, strides=[1, 2, 2, 1], padding="VALID")
    if second == "Conv2D":
        g.node("other", "Conv2D", ["pad", "w2"], T=F32, strides=[1, 1, 1, 1], padding="VALID")
    elif second == "MaxPool":
        g.node("other", "MaxPool", ["pad"], T=F32, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="VALID")
    else:
        g.node("other", second, ["pad"], T=F32)
    return engine.load_graph(g.bytes())


def test_every_convolution_reading_the_pad_takes_it():
    graph = shared_pad("Conv2D")
    after = optimized(graph, ["x:0"], ["conv:0", "other:0"], ["fuse_pad", "remove_dead_nodes"])
    assert "pad" not in after
    assert after.node("other").attrs["explicit_paddings"] == (0, 0, 0, 1, 1, 2, 0, 0)
    compare(graph, {"x:0": X}, ["conv:0", "other:0"])


@pytest.mark.parametrize("second", ["Relu", "MaxPool"])
def test_a_pad_with_another_reader_stays(second):
    # MaxPool pads with -inf, where a zero from the Pad could be the maximum.
    graph = shared_pad(second)
    assert conv_node(graph, fetches=("conv:0", "other:0")).inputs[0].node == "pad"
    compare(graph, {"x:0": -np.abs(X)}, ["conv:0", "other:0"])


def test_a_fetched_pad_is_kept_and_its_convolution_still_reads_the_input():
    graph = padded_conv()
    after = optimized(graph, ["x:0"], ["conv:0", "pad:0"], ["fuse_pad", "remove_dead_nodes"])
    assert after.node("pad").op == "Pad" and after.node("conv").inputs[0].node == "x"
    compare(graph, {"x:0": X}, ["conv:0", "pad:0"])


def test_a_fed_pad_stays():
    graph = padded_conv()
    conv = conv_node(graph, feeds=("pad:0",))
    assert conv.inputs[0].node == "pad" and conv.attrs["padding"] == "VALID"


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "twins"])
def test_keras_zero_padding_golden_still_matches_tensorflow(compiled):
    # MobileNetV2's block: ZeroPadding2D, then a stride-2 depthwise convolution with batch norm and ReLU6.
    case = load_case(FIXTURES / "models/mobilenet_block")
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    sess = engine.Session(engine.load_graph(case.model), options=options)
    fetches = list(case.fetches)
    assert "Pad" not in ops_of(sess, list(case.feeds), fetches)
    for name, got in zip(fetches, sess.run(fetches, case.feeds)):
        assert_matches(name, got, case.fetches[name], case.rtol, case.atol)
