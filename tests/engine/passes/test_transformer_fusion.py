"""The decoder and T5 fusions, each pattern built in more than one spelling: RMS normalisation
(fuse_rms_norm), rotary embeddings (fuse_rotary), scaled dot-product attention with its masks, scales,
transposes and grouped-query repeat (fuse_attention), and bias-free and gated projections
(fuse_projection). Each checks that the rewrite fires (or, where the graph means something else, that it
does not) and that the optimized graph computes what the unoptimized one does."""

import numpy as np
import pytest

import engine
from tests.engine.graphs import GraphBuilder
from tests.engine.passes.checks import F32, I32, compare, fixture_signature, ops_of, rng

B, T, N, H = 2, 5, 4, 8
D = N * H
SEQ = (rng.standard_normal((B, T, D)) * 2 + 0.5).astype(np.float32)


def _graph(g: GraphBuilder) -> engine.Graph:
    return engine.load_graph(g.bytes())


# -- RMSNorm -----------------------------------------------------------------------------------------------


def rms_norm(spelling: str, *, gamma_first=False, eps_first=False, axis=-1, gamma=True) -> engine.Graph:
    """x -> RMSNorm over `axis` spelled as Llama (Pow, Rsqrt), Gemma (Square, Sqrt, Reciprocal), raw TF
    (Mul(x, x), x / Sqrt) or with Pow(v, -0.5)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, D))
    g.const("axes", np.array([axis], np.int32))
    g.const("eps", np.float32(1e-6))
    g.const("gamma", rng.standard_normal(D).astype(np.float32))
    if spelling == "llama":
        g.const("two", np.float32(2))
        g.node("sq", "Pow", ["x", "two"], T=F32)
    elif spelling in ("gemma", "pow_half"):
        g.node("sq", "Square", ["x"], T=F32)
    else:
        g.node("sq", "Mul", ["x", "x"], T=F32)
    g.node("mean", "Mean", ["sq", "axes"], T=F32, keep_dims=True)
    g.node("var", "AddV2", ["eps", "mean"] if eps_first else ["mean", "eps"], T=F32)
    if spelling == "llama":
        g.node("inv", "Rsqrt", ["var"], T=F32)
        g.node("normed", "Mul", ["x", "inv"], T=F32)
    elif spelling == "gemma":
        g.node("root", "Sqrt", ["var"], T=F32)
        g.node("inv", "Reciprocal", ["root"], T=F32)
        g.node("normed", "Mul", ["inv", "x"], T=F32)
    elif spelling == "pow_half":
        g.const("minus_half", np.float32(-0.5))
        g.node("inv", "Pow", ["var", "minus_half"], T=F32)
        g.node("normed", "Mul", ["x", "inv"], T=F32)
    else:
        g.node("root", "Sqrt", ["var"], T=F32)
        g.node("normed", "RealDiv", ["x", "root"], T=F32)
    if gamma:
        g.node("y", "Mul", ["gamma", "normed"] if gamma_first else ["normed", "gamma"], T=F32)
    else:
        g.node("y", "Identity", ["normed"], T=F32)
    return _graph(g)


@pytest.mark.parametrize("spelling", ["llama", "gemma", "raw_div", "pow_half"])
@pytest.mark.parametrize("order", ["gamma_last", "gamma_first_eps_first"])
def test_rms_norm_becomes_one_kernel_however_spelled(spelling, order):
    graph = rms_norm(spelling, gamma_first=order != "gamma_last", eps_first=order != "gamma_last")
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateRmsNorm"]
    compare(graph, {"x:0": SEQ}, ["y:0"])


def test_rms_norm_without_gamma():
    graph = rms_norm("llama", gamma=False)
    assert "_TensorgateRmsNorm" in ops_of(engine.Session(graph), ["x:0"], ["y:0"])
    compare(graph, {"x:0": SEQ}, ["y:0"])


@pytest.mark.parametrize("variant", ["middle_axis", "fetched_mean"])
def test_rms_norm_stays_when_it_is_not_exactly_one(variant):
    graph = rms_norm("llama", axis=1 if variant == "middle_axis" else -1)
    fetches = ["y:0", "mean:0"] if variant == "fetched_mean" else ["y:0"]
    assert "_TensorgateRmsNorm" not in ops_of(engine.Session(graph), ["x:0"], fetches)
    compare(graph, {"x:0": SEQ}, fetches)


# -- rotary embeddings -----------------------------------------------------------------------------------

Q4 = rng.standard_normal((B, T, N, H)).astype(np.float32)
COS = np.cos(rng.standard_normal((1, T, 1, H))).astype(np.float32)
SIN = np.sin(rng.standard_normal((1, T, 1, H))).astype(np.float32)


def rotary(spelling: str, *, declared=True, swap=False) -> engine.Graph:
    """x * cos + rotate_half(x) * sin, rotate_half as Keras Hub's stack + reshape or as a concatenation.
    Without `declared`, x's last two dims are not stated, so the Reshape's constants cannot be proven to be x's."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, None, N, H) if declared else (None, None, None, None))
    g.placeholder("cos", np.float32, (1, None, 1, H))
    g.placeholder("sin", np.float32, (1, None, 1, H))
    g.const("last", np.int32(-1))
    g.node("halves", "Split", ["last", "x"], T=F32, num_split=2)
    g.node("neg", "Neg", ["halves:1"], T=F32)
    if spelling == "stack":
        g.node("stacked", "Pack", ["neg", "halves:0"], T=F32, N=2, axis=-2)
        g.node("shape", "Shape", ["x"], T=F32, out_type=I32)
        for i in range(4):
            g.const(f"b{i}", np.array([i], np.int32))
            g.const(f"e{i}", np.array([i + 1], np.int32))
        g.const("one", np.array([1], np.int32))
        dims = []
        for i in range(2):
            dims.append(g.node(f"d{i}", "StridedSlice", ["shape", f"b{i}", f"e{i}", "one"], T=I32, Index=I32,
                               shrink_axis_mask=1))
        dims += [g.const("d2", np.int32(N)), g.const("d3", np.int32(H))]
        g.node("target", "Pack", dims, T=I32, N=4, axis=0)
        g.node("rotated", "Reshape", ["stacked", "target"], T=F32, Tshape=I32)
    else:
        g.node("rotated", "ConcatV2", ["neg", "halves:0", "last"], T=F32, N=2, Tidx=I32)
    g.node("plain", "Mul", ["cos", "x"] if swap else ["x", "cos"], T=F32)
    g.node("turned", "Mul", ["sin", "rotated"] if swap else ["rotated", "sin"], T=F32)
    g.node("y", "AddV2", ["turned", "plain"] if swap else ["plain", "turned"], T=F32)
    return _graph(g)


