"""The decoder and T5 kernels held to their numpy twins (kernels.nn.transformer_rows' compiled loops against
the numpy code of _TensorgateRmsNorm, _TensorgateAttention, _TensorgateRotary, _TensorgateGatedProjection),
and the twins to plain definitions: on odd sizes, tiled sizes, non-contiguous operands, grouped-query heads,
masks that hide whole rows, NaN and infinities; and bad operands refused with a clear error."""

from __future__ import annotations

import numpy as np
import pytest

import kernels
from kernels import jit

rng = np.random.default_rng(32)
needs_numba = pytest.mark.skipif(not jit.AVAILABLE, reason="needs numba")


def _run(op, *inputs, compiled, **attrs):
    return kernels.lookup(op, "cpu").bind(np, attrs, {"compiled": compiled})(*inputs)[0]


def _both(op, *inputs, **attrs):
    before = [x.copy() for x in inputs]
    got = _run(op, *inputs, compiled=True, **attrs)
    twin = _run(op, *inputs, compiled=False, **attrs)
    for x, x0 in zip(inputs, before):
        np.testing.assert_array_equal(x, x0)
    assert got.shape == twin.shape and got.dtype == twin.dtype
    return got, twin


# -- RMSNorm -------------------------------------------------------------------------------------------------


@needs_numba
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 129), (700, 384)], ids=str)
def test_rms_norm_compiled_equals_twin(shape):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, np.inf, 0.0, -0.0][: x.size]
    gamma = rng.standard_normal(shape[-1]).astype(np.float32)
    got, twin = _both("_TensorgateRmsNorm", x, gamma, epsilon=1e-6)
    np.testing.assert_allclose(got, twin, rtol=4e-6, atol=1e-6)


def test_rms_norm_twin_is_the_definition():
    x = rng.standard_normal((4, 9, 33)).astype(np.float32)
    gamma = rng.standard_normal((1, 1, 33)).astype(np.float32)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * gamma
    for compiled in (False, True):
        np.testing.assert_allclose(_run("_TensorgateRmsNorm", x, gamma, compiled=compiled, epsilon=1e-5), want, rtol=2e-6, atol=2e-6)


def test_rms_norm_refuses_a_scalar():
    with pytest.raises(ValueError, match="scalar"):
        _run("_TensorgateRmsNorm", np.float32(2), np.float32(1), compiled=False, epsilon=1e-6)


# -- attention -----------------------------------------------------------------------------------------------


def _reference(q, k, v, scale, bias=None, mask=None, fill=-1e9, zero=False):
    """q [B, N, T, H], k [B, N, S, H], v [B, N, S, E] in float64, the plain definition."""
    s = np.einsum("bnth,bnsh->bnts", q.astype(np.float64), k) * scale
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = np.where(mask, s, fill)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        e = e / e.sum(-1, keepdims=True)
    if zero:
        e = np.where(mask, e, 0)
    return np.einsum("bnts,bnse->bnte", e, v)


CASES = {
    # name: (B, N, KV, T, S, H, E)
    "tiny": (1, 1, 1, 1, 1, 1, 1),
    "odd": (3, 3, 3, 5, 7, 9, 6),
    "gqa": (2, 4, 2, 6, 6, 8, 8),
    "tiled": (9, 4, 1, 33, 65, 16, 16),
    "query_blocks": (3, 2, 1, 130, 20, 8, 5),  # more queries than one block of the compiled kernel
}


def _operands(case, masked=True):
    b, n, kv, t, s, h, e = CASES[case]
    q = rng.standard_normal((b, t, n, h)).astype(np.float32)
    k = rng.standard_normal((b, s, kv, h)).astype(np.float32)
    v = rng.standard_normal((b, s, kv, e)).astype(np.float32)
    mask = rng.random((b, 1, t, s)) > 0.25
    mask[0, 0, 0] = False  # a query that sees nothing
    bias = (rng.standard_normal((1, n, t, s)) * 2).astype(np.float32)
    return q, k, v, mask, bias


def _layouts(**extra):
    return dict(q_layout="BTNH", k_layout="BSNH", v_layout="BSNE", out_layout="BTNE", **extra)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("masking", ["none", "bias", "select", "select_zeroed", "both"])
