"""A SavedModel's summary, as `tensorgate inspect <directory>` prints it: for each signature its inputs,
outputs and op histogram, and the ops it needs that have no kernel (with the node, and the function
of the library it sits in); the init ops; the lookup tables; the variables that stay live and how many
were frozen into constants.

    >>> print(summarize_saved_model(load_saved_model("export/1", check_ops=False)).format())
    SavedModel export/1 (tags: serve)
    signature 'serving_default' (tensorflow/serving/predict)
      inputs:  x  serving_default_x:0  float  [?,4]
    ...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kernels
from engine.compile.prune import prune_to_signature
from engine.graph import Graph, Node, parse_tensor_name
from engine.graph.dtypes import tf_name_of_numpy
from engine.graph.functions import FUNCTION_ATTRS
from engine.graph.op_origin import origin_note, origins
from engine.saved_model.loader import SavedModel
from kernels.state.lookup_tables import TABLE_OPS

__all__ = ["SavedModelSummary", "SignatureSummary", "summarize_saved_model"]


def _shape(shape: tuple[int | None, ...] | None) -> str:
    return "unknown" if shape is None else "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


@dataclass(frozen=True)
class SignatureSummary:
    name: str
    method_name: str
    inputs: list[tuple[str, str, str, str]]  # alias, tensor, dtype, shape
    outputs: list[tuple[str, str, str, str]]
    op_counts: dict[str, int]
    unsupported: dict[str, list[str]]  # op -> "node" or "node (in function f)"

    def to_dict(self) -> dict[str, Any]:
        def tensors(items):
            return [{"alias": a, "tensor": t, "dtype": d, "shape": s} for a, t, d, s in items]

        return {"name": self.name, "method_name": self.method_name, "inputs": tensors(self.inputs),
                "outputs": tensors(self.outputs), "op_counts": self.op_counts, "unsupported_ops": self.unsupported,
                "unsupported_op_origins": origins(self.unsupported)}


@dataclass(frozen=True)
class SavedModelSummary:
    path: str
    tags: tuple[str, ...]
    signatures: list[SignatureSummary]
    init_ops: list[str]
    tables: list[str]  # "node (Op: key -> value)"
    live_variables: list[str]  # "node (dtype, shape)"
    frozen_variables: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "tags": list(self.tags), "signatures": [s.to_dict() for s in self.signatures],
                "init_ops": self.init_ops, "tables": self.tables, "live_variables": self.live_variables,
                "frozen_variables": self.frozen_variables}

    def format(self) -> str:
        lines = [f"SavedModel {self.path} (tags: {', '.join(self.tags)})"]
        for sig in self.signatures:
            lines.append(f"signature '{sig.name}' ({sig.method_name or 'no method name'})")
            for title, items in (("inputs", sig.inputs), ("outputs", sig.outputs)):
                lines.append(f"  {title}:")
                lines += [f"    {alias}  {tensor}  {dtype}  {shape}" for alias, tensor, dtype, shape in items]
            lines.append("  ops: " + ", ".join(f"{op} {n}" for op, n in sig.op_counts.items()))
            if sig.unsupported:
                lines.append("  unsupported ops:")
                lines += [f"    {op}{origin_note(op)}: {', '.join(where[:5])}" + (f" and {len(where) - 5} more" if len(where) > 5 else "")
                          for op, where in sig.unsupported.items()]
            else:
                lines.append("  unsupported ops: none")
        lines.append("init ops: " + (", ".join(self.init_ops) or "none"))
        lines.append("lookup tables: " + (", ".join(self.tables) or "none"))
        lines.append("live variables (written by a signature): " + (", ".join(self.live_variables) or "none"))
        lines.append(f"frozen variables (read only, now constants): {self.frozen_variables}")
        return "\n".join(lines)


def _with_functions(graph: Graph, nodes: list[Node]) -> Iterator[tuple[Node, str | None]]:
    """`nodes` and every node of the functions they (indirectly) call, each with its function's name."""
    for node in nodes:
        yield node, None
    pending = [node for node in nodes if node.op in FUNCTION_ATTRS]
    seen: set[str] = set()
    while pending:
        node = pending.pop()
        for attr in FUNCTION_ATTRS[node.op]:
            name = getattr(node.attrs.get(attr), "name", None)
            if name in seen or graph.library is None or name not in graph.library:
                continue
            seen.add(name)
            for inner in graph.library[name].graph.nodes:
                yield inner, name
                if inner.op in FUNCTION_ATTRS:
                    pending.append(inner)


def _signature_summary(sm: SavedModel, name: str) -> SignatureSummary:
    sig = sm.signatures[name]
    feeds = [parse_tensor_name(t.tensor) for t in sig.inputs]
    fetches = [parse_tensor_name(t.tensor) for t in sig.outputs]
    counts: Counter = Counter()
    unsupported: dict[str, list[str]] = {}
    for node, function in _with_functions(sm.graph, prune_to_signature(sm.graph, feeds, fetches, ())):
        counts[node.op] += 1
        if node.op not in ("Placeholder", "_Arg", "_Retval") and not kernels.has_op(node.op):
            unsupported.setdefault(node.op, []).append(node.name if function is None else f"{node.name} (in function {function})")

    def row(t) -> tuple[str, str, str, str]:
        return t.alias, t.tensor, tf_name_of_numpy(t.dtype) if t.dtype is not None else "unknown", _shape(t.shape)

    return SignatureSummary(
        name=name, method_name=sig.method_name, inputs=[row(t) for t in sig.inputs], outputs=[row(t) for t in sig.outputs],
        op_counts=dict(counts.most_common()), unsupported=unsupported,
    )


def _tables(graph: Graph) -> list[str]:
    out = []
    for node in graph.nodes:
        if node.op in TABLE_OPS:
            key, value = node.attrs.get("key_dtype"), node.attrs.get("value_dtype")
            types = f"{tf_name_of_numpy(key)} -> {tf_name_of_numpy(value)}" if key is not None and value is not None else ""
            out.append(f"{node.name} ({node.op}{': ' + types if types else ''})")
    return out


def _live(graph: Graph, names: Mapping[str, Any] | tuple[str, ...]) -> list[str]:
    out = []
    for name in names:
        node = graph.node(name)
        out.append(f"{name} ({tf_name_of_numpy(node.attrs['dtype'])}, {_shape(node.attrs.get('shape'))})")
    return out


def summarize_saved_model(sm: SavedModel) -> SavedModelSummary:
    """Summarize a SavedModel (loaded with `check_ops=False`, so that unsupported ops can be listed)."""
    return SavedModelSummary(
        path=str(sm.path),
        tags=sm.tags,
        signatures=[_signature_summary(sm, name) for name in sm.signatures],
        init_ops=list(sm.init_ops),
        tables=_tables(sm.graph),
        live_variables=_live(sm.graph, sm.live_variables),
        frozen_variables=len(set(sm.variables) - set(sm.live_variables)),
    )
