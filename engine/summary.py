"""A graph's summary: size, op histogram, inputs, default outputs, and ops with no kernel; and what
the optimizer does to it, pass by pass.

Default outputs are the tensors no node consumes (what a frozen graph's serving signature returns);
inputs are the placeholders. `tensorgate inspect` prints the summary and, with `--optimized`, the
optimization report; the server derives default signatures from the same functions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.compile.dataflow import ROOT_FRAME, loop_frames
from engine.compile.plan import PLACEHOLDER_OPS, format_shape
from engine.compile.prune import prune_to_signature
from engine.errors import GraphError
from engine.graph import Graph, TensorRef, dtypes, parse_tensor_name, validate
from engine.graph.op_origin import origin_note, origins
from engine.passes import PIPELINE, PassContext, optimize
from kernels.array.identity import IDENTITY_OPS
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS, ENTER_OPS, SWITCH_OPS
from kernels.control_flow.functional import WHILE_OPS

__all__ = [
    "GraphSummary",
    "OptimizationReport",
    "PassEffect",
    "TensorInfo",
    "graph_inputs",
    "graph_outputs",
    "optimization_report",
    "summarize",
]

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


# Batch norm's outputs after y are batch statistics for training; an inference graph never means
# them as results (and listing them would keep the optimizer from folding the batch norm away).
_FIRST_OUTPUT_ONLY = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})
_NOT_RESULT_SOURCES = SWITCH_OPS | {"Const"}


def graph_outputs(graph: Graph) -> list[TensorRef]:
    """Tensors that no node consumes, in graph order: what a frozen graph computes.

    Left out: placeholders, constants and NoOps; values that cannot be fetched or are bookkeeping of
    control flow (anything inside a loop; the outputs of Switch, Merge, Enter, Exit, NextIteration,
    LoopCond and functional While, which loops leave unconsumed by the dozen; the identities of a
    Switch that pivot a conditional's branches); FusedBatchNorm's batch statistics, which only
    training reads; and identities of constants, which freezing leaves behind for every variable read.
    """
    consumed = {ref for node in graph.nodes for ref in node.inputs}
    in_loop = _loop_nodes(graph)
    outputs = []
    for node in graph.nodes:
        if node.op in _NOT_OUTPUTS or node.op in CONTROL_FLOW_OPS or node.name in in_loop:
            continue
        if node.op in WHILE_OPS:
            continue  # a functional loop's unread outputs are its counters and bookkeeping
        if node.op in IDENTITY_OPS and node.inputs and graph.node(node.inputs[0].node).op in _NOT_RESULT_SOURCES:
            continue
        for i in range(1 if node.op in _FIRST_OUTPUT_ONLY else graph.output_counts[node.name]):
            ref = TensorRef(node.name, i)
            if ref not in consumed:
                outputs.append(ref)
    return outputs


def _loop_nodes(graph: Graph) -> set[str]:
    """Nodes whose outputs live inside a loop frame (downstream of an Enter, before its Exit)."""
    if not any(node.op in ENTER_OPS for node in graph.nodes):
        return set()
    ordered = prune_to_signature(graph, (), (), [node.name for node in graph.nodes])
    try:
        _, out_frame_of, _ = loop_frames(ordered, frozenset())
    except GraphError:
        return set()  # malformed frames: running the graph reports them
    return {name for name, frame in out_frame_of.items() if frame != ROOT_FRAME}


def _histogram(graph: Graph) -> Counter:
    return Counter(node.op for node in graph.nodes)


def _most_first(counts: Counter) -> dict[str, int]:
    """An op histogram, most frequent op first (ties by name)."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _format_counts(counts: dict[str, int]) -> list[str]:
    width = max((len(op) for op in counts), default=0)
    return [f"  {op.ljust(width)}  {count}" for op, count in counts.items()]


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
            "unsupported_op_origins": origins(self.unsupported),
        }

    def format(self) -> str:
        lines = [f"nodes: {self.node_count}", "ops:"]
        lines += _format_counts(self.op_counts)
        lines.append("inputs:")
        lines += [f"  {i.describe()}" for i in self.inputs] or ["  (none)"]
        lines.append("default outputs:")
        lines += [f"  {name}" for name in self.outputs] or ["  (none)"]
        if self.unsupported:
            lines.append("unsupported ops:")
            for op, nodes in self.unsupported.items():
                shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
                lines.append(f"  {op}{origin_note(op)}: {shown}")
        else:
            lines.append("unsupported ops: none")
        return "\n".join(lines)


