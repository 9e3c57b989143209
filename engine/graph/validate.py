"""Load-time validation: what makes a graph unloadable, found before any request runs.

Each check raises one typed `engine.errors` exception that lists every offender of its kind:
duplicate names, inputs naming missing nodes or outputs, unsupported ops, bad attrs, and cycles that
are not loop back edges (a loop's NextIteration -> Merge edge is the one cycle TensorFlow allows).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping

import kernels
from engine.errors import (
    DuplicateNodeError,
    GraphCycleError,
    InvalidAttrError,
    InvalidInputError,
    MissingInputError,
    UnsupportedOpError,
)
from engine.graph import Node
from engine.graph.op_origin import origins
from kernels.registry import AttrBindError

__all__ = [
    "check_unique_names",
    "check_inputs",
    "find_unsupported_ops",
    "check_attrs",
    "check_acyclic",
    "output_counts",
]

LOOP_BACK_EDGE_OPS = frozenset({"NextIteration", "RefNextIteration"})


def check_unique_names(nodes: Iterable[Node]) -> None:
    seen: set[str] = set()
    dupes = []
    for node in nodes:
        if node.name in seen:
            dupes.append(node.name)
        seen.add(node.name)
    if dupes:
        raise DuplicateNodeError(dupes)


def _kernel_def(op: str) -> kernels.KernelDef | None:
    for device in kernels.DEVICES:
        if kernels.has_op(op, device):
            return kernels.lookup(op, device)
    return None


def output_counts(nodes: Iterable[Node]) -> dict[str, int]:
    """Outputs per node: from the kernel where the op has one, else one more than the highest consumed index."""
    nodes = list(nodes)
    counts: dict[str, int] = {}
    unknown: set[str] = set()
    for node in nodes:
        counts[node.name] = 1
        kdef = _kernel_def(node.op)
        if kdef is None:
            unknown.add(node.name)
            continue
        try:
            counts[node.name] = kdef.num_outputs(node.attrs)
        except (KeyError, TypeError):
            pass  # a missing count attr; check_attrs reports it
    for node in nodes:
        for ref in node.inputs:
            if ref.node in unknown:
                counts[ref.node] = max(counts[ref.node], ref.index + 1)
    return counts


def check_inputs(nodes: Iterable[Node], counts: Mapping[str, int]) -> None:
    for node in nodes:
        for ref in node.inputs:
            if ref.node not in counts:
                raise MissingInputError(node.name, str(ref))
            if ref.index >= counts[ref.node]:
                raise InvalidInputError(
                    node.name, str(ref), f"node '{ref.node}' has {counts[ref.node]} output(s)"
                )
        for ctrl in node.control_inputs:
            if ctrl not in counts:
                raise MissingInputError(node.name, f"^{ctrl}")


def find_unsupported_ops(nodes: Iterable[Node], device: str | None = None) -> dict[str, list[str]]:
    """Op type -> node names, for every op with no kernel on `device` (on any device when None)."""
    missing: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        if not kernels.has_op(node.op, device):
            missing[node.op].append(node.name)
    return dict(missing)


def check_supported(nodes: Iterable[Node], device: str | None = None) -> None:
    missing = find_unsupported_ops(nodes, device)
    if missing:
        raise UnsupportedOpError(missing, device, origins(missing))


def check_attrs(nodes: Iterable[Node]) -> None:
    for node in nodes:
        kdef = _kernel_def(node.op)
        if kdef is None:
            continue
        try:
            kdef.bind_attrs(node.attrs)
            kdef.num_outputs(node.attrs)
        except AttrBindError as e:
            raise InvalidAttrError(node.name, node.op, e.attr, e.reason) from None
        except (KeyError, TypeError) as e:
            raise InvalidAttrError(node.name, node.op, str(e).strip("'"), "is missing or malformed") from None


def check_acyclic(nodes: Iterable[Node]) -> None:
    """Kahn's algorithm over data and control edges, ignoring loop back edges."""
    nodes = list(nodes)
    consumers: dict[str, list[str]] = defaultdict(list)
    pending: dict[str, int] = {}
    by_name = {n.name: n for n in nodes}
    for node in nodes:
        sources = [r.node for r in node.inputs] + list(node.control_inputs)
        sources = [s for s in sources if by_name[s].op not in LOOP_BACK_EDGE_OPS]
        pending[node.name] = len(sources)
        for s in sources:
            consumers[s].append(node.name)
    ready = deque(name for name, count in pending.items() if count == 0)
    while ready:
        name = ready.popleft()
        for c in consumers[name]:
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    stuck = {name for name, count in pending.items() if count > 0}
    if stuck:
        raise GraphCycleError(_find_cycle(by_name, stuck))


def _find_cycle(by_name: Mapping[str, Node], stuck: set[str]) -> list[str]:
    """Walk backwards through stuck nodes until one repeats: that stretch is a cycle."""
    path: list[str] = []
    seen: dict[str, int] = {}
    name = min(stuck)
    while name not in seen:
        seen[name] = len(path)
        path.append(name)
        node = by_name[name]
        name = next(s for s in [r.node for r in node.inputs] + list(node.control_inputs) if s in stuck)
    cycle = path[seen[name] :]
    cycle.reverse()
    return cycle + [cycle[0]]