ROTARY_FEEDS = {"x:0": Q4, "cos:0": COS, "sin:0": SIN}


@pytest.mark.parametrize("spelling", ["stack", "concat"])
@pytest.mark.parametrize("swap", [False, True], ids=["x_first", "x_second"])
def test_rotary_embedding_becomes_one_kernel(spelling, swap):
    graph = rotary(spelling, swap=swap)
    ops = ops_of(engine.Session(graph), list(ROTARY_FEEDS), ["y:0"])
    assert "_TensorgateRotary" in ops and "Neg" not in ops
    compare(graph, ROTARY_FEEDS, ["y:0"])


def test_rotary_stays_when_the_reshape_is_not_provably_x_own_shape():
    graph = rotary("stack", declared=False)
    assert "_TensorgateRotary" not in ops_of(engine.Session(graph), list(ROTARY_FEEDS), ["y:0"])
    compare(graph, ROTARY_FEEDS, ["y:0"])


# -- attention ---------------------------------------------------------------------------------------------

S = 6
KV = 2
Q = rng.standard_normal((B, T, N, H)).astype(np.float32)
K = rng.standard_normal((B, S, N, H)).astype(np.float32)
V = rng.standard_normal((B, S, N, H)).astype(np.float32)
K2 = rng.standard_normal((B, S, KV, H)).astype(np.float32)
V2 = rng.standard_normal((B, S, KV, H)).astype(np.float32)
MASK = rng.random((B, 1, T, S)) > 0.3
MASK[0, 0, 1] = False  # a query that sees no key: the fill value decides what softmax makes of it
BIAS = (rng.standard_normal((1, N, T, S)) * 3).astype(np.float32)


def _perm(g: GraphBuilder, name: str, perm) -> str:
    return g.const(name, np.array(perm, np.int32))


