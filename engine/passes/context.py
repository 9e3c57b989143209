"""What a signature pins down for the optimization passes: the fed tensors, and the nodes whose
outputs are fetched or run as targets and so must keep their names and meaning."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from engine.graph import TensorRef

__all__ = ["PassContext"]


@dataclass(frozen=True)
class PassContext:
    """What a pass must leave alone, and its limits.

    >>> ctx = PassContext(fed=frozenset({TensorRef("x")}), preserve=frozenset({"probs"}))
    >>> ctx.is_pinned("probs"), ctx.is_pinned("x"), ctx.is_pinned("dense/MatMul")
    (True, True, False)
    """

    fed: frozenset[TensorRef]
    preserve: frozenset[str]
    constant_folding_max_bytes: int = 16 * 1024 * 1024
    device: str = "cpu"
    # Declared shapes of fed tensors, where known: the session checks feeds against them, so passes
    # may rely on their rank (a pruned graph no longer holds the fed placeholders).
    fed_shapes: Mapping[TensorRef, tuple[int | None, ...] | None] = field(default_factory=lambda: MappingProxyType({}))
    # The signature is compiled for partial runs, whose feeds arrive a few at a time: v1 loops then stay
    # loops (engine.passes.functionalize_loops), each part of one running as soon as its own feeds are in.
    partial_run: bool = False

    def is_pinned(self, name: str) -> bool:
        """True when `name` is fetched/targeted, or any of its outputs is fed."""
        return name in self.preserve or self.is_fed(name)

    def is_fed(self, name: str) -> bool:
        """True when any output of node `name` is fed."""
        return name in self._fed_nodes

    @cached_property
    def _fed_nodes(self) -> frozenset[str]:
        # Passes ask for every node they look at: a set, not a scan of the feeds each time.
        return frozenset(ref.node for ref in self.fed)
