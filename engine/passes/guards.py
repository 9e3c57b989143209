"""What no optimization pass may touch: nodes whose meaning is more than the value they compute.

An *opaque* node routes values between frames or branches (TensorFlow's v1 control flow: Switch,
Merge, Enter, Exit, NextIteration, LoopCond, ControlTrigger), calls a function of the library (If,
While, PartitionedCall and their variants), has an effect or holds state (a stateful kernel, or an op
of a family TensorFlow marks stateful), has no kernel we know, or is a placeholder (its value comes
from the run, not from its inputs). Passes never fold, merge, rewrite or remove an opaque node, and
never look through one: its outputs are as good as unknown.

    >>> is_opaque(graph.node("while/Merge"))
    True
"""

from __future__ import annotations

import kernels
from engine.graph import Node
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS, NEXT_ITERATION_OPS
from kernels.control_flow.functional import CALL_OPS  # ops that run functions of the graph's library

__all__ = ["CALL_OPS", "LOOP_BACK_EDGE_OPS", "is_opaque"]

# A loop's NextIteration -> Merge edge is the one cycle TensorFlow allows; orderings skip it.
LOOP_BACK_EDGE_OPS = NEXT_ITERATION_OPS

# Families TensorFlow marks stateful or whose values are handles to shared, mutable state. A kernel
# registered for one of them without `stateful=True` must still never be folded or merged: two
# RandomUniform nodes are two draws, two TensorListReserve nodes are two lists.
_STATEFUL_PREFIXES = (
    "Random", "TruncatedNormal", "Multinomial", "ParameterizedTruncatedNormal",
    "Variable", "VarHandle", "ReadVariable", "Assign", "Resource", "Print", "Assert",
    "TensorArray", "TensorList", "EmptyTensorList", "Stack", "Queue", "Iterator", "HashTable", "LookupTable",
    "MutableHashTable", "Save", "Restore",
)

_PLACEHOLDERS = frozenset({"Placeholder", "PlaceholderV2", "PlaceholderWithDefault"})


def is_opaque(node: Node) -> bool:
    """True when passes must leave `node` exactly as it is (see the module docstring)."""
    op = node.op
    if op in CONTROL_FLOW_OPS or op in CALL_OPS or op in _PLACEHOLDERS or op.startswith(_STATEFUL_PREFIXES):
        return True
    if not kernels.has_op(op, "cpu"):
        return True
    return kernels.lookup(op, "cpu").stateful