def keras3_attention(*, heads_kv=N, repeat=None, post_zero=True, scale_where="scores") -> engine.Graph:
    """Keras 3's chain (Llama's): transposes into BNTH and BNHS, BatchMatMulV2, Mul by the scale, a
    SelectV2 mask, Softmax, a SelectV2 zeroing masked probabilities, BatchMatMulV2, transpose back. With
    `repeat`, the keys and values go through Keras' ops.repeat (ExpandDims, Tile, Reshape to a shape
    computed from their own, or to a wrong one)."""
    g = GraphBuilder()
    g.placeholder("q", np.float32, (None, None, N, H))
    g.placeholder("k", np.float32, (None, None, heads_kv, H))
    g.placeholder("v", np.float32, (None, None, heads_kv, H))
    g.placeholder("mask", np.bool_, (None, 1, None, None))
    g.const("scale", np.float32(1 / np.sqrt(H)))
    g.const("fill", np.float32(-1e9))
    g.const("zero", np.float32(0))
    keys, values = "k", "v"
    if repeat is not None:
        keys, values = (_keras_repeat(g, name, repeat) for name in ("k", "v"))
    q = "q"
    if scale_where == "query":
        q = g.node("q_scaled", "Mul", ["scale", "q"], T=F32)
    g.node("qt", "Transpose", [q, _perm(g, "p0213", [0, 2, 1, 3])], T=F32, Tperm=I32)
    g.node("kt", "Transpose", [keys, _perm(g, "p0231", [0, 2, 3, 1])], T=F32, Tperm=I32)
    g.node("vt", "Transpose", [values, "p0213"], T=F32, Tperm=I32)
    g.node("scores", "BatchMatMulV2", ["qt", "kt"], T=F32)
    s = "scores" if scale_where == "query" else g.node("scaled", "Mul", ["scores", "scale"], T=F32)
    g.node("masked", "SelectV2", ["mask", s, "fill"], T=F32)
    g.node("probs", "Softmax", ["masked"], T=F32)
    p = g.node("kept", "SelectV2", ["mask", "probs", "zero"], T=F32) if post_zero else "probs"
    g.node("context", "BatchMatMulV2", [p, "vt"], T=F32)
    g.node("y", "Transpose", ["context", "p0213"], T=F32, Tperm=I32)
    return _graph(g)


def _keras_repeat(g: GraphBuilder, x: str, how: str) -> str:
    """ops.repeat(x, N // KV, axis=2) as Keras 3 freezes it: ExpandDims(x, 3), Tile, Reshape to x's shape with
    the heads multiplied. how="interleaved" expands axis 2 instead: the same target shape, but head n then
    reads key head n % KV, not n // G (another meaning, which must not be read as a repeat)."""
    groups = N // KV
    axis = 3 if how == "keras" else 2
    g.const(f"{x}/axis", np.int32(axis))
    g.node(f"{x}/expanded", "ExpandDims", [x, f"{x}/axis"], T=F32, Tdim=I32)
    multiples = [1, 1, 1, 1, 1]
    multiples[axis] = groups
    g.const(f"{x}/multiples", np.array(multiples, np.int32))
    g.node(f"{x}/tiled", "Tile", [f"{x}/expanded", f"{x}/multiples"], T=F32, Tmultiples=I32)
    g.node(f"{x}/shape", "Shape", [x], T=F32, out_type=I32)
    one = g.const(f"{x}/one", np.array([1], np.int32))
    bounds = {"lead": ([0], [2], 0), "head": ([2], [3], 1), "tail": ([3], [0], 0)}
    for part, (begin, end, shrink) in bounds.items():
        g.const(f"{x}/{part}_b", np.array(begin, np.int32))
        g.const(f"{x}/{part}_e", np.array(end, np.int32))
        g.node(f"{x}/{part}", "StridedSlice", [f"{x}/shape", f"{x}/{part}_b", f"{x}/{part}_e", one], T=I32, Index=I32,
               shrink_axis_mask=shrink, end_mask=1 if part == "tail" else 0)
    g.const(f"{x}/groups", np.int32(groups))
    g.node(f"{x}/heads", "Mul", [f"{x}/groups", f"{x}/head"], T=I32)
    g.node(f"{x}/heads_v", "Pack", [f"{x}/heads"], T=I32, N=1, axis=0)
    g.const(f"{x}/zero_axis", np.int32(0))
    g.node(f"{x}/target", "ConcatV2", [f"{x}/lead", f"{x}/heads_v", f"{x}/tail", f"{x}/zero_axis"], T=I32, N=3, Tidx=I32)
    return g.node(f"{x}/repeated", "Reshape", [f"{x}/tiled", f"{x}/target"], T=F32, Tshape=I32)


