"""Fusing bias-free dense layers into `_TensorgateProjection`, and a gated feed-forward layer's pair of them
with its gate into one `_TensorgateGatedProjection`.

Decoder and T5 blocks use dense layers without a bias, which fuse_dense (bias first) leaves as they froze:

    MatMul(Tensordot's x.reshape(-1, K), W)      (Keras Dense on 3-D data; fold_tensordot.tensordot_rows)
    BatchMatMulV2(x, W)                          (Keras 3 Dense, numpy's one GEMM per batch item)
        ->  _TensorgateProjection(x, W)          x [..., K] . W [K, F], one 2-D matmul over all rows
    Einsum("P C, W -> P U", x, W)                (EinsumDense contracting x's trailing labels C with W's:
        ->  _TensorgateProjection(x, W', axes=|C|) 'abc,cde->abde', 'abcd,cde->abe', Gemma's 'btd,ndh->btnh')

with W a float constant (2-D for the first two; W' is W's axes in the order C, U). A MatMul's readers must all be Reshapes (they reshape the projection instead);
one restoring Tensordot's own shape is dropped. Then a gated feed-forward layer,

    gate(x . W1) * (x . W2),  gate: Swish (x * Sigmoid(x), or fuse_swish's `_TensorgateSwish`), GELU
                                    (`_TensorgateGelu`, either form), Relu
        ->  _TensorgateGatedProjection(x, [W1 | W2], gate=...)

(SwiGLU in Llama and Mistral, GeGLU in Gemma, ReGLU in T5), makes one matmul of both and one pass for the
gate and the product. Last, projections of the same x (an attention's queries, keys and values) become one
`_TensorgateSplitProjection`, one matmul whose outputs are views of its product: bias-free projections
together, and dense layers with a bias and no activation (`_TensorgateDense`, BERT's and ViT's queries, keys
and values) together with their biases; only where every reader of them takes a view as it takes any array
(Reshape, Transpose, Shape, the rotary and attention ops), and none is fetched. Last, a bias added to a
projection (BiasAdd, or Add of a constant; EinsumDense's attention output) becomes its bias, and a residual
connection's Add of a projection (or of a dense layer with a bias and no activation) its addend
(`has_bias`, `has_addend`), each only where it alone reads the product: the sums are made tile by tile.
The Mul's operands may come in either order. Every node inside a chain must be read only by the chain,
have no control consumer, and be neither fetched nor fed; the fused node takes the chain's last name.
"""

from __future__ import annotations

import numpy as np

import kernels
from engine.graph import Graph, Node, TensorRef
from engine.passes.context import PassContext
from engine.passes.fold_tensordot import is_tensordot_shape, tensordot_rows
from engine.passes.fuse_gelu import FUSED_OP as GELU
from engine.passes.rewrite import (
    Consumers,
    const_controls,
    const_node,
    constant_value,
    fresh_name,
    merged_controls,
    producer,
    rebuild,
)

__all__ = ["GATED_OP", "PROJECTION_OP", "SPLIT_OP", "run"]

PROJECTION_OP = "_TensorgateProjection"
GATED_OP = "_TensorgateGatedProjection"
SPLIT_OP = "_TensorgateSplitProjection"
DENSE_OP = "_TensorgateDense"  # fuse_dense's and fold_tensordot's dense layer with a bias
# Readers that may take a split projection's output, a strided view of its product, as they take any array.
_VIEW_READERS = frozenset({"Reshape", "Transpose", "Shape", "_TensorgateRotary", "_TensorgateAttention"})
_SWISH = "_TensorgateSwish"
_BATCH_MATMULS = ("BatchMatMul", "BatchMatMulV2")


def _out(node: Node) -> TensorRef:
    return TensorRef(node.name, 0)


def _private(node: Node, consumers: Consumers, graph: Graph, ctx: PassContext, readers: set[str]) -> bool:
    """`node` is read exactly by `readers`, has no control consumer and is not pinned."""
    return (not ctx.is_pinned(node.name) and not consumers.control.get(node.name)
            and consumers.readers(graph, node) == readers)


