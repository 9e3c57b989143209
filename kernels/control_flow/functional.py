"""Functional control flow: If, While and function calls, whose bodies are functions of the graph's
FunctionDefLibrary.

These ops run other graphs, so no array kernel can compute them: the planner binds each node through
engine.runtime.calls.bind_call, which compiles the named functions. The registrations here give the
planner and the validator their attrs, output counts and statefulness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.registry import kernel

__all__ = ["IF_OPS", "WHILE_OPS", "PARTITIONED_CALL_OPS", "CALL_OPS"]

IF_OPS = frozenset({"If", "StatelessIf"})
WHILE_OPS = frozenset({"While", "StatelessWhile"})
PARTITIONED_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
# Ops that call functions of the library; the planner binds them specially.
CALL_OPS = IF_OPS | WHILE_OPS | PARTITIONED_CALL_OPS


def _count(attr: str):
    def outputs(attrs: Mapping[str, Any]) -> int:
        return len(attrs[attr])

    return outputs


def _bound_by_planner(op: str) -> RuntimeError:
    return RuntimeError(f"{op} runs only as bound by the planner (engine.runtime.calls.bind_call)")


# Statefulness as TensorFlow declares it. Passes leave every call op alone either way
# (engine.passes.guards): their bodies need the function library.
@kernel("If", outputs=_count("Tout"), stateful=True)
@kernel("StatelessIf", outputs=_count("Tout"))
def if_(xp, cond, *inputs, Tout: tuple, then_branch, else_branch, Tin: tuple = (), Tcond=None, output_shapes=()):
    """then_branch(*inputs) when `cond` is true, else else_branch(*inputs)."""
    raise _bound_by_planner("If")


@kernel("While", outputs=_count("T"), stateful=True)
@kernel("StatelessWhile", outputs=_count("T"))
def while_(xp, *loop_vars, T: tuple, cond, body, output_shapes=(), parallel_iterations: int = 10):
    """loop_vars = body(*loop_vars) while cond(*loop_vars)."""
    raise _bound_by_planner("While")


@kernel("StatefulPartitionedCall", outputs=_count("Tout"), stateful=True)
@kernel("PartitionedCall", outputs=_count("Tout"))
def partitioned_call(xp, *args, Tout: tuple, f, Tin: tuple = (), config: str = "", config_proto: Any = "",
                     executor_type: str = ""):
    """f(*args)."""
    raise _bound_by_planner("PartitionedCall")