def raw_attention(*, product="einsum_k_first", mask="bias", divide=False) -> engine.Graph:
    """Hand-written spellings: the scale on q before the product or dividing the scores after it, the keys'
    transpose inside the product (adj_y) or an Einsum with the keys first, an additive bias or a
    Fill(Shape(scores), -inf)-filled select, and an Einsum writing the output straight into BTNH."""
    g = GraphBuilder()
    g.placeholder("q", np.float32, (None, None, N, H))
    g.placeholder("k", np.float32, (None, None, N, H))
    g.placeholder("v", np.float32, (None, None, N, H))
    if mask == "bias":
        g.placeholder("bias", np.float32, (1, N, None, None))
    else:
        g.placeholder("mask", np.bool_, (None, 1, None, None))
    g.const("scale", np.float32(np.sqrt(H) if divide else 1 / np.sqrt(H)))
    q = "q" if divide else g.node("q_scaled", "Mul", ["q", "scale"], T=F32)
    if product == "einsum_k_first":
        g.node("scores", "Einsum", ["k", q], T=F32, N=2, equation="aecd,abcd->acbe")
    else:
        g.node("qt", "Transpose", [q, _perm(g, "p0213", [0, 2, 1, 3])], T=F32, Tperm=I32)
        g.node("kt", "Transpose", ["k", "p0213"], T=F32, Tperm=I32)
        g.node("scores", "BatchMatMulV2", ["qt", "kt"], T=F32, adj_y=True)
    s = g.node("divided", "RealDiv", ["scores", "scale"], T=F32) if divide else "scores"
    if mask == "bias":
        g.node("masked", "AddV2", ["bias", s], T=F32)
    else:
        g.node("scores_shape", "Shape", [s], T=F32, out_type=I32)
        g.const("minus_inf", np.float32(-np.inf))
        g.node("filled", "Fill", ["scores_shape", "minus_inf"], T=F32, index_type=I32)
        g.node("masked", "SelectV2", ["mask", s, "filled"], T=F32)
    g.node("probs", "Softmax", ["masked"], T=F32)
    g.node("y", "Einsum", ["probs", "v"], T=F32, N=2, equation="bnts,bsnh->btnh")
    return _graph(g)


