"""`_TensorgateExpandDepthwise` (kernels.nn.expand_depthwise): its twin is the chain it replaces (the fused
expansion, the fused depthwise convolution, the Mean kernel) run in turn, and its banded path equals the
twin to float32 rounding, over bands that split images, strides, padding and every activation it takes."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

rng = np.random.default_rng(47)
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _run(*inputs, compiled=False, **attrs):
    return kernels.lookup("_TensorgateExpandDepthwise", "cpu").bind(np, attrs, {"compiled": compiled})(*inputs)


def _case(n=2, h=9, w=11, c_in=4, mid=12, k=3):
    x = rng.standard_normal((n, h, w, c_in)).astype(np.float32)
    ef = (rng.standard_normal((1, 1, c_in, mid)) * 0.5).astype(np.float32)
    eb = rng.standard_normal(mid).astype(np.float32)
    df = (rng.standard_normal((k, k, mid, 1)) * 0.5).astype(np.float32)
    db = rng.standard_normal(mid).astype(np.float32)
    return x, ef, eb, df, db


def _chain(x, ef, eb, df, db, attrs, expand_activation, depthwise_activation):
    def ops(act):
        return ("BiasAdd", act) if act else ("BiasAdd",)

    h = x
    if ef is not None:
        (h,) = kernels.lookup("_FusedConv2D", "cpu").bind(np, {"strides": (1, 1, 1, 1), "padding": "SAME",
                                                                "fused_ops": ops(expand_activation), "num_args": 1}, {})(x, ef, eb)
    (y,) = kernels.lookup("_FusedDepthwiseConv2dNative", "cpu").bind(
        np, {**attrs, "fused_ops": ops(depthwise_activation), "num_args": 1}, {})(h, df, db)
    (mean,) = kernels.lookup("Mean", "cpu").bind(np, {"keep_dims": True}, {})(y, np.array([1, 2], np.int32))
    return y, mean


ATTRS = [
    {"strides": (1, 1, 1, 1), "padding": "SAME"},
    {"strides": (1, 2, 2, 1), "padding": "SAME"},
    {"strides": (1, 2, 2, 1), "padding": "EXPLICIT", "explicit_paddings": (0, 0, 0, 1, 1, 0, 0, 0)},
    {"strides": (1, 1, 1, 1), "padding": "VALID", "dilations": (1, 2, 2, 1)},
]
ACTIVATIONS = [("Swish", "Swish"), ("HardSwish", "HardSwish"), ("Relu6", "Relu"), ("", "")]


@pytest.mark.parametrize("activations", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("attrs", ATTRS, ids=str)
def test_twin_is_the_chain(attrs, activations):
    x, ef, eb, df, db = _case()
    expand_activation, depthwise_activation = activations
    y, mean = _run(x, ef, eb, df, db, **attrs, expand_activation=expand_activation,
                   depthwise_activation=depthwise_activation)
    want_y, want_mean = _chain(x, ef, eb, df, db, attrs, expand_activation, depthwise_activation)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(mean, want_mean)


@pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")
@pytest.mark.parametrize("shape", [(2, 9, 11, 4, 12, 3), (1, 64, 64, 16, 96, 3), (3, 20, 20, 8, 40, 5)], ids=str)
@pytest.mark.parametrize("activations", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("attrs", ATTRS, ids=str)
def test_banded_equals_twin(attrs, activations, shape):
    x, ef, eb, df, db = _case(*shape)
    x.flags.writeable = False
    kw = {**attrs, "expand_activation": activations[0], "depthwise_activation": activations[1]}
    got = _run(x, ef, eb, df, db, compiled=True, **kw)
    twin = _run(x, ef, eb, df, db, **kw)
    for g, t in zip(got, twin):
        assert g.shape == t.shape and g.dtype == t.dtype
        np.testing.assert_allclose(g, t, **TOL)


@pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")
def test_without_expansion():
    x, _, _, df, db = _case(c_in=12)
    kw = {"strides": (1, 1, 1, 1), "padding": "SAME", "expand": False, "depthwise_activation": "Swish"}
    got, twin = _run(x, df, db, compiled=True, **kw), _run(x, df, db, **kw)
    for g, t in zip(got, twin):
        np.testing.assert_allclose(g, t, **TOL)
    want = _chain(x, None, None, df, db, {"strides": (1, 1, 1, 1), "padding": "SAME"}, "", "Swish")
    for g, t in zip(twin, want):
        np.testing.assert_array_equal(g, t)


@pytest.mark.parametrize("case, message", [
    ("inputs", "takes 5 inputs, got 4"),
    ("rank", "x must be NHWC"),
    ("expand", "input depth must be evenly divisible by filter depth"),
    ("depthwise", "a per-channel input has shape"),
])
def test_bad_inputs_are_refused(case, message):
    x, ef, eb, df, db = _case()
    inputs = [x, ef, eb, df, db]
    if case == "inputs":
        inputs = inputs[:-1]
    elif case == "rank":
        inputs[0] = x[0]
    elif case == "expand":  # shapes the banded path does not take run as the chain, whose kernels refuse them
        inputs[1] = np.ones((1, 1, 3, 12), np.float32)
    else:
        inputs[4] = db[:5]
    for compiled in (False, True):
        with pytest.raises(ValueError, match=message):
            _run(*inputs, compiled=compiled, strides=(1, 1, 1, 1), padding="SAME")


@pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")
def test_channel_multiplier_runs_the_chain():
    x, ef, eb, _, _ = _case()
    df = rng.standard_normal((3, 3, 12, 2)).astype(np.float32)
    db = rng.standard_normal(24).astype(np.float32)
    got = _run(x, ef, eb, df, db, compiled=True, strides=(1, 1, 1, 1), padding="SAME")
    want = _chain(x, ef, eb, df, db, {"strides": (1, 1, 1, 1), "padding": "SAME"}, "", "")
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, **TOL)
