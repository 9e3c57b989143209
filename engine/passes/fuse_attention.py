"""Fusing scaled dot-product attention, however a graph spells it, into one `_TensorgateAttention`.

The meaning matched, from the Softmax (over the last axis) outwards:

    scores = product(q, k)            BatchMatMul(V2) with either adjoint, or a two-operand Einsum, contracting
                                      q's and k's depth; optionally transposed after
    scores = scores * c (or / c)      scalar constants, on the scores or on q or k before the product
    scores = scores + bias            any tensor that broadcasts against the scores (T5's position bias, Keras
                                      2's (1 - mask) * -1e9 adder)
    scores = where(mask, scores, f)   SelectV2 with a scalar fill (or Fill(Shape(scores), f)), either branch
    p      = Softmax(scores)
    p      = where(mask, p, 0)        the same mask, Keras 3's masked Softmax
    out    = product(p, v)            contracting the keys; optionally transposed after

with the transposes on q, k and v followed back to the tensors they permute, and the grouped-query
`ops.repeat` of Keras (ExpandDims, Tile, Reshape to a shape computed from the keys' own, checked value by
value with engine.passes.shape_facts) followed back to the un-repeated keys and values. The axes of every
operand are named by what they are to the product (batch, heads, queries, keys, depth), so queries and keys
may come in any layout and the two products in either operand order; `_TensorgateAttention` (kernels/nn/
attention.py) reads each operand in its own layout, and writes the output in the layout the chain's last
node has. Only that order of steps fires (a scale after the bias, two biases, a mask applied after Softmax
alone do not). A bias that is an Add of two terms read only by fused chains is handed over as its two terms
(`bias_terms=2`), so that the sum is never written. Every node inside the chain must be read only by the
chain, have no control consumer, and be neither fetched nor fed; the fused node takes the chain's last name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.attention_operands import (
    Chain,
    const_ints,
    einsum_terms,
    out_ref,
    permuted,
    scaled,
    scores_product,
    walk_operand,
)
from engine.passes.context import PassContext
from engine.passes.rewrite import (
    Consumers,
    const_node,
    fresh_name,
    merged_controls,
    producer,
    rebuild,
)
from engine.passes.shape_facts import rank

__all__ = ["FUSED_OP", "run"]

FUSED_OP = "_TensorgateAttention"
_PRODUCTS = ("BatchMatMul", "BatchMatMulV2", "Einsum")
_ADDS = ("Add", "AddV2")
_IDENTITIES = ("Identity", "StopGradient")  # Keras' inference-time Dropout is an Identity


def _fill(chain: Chain, ref: TensorRef, select: Node, scores: TensorRef) -> tuple[float, list[Node]] | None:
    """(value, nodes) when `ref` is a scalar float constant, or Fill(Shape(scores), scalar) read only by `select`."""
    value = chain.scalar(ref)
    if value is not None:
        return value, []
    fill = producer(chain.graph, ref, chain.ctx, ("Fill",))
    shape = None if fill is None else producer(chain.graph, fill.inputs[0], chain.ctx, ("Shape",))
    value = None if fill is None else chain.scalar(fill.inputs[1])
    if shape is None or value is None or shape.inputs[0] != scores:
        return None
    if not chain.only_read_by(fill, select) or not chain.only_read_by(shape, fill):
        return None
    return value, [fill, shape]


def _to_product(chain: Chain, ref: TensorRef, reader: Node,
                also: frozenset[str] = frozenset()) -> tuple[Node, list[list[int]], list[Node], float] | None:
    """(product, transposes from it outwards, nodes, scale) when `ref` is the product of queries and keys,
    followed by identities, transposes and scalar scales each read only by the next (the first also by the
    nodes in `also`)."""
    perms: list[list[int]] = []
    nodes: list[Node] = []
    scale = 1.0
    while True:
        node = producer(chain.graph, ref, chain.ctx, ("Transpose", "Mul", "RealDiv", *_IDENTITIES, *_PRODUCTS))
        if node is None or not chain.only_read_by(node, reader, also, shapes=True):
            return None
        also = frozenset()
        if node.op in _PRODUCTS:
            return node, perms[::-1], nodes, scale
        if node.op == "Transpose":
            perm = const_ints(chain.graph, node.inputs[1], chain.ctx)
            if perm is None or sorted(perm) != list(range(len(perm))):
                return None
            perms.append(perm)
            ref = node.inputs[0]
        elif node.op in _IDENTITIES:
            ref = node.inputs[0]
        else:
            found = scaled(chain, node)
            if found is None:
                return None
            ref, factor = found
            scale *= factor
        nodes.append(node)
        reader = node


def _through_identities(chain: Chain, node: Node) -> Node:
    """The last of the Identity nodes that follow `node`, each the sole reader of the one before (`node` if
    none); they join the chain."""
    while True:
        reader = chain.sole_reader(node)
        if reader is None or reader.op not in _IDENTITIES:
            return node
        chain.nodes.append(reader)
        node = reader


@dataclass
class _Match:
    q: TensorRef
    k: TensorRef
    v: TensorRef
    bias: TensorRef | None
    mask: TensorRef | None
    attrs: dict
    end: Node
    nodes: list[Node]
    # Shape nodes outside the chain that read a scores tensor inside it, with the axes of what they read.
    shapes: list[tuple[Node, str]] = field(default_factory=list)


def _scores_labels(chain: Chain, product: Node, labels: str, softmax: Node) -> dict[str, str]:
    """The axes of each scores tensor between the product (axes `labels`) and the softmax: the chain there
    is a line, each node read by the next, the transposes permuting the axes."""
    inside = {n.name for n in chain.nodes}
    found, node = {product.name: labels}, product
    while node.name != softmax.name:
        nxt = [r for r in chain.consumers.readers(chain.graph, node) if r in inside and chain.graph.node(r).op not in ("Shape", "Fill")]
        if len(nxt) != 1:
            break
        node = chain.graph.node(nxt[0])
        if node.op == "Transpose":
            labels = permuted(labels, const_ints(chain.graph, node.inputs[1], chain.ctx))
        found[node.name] = labels
    return found


def _scores_side(chain: Chain, softmax: Node):
    """The steps between the product of queries and keys and `softmax`: (product, its transposes outwards,
    bias, mask, keep, fill) with the chain's nodes and scale filled in, or None."""
    ref, reader = softmax.inputs[0], softmax
    mask, keep, fill, also = None, True, 0.0, frozenset()
    select = producer(chain.graph, ref, chain.ctx, ("SelectV2",))
    if select is not None and chain.only_read_by(select, reader, shapes=True):
        cond, a, b = select.inputs
        found = _fill(chain, b, select, a)
        if found is None:
            found, keep = _fill(chain, a, select, b), False
        if found is None:
            return None
        fill, fill_nodes = found
        mask, ref, reader = cond, (a if keep else b), select
        also = frozenset(n.name for n in fill_nodes if n.op == "Shape")  # Fill(Shape(scores)) reads the scores
        chain.nodes.extend([select, *fill_nodes])
    candidates: list[tuple[TensorRef, TensorRef | None, Node | None]] = [(ref, None, None)]
    add = producer(chain.graph, ref, chain.ctx, _ADDS)
    if add is not None and len(add.inputs) == 2 and chain.only_read_by(add, reader, also, shapes=True):
        candidates = [(add.inputs[0], add.inputs[1], add), (add.inputs[1], add.inputs[0], add), *candidates]
    kept = len(chain.shapes)
    for scores_ref, bias, add_node in candidates:
        del chain.shapes[kept:]  # what a failed candidate's walk recorded
        found = _to_product(chain, scores_ref, add_node or reader, frozenset() if add_node else also)
        if found is not None:
            product, perms, nodes, scale = found
            chain.nodes.extend([*([add_node] if add_node else []), *nodes, product])
            chain.scale *= scale
            return product, perms, bias, mask, keep, fill
    return None