def gemma_attention() -> engine.Graph:
    """Gemma's grouped-query spelling: queries as [B, T, KV, G, H], one Einsum against keys of KV heads."""
    g = GraphBuilder()
    g.placeholder("q", np.float32, (None, None, KV, N // KV, H))
    g.placeholder("k", np.float32, (None, None, KV, H))
    g.placeholder("v", np.float32, (None, None, KV, H))
    g.placeholder("mask", np.bool_, (None, 1, 1, None, None))
    g.const("fill", np.float32(-1e9))
    g.const("zero", np.float32(0))
    g.node("scores", "Einsum", ["q", "k"], T=F32, N=2, equation="btkgh,bskh->bkgts")
    g.node("masked", "SelectV2", ["mask", "scores", "fill"], T=F32)
    g.node("probs", "Softmax", ["masked"], T=F32)
    g.node("kept", "SelectV2", ["mask", "probs", "zero"], T=F32)
    g.node("y", "Einsum", ["kept", "v"], T=F32, N=2, equation="bkgts,bskh->btkgh")
    return _graph(g)


def _attention_ops(graph, feeds):
    return ops_of(engine.Session(graph), list(feeds), ["y:0"])


@pytest.mark.parametrize("scale_where", ["scores", "query"])
@pytest.mark.parametrize("post_zero", [True, False], ids=["zeroed", "not_zeroed"])
def test_keras3_attention_becomes_one_kernel(scale_where, post_zero):
    graph = keras3_attention(post_zero=post_zero, scale_where=scale_where)
    feeds = {"q:0": Q, "k:0": K, "v:0": V, "mask:0": MASK}
    assert _attention_ops(graph, feeds) == ["_TensorgateAttention"]
    compare(graph, feeds, ["y:0"])


@pytest.mark.parametrize("product", ["einsum_k_first", "adjoint_keys"])
@pytest.mark.parametrize("mask", ["bias", "fill_select"])
@pytest.mark.parametrize("divide", [False, True], ids=["q_scaled", "scores_divided"])
def test_hand_written_attention_becomes_one_kernel(product, mask, divide):
    graph = raw_attention(product=product, mask=mask, divide=divide)
    feeds = {"q:0": Q, "k:0": K, "v:0": V}
    feeds.update({"bias:0": BIAS} if mask == "bias" else {"mask:0": MASK})
    assert _attention_ops(graph, feeds) == ["_TensorgateAttention"]
    compare(graph, feeds, ["y:0"])


def test_grouped_query_repeat_is_read_as_shared_heads():
    graph = keras3_attention(heads_kv=KV, repeat="keras")
    feeds = {"q:0": Q, "k:0": K2, "v:0": V2, "mask:0": MASK}
    assert _attention_ops(graph, feeds) == ["_TensorgateAttention"]  # no Tile: the repeat is gone
    compare(graph, feeds, ["y:0"])


def test_an_interleaving_tile_is_not_read_as_a_repeat():
    graph = keras3_attention(heads_kv=KV, repeat="interleaved")
    feeds = {"q:0": Q, "k:0": K2, "v:0": V2, "mask:0": MASK}
    ops = _attention_ops(graph, feeds)
    assert "Tile" in ops and "_TensorgateAttention" in ops
    compare(graph, feeds, ["y:0"])


def test_gemma_grouped_query_einsums_become_one_kernel():
    graph = gemma_attention()
    q5 = Q.reshape(B, T, KV, N // KV, H)
    feeds = {"q:0": q5, "k:0": K2, "v:0": V2, "mask:0": MASK[:, :, None]}
    assert _attention_ops(graph, feeds) == ["_TensorgateAttention"]
    compare(graph, feeds, ["y:0"])


@pytest.mark.parametrize("variant", ["softmax_fetched", "scale_after_bias"])
def test_attention_stays_when_it_is_not_exactly_one(variant):
    if variant == "softmax_fetched":
        graph, fetches = keras3_attention(), ["y:0", "probs:0"]
    else:
        g = GraphBuilder()
        for name in "qkv":
            g.placeholder(name, np.float32, (None, None, N, H))
        g.placeholder("bias", np.float32, (1, N, None, None))
        g.const("scale", np.float32(0.3))
        g.node("scores", "Einsum", ["q", "k"], T=F32, N=2, equation="btnh,bsnh->bnts")
        g.node("biased", "AddV2", ["scores", "bias"], T=F32)
        g.node("scaled", "Mul", ["biased", "scale"], T=F32)  # the scale multiplies the bias too
        g.node("probs", "Softmax", ["scaled"], T=F32)
        g.node("y", "Einsum", ["probs", "v"], T=F32, N=2, equation="bnts,bsnh->btnh")
        graph, fetches = _graph(g), ["y:0"]
    feeds = {"q:0": Q, "k:0": K, "v:0": V}
    feeds.update({"mask:0": MASK} if variant == "softmax_fetched" else {"bias:0": BIAS})
    assert "_TensorgateAttention" not in ops_of(engine.Session(graph), list(feeds), fetches)
    compare(graph, feeds, fetches)


def t5_attention_stack(*, bias_read_elsewhere=False) -> engine.Graph:
    """T5's two self-attention layers sharing one bias: the position bias [1, N, T, S] plus the padding mask's
    (1 - mask) * -1e9 [B, 1, 1, S], added once and read by both layers' AddV2 to the scores."""
    g = GraphBuilder()
    for name in "qkv":
        g.placeholder(name, np.float32, (None, None, N, H))
    g.placeholder("position", np.float32, (1, N, None, None))
    g.placeholder("padding", np.float32, (None, 1, 1, None))
    g.const("one", np.float32(1))
    g.const("minus_big", np.float32(-1e9))
    g.node("kept", "Sub", ["one", "padding"], T=F32)
    g.node("mask_bias", "Mul", ["kept", "minus_big"], T=F32)
    g.node("bias", "AddV2", ["position", "mask_bias"], T=F32)
    layer_in = "q"
    for layer in range(2):
        g.node(f"scores{layer}", "Einsum", [layer_in, "k"], T=F32, N=2, equation="btnh,bsnh->bnts")
        g.node(f"biased{layer}", "AddV2", [f"scores{layer}", "bias"], T=F32)
        g.node(f"probs{layer}", "Softmax", [f"biased{layer}"], T=F32)
        layer_in = g.node(f"y{layer}" if layer == 0 else "y", "Einsum", [f"probs{layer}", "v"], T=F32, N=2,
                          equation="bnts,bsnh->btnh")
    if bias_read_elsewhere:
        g.node("bias_sum", "Sum", ["bias", g.const("all_axes", np.array([0, 1, 2, 3], np.int32))], T=F32, Tidx=I32)
    return _graph(g)


@pytest.mark.parametrize("bias_read_elsewhere", [False, True], ids=["shared_by_layers", "also_fetched_elsewhere"])
def test_a_bias_of_two_terms_reaches_the_kernels_unsummed(bias_read_elsewhere):
    graph = t5_attention_stack(bias_read_elsewhere=bias_read_elsewhere)
    padding = (rng.random((B, 1, 1, S)) > 0.3).astype(np.float32)
    feeds = {"q:0": Q, "k:0": K, "v:0": V, "position:0": BIAS, "padding:0": padding}
    fetches = ["y:0", "bias_sum:0"] if bias_read_elsewhere else ["y:0"]
    plan = engine.Session(graph).plan_for(list(feeds), fetches)
    fused = [ins for ins in plan.instructions if ins.op == "_TensorgateAttention"]
    assert len(fused) == 2
    assert ("AddV2" in [ins.op for ins in plan.instructions]) == bias_read_elsewhere
    compare(graph, feeds, fetches)


def test_t5_stack_written_by_tensorflow_fuses_its_shared_bias_and_residuals():
    """The golden case (TensorFlow's outputs are test_golden's): both layers' attention read the position and
    mask terms unsummed, each residual Add is its projection's addend, and nothing is left between."""
    graph, feeds, fetches = fixture_signature("models/transformer_patterns/t5_stack")
    plan = engine.Session(graph).plan_for(list(feeds), fetches)
    attention = [ins for ins in plan.instructions if ins.op == "_TensorgateAttention"]
    ops = [ins.op for ins in plan.instructions]
    assert len(attention) == 2 and all(len(ins.inputs) == 5 for ins in attention)  # q, k, v and the two terms
    assert ops.count("_TensorgateProjection") == 4 and "Softmax" not in ops
    assert ops.count("AddV2") == 1  # the buckets' integer offset; no float sum is left
    got = engine.Session(graph).run(fetches, feeds)
    with np.load("tests/fixtures/models/transformer_patterns/t5_stack/data.npz") as data:
        np.testing.assert_allclose(got[0], data["fetch_0"], rtol=1e-4, atol=1e-4)


# -- projections ---------------------------------------------------------------------------------------------

F = 12
W1 = (rng.standard_normal((D, F)) * 0.3).astype(np.float32)
W2 = (rng.standard_normal((D, F)) * 0.3).astype(np.float32)


def _tensordot(g: GraphBuilder, name: str, x: str, w: str, units: int) -> str:
    """x . w over x's last axis as Keras' Dense freezes it on 3-D data (Tensordot)."""
    g.node(f"{name}/shape", "Shape", [x], T=F32, out_type=I32)
    g.const(f"{name}/free", np.array([0, 1], np.int32))
    g.const(f"{name}/last", np.array([2], np.int32))
    g.const(f"{name}/axis0", np.int32(0))
    g.node(f"{name}/gather", "GatherV2", [f"{name}/shape", f"{name}/free", f"{name}/axis0"], Tparams=I32, Tindices=I32, Taxis=I32)
    g.node(f"{name}/gather_1", "GatherV2", [f"{name}/shape", f"{name}/last", f"{name}/axis0"], Tparams=I32, Tindices=I32, Taxis=I32)
    g.const(f"{name}/prod_axis", np.array([0], np.int32))
    g.node(f"{name}/prod", "Prod", [f"{name}/gather", f"{name}/prod_axis"], T=I32, Tidx=I32, keep_dims=False)
    g.node(f"{name}/prod_1", "Prod", [f"{name}/gather_1", f"{name}/prod_axis"], T=I32, Tidx=I32, keep_dims=False)
    g.node(f"{name}/stack", "Pack", [f"{name}/prod", f"{name}/prod_1"], T=I32, N=2, axis=0)
    g.node(f"{name}/transpose", "Transpose", [x, _perm(g, f"{name}/perm", [0, 1, 2])], T=F32, Tperm=I32)
    g.node(f"{name}/reshape", "Reshape", [f"{name}/transpose", f"{name}/stack"], T=F32, Tshape=I32)
    g.node(f"{name}/matmul", "MatMul", [f"{name}/reshape", w], T=F32)
    g.const(f"{name}/units", np.array([units], np.int32))
    g.node(f"{name}/concat", "ConcatV2", [f"{name}/gather", f"{name}/units", f"{name}/axis0"], T=I32, N=2, Tidx=I32)
    return g.node(name, "Reshape", [f"{name}/matmul", f"{name}/concat"], T=F32, Tshape=I32)


def _product(g: GraphBuilder, spelling: str, name: str, x: str, w: str) -> str:
    if spelling == "tensordot":
        return _tensordot(g, name, x, w, F)
    if spelling == "batch_matmul":
        return g.node(name, "BatchMatMulV2", [x, w], T=F32)
    return g.node(name, "Einsum", [x, w], T=F32, N=2, equation="btd,df->btf")


@pytest.mark.parametrize("spelling", ["tensordot", "batch_matmul", "einsum"])
def test_bias_free_dense_becomes_one_projection(spelling):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, D))
    g.const("w", W1)
    _product(g, spelling, "y", "x", "w")
    graph = _graph(g)
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateProjection"]
    compare(graph, {"x:0": SEQ}, ["y:0"])


def test_einsum_dense_over_two_axes_and_permuted_weights_becomes_one_projection():
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, N, H))
    g.const("w_out", rng.standard_normal((N, H, D)).astype(np.float32))
    g.node("o", "Einsum", ["x", "w_out"], T=F32, N=2, equation="bquh,uhm->bqm")
    g.const("w_q", rng.standard_normal((N, D, H)).astype(np.float32))  # Gemma's 'btd,ndh->btnh'
    g.node("y", "Einsum", ["o", "w_q"], T=F32, N=2, equation="btd,ndh->btnh")
    graph = _graph(g)
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateProjection"] * 2
    compare(graph, {"x:0": Q}, ["y:0"])