def _einsum_axes(node: Node, w: np.ndarray) -> tuple[int, list[int]] | None:
    """(a, perm) when the Einsum `node` contracts the last a axes of its first operand with a of the constant
    w's and keeps the rest of both ("P C, W -> P U", U the rest of w's labels): perm orders w's axes as C
    then U; None for other equations."""
    equation = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if not arrow or "." in equation or len(terms) != 2 or len(terms[1]) != w.ndim or w.ndim < 2:
        return None
    x_labels, w_labels = terms
    if any(len(set(t)) != len(t) for t in (x_labels, w_labels, out)):
        return None
    contracted = [c for c in x_labels if c in w_labels]
    axes = len(contracted)
    kept, units = x_labels[:len(x_labels) - axes], [c for c in w_labels if c not in x_labels]
    if not 0 < axes < w.ndim or x_labels[len(x_labels) - axes:] != "".join(contracted) or any(c in out for c in contracted):
        return None
    if out[:len(kept)] != kept or sorted(out[len(kept):]) != sorted(units) or len(out) != len(kept) + len(units):
        return None
    return axes, [w_labels.index(c) for c in contracted] + [w_labels.index(c) for c in out[len(kept):]]


def _projections(graph: Graph, ctx: PassContext) -> Graph:
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        # A MatMul's product changes shape ([rows, F] to [..., F]): it must not be fetched. The others keep theirs.
        if node.op not in ("MatMul", "Einsum", *_BATCH_MATMULS) or len(node.inputs) != 2:
            continue
        if node.op == "MatMul" and ctx.is_pinned(node.name):
            continue
        w = constant_value(graph, node.inputs[1], ctx.fed)
        if w is None or w.dtype.kind != "f" or w.ndim < 2 or node.name in replaced:
            continue
        weights_ref, attrs = node.inputs[1], {"T": w.dtype}
        if node.op != "Einsum" and w.ndim != 2:
            continue
        if node.op == "MatMul":
            if node.attrs.get("transpose_a") or node.attrs.get("transpose_b"):
                continue
            found = tensordot_rows(graph, node.inputs[0], ctx)
            readers = [graph.node(r) for r in consumers.readers(graph, node)]
            if (found is None or consumers.control.get(node.name) or not readers
                    or any(r.op != "Reshape" or r.inputs[0] != _out(node) or r.inputs[1] == _out(node) for r in readers)):
                continue
            x, rows = found[0], found[1]
            if len(readers) == 1 and is_tensordot_shape(graph, readers[0].inputs[1], rows, w.shape[1], ctx):
                outer = readers[0]  # restores the matmul's own shape: the projection has it already
                replaced[outer.name] = Node(outer.name, PROJECTION_OP, (x, weights_ref), merged_controls([node, outer]),
                                            node.device, {"T": w.dtype})
                removed.add(node.name)
                continue
        elif node.op == "Einsum":
            found = _einsum_axes(node, w)
            if found is None:
                continue
            x, (attrs["axes"], perm) = node.inputs[0], found
            if perm != sorted(perm):
                const = const_node(fresh_name(graph, taken, f"{node.name}/projection_weights"),
                                   np.ascontiguousarray(w.transpose(perm)), const_controls(graph, [weights_ref]))
                added.append(const)
                weights_ref = _out(const)
        else:
            if node.attrs.get("adj_x"):
                continue
            x = node.inputs[0]
            if node.attrs.get("adj_y"):
                const = const_node(fresh_name(graph, taken, f"{node.name}/projection_weights"), np.ascontiguousarray(w.T),
                                   const_controls(graph, [weights_ref]))
                added.append(const)
                weights_ref = _out(const)
        replaced[node.name] = Node(node.name, PROJECTION_OP, (x, weights_ref), node.control_inputs, node.device, attrs)
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)


def _gate(graph: Graph, ref: TensorRef, consumers: Consumers, ctx: PassContext) -> tuple[str, Node, list[Node]] | None:
    """(gate name, its projection, the gate's nodes) when `ref` is gate(projection)."""
    node = producer(graph, ref, ctx, ("Relu", GELU, _SWISH, "Mul"))
    if node is None:
        return None
    if node.op == "Mul":
        if len(node.inputs) != 2:
            return None
        for p_ref, s_ref in (node.inputs, node.inputs[::-1]):
            sigmoid = producer(graph, s_ref, ctx, ("Sigmoid",))
            projection = producer(graph, p_ref, ctx, (PROJECTION_OP,))
            if (sigmoid is not None and projection is not None and sigmoid.inputs[0] == p_ref
                    and _private(sigmoid, consumers, graph, ctx, {node.name})
                    and _private(projection, consumers, graph, ctx, {node.name, sigmoid.name})):
                return "Silu", projection, [projection, sigmoid]
        return None
    projection = producer(graph, node.inputs[0], ctx, (PROJECTION_OP,))
    if projection is None or not _private(projection, consumers, graph, ctx, {node.name}):
        return None
    name = {"Relu": "Relu", _SWISH: "Silu"}.get(node.op)
    if node.op == GELU:
        name = "GeluApproximate" if node.attrs.get("approximate") else "GeluExact"
    return name, projection, [projection]