def summarize(graph: Graph, device: str | None = None) -> GraphSummary:
    """Summarize a graph (decoded with `check_ops=False` so that unsupported ops can be listed)."""
    counts = _histogram(graph)
    return GraphSummary(
        node_count=len(graph.nodes),
        op_counts=_most_first(counts),
        inputs=graph_inputs(graph),
        outputs=[str(ref) for ref in graph_outputs(graph)],
        unsupported={op: sorted(nodes) for op, nodes in sorted(validate.find_unsupported_ops(graph.nodes, device).items())},
    )


@dataclass(frozen=True)
class PassEffect:
    """What one pass did: node counts before and after, and the op histogram's change."""

    name: str
    nodes_before: int
    nodes_after: int
    ops_added: dict[str, int]
    ops_removed: dict[str, int]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass": self.name,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "ops_added": self.ops_added,
            "ops_removed": self.ops_removed,
            "seconds": round(self.seconds, 6),
        }

    def describe_changes(self) -> str:
        changes = [f"+{op} {n}" for op, n in self.ops_added.items()] + [f"-{op} {n}" for op, n in self.ops_removed.items()]
        return ", ".join(changes) or "(no change)"


@dataclass(frozen=True)
class OptimizationReport:
    """The optimizer's work on one signature, pass by pass (what `tensorgate inspect --optimized` prints).

    >>> report = optimization_report(engine.graph.graph_def.decode_graph(parse_graph_def("model.pb"), check_ops=False))
    >>> [(p.name, p.nodes_before, p.nodes_after) for p in report.passes][0]
    ('fold_constants', 1052, 1052)
    """

    feeds: list[str]
    fetches: list[str]
    graph_nodes: int
    signature_nodes: int
    passes: list[PassEffect]
    op_counts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "feeds": self.feeds,
            "fetches": self.fetches,
            "graph_nodes": self.graph_nodes,
            "signature_nodes": self.signature_nodes,
            "passes": [p.to_dict() for p in self.passes],
            "optimized_nodes": self.passes[-1].nodes_after if self.passes else self.signature_nodes,
            "optimized_op_counts": self.op_counts,
        }

    def format(self) -> str:
        final = self.passes[-1].nodes_after if self.passes else self.signature_nodes
        lines = [
            f"signature: {len(self.feeds)} feed(s) {', '.join(self.feeds) or '-'}; {len(self.fetches)} fetch(es) {', '.join(self.fetches)}",
            f"nodes: {self.graph_nodes} in the graph, {self.signature_nodes} for the signature, {final} optimized",
            "",
        ]
        width = max([len("pass")] + [len(p.name) for p in self.passes])
        lines.append(f"{'pass'.ljust(width)}  {'before':>7}  {'after':>7}  ops added/removed")
        for p in self.passes:
            lines.append(f"{p.name.ljust(width)}  {p.nodes_before:>7}  {p.nodes_after:>7}  {p.describe_changes()}")
        lines.append("")
        lines.append("optimized ops:")
        lines += _format_counts(self.op_counts)
        return "\n".join(lines)



def optimization_report(graph: Graph, fetches: Sequence[str] | None = None) -> OptimizationReport:
    """Prune `graph` to a signature (the default outputs, or `fetches`, with the placeholders they
    need fed, as the server's default signature does) and run the pipeline over it pass by pass."""
    fetch_refs = [parse_tensor_name(f) for f in fetches] if fetches else graph_outputs(graph)
    needed = prune_to_signature(graph, (), fetch_refs, ())
    feed_refs = [TensorRef(node.name, 0) for node in needed if node.op in PLACEHOLDER_OPS]
    nodes = prune_to_signature(graph, feed_refs, fetch_refs, ())
    current = Graph(nodes=tuple(nodes), output_counts=graph.output_counts, library=graph.library)
    ctx = PassContext(
        fed=frozenset(feed_refs),
        preserve=frozenset(ref.node for ref in fetch_refs),
        fed_shapes={ref: graph.node(ref.node).attrs.get("shape") for ref in feed_refs},
    )
    effects = []
    for name, _ in PIPELINE:
        start = time.perf_counter()
        after = optimize(current, ctx, [name])
        seconds = time.perf_counter() - start
        before_ops, after_ops = _histogram(current), _histogram(after)
        effects.append(
            PassEffect(
                name,
                len(current),
                len(after),
                _most_first(after_ops - before_ops),
                _most_first(before_ops - after_ops),
                seconds,
            )
        )
        current = after
    counts = _histogram(current)
    return OptimizationReport(
        feeds=[str(ref) for ref in feed_refs],
        fetches=[str(ref) for ref in fetch_refs],
        graph_nodes=len(graph),
        signature_nodes=len(nodes),
        passes=effects,
        op_counts=_most_first(counts),
    )