def _values_side(chain: Chain, p_node: Node, scores: str):
    """(v ref, v labels, output labels, end node) for the product of the probabilities with the values,
    reading `p_node` (axes `scores`), and an optional transpose after it; or None."""
    pv = chain.sole_reader(p_node)
    if pv is None or pv.op not in _PRODUCTS or sum(r == out_ref(p_node) for r in pv.inputs) != 1:
        return None
    if pv.op == "Einsum":
        terms = einsum_terms(pv)
        if terms is None:
            return None
        p_first = pv.inputs[0] == out_ref(p_node)
        tp, tv, out = (terms[0], terms[1], terms[2]) if p_first else (terms[1], terms[0], terms[2])
        names = dict(zip(tp, scores))
        contracted = [c for c in tp if c in tv and c not in out]
        free_v = [c for c in tv if c not in tp]
        if contracted != [c for c in tp if names[c] == "S"] or len(free_v) != 1 or any(c not in out for c in free_v):
            return None
        names[free_v[0]] = "E"
        if any(c not in names for c in out):
            return None
        v_ref, v_labels, out_labels = pv.inputs[1 if p_first else 0], "".join(names[c] for c in tv), "".join(names[c] for c in out)
    else:
        if pv.inputs[0] != out_ref(p_node) or rank(chain.graph, pv.inputs[1], chain.ctx) != len(scores) or len(scores) < 2:
            return None
        m, k = (scores[-1], scores[-2]) if pv.attrs.get("adj_x") else (scores[-2], scores[-1])
        if (m, k) != ("T", "S"):
            return None
        v_ref = pv.inputs[1]
        v_labels = scores[:-2] + ("ES" if pv.attrs.get("adj_y") else "SE")
        out_labels = scores[:-2] + "TE"
    if set(out_labels) != (set(scores) - {"S"}) | {"E"}:
        return None
    chain.nodes.append(pv)
    end = pv
    after = chain.sole_reader(pv)
    if after is not None and after.op == "Transpose" and after.inputs[0] == out_ref(pv):
        perm = const_ints(chain.graph, after.inputs[1], chain.ctx)
        if perm is not None and sorted(perm) == list(range(len(out_labels))):
            out_labels, end = permuted(out_labels, perm), after
            chain.nodes.append(after)
    return v_ref, v_labels, out_labels, end


