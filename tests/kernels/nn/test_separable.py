"""_TensorgateSeparableConv2D: the banded path (the depthwise loop and the pointwise GEMM per band of output rows)
held to its numpy twin (the depthwise and 1x1 kernels on whole tensors) at every stride, padding, dilation,
multiplier, band size and fused step. The sums are the same in the same order, but BLAS may round a GEMM row
differently by the size of the matrix it is in, so the two agree to float32 rounding rather than to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import jit
from kernels.nn import separable
from kernels.nn.window import window_from_attrs

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

# (batch, height, width, in, multiplier, out, kernel, stride, padding, explicit, dilation)
GEOMETRIES = [
    (2, 9, 11, 8, 1, 12, 3, 1, "SAME", (), 1),
    (1, 16, 16, 16, 1, 24, 3, 2, "EXPLICIT", (0, 0, 0, 1, 0, 1, 0, 0), 1),
    (3, 7, 7, 5, 1, 6, 5, 2, "VALID", (), 1),
    (1, 12, 10, 4, 1, 4, 3, 1, "SAME", (), 2),
    (2, 14, 14, 11, 1, 7, 7, 1, "SAME", (), 1),
    (2, 13, 13, 6, 2, 9, 5, 2, "SAME", (), 1),
    (1, 1, 1, 4, 1, 4, 3, 1, "SAME", (), 1),
    (2, 5, 6, 3, 1, 7, 3, 2, "EXPLICIT", (0, 0, 2, 3, 1, 0, 0, 0), 1),
]
DEPTHWISE_OPS = [(), ("BiasAdd",), ("BiasAdd", "Relu"), ("BiasAdd", "Relu6"), ("BiasAdd", "LeakyRelu"),
                 ("BiasAdd", "Elu")]
POINTWISE_OPS = [(), ("BiasAdd",), ("BiasAdd", "Relu"), ("BiasAdd", "Add"), ("BiasAdd", "Add", "Relu6"),
                 ("FusedBatchNorm", "Relu"), ("BiasAdd", "LeakyRelu")]


@pytest.fixture
def small_bands(monkeypatch):
    """Bands of a row or two: the small cases here cut into many, as large layers are."""
    monkeypatch.setattr(separable, "_MIN_BAND_MACS", 1)
    monkeypatch.setattr(separable, "_BAND_BYTES", 512)


def _case(geometry, depthwise_ops, pointwise_ops, seed=0):
    n, h, w, c, mult, co, k, s, pad, explicit, d = geometry
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    attrs = {"strides": (1, s, s, 1), "padding": pad, "explicit_paddings": explicit, "dilations": (1, d, d, 1)}
    inputs = [f32(n, h, w, c), f32(k, k, c, mult)]
    if depthwise_ops:
        inputs.append(f32(c * mult))
    inputs.append(f32(1, 1, c * mult, co))
    if pointwise_ops and pointwise_ops[0] == "FusedBatchNorm":
        inputs += [f32(co), f32(co), f32(co), rng.uniform(0.5, 2.0, co).astype(np.float32)]
    elif pointwise_ops:
        inputs.append(f32(co))
    if "Add" in pointwise_ops:
        win = window_from_attrs((h, w), (k, k), attrs["strides"], pad, explicit, "NHWC", attrs["dilations"])
        inputs.append(f32(n, win.out_h, win.out_w, co))
    attrs.update(depthwise_ops=depthwise_ops, fused_ops=pointwise_ops, leakyrelu_alpha=0.3)
    return inputs, attrs


def _both(inputs, attrs):
    twin = separable.separable_conv2d(np, *inputs, **attrs, compiled=False)[0]
    banded = separable.separable_conv2d(np, *inputs, **attrs, compiled=True)[0]
    assert banded.shape == twin.shape and banded.dtype == twin.dtype == np.float32
    return banded, twin


def assert_agree(banded, twin, elu=False):
    scale = float(np.abs(twin).max()) if twin.size else 1.0
    np.testing.assert_allclose(banded, twin, rtol=1e-5, atol=(1e-5 if elu else 1e-6) * scale)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("depthwise_ops", DEPTHWISE_OPS, ids=str)
def test_banded_equals_twin_for_every_geometry_and_depthwise_step(small_bands, geometry, depthwise_ops):
    banded, twin = _both(*_case(geometry, depthwise_ops, ("BiasAdd", "Relu")))
    assert_agree(banded, twin, elu="Elu" in depthwise_ops)


@pytest.mark.parametrize("pointwise_ops", POINTWISE_OPS, ids=str)
def test_banded_equals_twin_for_every_pointwise_step(small_bands, pointwise_ops):
    for geometry in (GEOMETRIES[0], GEOMETRIES[1], GEOMETRIES[5]):
        banded, twin = _both(*_case(geometry, ("BiasAdd", "Relu6"), pointwise_ops, seed=1))
        assert_agree(banded, twin)


@pytest.mark.parametrize("input_activation", ["Relu", "Relu6"])
def test_input_activation_banded_equals_twin(small_bands, input_activation):
    for geometry in (GEOMETRIES[0], GEOMETRIES[1], GEOMETRIES[5]):
        inputs, attrs = _case(geometry, ("BiasAdd",), ("BiasAdd", "Relu"), seed=7)
        inputs[0] = inputs[0] * 4  # values past 6 for Relu6
        attrs["input_activation"] = input_activation
        banded, twin = _both(inputs, attrs)
        assert_agree(banded, twin)
        # The twin is the activation, then the pair.
        activated = np.clip(inputs[0], 0, 6 if input_activation == "Relu6" else None)
        without = separable.separable_conv2d(np, activated, *inputs[1:], **{**attrs, "input_activation": ""})[0]
        np.testing.assert_array_equal(twin, without)


def test_default_bands_on_a_layer_large_enough_to_split():
    inputs, attrs = _case((2, 56, 56, 32, 1, 48, 5, 1, "SAME", (), 1), (), ("BiasAdd",), seed=2)
    win = window_from_attrs((56, 56), (5, 5), attrs["strides"], "SAME", (), "NHWC")
    assert len(separable._bands(2, win, 25, 32, 48)) >= 2
    assert_agree(*_both(inputs, attrs))


@pytest.mark.parametrize("geometry", [GEOMETRIES[0], (2, 7, 7, 1024, 1, 1024, 3, 1, "SAME", (), 1)], ids=str)
def test_a_small_or_wide_layer_is_the_chain_itself(geometry):
    """Too little work to cut into bands, or bands too wide to stay in cache: the whole-tensor kernels, exactly."""
    inputs, attrs = _case(geometry, ("BiasAdd", "Relu"), ("BiasAdd",), seed=3)
    n, h, w, c, mult, co, k = geometry[:7]
    assert len(separable._bands(n, window_from_attrs((h, w), (k, k), attrs["strides"], "SAME", (), "NHWC"),
                                k * k, c * mult, co)) < 2
    banded, twin = _both(inputs, attrs)
    np.testing.assert_array_equal(banded, twin)


def test_views_and_read_only_inputs(small_bands):
    inputs, attrs = _case(GEOMETRIES[4], ("BiasAdd",), ("BiasAdd", "Add"), seed=4)
    wide = np.concatenate([inputs[0], inputs[0]], axis=2)[:, :, ::2]  # a strided view
    inputs[0] = wide
    for a in inputs[1:]:
        a.setflags(write=False)
    assert_agree(*_both(inputs, attrs))


def test_other_dtypes_run_the_twin():
    inputs, attrs = _case(GEOMETRIES[0], ("BiasAdd", "Relu"), ("BiasAdd",), seed=5)
    inputs = [a.astype(np.float64) for a in inputs]
    got = separable.separable_conv2d(np, *inputs, **attrs, compiled=True)[0]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, separable.separable_conv2d(np, *inputs, **attrs, compiled=False)[0])


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda ins: ins.__setitem__(3, ins[3][:, :, :5]), "do not chain"),
        (lambda ins: ins.__setitem__(3, np.zeros((3, 3, 8, 12), np.float32)), "1x1 pointwise filter"),
        (lambda ins: ins.__setitem__(2, ins[2][:5]), "per-channel"),
        (lambda ins: ins.append(ins[-1]), "extra inputs"),
        (lambda ins: ins.__delitem__(slice(2, None)), "pointwise filter after"),
    ],
)
def test_bad_inputs_raise(change, message):
    inputs, attrs = _case(GEOMETRIES[0], ("BiasAdd", "Relu"), ("BiasAdd",), seed=6)
    change(inputs)
    with pytest.raises(ValueError, match=message):
        separable.separable_conv2d(np, *inputs, **attrs, compiled=True)