def gated(spelling: str, gate: str, *, gated_first=True) -> engine.Graph:
    """gate(x . W1) * (x . W2) with the products spelled `spelling`."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, D))
    g.const("w1", W1)
    g.const("w2", W2)
    a = _product(g, spelling, "gate_proj", "x", "w1")
    b = _product(g, spelling, "up_proj", "x", "w2")
    if gate == "silu":
        g.node("sig", "Sigmoid", [a], T=F32)
        act = g.node("act", "Mul", ["sig", a], T=F32)
    elif gate == "relu":
        act = g.node("act", "Relu", [a], T=F32)
    else:  # GELU's tanh form, which fuse_gelu makes one op first
        for name, value in (("half", 0.5), ("one", 1.0), ("cubic", 0.044715), ("three", 3.0), ("root", np.sqrt(2 / np.pi))):
            g.const(name, np.float32(value))
        g.node("pow", "Pow", [a, "three"], T=F32)
        g.node("c", "Mul", ["cubic", "pow"], T=F32)
        g.node("inner", "AddV2", [a, "c"], T=F32)
        g.node("u", "Mul", ["root", "inner"], T=F32)
        g.node("tanh", "Tanh", ["u"], T=F32)
        g.node("onep", "AddV2", ["one", "tanh"], T=F32)
        g.node("halfx", "Mul", ["half", a], T=F32)
        act = g.node("act", "Mul", ["halfx", "onep"], T=F32)
    g.node("y", "Mul", [act, b] if gated_first else [b, act], T=F32)
    return _graph(g)


@pytest.mark.parametrize("spelling", ["tensordot", "batch_matmul", "einsum"])
@pytest.mark.parametrize("gate", ["silu", "relu", "gelu_tanh"])
def test_gated_feed_forward_becomes_one_kernel(spelling, gate):
    graph = gated(spelling, gate, gated_first=gate != "relu")
    assert ops_of(engine.Session(graph), ["x:0"], ["y:0"]) == ["_TensorgateGatedProjection"]
    compare(graph, {"x:0": SEQ}, ["y:0"])


def test_gate_stays_apart_when_its_projection_is_read_elsewhere():
    graph = gated("batch_matmul", "relu")
    ops = ops_of(engine.Session(graph), ["x:0"], ["y:0", "gate_proj:0"])
    assert "_TensorgateGatedProjection" not in ops
    compare(graph, {"x:0": SEQ}, ["y:0", "gate_proj:0"])


def test_projections_of_one_input_share_one_matmul():
    """q, k and v of one x (reshaped into heads, as attention reads them) become one split projection; a
    projection read by an op that is not known to take a view of the product keeps its own."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, D))
    g.const("heads", np.array([-1, T, N, H], np.int32))
    for name in ("q", "k", "v", "other"):
        g.const(f"w_{name}", rng.standard_normal((D, D)).astype(np.float32))
        g.node(f"{name}_proj", "BatchMatMulV2", ["x", f"w_{name}"], T=F32)
    for name in ("q", "k", "v"):
        g.node(name, "Reshape", [f"{name}_proj", "heads"], T=F32, Tshape=I32)
    g.node("other", "Relu", ["other_proj"], T=F32)
    graph = _graph(g)
    fetches = ["q:0", "k:0", "v:0", "other:0"]
    ops = ops_of(engine.Session(graph), ["x:0"], fetches)
    assert ops.count("_TensorgateSplitProjection") == 1 and ops.count("_TensorgateProjection") == 1
    compare(graph, {"x:0": SEQ}, fetches)


