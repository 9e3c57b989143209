"""The executor: runs a plan's instructions in order over a list of slots.

It is deliberately a short loop; everything that can be decided ahead of time (which kernel, which
attrs, which slots, when to free) was decided when the plan was compiled.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine import devices
from engine.compile.plan import Plan
from engine.errors import EngineError, kernel_failure
from engine.runtime.dataflow_executor import run_dataflow

__all__ = ["execute", "execute_from_host", "execute_profiled"]


def execute(plan: Plan, feed_values: Sequence[Any]) -> list[Any]:
    """Run `plan` with `feed_values` (in `plan.feeds` order); returns values in `plan.fetches` order.

    A kernel failure is re-raised as ExecutionError naming the node and op. Plans with control flow
    run on the dataflow executor (engine.runtime.dataflow_executor).
    """
    if plan.dataflow is not None:
        return run_dataflow(plan.dataflow, feed_values)
    return _run(plan, feed_values, plan.program)


def _run(plan: Plan, feed_values: Sequence[Any], program: Sequence[tuple]) -> list[Any]:
    """The loop: `program` is the plan's (or the same steps with their functions wrapped)."""
    slots = list(plan.initial)
    for spec, value in zip(plan.feeds, feed_values):
        slots[spec.slot] = value
    step = 0
    # IEEE results (1/0 -> inf, log(0) -> -inf, NaN casts) are values in TensorFlow, not warnings.
    with np.errstate(all="ignore"):
        try:
            for step, (fn, inputs, out, single, frees) in enumerate(program):
                results = fn(*[slots[i] for i in inputs])
                if single:
                    slots[out] = results[0]
                else:
                    for slot, value in zip(out, results):
                        slots[slot] = value
                for slot in frees:
                    slots[slot] = None
        except EngineError:
            raise
        except Exception as e:  # kernels raise whatever numpy raises; name the node for the caller
            ins = plan.instructions[step]
            raise kernel_failure(ins.node, ins.op, plan.device, e) from e
    return [slots[s] for s in plan.fetch_slots]


def execute_profiled(plan: Plan, feed_values: Sequence[Any]) -> tuple[list[Any], list[tuple[str, str, float]]]:
    """`execute`, also timing every instruction: (fetched values, [(node, op, seconds)] in plan order).

    For benchmarks and diagnostics, not for serving: each step's function is wrapped in a timer. A
    dataflow plan (control flow) is timed as one step."""
    clock = time.perf_counter
    if plan.dataflow is not None:
        start = clock()
        values = run_dataflow(plan.dataflow, feed_values)
        return values, [("(dataflow)", "(dataflow)", clock() - start)]
    timings: list[tuple[str, str, float]] = []

    def timed(fn: Any, ins: Any) -> Any:
        def call(*args: Any) -> Any:
            start = clock()
            try:
                return fn(*args)
            finally:
                timings.append((ins.node, ins.op, clock() - start))

        return call

    program = tuple((timed(step[0], ins), *step[1:]) for ins, step in zip(plan.instructions, plan.program))
    return _run(plan, feed_values, program), timings


def execute_from_host(plan: Plan, host_values: Sequence[Any]) -> list[Any]:
    """`execute` with host feed values first copied to the plan's device (a GPU plan run eagerly)."""
    return execute(plan, [devices.to_device(v, plan.device) for v in host_values])
