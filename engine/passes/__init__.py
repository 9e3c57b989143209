"""Graph optimization passes, run on each signature's pruned graph before it is planned.

A pass is a module with `run(graph, ctx) -> graph`: it returns a new Graph and never mutates its
input. `PassContext` says what a pass must leave alone: nodes whose outputs are fetched, fed or run
as targets keep their names and meaning. The pipeline below lists the order; a later issue adds
more passes (common subexpressions, arithmetic simplification, `tensorgate inspect --optimized`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.graph import Graph, TensorRef
from engine.passes import fold_affine, fold_constants, fuse_activation

__all__ = ["PassContext", "Pass", "PIPELINE", "optimize"]


@dataclass(frozen=True)
class PassContext:
    """What the signature pins down: fed tensors, and nodes whose outputs must keep their meaning."""

    fed: frozenset[TensorRef]
    preserve: frozenset[str]
    constant_folding_max_bytes: int = 16 * 1024 * 1024
    device: str = "cpu"

    def is_pinned(self, name: str) -> bool:
        """True when `name` is fetched/targeted, or any of its outputs is fed."""
        return name in self.preserve or any(ref.node == name for ref in self.fed)


Pass = Callable[[Graph, PassContext], Graph]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("fold_constants", fold_constants.run),
    ("fold_affine", fold_affine.run),
    ("fuse_activation", fuse_activation.run),
)


def optimize(graph: Graph, ctx: PassContext, passes: Sequence[str] | None = None) -> Graph:
    """Run the pipeline (or the named subset of it, in pipeline order) over `graph`."""
    for name, run in PIPELINE:
        if passes is None or name in passes:
            graph = run(graph, ctx)
    return graph