def test_attention_twin_is_the_definition_and_compiled_equals_it(case, masking):
    q, k, v, mask, bias = _operands(case)
    n, kv = q.shape[2], k.shape[2]
    attrs = _layouts(scale=0.35)
    inputs = [q, k, v]
    if masking in ("bias", "both"):
        inputs.append(bias)
        attrs.update(has_bias=True, bias_layout="BNTS")
    if masking in ("select", "select_zeroed", "both"):
        inputs.append(mask)
        attrs.update(has_mask=True, mask_layout="BNTS", fill=-1e9, zero_masked=masking == "select_zeroed")
    def heads(x):
        return np.repeat(x, n // kv, axis=2).transpose(0, 2, 1, 3)

    want = _reference(q.transpose(0, 2, 1, 3), heads(k), heads(v), 0.35, bias if "bias_layout" in attrs else None,
                      mask if "mask_layout" in attrs else None, zero=attrs.get("zero_masked", False)).transpose(0, 2, 1, 3)
    twin = _run("_TensorgateAttention", *inputs, compiled=False, **attrs)
    np.testing.assert_allclose(twin, want, rtol=1e-4, atol=1e-5)
    if jit.AVAILABLE:
        got, twin = _both("_TensorgateAttention", *inputs, **attrs)
        np.testing.assert_allclose(got, twin, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("case", ["odd", "gqa", "query_blocks"])
@pytest.mark.parametrize("terms", ["full_and_padding", "per_query_and_scalar", "both_rows"])
def test_attention_with_a_bias_of_two_terms_adds_them_first(case, terms):
    q, k, v, mask, bias = _operands(case)
    b, t, n, _ = q.shape
    s = k.shape[1]
    padding = np.where(rng.random((b, 1, 1, s)) > 0.3, 0.0, -1e9).astype(np.float32)  # T5's (1 - mask) * -1e9
    first, second = {
        "full_and_padding": (bias, padding),
        "per_query_and_scalar": ((rng.standard_normal((t, 1)) * 2).astype(np.float32), np.float32(0.75)),
        "both_rows": (rng.standard_normal((n, 1, s)).astype(np.float32),
                      rng.standard_normal((b, 1, 1, s)).astype(np.float32)),
    }[terms]
    attrs = _layouts(scale=0.6, has_bias=True, bias_layout="BNTS", has_mask=True, mask_layout="BNTS", fill=-1e9)
    one_term = _run("_TensorgateAttention", q, k, v, first + second, mask, compiled=False, **attrs)
    twin = _run("_TensorgateAttention", q, k, v, first, second, mask, compiled=False, bias_terms=2, **attrs)
    np.testing.assert_array_equal(twin, one_term)
    if jit.AVAILABLE:
        got, twin = _both("_TensorgateAttention", q, k, v, first, second, mask, bias_terms=2, **attrs)
        np.testing.assert_allclose(got, twin, rtol=2e-5, atol=2e-6)


def test_attention_refuses_a_bias_of_three_terms():
    q, k, v, _, bias = _operands("odd")
    with pytest.raises(ValueError, match="bias_terms"):
        _run("_TensorgateAttention", q, k, v, bias, bias, bias, compiled=False, bias_terms=3,
             **_layouts(has_bias=True, bias_layout="BNTS"))


@needs_numba
def test_attention_reads_every_layout_in_place_and_writes_any():
    q, k, v, _, _ = _operands("odd")
    want = _run("_TensorgateAttention", q, k, v, compiled=False, **_layouts(scale=0.5))
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3))  # BNTH
    kt = np.ascontiguousarray(k.transpose(0, 2, 3, 1))  # BNHS
    vt = v.transpose(2, 0, 1, 3)  # NBSE, a non-contiguous view
    for compiled in (False, True):
        got = _run("_TensorgateAttention", qt, kt, vt, compiled=compiled, q_layout="BNTH", k_layout="BNHS",
                   v_layout="NBSE", out_layout="BNTE", scale=0.5)
        np.testing.assert_allclose(got, want.transpose(0, 2, 1, 3), rtol=2e-5, atol=2e-6)