def _match(graph: Graph, softmax: Node, consumers: Consumers, ctx: PassContext) -> _Match | None:
    chain = Chain(graph, ctx, consumers, [softmax])
    found = _scores_side(chain, softmax)
    if found is None:
        return None
    product, perms, bias, mask, keep, fill = found
    product_rank = rank(graph, out_ref(product), ctx)
    if product_rank is None:
        return None
    keys_axis = product_rank - 1
    for perm in reversed(perms):
        if len(perm) != product_rank:
            return None
        keys_axis = perm[keys_axis]
    side = scores_product(chain, product, keys_axis)
    if side is None:
        return None
    q_ref, q_labels, k_ref, k_labels, scores = side
    for perm in perms:
        scores = permuted(scores, perm)
    if scores[-1] != "S":
        return None
    p_node = _through_identities(chain, softmax)
    reader = chain.sole_reader(p_node)
    zero_masked = False
    if reader is not None and mask is not None and reader.op == "SelectV2" and reader.inputs[0] == mask:
        kept, other = (reader.inputs[1], reader.inputs[2]) if keep else (reader.inputs[2], reader.inputs[1])
        if kept == out_ref(p_node) and chain.scalar(other) == 0.0:
            zero_masked, p_node = True, reader
            chain.nodes.append(reader)
            p_node = _through_identities(chain, p_node)
    values = _values_side(chain, p_node, scores)
    if values is None:
        return None
    v_ref, v_labels, out_labels, end = values
    q_ref, q_labels, _ = walk_operand(chain, q_ref, q_labels, product, True)
    k_ref, k_labels, k_groups = walk_operand(chain, k_ref, k_labels, product, True, repeats=True)
    pv = end if end.op != "Transpose" else graph.node(end.inputs[0].node)
    v_ref, v_labels, v_groups = walk_operand(chain, v_ref, v_labels, pv, False, repeats=True)
    if k_groups != v_groups:  # the kernel shares one key and value head between the same query heads
        return None
    for extra in (bias, mask):
        extra_rank = None if extra is None else rank(graph, extra, ctx)
        if extra is not None and (extra_rank is None or extra_rank > len(scores)):
            return None
    labels_of = _scores_labels(chain, product, side[4], softmax)
    shapes = [(node, labels_of.get(name)) for node, name in chain.shapes]
    # A Shape of the scores is rewritten from q's and k's shapes: every axis must be one of theirs.
    if any(labels is None or any(c != "S" and c not in q_labels for c in labels) or "S" not in k_labels
           for _, labels in shapes):
        return None
    attrs = {"T": softmax.attrs.get("T", np.dtype(np.float32)), "q_layout": q_labels, "k_layout": k_labels,
             "v_layout": v_labels, "out_layout": out_labels, "scale": chain.scale, "has_bias": bias is not None,
             "bias_layout": scores if bias is not None else "", "has_mask": mask is not None,
             "mask_layout": scores if mask is not None else "", "keep": keep, "fill": fill, "zero_masked": zero_masked}
    return _Match(q_ref, k_ref, v_ref, bias, mask, attrs, end, [n for n in chain.nodes if n.name != end.name], shapes)


