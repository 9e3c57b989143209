"""`_TensorgateAttention`: scaled dot-product attention as one op, which engine/passes/fuse_attention.py writes
in place of the chain a graph spells it with (a matmul or Einsum of queries and keys, a scale, an additive
bias, a boolean mask, Softmax, a second product with the values, and the transposes between).

    scores = (q . k) * scale + bias                  over the depth H, for every query T and key S
    scores = where(mask == keep, scores, fill)        the mask's other positions get `fill` (-1e9, -inf ...)
    p      = softmax(scores)                          over the keys
    p      = where(mask == keep, p, 0)                with zero_masked (Keras' masked Softmax)
    out    = p . v                                    over the keys

Each operand comes in the layout the graph has it, named by its axes' letters (`q_layout="BTNH"`: batch,
query position, head, depth): B batch, T queries, S keys, H the depth queries and keys share, E the values'
depth, N heads. Grouped-query attention has fewer key/value heads than query heads: K of them, each shared
by G consecutive query heads (head n reads key head n // G, as Keras' `ops.repeat` of the keys gives); the
queries' heads are then N (split here into K x G) or K and G as separate axes (Gemma's "BTKGH"). `bias`
and `mask` broadcast, as numpy does, against the scores in `bias_layout`/`mask_layout` (the scores' axes
where the graph applied them). With `bias_terms=2` the bias comes as two inputs that the graph added to each
other before the scores (T5's position bias [1, N, T, S] and its padding mask's [B, 1, 1, S]), each
broadcasting on its own, so that their sum [B, N, T, S] is never written.

On CPU the float32 kernel computes the scores in blocks that stay in cache (a few batch items, up to 64
queries), shared out to the engine's pool threads (kernels.pool.run_tasks): per block, one product of
queries and keys (BLAS, reading the queries in place through strided views, the block's keys copied into
[H, S] rows), one compiled pass per score row for the scale, bias, mask and softmax (kernels/nn/
transformer_rows.py), and one product with the values written straight into the output's layout. The numpy
code over whole tensors is its twin.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy

from kernels.jit import use_compiled
from kernels.nn import transformer_rows
from kernels.pool import chunks, run_tasks
from kernels.registry import kernel

__all__ = ["attention"]

# Score elements per block: _QUERY_BLOCK queries of as many batch items as make _BLOCK_SCORES, whose product,
# softmax and product with the values run in turn while its scores (256 KiB) are in L2. The blocks of a
# batch's items are shared out to the engine's pool threads (kernels.pool.run_tasks). BLAS runs
# products of up to 64 rows faster too (a seventh at [64, 128] x [128, 64], measured against one product
# of all 128 queries).
_BLOCK_SCORES = 1 << 16
_QUERY_BLOCK = 64
# A block's keys are copied into [H, S] rows for at least this many queries: below, the copy costs about
# what it saves. (Copies of the queries and values to unit strides measured no faster.)
_COPY_KEYS_FROM = 16

_Q, _K, _V, _SCORES, _OUT = "BKGTH", "BKSH", "BKSE", "BKGTS", "BKGTE"


@functools.lru_cache(maxsize=256)
def _check_layout(name: str, layout: str, ndim: int, required: str, allowed: str) -> None:
    if len(layout) != ndim or len(set(layout)) != len(layout) or not set(required) <= set(layout) <= set(allowed):
        raise ValueError(f"_TensorgateAttention: {name}_layout '{layout}' does not fit an operand of rank {ndim} "
                         f"(letters from '{allowed}', each once, with '{required}')")


def _heads(q_layout: str, q: Any, kv_heads: int) -> tuple[int, int]:
    """(K, G): key/value heads and query heads per key/value head."""
    if "N" in q_layout:
        n = q.shape[q_layout.index("N")]
        if kv_heads == 0 or n % kv_heads:
            raise ValueError(f"_TensorgateAttention: {n} query heads cannot share {kv_heads} key/value heads")
        return kv_heads, n // kv_heads
    k = q.shape[q_layout.index("K")] if "K" in q_layout else 1
    g = q.shape[q_layout.index("G")] if "G" in q_layout else 1
    return k, g


@functools.lru_cache(maxsize=256)
def _view_plan(layout: str, target: str) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """How _canonical views an operand: the axis N splits at (-1: none), the transpose of the split operand,
    and for each letter of `target` the transposed axis it is (-1: absent, size 1). Cached: layouts are
    attrs, the same on every call."""
    split = layout.find("N")
    if split >= 0:
        layout = layout[:split] + "KG" + layout[split + 1:]
    present = [c for c in target if c in layout]
    return split, tuple(layout.index(c) for c in present), tuple(present.index(c) if c in present else -1 for c in target)


def _canonical(x: Any, layout: str, target: str, sizes: dict[str, int]) -> Any:
    """x (axes named by `layout`) as a view with axes `target`: N split into K x G, absent axes of size 1."""
    split, perm, places = _view_plan(layout, target)
    if split >= 0:
        x = x.reshape(x.shape[:split] + (sizes["K"], sizes["G"]) + x.shape[split + 1:])
    x = x.transpose(perm)
    return x.reshape(tuple(x.shape[i] if i >= 0 else 1 for i in places))


def _scores_operand(xp: Any, x: Any, layout: str, sizes: dict[str, int], batch: int) -> Any:
    """A bias or mask broadcasting against the scores in `layout` (right-aligned), as a C-contiguous
    [B or 1, N or 1, T or 1, S or 1] array (K and G merged into N)."""
    if x.ndim > len(layout):
        raise ValueError(f"_TensorgateAttention: a bias or mask of rank {x.ndim} cannot broadcast against the scores")
    layout = layout[len(layout) - x.ndim:]
    if "N" in layout and x.shape[layout.index("N")] == 1:  # broadcast over the heads: no K x G to split
        i = layout.index("N")
        x, layout = x.reshape(x.shape[:i] + x.shape[i + 1:]), layout[:i] + layout[i + 1:]
    c = _canonical(x, layout, _SCORES, sizes)
    full = (batch, sizes["K"], sizes["G"], sizes["T"], sizes["S"])
    for axis, (have, want) in enumerate(zip(c.shape, full)):
        if have not in (1, want):
            raise ValueError(f"_TensorgateAttention: a bias or mask of shape {list(x.shape)} does not broadcast "
                             f"against scores {list(full)} (axis '{_SCORES[axis]}')")
    b, k, g, t, s = c.shape
    if k != g and 1 in (k, g) and sizes["K"] > 1 and sizes["G"] > 1:  # one of K and G broadcast: spell it out
        c = xp.broadcast_to(c, (b, sizes["K"], sizes["G"], t, s))
    return xp.ascontiguousarray(c.reshape(c.shape[0], c.shape[1] * c.shape[2], t, s))


def _softmax_twin(xp: Any, s: Any, scale: float, biases: tuple[Any, ...], mask: Any, keep: bool, fill: float,
                  zero_masked: bool) -> Any:
    s = s * s.dtype.type(scale)
    if len(biases) == 2:
        s += biases[0] + biases[1]  # the terms first, as the graph's Add of them
    elif biases:
        s += biases[0]
    if mask is not None:
        s = xp.where(mask == keep, s, s.dtype.type(fill))
    with numpy.errstate(invalid="ignore"):  # a row of -inf only: NaN, as TensorFlow's Softmax gives
        e = xp.exp(s - s.max(axis=-1, keepdims=True))
        e /= e.sum(axis=-1, keepdims=True)
    if mask is not None and zero_masked:
        e = xp.where(mask == keep, e, e.dtype.type(0))
    return e


def _blas_target(out: Any) -> bool:
    """Whether numpy's matmul can write `out`'s trailing matrices through BLAS (unit-stride rows)."""
    item = out.itemsize
    return out.strides[-1] == item and out.strides[-2] % item == 0 and out.strides[-2] >= out.shape[-1] * item


@kernel("_TensorgateAttention")
def attention(
    xp,
    q,
    k,
    v,
    *extra,
    q_layout: str,
    k_layout: str,
    v_layout: str,
    out_layout: str,
    scale: float = 1.0,
    has_bias: bool = False,
    bias_layout: str = "",
    bias_terms: int = 1,
    has_mask: bool = False,
    mask_layout: str = "",
    keep: bool = True,
    fill: float = 0.0,
    zero_masked: bool = False,
    compiled: bool = False,
):
    """softmax(where(mask == keep, q.k * scale + bias, fill)) . v in `out_layout` (see the module docstring);
    `extra` holds the bias's `bias_terms` terms (if has_bias) then the mask (if has_mask)."""
    if bias_terms not in (1, 2):
        raise ValueError(f"_TensorgateAttention: bias_terms is {bias_terms}; a bias has one or two terms")
    terms = bias_terms if has_bias else 0
    if len(extra) != terms + int(has_mask):
        raise ValueError(f"_TensorgateAttention: {len(extra)} inputs after q, k, v; has_bias={has_bias} "
                         f"(bias_terms={bias_terms}), has_mask={has_mask}")
    biases = extra[:terms]
    mask = extra[-1] if has_mask else None
    _check_layout("q", q_layout, q.ndim, "TH", "BNKGTH")
    _check_layout("k", k_layout, k.ndim, "SH", "BNKSH")
    _check_layout("v", v_layout, v.ndim, "SE", "BNKSE")
    kv_heads = next((x.shape[lay.index(c)] for x, lay in ((k, k_layout), (v, v_layout)) for c in "NK" if c in lay), 1)
    heads_k, groups = _heads(q_layout, q, kv_heads)
    sizes = {"K": heads_k, "G": groups, "T": q.shape[q_layout.index("T")], "S": k.shape[k_layout.index("S")]}
    qc = _canonical(q, q_layout, _Q, sizes)
    kc = _canonical(k, k_layout.replace("N", "K"), _K, sizes)[:, :, None]
    vc = _canonical(v, v_layout.replace("N", "K"), _V, sizes)[:, :, None]
    if (kc.shape[-1] != qc.shape[-1] or vc.shape[-2] != kc.shape[-2] or kc.shape[1] != vc.shape[1]
            or kc.shape[1] not in (1, heads_k)):
        raise ValueError(f"_TensorgateAttention: q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} do not match "
                         f"in layouts {q_layout}, {k_layout}, {v_layout}")
    batch = max(qc.shape[0], kc.shape[0], vc.shape[0])
    _check_layout("out", out_layout, len(out_layout), "TE", "BNKGTE")
    biases_c = tuple(_scores_operand(xp, b, bias_layout, sizes, batch) for b in biases)
    mask_c = None if mask is None else _scores_operand(xp, mask, mask_layout, sizes, batch)
    out_shape = {"B": batch, "N": heads_k * groups, "K": heads_k, "G": groups, "T": sizes["T"], "E": vc.shape[-1]}
    dtype = numpy.result_type(q.dtype, k.dtype, v.dtype)
    heads = heads_k * groups
    if (use_compiled(xp, compiled, q.dtype, k.dtype, v.dtype, *(b.dtype for b in biases))
            and (mask is None or mask.dtype == numpy.bool_) and qc.shape[0] == kc.shape[0] == vc.shape[0] == batch
            and qc.size and kc.size):
        out = numpy.empty(tuple(out_shape[c] for c in out_layout), numpy.float32)
        oc = _canonical(out, out_layout, _OUT, sizes)
        queries, keys = sizes["T"], sizes["S"]
        direct = _blas_target(oc)
        rows = -(-queries // -(-queries // _QUERY_BLOCK))  # blocks of at most _QUERY_BLOCK queries, evened out

        def work(part: Any) -> None:
            b0, b1 = part.b0, part.b1
            kt = kc[b0:b1].swapaxes(-1, -2)
            if queries >= _COPY_KEYS_FROM:
                # BLAS multiplies the queries by a row-major [H, S] faster than by the transpose of the keys'
                # [S, H] (by a sixth at 128 queries and keys), and the copy is a T-th of the product's work.
                kt = numpy.ascontiguousarray(kt)
            for t0 in range(0, queries, rows):
                t1 = min(t0 + rows, queries)
                s = numpy.matmul(qc[b0:b1, :, :, t0:t1], kt)
                transformer_rows.masked_softmax_into(s.reshape(b1 - b0, heads, t1 - t0, keys), scale, biases_c, mask_c,
                                                     keep, fill, zero_masked, b0, t0)
                if direct:
                    numpy.matmul(s, vc[b0:b1], out=oc[b0:b1, :, :, t0:t1])
                else:
                    oc[b0:b1, :, :, t0:t1] = numpy.matmul(s, vc[b0:b1])

        run_tasks(work, chunks(batch, 1, max(heads * rows * keys, 1), _BLOCK_SCORES))
        return (out,)
    s = xp.matmul(qc, kc.swapaxes(-1, -2))
    s = s.reshape(s.shape[0], heads, sizes["T"], sizes["S"])
    p = _softmax_twin(xp, s, scale, biases_c, mask_c, keep, fill, zero_masked)
    o = xp.matmul(p.reshape(p.shape[0], heads_k, groups, sizes["T"], sizes["S"]), vc).astype(dtype, copy=False)
    # o is [B, K, G, T, E]: into the output's layout.
    o_layout = _OUT if "N" not in out_layout else "BNTE"
    if "N" in out_layout:
        o = o.reshape(o.shape[0], heads, sizes["T"], o.shape[-1])
    present = [c for c in o_layout if c in out_layout]
    dropped = tuple(i for i, c in enumerate(o_layout) if c not in out_layout)
    for i in dropped:
        if o.shape[i] != 1:
            raise ValueError(f"_TensorgateAttention: out_layout '{out_layout}' drops axis '{o_layout[i]}' of size {o.shape[i]}")
    o = o.reshape(tuple(n for i, n in enumerate(o.shape) if i not in dropped))
    return (xp.ascontiguousarray(o.transpose([present.index(c) for c in out_layout])),)