@needs_numba
def test_attention_grouped_queries_as_separate_axes():
    q, k, v, mask, _ = _operands("gqa")
    b, t, n, h = q.shape
    kv = k.shape[2]
    want = _run("_TensorgateAttention", q, k, v, mask, compiled=False, **_layouts(scale=1.0, has_mask=True, mask_layout="BNTS",
                fill=-1e9))
    q5 = q.reshape(b, t, kv, n // kv, h)
    for compiled in (False, True):
        got = _run("_TensorgateAttention", q5, k, v, mask[:, :, None], compiled=compiled, q_layout="BTKGH", k_layout="BSKH",
                   v_layout="BSKE", out_layout="BTKGE", has_mask=True, mask_layout="BKGTS", fill=-1e9)
        np.testing.assert_allclose(got.reshape(b, t, n, -1), want, rtol=2e-5, atol=2e-6)


@needs_numba
def test_attention_fully_masked_rows_and_infinite_fill_agree():
    q, k, v, mask, _ = _operands("odd")
    mask[1, 0, 2] = False
    attrs = _layouts(has_mask=True, mask_layout="BNTS", fill=-np.inf)
    got, twin = _both("_TensorgateAttention", q, k, v, mask, **attrs)
    assert np.isnan(got[1, 2]).all() and np.isnan(twin[1, 2]).all()  # softmax over nothing, as TensorFlow's
    np.testing.assert_allclose(got, twin, rtol=2e-5, atol=2e-6)
    got, twin = _both("_TensorgateAttention", q, k, v, mask, **{**attrs, "zero_masked": True})
    np.testing.assert_allclose(got, twin, rtol=2e-5, atol=2e-6)
    assert np.isfinite(got).all()


@pytest.mark.parametrize("bad", ["layout", "extra_inputs", "heads", "mask_shape"])
def test_attention_refuses_what_does_not_fit(bad):
    q, k, v, mask, _ = _operands("gqa")
    attrs, inputs = _layouts(), [q, k, v]
    if bad == "layout":
        attrs["q_layout"] = "BTNX"
    elif bad == "extra_inputs":
        inputs.append(mask)
    elif bad == "heads":
        inputs[1] = np.concatenate([k, k[:, :, :1]], axis=2)  # 3 key heads for 4 query heads
        inputs[2] = np.concatenate([v, v[:, :, :1]], axis=2)
    else:
        inputs.append(mask[:, :, :, :2])
        attrs.update(has_mask=True, mask_layout="BNTS")
    with pytest.raises(ValueError, match="_TensorgateAttention"):
        _run("_TensorgateAttention", *inputs, compiled=False, **attrs)


# -- rotary embeddings -----------------------------------------------------------------------------------


@needs_numba
@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (3, 5, 4, 10), (40, 64, 8, 64)], ids=str)
def test_rotary_compiled_equals_twin_and_definition(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, np.inf, -0.0][: x.size]
    angles = rng.standard_normal((1, shape[1], 1, shape[3]))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    got, twin = _both("_TensorgateRotary", x, cos, sin)
    np.testing.assert_array_equal(got, twin)
    half = shape[3] // 2
    want = x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin
    np.testing.assert_array_equal(twin, want)


def test_rotary_refuses_an_odd_width():
    x = np.ones((1, 2, 1, 3), np.float32)
    with pytest.raises(ValueError, match="even"):
        _run("_TensorgateRotary", x, x, x, compiled=False)


# -- projections -----------------------------------------------------------------------------------------------

EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, -88.0, 100.0, -100.0, 5.66, -5.66, 1e-30], np.float32)


@needs_numba
@pytest.mark.parametrize("gate", ["Silu", "GeluExact", "GeluApproximate", "Relu"])
@pytest.mark.parametrize("rows", [1, 3, 700, 30000], ids=lambda r: f"rows{r}")  # 30000: tasks of tiles
def test_gated_projection_compiled_equals_twin(gate, rows):
    # Identity-like weights carry the edge values to the gate as they are.
    units = 12
    x = rng.standard_normal((rows, 2 * units)).astype(np.float32) * 4
    x.reshape(-1)[: EDGES.size] = EDGES
    weights = np.eye(2 * units, dtype=np.float32)
    got, twin = _both("_TensorgateGatedProjection", x, weights, gate=gate)
    # GELU's tanh form goes through exp here (x / (1 + exp(-2u))) and through tanh in the twin: float32 rounding.
    atol = 1e-5 if gate == "GeluApproximate" else 1e-6
    np.testing.assert_allclose(got, twin, rtol=3e-6, atol=atol)


def test_gated_projection_twin_is_the_definition():
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    w = rng.standard_normal((8, 10)).astype(np.float32)
    g, u = x @ w[:, :5], x @ w[:, 5:]
    want = {"Silu": g / (1 + np.exp(-g)) * u, "Relu": np.maximum(g, 0) * u}
    for gate, expected in want.items():
        np.testing.assert_allclose(_run("_TensorgateGatedProjection", x, w, compiled=False, gate=gate), expected, rtol=1e-5, atol=1e-6)


