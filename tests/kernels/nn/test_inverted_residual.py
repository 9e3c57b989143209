"""_TensorgateInvertedResidual: the banded path (expand, depthwise and project per band of output rows) held
to its numpy twin (the three fused kernels on whole tensors) at every stride, padding, band size and activation,
with and without the residual. The sums are the same in the same order, but BLAS may round a GEMM row
differently by the size of the matrix it is in (OpenBLAS has kernels for small matrices), so the two agree to
float32 rounding rather than to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import jit
from kernels.nn import inverted_residual as ir

pytestmark = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")

# (batch, height, width, in, mid, out, kernel, stride, padding, explicit, dilation, residual)
GEOMETRIES = [
    (2, 9, 11, 8, 48, 8, 3, 1, "SAME", (), 1, True),
    (1, 16, 16, 16, 96, 24, 3, 2, "EXPLICIT", (0, 0, 0, 1, 0, 1, 0, 0), 1, False),
    (3, 7, 7, 5, 30, 6, 5, 2, "VALID", (), 1, False),
    (1, 12, 10, 4, 24, 4, 3, 1, "SAME", (), 2, True),
    (1, 1, 1, 4, 8, 4, 3, 1, "SAME", (), 1, True),
    (2, 5, 6, 3, 12, 7, 3, 2, "SAME", (), 1, False),
]


def _case(geometry, seed=0):
    n, h, w, ci, mid, co, k, s, pad, explicit, d, residual = geometry
    rng = np.random.default_rng(seed)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    x = f32(n, h, w, ci)
    args = [x, f32(1, 1, ci, mid), f32(mid), f32(k, k, mid, 1), f32(mid), f32(1, 1, mid, co), f32(co)]
    attrs = dict(strides=(1, s, s, 1), padding=pad, explicit_paddings=explicit, dilations=(1, d, d, 1))
    if residual:
        twin = ir.inverted_residual(np, *args, **attrs)[0]  # the output shape, for the addend
        args.append(f32(*twin.shape))
    return args, attrs


def assert_agree(banded, twin):
    assert banded.shape == twin.shape and banded.dtype == twin.dtype
    scale = float(np.abs(twin).max()) if twin.size else 1.0
    np.testing.assert_allclose(banded, twin, rtol=1e-5, atol=1e-6 * scale)


def _both(args, attrs, **kw):
    twin = ir.inverted_residual(np, *args, **attrs, **kw, compiled=False)[0]
    banded = ir.inverted_residual(np, *args, **attrs, **kw, compiled=True)[0]
    return banded, twin


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("acts", [("Relu6", "Relu6"), ("", ""), ("Relu", "Relu6"), ("Relu6", "")])
def test_banded_equals_twin(geometry, acts):
    args, attrs = _case(geometry)
    banded, twin = _both(args, attrs, expand_activation=acts[0], depthwise_activation=acts[1])
    assert banded.dtype == np.float32
    assert_agree(banded, twin)


@pytest.mark.parametrize("band_bytes", [1, 4096, 1 << 30])
def test_every_band_size(monkeypatch, band_bytes):
    """One output row per band (most halo recomputed), a few, and the whole image in one band."""
    monkeypatch.setattr(ir, "_BAND_BYTES", band_bytes)
    for geometry in GEOMETRIES[:4]:
        args, attrs = _case(geometry, seed=1)
        assert_agree(*_both(args, attrs, expand_activation="Relu6", depthwise_activation="Relu6"))


def test_matches_the_unfused_chain_without_numba_paths():
    """The twin is the three fused kernels: check it against them directly (plain numpy, no compiled loop)."""
    from kernels.nn import fused

    args, attrs = _case(GEOMETRIES[0], seed=2)
    x, ef, eb, df, db, pf, pb, addend = args
    h = fused.fused_conv2d(np, x, ef, eb, strides=(1, 1, 1, 1), padding="VALID", fused_ops=("BiasAdd", "Relu6"),
                           num_args=1)[0]
    d = fused.fused_depthwise_conv2d(np, h, df, db, **attrs, fused_ops=("BiasAdd", "Relu6"), num_args=1)[0]
    want = fused.fused_conv2d(np, d, pf, pb, addend, strides=(1, 1, 1, 1), padding="VALID",
                              fused_ops=("BiasAdd", "Add"), num_args=2)[0]
    got = ir.inverted_residual(np, *args, **attrs, expand_activation="Relu6", depthwise_activation="Relu6",
                               compiled=True)[0]
    assert_agree(got, want)


def test_float64_and_broadcast_residual_run_the_twin():
    args, attrs = _case(GEOMETRIES[0], seed=3)
    as64 = [a.astype(np.float64) for a in args]
    got = ir.inverted_residual(np, *as64, **attrs, compiled=True)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ir.inverted_residual(np, *args, **attrs)[0], rtol=1e-4, atol=1e-4)
    per_channel = args[:-1] + [args[-1][0, 0, 0]]  # an addend that broadcasts: the twin's business
    assert_agree(*_both(per_channel, attrs))


def test_read_only_inputs_and_empty_batch():
    args, attrs = _case(GEOMETRIES[1], seed=4)
    for a in args[1:]:
        a.flags.writeable = False  # constants are read-only
    assert_agree(*_both(args, attrs))
    empty = [args[0][:0], *args[1:]]
    assert ir.inverted_residual(np, *empty, **attrs, compiled=True)[0].shape == (0, 8, 8, 24)


def test_two_addends_are_an_error():
    args, attrs = _case(GEOMETRIES[0])
    with pytest.raises(ValueError, match="takes 7 or 8 inputs, got 9"):
        ir.inverted_residual(np, *args, args[-1], **attrs)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_block_without_expansion(geometry):
    """MobileNetV2's first block: depthwise and project only (expand=False; the input is already `mid` wide)."""
    n, h, w, ci, mid, co, k, s, pad, explicit, d, residual = geometry
    args, attrs = _case((n, h, w, mid, mid, co, k, s, pad, explicit, d, residual), seed=6)
    inputs = [args[0], *args[3:]]
    banded = ir.inverted_residual(np, *inputs, **attrs, expand=False, depthwise_activation="Relu6", compiled=True)[0]
    twin = ir.inverted_residual(np, *inputs, **attrs, expand=False, depthwise_activation="Relu6", compiled=False)[0]
    assert_agree(banded, twin)
