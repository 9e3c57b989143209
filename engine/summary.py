"""A graph's summary: size, op histogram, inputs, default outputs, and ops with no kernel.

Default outputs are the tensors no node consumes (what a frozen graph's serving signature returns);
inputs are the placeholders. `tensorgate inspect` prints this; the server derives default signatures
from the same functions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import dtypes, validate
from engine.graph import Graph, TensorRef
from engine.plan import PLACEHOLDER_OPS, format_shape

__all__ = ["TensorInfo", "GraphSummary", "graph_inputs", "graph_outputs", "summarize"]

# Nodes whose unconsumed outputs are not results: they feed or configure, they do not compute.
_NOT_OUTPUTS = PLACEHOLDER_OPS | {"PlaceholderWithDefault", "Const", "NoOp"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int | None, ...] | None
    has_default: bool = False

    def describe(self) -> str:
        default = " (has default)" if self.has_default else ""
        return f"{self.name}  {self.dtype}  {format_shape(self.shape)}{default}"


def graph_inputs(graph: Graph) -> list[TensorInfo]:
    """Placeholders (and PlaceholderWithDefaults) with their declared dtype and shape, in graph order."""
    infos = []
    for node in graph.nodes:
        if node.op in PLACEHOLDER_OPS or node.op == "PlaceholderWithDefault":
            dtype = node.attrs.get("dtype")
            infos.append(
                TensorInfo(
                    f"{node.name}:0",
                    dtypes.tf_name_of_numpy(dtype) if isinstance(dtype, np.dtype) else "unknown",
                    node.attrs.get("shape"),
                    has_default=node.op == "PlaceholderWithDefault",
                )
            )
    return infos


def graph_outputs(graph: Graph) -> list[TensorRef]:
    """Tensors that no node consumes, in graph order (excluding placeholders, constants and NoOps)."""
    consumed = {ref for node in graph.nodes for ref in node.inputs}
    outputs = []
    for node in graph.nodes:
        if node.op in _NOT_OUTPUTS:
            continue
        for i in range(graph.output_counts[node.name]):
            ref = TensorRef(node.name, i)
            if ref not in consumed:
                outputs.append(ref)
    return outputs


@dataclass(frozen=True)
class GraphSummary:
    node_count: int
    op_counts: dict[str, int]
    inputs: list[TensorInfo]
    outputs: list[str]
    unsupported: dict[str, list[str]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_count": self.node_count,
            "op_counts": self.op_counts,
            "inputs": [
                {"name": i.name, "dtype": i.dtype, "shape": None if i.shape is None else list(i.shape), "has_default": i.has_default}
                for i in self.inputs
            ],
            "outputs": self.outputs,
            "unsupported_ops": self.unsupported,
        }

    def format(self) -> str:
        lines = [f"nodes: {self.node_count}", "ops:"]
        width = max((len(op) for op in self.op_counts), default=0)
        lines += [f"  {op.ljust(width)}  {count}" for op, count in self.op_counts.items()]
        lines.append("inputs:")
        lines += [f"  {i.describe()}" for i in self.inputs] or ["  (none)"]
        lines.append("default outputs:")
        lines += [f"  {name}" for name in self.outputs] or ["  (none)"]
        if self.unsupported:
            lines.append("unsupported ops:")
            for op, nodes in self.unsupported.items():
                shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
                lines.append(f"  {op}: {shown}")
        else:
            lines.append("unsupported ops: none")
        return "\n".join(lines)


def summarize(graph: Graph, device: str | None = None) -> GraphSummary:
    """Summarize a graph (decoded with `check_ops=False` so that unsupported ops can be listed)."""
    counts = Counter(node.op for node in graph.nodes)
    return GraphSummary(
        node_count=len(graph.nodes),
        op_counts=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        inputs=graph_inputs(graph),
        outputs=[str(ref) for ref in graph_outputs(graph)],
        unsupported={op: sorted(nodes) for op, nodes in sorted(validate.find_unsupported_ops(graph.nodes, device).items())},
    )