def test_projection_contracts_trailing_axes():
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5, 6, 7)).astype(np.float32)
    got = _run("_TensorgateProjection", x, w, compiled=False, axes=2)
    np.testing.assert_allclose(got, np.einsum("abcd,cdef->abef", x, w), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="cannot contract"):
        _run("_TensorgateProjection", x, w, compiled=False, axes=1)
    with pytest.raises(ValueError, match="expected"):
        _run("_TensorgateGatedProjection", x, w[:, :, 0, :].reshape(4, 35), compiled=False, gate="Relu")


def test_split_projection_cuts_one_product_into_outputs():
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    parts = [rng.standard_normal((8,) + units).astype(np.float32) for units in ((4, 2), (3,), (2, 2))]
    weights = np.concatenate([w.reshape(8, -1) for w in parts], axis=1)
    got = _run("_TensorgateSplitProjection", x, weights, compiled=False, sizes=[8, 3, 4], units=[4, 2, 3, 2, 2],
               ranks=[2, 1, 2])
    fn = kernels.lookup("_TensorgateSplitProjection", "cpu").bind(np, {"sizes": [8, 3, 4], "units": [4, 2, 3, 2, 2],
                                                                       "ranks": [2, 1, 2]})
    outputs = fn(x, weights)
    assert got.shape == (2, 3, 4, 2) and len(outputs) == 3
    for out, w in zip(outputs, parts):
        np.testing.assert_allclose(out, np.tensordot(x, w, axes=1), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="do not hold"):
        fn = kernels.lookup("_TensorgateSplitProjection", "cpu").bind(np, {"sizes": [8, 7], "units": [9, 6], "ranks": [1, 1]})
        fn(x, weights)


# Rows x 64 x 24: one piece below 2^25 multiply-adds, tiles of rows shared out to the pool above.
@pytest.mark.parametrize("rows", [6, 30000], ids=["one_piece", "tiles"])
def test_split_projection_adds_each_output_its_bias(rows):
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    parts = [rng.standard_normal((64,) + units).astype(np.float32) for units in ((2, 4), (8,), (2, 4))]
    biases = [rng.standard_normal(w.shape[1:]).astype(np.float32) for w in parts]
    weights = np.concatenate([w.reshape(64, -1) for w in parts], axis=1)
    bias = np.concatenate([b.reshape(-1) for b in biases])
    attrs = {"sizes": [8, 8, 8], "units": [2, 4, 8, 2, 4], "ranks": [2, 1, 2], "has_bias": True}
    outputs = kernels.lookup("_TensorgateSplitProjection", "cpu").bind(np, attrs)(x, weights, bias)
    for out, w, b in zip(outputs, parts, biases):
        np.testing.assert_allclose(out, np.tensordot(x, w, axes=1) + b, rtol=1e-5, atol=1e-5)
    plain = kernels.lookup("_TensorgateSplitProjection", "cpu").bind(np, {**attrs, "has_bias": False})(x, weights)
    for out, w in zip(plain, parts):
        np.testing.assert_allclose(out, np.tensordot(x, w, axes=1), rtol=1e-5, atol=1e-5)
    for bad in ((x, weights), (x, weights, bias[:-1])):
        with pytest.raises(ValueError, match="has_bias"):
            kernels.lookup("_TensorgateSplitProjection", "cpu").bind(np, attrs)(*bad)


@pytest.mark.parametrize("rows", [6, 30000], ids=["one_piece", "tiles"])
def test_projection_adds_its_bias_and_addend_as_the_graph_did(rows):
    x = rng.standard_normal((rows, 2, 32)).astype(np.float32)
    w = rng.standard_normal((2, 32, 24)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    product = np.tensordot(x, w, axes=2)
    np.testing.assert_allclose(_run("_TensorgateProjection", x, w, compiled=False, axes=2), product, rtol=1e-5, atol=1e-4)
    for addend in (rng.standard_normal((rows, 24)).astype(np.float32), rng.standard_normal(24).astype(np.float32),
                   rng.standard_normal((3, rows, 24)).astype(np.float32)):  # same shape, broadcast either way
        got = _run("_TensorgateProjection", x, w, addend, compiled=False, axes=2, has_addend=True)
        np.testing.assert_allclose(got, product + addend, rtol=1e-5, atol=1e-4)
        got = _run("_TensorgateProjection", x, w, bias, addend, compiled=False, axes=2, has_bias=True, has_addend=True)
        np.testing.assert_allclose(got, product + bias + addend, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="has_addend"):
        _run("_TensorgateProjection", x, w, compiled=False, axes=2, has_addend=True)
    with pytest.raises(ValueError, match="bias has shape"):
        _run("_TensorgateProjection", x, w, bias[:3], compiled=False, axes=2, has_bias=True)
