"""OpScope: what every op function does around the op it adds.

An op function opens `op_scope(...)`, which finds the graph (the inputs' graph, else the default one),
opens a name scope named after the op (`matmul`, `matmul_1`, ...), and hands back an OpScope: it
converts Python values to Const inputs (named after the argument, inside the op's scope: `mul/y`),
checks dtypes and ranks, raises BuildErrors naming the op, and finally emits the op under the
scope's name -- TensorFlow's own recipe, so that the names come out as TensorFlow's would.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from engine.builder.dtypes import DTypeLike, dtype_name
from engine.builder.errors import BuildError
from engine.builder.graph import GraphBuilder, get_default_graph
from engine.builder.shapes import Shape, format_shape
from engine.builder.tensor import Operation, Tensor

__all__ = ["OpScope", "op_scope", "graph_of"]


def graph_of(values: Sequence[Any]) -> GraphBuilder:
    """The graph the Tensors among `values` belong to (they must agree), else the default graph."""
    graph = None
    for value in values:
        if isinstance(value, (Tensor, Operation)):
            if graph is None:
                graph = value.graph
            elif value.graph is not graph:
                raise ValueError(f"'{value.name}' belongs to another graph than the op's other inputs")
    return graph if graph is not None else get_default_graph()


class OpScope:
    """The op being built: its type, graph and node name, plus the checks op functions share."""

    def __init__(self, graph: GraphBuilder, op_type: str, scope: str):
        self.graph, self.op_type, self.scope = graph, op_type, scope

    @property
    def name(self) -> str:
        """The node name the op will get."""
        return self.scope.rstrip("/")

    def fail(self, reason: str) -> BuildError:
        """The BuildError to raise: `raise scope.fail("...")`."""
        return BuildError(self.op_type, self.name, reason)

    def tensor(self, value: Any, arg: str, dtype: DTypeLike | None = None, *, dtype_hint: np.dtype | None = None) -> Tensor:
        """`value` as a Tensor: itself if it is one, else a Const named `arg` inside this op's scope."""
        from engine.builder.ops.constants import convert_to_tensor

        try:
            return convert_to_tensor(value, dtype, name=arg, dtype_hint=dtype_hint)
        except BuildError as e:
            raise self.fail(f"input '{arg}': {e.reason}") from None

    def check_dtype(self, arg: str, tensor: Tensor, allowed: Collection[np.dtype]) -> None:
        if tensor.dtype not in allowed:
            names = ", ".join(sorted(dtype_name(d) for d in allowed))
            raise self.fail(f"input '{arg}' has type {dtype_name(tensor.dtype)}, which {self.op_type} does not take (allowed: {names})")

    def check_same_dtype(self, tensors: Mapping[str, Tensor]) -> np.dtype:
        """The one dtype all `tensors` share; a BuildError naming the first that differs."""
        (first, first_tensor), *rest = tensors.items()
        for arg, tensor in rest:
            if tensor.dtype != first_tensor.dtype:
                raise self.fail(
                    f"input '{arg}' has type {dtype_name(tensor.dtype)} that does not match type "
                    f"{dtype_name(first_tensor.dtype)} of input '{first}'; cast one of them first"
                )
        return first_tensor.dtype

    def check_rank(self, arg: str, tensor: Tensor, expected: int | None = None, *, at_least: int = 0) -> None:
        """Rank exactly `expected`, or at least `at_least`; unknown ranks pass."""
        ndim = tensor.ndim
        if ndim is None:
            return
        if expected is not None and ndim != expected:
            raise self.fail(f"input '{arg}' must have rank {expected}, but has shape {format_shape(tensor.shape)}")
        if ndim < at_least:
            raise self.fail(f"input '{arg}' must have rank at least {at_least}, but has shape {format_shape(tensor.shape)}")

    def emit(self, inputs: Sequence[Tensor], attrs: Mapping[str, Any], outputs: Sequence[tuple[np.dtype, Shape]]) -> Operation:
        """Add the op, named after this scope."""
        return self.graph.create_op(self.op_type, inputs, attrs=attrs, outputs=outputs, name=self.scope)

    def emit_one(self, inputs: Sequence[Tensor], attrs: Mapping[str, Any], dtype: np.dtype, shape: Shape) -> Tensor:
        """Add an op with one output and return that output."""
        return self.emit(inputs, attrs, [(dtype, shape)]).outputs[0]


@contextmanager
def op_scope(op_type: str, name: str | None, default_name: str, values: Sequence[Any] = ()) -> Iterator[OpScope]:
    """Open the op's graph and name scope: `with op_scope("MatMul", name, "MatMul", [a, b]) as s:`."""
    graph = graph_of(values)
    with graph.as_default(), graph.name_scope(name or default_name) as scope:
        yield OpScope(graph, op_type, scope)