def _gates(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(GATED_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op != "Mul" or len(node.inputs) != 2 or node.name in removed:
            continue
        for gated_ref, other_ref in (node.inputs, node.inputs[::-1]):
            gate = _gate(graph, gated_ref, consumers, ctx)
            other = producer(graph, other_ref, ctx, (PROJECTION_OP,))
            if gate is None or other is None or gated_ref == other_ref:
                continue
            name, projection, gate_nodes = gate
            gate_node = graph.node(gated_ref.node)
            w1 = constant_value(graph, projection.inputs[1], ctx.fed)
            w2 = constant_value(graph, other.inputs[1], ctx.fed)
            if (projection.inputs[0] != other.inputs[0] or w1 is None or w2 is None or w1.shape != w2.shape
                    or w1.dtype != w2.dtype or w1.ndim != 2 or projection.attrs.get("axes", 1) != 1
                    or other.attrs.get("axes", 1) != 1):
                continue
            inner = [*gate_nodes, *([gate_node] if gate_node not in gate_nodes else []), other]
            names = {n.name for n in inner}
            if names & (removed | set(replaced)) or not _private(other, consumers, graph, ctx, {node.name}):
                continue
            if not _private(gate_node, consumers, graph, ctx, {node.name}):
                continue
            weights = const_node(fresh_name(graph, taken, f"{node.name}/gated_weights"),
                                 np.ascontiguousarray(np.concatenate([w1, w2], axis=1)),
                                 const_controls(graph, [projection.inputs[1], other.inputs[1]]))
            added.append(weights)
            replaced[node.name] = Node(node.name, GATED_OP, (projection.inputs[0], _out(weights)),
                                       merged_controls([*inner, node]), node.device, {"T": w1.dtype, "gate": name})
            removed.update(names)
            break
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)


def _mergeable(graph: Graph, node: Node, consumers: Consumers,
               ctx: PassContext) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(weights, bias or None) of the projection `node` when it may join a split projection, else None: a
    bias-free projection, or a dense layer with a bias and no activation (`_TensorgateDense`)."""
    if ctx.is_pinned(node.name) or consumers.control.get(node.name):
        return None
    bias = None
    if node.op == DENSE_OP:
        if list(node.attrs.get("fused_ops", ())) != ["BiasAdd"] or len(node.inputs) != 3:
            return None
        bias = constant_value(graph, node.inputs[2], ctx.fed)
        if bias is None or bias.dtype.kind != "f":
            return None
    elif node.op != PROJECTION_OP or node.attrs.get("axes", 1) != 1:
        return None
    w = constant_value(graph, node.inputs[1], ctx.fed)
    readers = consumers.readers(graph, node)
    if w is None or w.ndim < 2 or not readers or any(graph.node(r).op not in _VIEW_READERS for r in readers):
        return None
    if bias is not None and (bias.shape != w.shape[1:] or bias.dtype != w.dtype):
        return None
    return w, bias


def _merged(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(SPLIT_OP, ctx.device):
        return graph
    consumers = Consumers(graph)
    groups: dict[tuple, list[tuple[Node, np.ndarray, np.ndarray | None]]] = {}
    for node in graph.nodes:
        found = _mergeable(graph, node, consumers, ctx)
        if found is not None:
            w, bias = found
            groups.setdefault((node.inputs[0], w.dtype.str, w.shape[0], bias is not None), []).append((node, w, bias))
    rewired: dict[TensorRef, TensorRef] = {}
    added: list[Node] = []
    removed: set[str] = set()
    taken: set[str] = set()
    for (x, _, depth, biased), members in groups.items():
        if len(members) < 2:
            continue
        nodes, weights = [m for m, _, _ in members], [w for _, w, _ in members]
        const = const_node(fresh_name(graph, taken, f"{nodes[0].name}/split_weights"),
                           np.ascontiguousarray(np.concatenate([w.reshape(depth, -1) for w in weights], axis=1)),
                           const_controls(graph, [n.inputs[1] for n in nodes]))
        inputs = [x, _out(const)]
        added.append(const)
        if biased:
            bias = const_node(fresh_name(graph, taken, f"{nodes[0].name}/split_bias"),
                              np.concatenate([b.reshape(-1) for _, _, b in members]),
                              const_controls(graph, [n.inputs[2] for n in nodes]))
            inputs.append(_out(bias))
            added.append(bias)
        name = fresh_name(graph, taken, f"{nodes[0].name}/split")
        attrs = {"T": weights[0].dtype, "sizes": tuple(int(np.prod(w.shape[1:])) for w in weights),
                 "units": tuple(int(d) for w in weights for d in w.shape[1:]),
                 "ranks": tuple(w.ndim - 1 for w in weights), "has_bias": biased}
        added.append(Node(name, SPLIT_OP, tuple(inputs), merged_controls(nodes), nodes[0].device, attrs))
        removed.update(n.name for n in nodes)
        rewired.update({_out(n): TensorRef(name, i) for i, n in enumerate(nodes)})
    if not rewired:
        return graph
    replaced = {
        node.name: Node(node.name, node.op, tuple(rewired.get(r, r) for r in node.inputs), node.control_inputs,
                        node.device, node.attrs)
        for node in graph.nodes
        if node.name not in removed and any(r in rewired for r in node.inputs)
    }
    return rebuild(graph, replaced, removed, added)


def _units_bias(graph: Graph, node: Node, ref: TensorRef, units: tuple[int, ...],
                ctx: PassContext) -> np.ndarray | None:
    """The constant `ref` as a bias over a projection's `units` when the Add or BiasAdd `node` adds it as one
    (it broadcasts to units without growing them), else None."""
    b = constant_value(graph, ref, ctx.fed)
    if b is None or b.dtype.kind != "f" or b.ndim > len(units) or b.size == 0:
        return None
    if node.op == "BiasAdd" and (b.ndim != 1 or node.attrs.get("data_format", "NHWC") not in ("NHWC", b"NHWC")):
        return None
    try:
        if np.broadcast_shapes(b.shape, units) != units:
            return None
    except ValueError:
        return None
    return np.ascontiguousarray(np.broadcast_to(b, units))


def _residuals(graph: Graph, ctx: PassContext) -> Graph:
    """A bias and a residual connection's Add after a projection, each the sole reader of what it adds to, into
    the projection (`has_bias`, `has_addend`): Add(projection, r) either way round, BiasAdd or Add of a
    constant bias first, and the dense layers with a bias and no activation (`_TensorgateDense`) as
    projections with a bias. The sums are made tile by tile while the product is in cache."""
    consumers = Consumers(graph)
    replaced: dict[str, Node] = {}
    removed: set[str] = set()
    added: list[Node] = []
    taken: set[str] = set()

    def current(ref: TensorRef) -> Node | None:
        node = replaced.get(ref.node) if ref.index == 0 else None
        return node if node is not None else producer(graph, ref, ctx, (PROJECTION_OP, DENSE_OP))

    for node in graph.nodes:
        if node.op not in ("Add", "AddV2", "BiasAdd") or len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
            continue
        orders = (node.inputs,) if node.op == "BiasAdd" else (node.inputs, node.inputs[::-1])
        for p_ref, other in orders:
            source = current(p_ref)
            if (source is None or source.attrs.get("has_addend") or source.name in removed
                    or source.attrs.get("T") != node.attrs.get("T")
                    or not _private(graph.node(source.name), consumers, graph, ctx, {node.name})):
                continue
            if source.op == DENSE_OP:
                if list(source.attrs.get("fused_ops", ())) != ["BiasAdd"] or len(source.inputs) != 3:
                    continue
                inputs, attrs = source.inputs, {"T": source.attrs.get("T"), "has_bias": True}
            else:
                inputs, attrs = source.inputs, dict(source.attrs)
            w = constant_value(graph, inputs[1], ctx.fed)
            if w is None:
                continue
            units = tuple(int(d) for d in w.shape[int(attrs.get("axes", 1)):])
            bias = None if attrs.get("has_bias") else _units_bias(graph, node, other, units, ctx)
            if bias is not None:
                const = const_node(fresh_name(graph, taken, f"{node.name}/projection_bias"), bias,
                                   const_controls(graph, [other]))
                added.append(const)
                inputs, attrs = (*inputs, _out(const)), {**attrs, "has_bias": True}
            elif node.op == "BiasAdd":
                continue
            else:
                inputs, attrs = (*inputs, other), {**attrs, "has_addend": True}
            replaced[node.name] = Node(node.name, PROJECTION_OP, inputs, merged_controls([source, node]), node.device,
                                       attrs)
            replaced.pop(source.name, None)
            removed.add(source.name)
            break
    if not replaced:
        return graph
    return rebuild(graph, replaced, removed, added)


def run(graph: Graph, ctx: PassContext) -> Graph:
    if not kernels.has_op(PROJECTION_OP, ctx.device):
        return graph
    return _residuals(_merged(_gates(_projections(graph, ctx), ctx), ctx), ctx)
