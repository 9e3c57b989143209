"""`_TensorgateSqueezeExcite` (kernels.nn.squeeze_excite): its twin is the chain of kernels it replaces, run in
turn, and its compiled path (the excitation applied chunk by chunk before the projection's GEMMs) equals
the twin to the bit; bad filters and input counts are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

rng = np.random.default_rng(29)
ONES = (1, 1, 1, 1)


def _run(op, *inputs, compiled=False, **attrs):
    return kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})(*inputs)


def _block(n=2, h=5, w=6, c=16, reduced=4, out=8):
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    weights = [
        rng.standard_normal((1, 1, c, reduced)).astype(np.float32), rng.standard_normal(reduced).astype(np.float32),
        rng.standard_normal((1, 1, reduced, c)).astype(np.float32), rng.standard_normal(c).astype(np.float32),
    ]
    project = [rng.standard_normal((1, 1, c, out)).astype(np.float32), rng.standard_normal(out).astype(np.float32)]
    residual = rng.standard_normal((n, h, w, out)).astype(np.float32)
    return x, weights, project, residual


def _conv(x, filt, bias, fused_ops, *extra):
    return _run("_FusedConv2D", x, filt, bias, *extra, strides=ONES, padding="SAME", fused_ops=fused_ops,
                num_args=1 + len(extra))[0]


def _chain(x, weights, reduce_activation, gate, multiplier, divisor, project=(), project_ops=(), residual=None):
    """The unfused ops, one kernel after another."""
    (mean,) = _run("Mean", x, np.array([1, 2], np.int32), keep_dims=True)
    reduced = _conv(mean, *weights[:2], ("BiasAdd", reduce_activation) if reduce_activation else ("BiasAdd",))
    g = _conv(reduced, *weights[2:], ("BiasAdd", gate))
    if multiplier != 1.0:
        (g,) = _run("Mul", g, np.float32(multiplier))
    if divisor != 1.0:
        (g,) = _run("RealDiv", g, np.float32(divisor))
    (y,) = _run("Mul", x, g)
    if project_ops:
        y = _conv(y, *project, project_ops, *(() if residual is None else (residual,)))
    return y


# (reduce activation, gate, multiplier, divisor): EfficientNet's, MobileNetV3's (Keras 2 and 3), a RealDiv gate.
GATES = [("Swish", "Sigmoid", 1.0, 1.0), ("Relu", "Relu6", 1 / 6, 1.0), ("", "Relu6", 1.0, 6.0),
         ("HardSwish", "Sigmoid", 1.0, 1.0)]
PROJECTIONS = [(), ("BiasAdd",), ("BiasAdd", "Add")]


@pytest.mark.parametrize("project_ops", PROJECTIONS, ids=str)
@pytest.mark.parametrize("gate", GATES, ids=str)
def test_twin_is_the_chain(gate, project_ops):
    x, weights, project, residual = _block()
    reduce_activation, gate_activation, multiplier, divisor = gate
    inputs = (*project, residual)[: len(project_ops) + 1] if project_ops else ()
    got = _run("_TensorgateSqueezeExcite", x, *weights, *inputs, reduce_activation=reduce_activation,
               gate_activation=gate_activation, gate_multiplier=multiplier, gate_divisor=divisor,
               project_fused_ops=project_ops)[0]
    want = _chain(x, weights, reduce_activation, gate_activation, multiplier, divisor, project, project_ops,
                  residual if "Add" in project_ops else None)
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")
@pytest.mark.parametrize("shape", [(2, 5, 6, 16), (8, 40, 40, 64), (1, 1, 1, 8)], ids=str)
@pytest.mark.parametrize("project_ops", PROJECTIONS, ids=str)
@pytest.mark.parametrize("gate", [GATES[1], GATES[0]], ids=["hard", "sigmoid"])
def test_compiled_equals_twin(gate, project_ops, shape):
    n, h, w, c = shape
    x, weights, project, residual = _block(n, h, w, c, reduced=max(c // 4, 1), out=c // 2)
    x.flags.writeable = False  # a caller's feed
    inputs = (*project, residual)[: len(project_ops) + 1] if project_ops else ()
    reduce_activation, gate_activation, multiplier, divisor = gate
    attrs = {"reduce_activation": reduce_activation, "gate_activation": gate_activation, "gate_multiplier": multiplier,
                 "gate_divisor": divisor, "project_fused_ops": project_ops}
    got = _run("_TensorgateSqueezeExcite", x, *weights, *inputs, compiled=True, **attrs)[0]
    twin = _run("_TensorgateSqueezeExcite", x, *weights, *inputs, **attrs)[0]
    assert got.shape == twin.shape and got.dtype == twin.dtype
    if gate_activation == "Sigmoid":  # the compiled exp of swish and sigmoid: float32 rounding apart
        np.testing.assert_allclose(got, twin, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, twin)


def test_broadcasting_residual_takes_the_twin():
    x, weights, project, _ = _block()
    residual = rng.standard_normal((1, 1, 1, 8)).astype(np.float32)
    attrs = {"gate_activation": "Relu6", "project_fused_ops": ("BiasAdd", "Add")}
    got = _run("_TensorgateSqueezeExcite", x, *weights, *project, residual, compiled=True, **attrs)[0]
    np.testing.assert_array_equal(got, _chain(x, weights, "", "Relu6", 1.0, 1.0, project, ("BiasAdd", "Add"),
                                              residual))


def test_float64_runs_the_twin():
    x, weights, project, _ = _block()
    x64 = x.astype(np.float64)
    weights64 = [w.astype(np.float64) for w in weights]
    attrs = {"gate_activation": "Sigmoid", "project_fused_ops": ("BiasAdd",)}
    got = _run("_TensorgateSqueezeExcite", x64, *weights64, *[p.astype(np.float64) for p in project], compiled=True,
               **attrs)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _run("_TensorgateSqueezeExcite", x, *weights, *project, **attrs)[0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("case, message", [
    ("rank", "x must be NHWC"),
    ("reduce", "the reduce filter must be"),
    ("expand", "the expand filter must be"),
    ("projection", "the projection filter must be"),
    ("inputs", "takes 7 inputs, got 6"),
])
def test_bad_inputs_are_refused(case, message):
    x, weights, project, _ = _block()
    attrs = {"gate_activation": "Sigmoid", "project_fused_ops": ("BiasAdd",)}
    inputs = [x, *weights, *project]
    if case == "rank":
        inputs[0] = x[0]
    elif case == "reduce":
        inputs[1] = weights[0][:, :, :8]
    elif case == "expand":
        inputs[3] = weights[2][:, :, :, :8]
    elif case == "projection":
        inputs[5] = np.ones((3, 3, 16, 8), np.float32)
    else:
        inputs = inputs[:-1]
    with pytest.raises(ValueError, match=message):
        _run("_TensorgateSqueezeExcite", *inputs, **attrs)