def _shape_nodes(graph: Graph, match: _Match, taken: set[str]) -> tuple[list[Node], dict[str, Node]]:
    """Nodes computing each outside Shape of a scores tensor from q's and k's shapes instead (its dims are
    theirs: max(q dim, k dim) for an axis both have, as the product broadcasts them, else the one that has
    it), and those Shapes replaced by them under their own names."""
    added: list[Node] = []
    replaced: dict[str, Node] = {}
    q_layout, k_layout = match.attrs["q_layout"], match.attrs["k_layout"]
    extended: dict = {}
    for shape, labels in match.shapes:
        out_type = shape.attrs.get("out_type", np.dtype(np.int32))
        if out_type not in extended:
            one = const_node(fresh_name(graph, taken, f"{shape.name}/one"), np.ones(1, out_type))
            axis = const_node(fresh_name(graph, taken, f"{shape.name}/axis"), np.int32(0))
            added += [one, axis]
            dims = []
            for ref, side in ((match.q, "q"), (match.k, "k")):
                source = Node(fresh_name(graph, taken, f"{shape.name}/{side}_shape"), "Shape", (ref,), (), shape.device,
                              {"T": match.attrs["T"], "out_type": out_type})
                padded = Node(fresh_name(graph, taken, f"{shape.name}/{side}_dims"), "ConcatV2",
                              (out_ref(source), out_ref(one), out_ref(axis)), (), shape.device, {"T": out_type, "N": 2, "Tidx": np.dtype(np.int32)})
                added += [source, padded]
                dims.append(padded)
            extended[out_type] = (dims, axis)
        (q_dims, k_dims), axis = extended[out_type]
        picked = []
        for dims, layout, side in ((q_dims, q_layout, "q"), (k_dims, k_layout, "k")):
            index = const_node(fresh_name(graph, taken, f"{shape.name}/{side}_axes"),
                               np.array([layout.index(c) if c in layout else len(layout) for c in labels], np.int32))
            gather = Node(fresh_name(graph, taken, f"{shape.name}/{side}_gather"), "GatherV2",
                          (out_ref(dims), out_ref(index), out_ref(axis)), (), shape.device,
                          {"Tparams": out_type, "Tindices": np.dtype(np.int32), "Taxis": np.dtype(np.int32), "batch_dims": 0})
            added += [index, gather]
            picked.append(gather)
        replaced[shape.name] = Node(shape.name, "Maximum", tuple(out_ref(n) for n in picked), shape.control_inputs, shape.device,
                                    {"T": out_type})
    return added, replaced


def _split_bias_terms(graph: Graph, consumers: Consumers, ctx: PassContext, replaced: dict[str, Node],
                      removed: set[str]) -> None:
    """Where the fused nodes' bias is an Add of two terms read by nothing else (T5's position bias plus its
    padding mask's, one sum for every layer of a stack), hand them the two terms instead (`bias_terms=2`):
    the sum, [B, N, T, S], is then never written, and each kernel reads the small terms."""
    fused_by_bias: dict[TensorRef, list[str]] = {}
    for name, node in replaced.items():
        if node.op == FUSED_OP and node.attrs.get("has_bias") and node.attrs.get("bias_terms", 1) == 1:
            fused_by_bias.setdefault(node.inputs[3], []).append(name)
    for bias, names in fused_by_bias.items():
        add = producer(graph, bias, ctx, _ADDS)
        if (add is None or len(add.inputs) != 2 or ctx.is_pinned(add.name) or consumers.control.get(add.name)
                or not consumers.readers(graph, add) <= removed):
            continue
        # Every reader of the sum is inside a fused chain: after the rewrite only the fused nodes read it.
        if any(bias in replaced[n].inputs[:3] + replaced[n].inputs[4:] for n in names):
            continue
        if any(name not in names and bias in node.inputs for name, node in replaced.items()):
            continue
        layout_rank = len(replaced[names[0]].attrs["bias_layout"])
        ranks = [rank(graph, term, ctx) for term in add.inputs]
        if any(r is None or r > layout_rank for r in ranks):
            continue
        for name in names:
            node = replaced[name]
            inputs = (*node.inputs[:3], *add.inputs, *node.inputs[4:])
            replaced[name] = Node(node.name, node.op, inputs, merged_controls([node, add]), node.device,
                                  {**node.attrs, "bias_terms": 2})
        removed.add(add.name)


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(FUSED_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op != "Softmax" or node.name in removed:
            continue
        match = _match(graph, node, consumers, ctx)
        if match is None:
            continue
        names = {n.name for n in match.nodes}
        inputs = [match.q, match.k, match.v, *(r for r in (match.bias, match.mask) if r is not None)]
        if len(names) != len(match.nodes) or names & (removed | set(replaced)) or any(r.node in names for r in inputs):
            continue
        if any(shape.name in replaced for shape, _ in match.shapes):
            continue
        end = match.end
        replaced[end.name] = Node(end.name, FUSED_OP, tuple(inputs), merged_controls([*match.nodes, end]), end.device,
                                  match.attrs)
        removed.update(names)
        shape_added, shape_replaced = _shape_nodes(graph, match, taken)
        added += shape_added
        replaced.update(shape_replaced)
    if not replaced:
        return graph
    _split_bias_terms(graph, consumers, ctx, replaced, removed)
    return rebuild(graph, replaced, removed, added)