@pytest.mark.parametrize("addend", ["residual_first", "residual_last", "broadcast_vector", "read_elsewhere"])
def test_residual_add_of_a_projection_becomes_its_addend(addend):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, D))
    g.placeholder("h", np.float32, (None, T, D))
    g.const("w", (rng.standard_normal((D, D)) * 0.3).astype(np.float32))
    g.placeholder("vector", np.float32, (D,))  # fed: a constant one would be fuse_dense's bias
    _product(g, "einsum", "proj", "x", "w")
    other = "vector" if addend == "broadcast_vector" else "h"
    g.node("y", "AddV2", [other, "proj"] if addend == "residual_first" else ["proj", other], T=F32)
    fetches = ["y:0", "proj:0"] if addend == "read_elsewhere" else ["y:0"]
    graph = _graph(g)
    feeds = {"x:0": SEQ, "h:0": (SEQ * 0.5 - 1).astype(np.float32),
             "vector:0": rng.standard_normal(D).astype(np.float32)}
    ops = ops_of(engine.Session(graph), list(feeds), fetches)
    assert ops == (["_TensorgateProjection", "AddV2"] if addend == "read_elsewhere" else ["_TensorgateProjection"])
    compare(graph, feeds, fetches)


@pytest.mark.parametrize("layer", ["einsum_over_heads_bias_add", "dense_with_bias"])
def test_bias_and_residual_after_a_projection_join_it(layer):
    """BERT's attention output (EinsumDense over the heads, BiasAdd) and its feed-forward output (a dense layer
    with a bias), each followed by the residual Add: one projection with a bias and an addend."""
    g = GraphBuilder()
    g.placeholder("h", np.float32, (None, T, D))
    g.const("b", rng.standard_normal(D).astype(np.float32))
    if layer == "einsum_over_heads_bias_add":
        g.placeholder("x", np.float32, (None, T, N, H))
        g.const("w", (rng.standard_normal((N, H, D)) * 0.3).astype(np.float32))
        g.node("proj", "Einsum", ["x", "w"], T=F32, N=2, equation="abcd,cde->abe")
        g.node("biased", "BiasAdd", ["proj", "b"], T=F32)
        x = SEQ.reshape(B, T, N, H)
    else:
        g.placeholder("x", np.float32, (None, T, D))
        g.const("w", (rng.standard_normal((D, D)) * 0.3).astype(np.float32))
        _product(g, "batch_matmul", "proj", "x", "w")  # with the bias: fuse_dense's _TensorgateDense
        g.node("biased", "AddV2", ["proj", "b"], T=F32)
        x = SEQ
    g.node("y", "AddV2", ["h", "biased"], T=F32)
    graph = _graph(g)
    feeds = {"x:0": x, "h:0": (SEQ * 0.5 - 1).astype(np.float32)}
    plan = engine.Session(graph).plan_for(list(feeds), ["y:0"])
    assert [ins.op for ins in plan.instructions] == ["_TensorgateProjection"]
    assert len(plan.instructions[0].inputs) == 4  # x, weights, bias, addend
    compare(graph, feeds, ["y:0"])


