"""TensorFlow's dataflow control-flow primitives: Switch, Merge, Enter, Exit, NextIteration, LoopCond
and ControlTrigger.

They route tensors rather than compute them, so the dataflow executor (engine.compile.dataflow) interprets them
itself: which output of a Switch is live, when a Merge fires, which frame and iteration an Enter, Exit
or NextIteration sends its value to. The bodies registered here give the planner their output counts
and attrs and compute the value part of each, which is all a straight-line evaluation needs.
"""

from __future__ import annotations

from kernels.registry import kernel

__all__ = ["SWITCH_OPS", "MERGE_OPS", "ENTER_OPS", "EXIT_OPS", "NEXT_ITERATION_OPS", "CONTROL_FLOW_OPS"]

SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
MERGE_OPS = frozenset({"Merge", "RefMerge"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
# Ops whose presence makes a graph need the dataflow executor; passes never rewrite them.
CONTROL_FLOW_OPS = SWITCH_OPS | MERGE_OPS | ENTER_OPS | EXIT_OPS | NEXT_ITERATION_OPS | {"LoopCond", "ControlTrigger"}


@kernel(*sorted(SWITCH_OPS), outputs=2)
def switch(xp, data, pred):
    """(output_false, output_true): the executor marks the untaken one dead."""
    return (data, data)


@kernel(*sorted(MERGE_OPS), outputs=2)
def merge(xp, *inputs, N: int | None = None):
    """(output, value_index): the executor passes the first live input and its index."""
    raise RuntimeError("Merge runs only in the dataflow executor")


@kernel(*sorted(ENTER_OPS))
def enter(xp, data, *, frame_name: str, is_constant: bool = False, parallel_iterations: int = 10):
    return (data,)


@kernel(*sorted(EXIT_OPS | NEXT_ITERATION_OPS | {"LoopCond"}))
def forward(xp, data):
    return (data,)


@kernel("ControlTrigger", outputs=0)
def control_trigger(xp):
    """Fires even when its control inputs are dead, so it can order work after either branch."""
    return ()
