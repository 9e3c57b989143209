"""How fuse_attention reads an attention's operands: the axes of every tensor named by what they are to the
products (B batch, N heads, K key/value heads and G query heads per key/value head, T queries, S keys, H the
depth queries and keys share, E the values' depth), followed back through transposes, scalar scales and
Keras' grouped-query repeat; the chain being matched (`Chain`) and what it has collected so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.rewrite import Consumers, constant_value, producer, scalar_constant
from engine.passes.shape_facts import Dim, rank, symbolic_dims

__all__ = ["Chain", "batch_letters", "const_ints", "einsum_terms", "out_ref", "permuted", "repeat_source", "scaled",
           "scores_product", "walk_operand"]


def out_ref(node: Node) -> TensorRef:
    return TensorRef(node.name, 0)


def const_ints(graph: Graph, ref: TensorRef, ctx: PassContext) -> list[int] | None:
    value = constant_value(graph, ref, ctx.fed)
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
        return None
    return [int(v) for v in np.reshape(value, -1)]


@dataclass
class Chain:
    """What one match is made of, filled in as the matcher walks."""

    graph: Graph
    ctx: PassContext
    consumers: Consumers
    nodes: list[Node] = field(default_factory=list)
    scale: float = 1.0
    # Shape nodes outside the chain reading a scores tensor inside it: (the Shape, the node it reads).
    shapes: list[tuple[Node, str]] = field(default_factory=list)

    def only_read_by(self, node: Node, reader: Node, also: frozenset[str] = frozenset(), shapes: bool = False) -> bool:
        """Whether `node` may join the chain: read by `reader` alone (and nodes in `also`, which are in the
        chain too; and, with `shapes`, Shape nodes, which fuse_attention rewrites from q's and k's shapes), no
        control consumer, not pinned."""
        if self.ctx.is_pinned(node.name) or self.consumers.control.get(node.name):
            return False
        readers = self.consumers.readers(self.graph, node)
        if reader.name not in readers:
            return False
        outside = [self.graph.node(r) for r in readers - {reader.name} - also]
        if not shapes and outside:
            return False
        if any(r.op != "Shape" or r.inputs[0] != out_ref(node) for r in outside):
            return False
        self.shapes.extend((r, node.name) for r in outside)
        return True

    def sole_reader(self, node: Node) -> Node | None:
        if self.ctx.is_pinned(node.name) or self.consumers.control.get(node.name):
            return None
        readers = self.consumers.readers(self.graph, node)
        return self.graph.node(next(iter(readers))) if len(readers) == 1 else None

    def scalar(self, ref: TensorRef) -> float | None:
        return scalar_constant(self.graph, ref, self.ctx)


def scaled(chain: Chain, node: Node) -> tuple[TensorRef, float] | None:
    """(input, factor) when `node` multiplies its input by a scalar constant (Mul either way, RealDiv)."""
    if node.op == "Mul" and len(node.inputs) == 2:
        for x, c in (node.inputs, node.inputs[::-1]):
            value = chain.scalar(c)
            if value is not None:
                return x, value
    if node.op == "RealDiv" and len(node.inputs) == 2:
        value = chain.scalar(node.inputs[1])
        if value:
            return node.inputs[0], 1.0 / value
    return None


def walk_operand(chain: Chain, ref: TensorRef, labels: str, reader: Node, scales: bool,
                 repeats: bool = False) -> tuple[TensorRef, str, int]:
    """Follow `ref` (axes named `labels`) back through transposes, scalar scales (when `scales`) and Keras'
    grouped-query repeat of the heads (when `repeats`), each read only by the node after it; (the source
    tensor, its axes' names, how many times the repeats repeated its heads)."""
    groups = 1
    while True:
        node = producer(chain.graph, ref, chain.ctx, ("Transpose", "Mul", "RealDiv", "Reshape"))
        if node is None or not chain.only_read_by(node, reader):
            return ref, labels, groups
        if node.op == "Transpose":
            perm = const_ints(chain.graph, node.inputs[1], chain.ctx)
            if perm is None or sorted(perm) != list(range(len(labels))):
                return ref, labels, groups
            source = [""] * len(perm)
            for i, p in enumerate(perm):
                source[p] = labels[i]
            ref, labels = node.inputs[0], "".join(source)
            chain.nodes.append(node)
        elif node.op in ("Mul", "RealDiv") and scales and scaled(chain, node) is not None:
            ref, factor = scaled(chain, node)
            chain.scale *= factor
            chain.nodes.append(node)
        elif node.op == "Reshape" and repeats:
            found = repeat_source(chain, node, labels)
            if found is None:
                return ref, labels, groups
            ref, groups = found[0], groups * found[1]
        else:
            return ref, labels, groups
        reader = node


def repeat_source(chain: Chain, reshape: Node, labels: str) -> tuple[TensorRef, int] | None:
    """(x, G) when `reshape` is Keras' ops.repeat(x, G, axis a) of the heads axis a: Reshape(Tile(ExpandDims(x,
    a + 1), [1.., G, 1..]), x's shape with dim a multiplied by G). Adds the three nodes to the chain."""
    rank_ = len(labels)
    graph, ctx = chain.graph, chain.ctx
    tile = producer(graph, reshape.inputs[0], ctx, ("Tile",))
    expand = None if tile is None else producer(graph, tile.inputs[0], ctx, ("ExpandDims",))
    if expand is None or not chain.only_read_by(tile, reshape) or not chain.only_read_by(expand, tile):
        return None
    axis, multiples = const_ints(graph, expand.inputs[1], ctx), const_ints(graph, tile.inputs[1], ctx)
    if axis is None or len(axis) != 1 or multiples is None or len(multiples) != rank_ + 1:
        return None
    inserted = axis[0] % (rank_ + 1)
    if inserted == 0 or any(m != 1 for i, m in enumerate(multiples) if i != inserted):
        return None
    x, a, groups = expand.inputs[0], inserted - 1, multiples[inserted]
    want = [Dim(groups if i == a else 1, x, i) for i in range(rank_)]
    if labels[a] not in "NK" or symbolic_dims(graph, reshape.inputs[1], ctx) != want:
        return None
    chain.nodes.extend([reshape, tile, expand])
    return x, groups


def einsum_terms(node: Node) -> tuple[str, str, str] | None:
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if not arrow or "." in equation or len(terms) != 2 or len(node.inputs) != 2:
        return None
    if any(len(set(t)) != len(t) for t in (*terms, out)) or not set(out) <= set(terms[0]) | set(terms[1]):
        return None
    return terms[0], terms[1], out


def batch_letters(count: int, grouped: bool) -> str | None:
    letters = {0: "", 1: "B", 2: "BK" if grouped else "BN"}
    return letters.get(count)


def scores_product(chain: Chain, product: Node, keys_axis: int):
    """(query ref, its labels, key ref, its labels, the product's output labels) for the product of queries and
    keys whose output axis `keys_axis` is the keys (the softmax axis), or None."""
    graph, ctx = chain.graph, chain.ctx
    if product.op == "Einsum":
        terms = einsum_terms(product)
        if terms is None:
            return None
        ta, tb, out = terms
        contracted = [c for c in ta if c in tb and c not in out]
        batch = [c for c in out if c in ta and c in tb]
        if len(contracted) != 1 or not 0 <= keys_axis < len(out) or any(c not in out and c not in contracted for c in ta + tb):
            return None
        keys_label = out[keys_axis]
        k_first = keys_label in ta and keys_label not in tb
        tq, tk = (tb, ta) if k_first else (ta, tb)
        free_k = [c for c in tk if c not in tq]
        free_q = [c for c in out if c in tq and c not in tk]
        if free_k != [keys_label] or len(free_q) not in (1, 2):
            return None
        letters = batch_letters(len(batch), len(free_q) == 2)
        if letters is None:
            return None
        names = dict(zip(batch, letters))
        names.update({keys_label: "S", contracted[0]: "H", free_q[-1]: "T"})
        if len(free_q) == 2:
            names[free_q[0]] = "G"
        q_ref, k_ref = (product.inputs[1], product.inputs[0]) if k_first else (product.inputs[0], product.inputs[1])
        return (q_ref, "".join(names[c] for c in tq), k_ref, "".join(names[c] for c in tk), "".join(names[c] for c in out))
    a_rank, b_rank = rank(graph, product.inputs[0], ctx), rank(graph, product.inputs[1], ctx)
    if a_rank is None or a_rank != b_rank or a_rank < 2 or len(product.inputs) != 2:
        return None
    batch = batch_letters(a_rank - 2, False)
    m, n = a_rank - 2, a_rank - 1
    if batch is None or keys_axis not in (m, n):
        return None
    rows, cols = ("S", "T") if keys_axis == m else ("T", "S")
    a = batch + (("H" + rows) if product.attrs.get("adj_x") else (rows + "H"))
    b = batch + ((cols + "H") if product.attrs.get("adj_y") else ("H" + cols))
    out = batch + rows + cols
    if rows == "T":
        return product.inputs[0], a, product.inputs[1], b, out
    return product.inputs[1], b, product.inputs[0], a, out


def permuted(labels: str, perm: list[int]) -> str:
    return "".join(labels[p] for p in perm)