def test_dense_layers_with_biases_of_one_input_share_one_matmul():
    """BERT's and ViT's queries, keys and values: EinsumDense into heads plus a bias each, read by one attention.
    They become one split projection with the biases side by side; a dense layer with an activation, or
    without a bias, does not join them."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, T, D))
    for name in ("q", "k", "v", "act"):
        g.const(f"w_{name}", (rng.standard_normal((D, N, H)) * 0.3).astype(np.float32))
        g.const(f"b_{name}", rng.standard_normal((N, H)).astype(np.float32))
        g.node(f"{name}_proj", "Einsum", ["x", f"w_{name}"], T=F32, N=2, equation="abc,cde->abde")
        g.node(f"{name}_biased", "AddV2", [f"{name}_proj", f"b_{name}"], T=F32)
    g.node("act", "Relu", ["act_biased"], T=F32)
    g.node("scores", "Einsum", ["q_biased", "k_biased"], T=F32, N=2, equation="btnh,bsnh->bnts")
    g.node("probs", "Softmax", ["scores"], T=F32)
    g.node("y", "Einsum", ["probs", "v_biased"], T=F32, N=2, equation="bnts,bsnh->btnh")
    graph = _graph(g)
    fetches = ["y:0", "act:0"]
    plan = engine.Session(graph).plan_for(["x:0"], fetches)
    ops = [ins.op for ins in plan.instructions]
    assert ops.count("_TensorgateSplitProjection") == 1 and ops.count("_TensorgateAttention") == 1
    assert "Einsum" not in ops and "AddV2" not in ops
    compare(graph, {"x:0": SEQ}, fetches)


def test_keras3_dot_product_attention_mask_built_from_the_scores_shape():
    """Keras 3's ops.dot_product_attention (its MultiHeadAttention's path) builds the mask from
    ones_like(scores), reading the scores' Shape: the Shape is rewritten from q's and k's, the rest fuses."""
    g = GraphBuilder()
    for name, heads in (("q", N), ("k", N), ("v", N)):
        g.placeholder(name, np.float32, (None, None, heads, H))
    g.placeholder("mask", np.bool_, (None, 1, None, None))
    g.const("scale", np.float32(1 / np.sqrt(H)))
    g.const("true", np.bool_(True))
    g.const("large_negative", np.float32(-3.4e38))
    g.node("logits", "Einsum", ["q", "k"], T=F32, N=2, equation="BTNH,BSNH->BNTS")
    g.node("scaled", "Mul", ["logits", "scale"], T=F32)
    g.node("logits_shape", "Shape", ["scaled"], T=F32, out_type=I32)
    g.node("ones", "Fill", ["logits_shape", "true"], T=np.dtype(np.bool_), index_type=I32)
    g.node("combined", "LogicalAnd", ["ones", "mask"])
    g.node("padded", "SelectV2", ["combined", "scaled", "large_negative"], T=F32)
    g.node("probs", "Softmax", ["padded"], T=F32)
    g.node("y", "Einsum", ["probs", "v"], T=F32, N=2, equation="BNTS,BSNH->BTNH")
    graph = _graph(g)
    feeds = {"q:0": Q, "k:0": K, "v:0": V, "mask:0": MASK}
    ops = _attention_ops(graph, feeds)
    assert "_TensorgateAttention" in ops and "Einsum" not in ops and "Softmax" not in ops
    compare(graph, feeds, ["y:0"])
