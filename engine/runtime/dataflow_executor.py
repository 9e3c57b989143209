"""The dataflow executor: runs a DataflowPlan the way TensorFlow's executor runs v1 control flow.

A node runs when all its inputs have arrived. Values carry a deadness bit: the untaken output of a
Switch is dead, a node with a dead input does not compute and passes deadness on, and a Merge fires on
its first live input (or, once all its expected inputs are dead, outputs dead). Loops live in frames:
an Enter sends its value into iteration 0 of a child frame instance (a loop invariant, `is_constant`,
into every iteration), NextIteration sends a live value into the next iteration of the same frame
(a dead one ends the loop), and Exit sends a live value back to the parent frame. Each iteration keeps
its own pending counts, so iterations and nested loops (one child frame instance per parent
iteration) never mix. A frame instance is complete when all its Enters have fired and no work is
left in any iteration; Exits that never produced a live value then send dead values out, so a loop
on an untaken branch is dead after it, as in TensorFlow.

`DataflowRun` is one run (a "step"): feeds may be supplied in several calls, and what they make
computable runs before each call returns, which is what partial runs need.

    >>> step = DataflowRun(plan)
    >>> step.feed(0, x)
    >>> step.run()
    >>> step.result(0)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.compile.dataflow import (
    ROOT_FRAME,
    ROUTE_COUNTED,
    ROUTE_DIRECT,
    ROUTE_MERGE,
    DataflowNode,
    DataflowPlan,
    Kind,
)
from engine.errors import DeadTensorError, EngineError, ExecutionError, LoopLimitError, kernel_failure

__all__ = ["DEAD", "DataflowRun", "run_dataflow"]


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


# A dead value; `_MISSING` marks a result that has not arrived (yet).
DEAD = _Marker("DEAD")
_MISSING = _Marker("MISSING")
_LIVE = None  # a live control edge carries no value


class _Iteration:
    """One iteration of one frame instance: the pending state of its partially ready nodes."""

    __slots__ = ("states", "outstanding", "child_frames")

    def __init__(self) -> None:
        # node id -> [pending, dead, inputs] (normal nodes) or [control pending, dead count, live input
        # index or -1, value, fired] (Merge); dropped once the node is queued.
        self.states: dict[int, list] = {}
        self.outstanding = 0  # queued nodes of this iteration
        self.child_frames = 0  # loop instances started in this iteration and not yet complete


class _Frame:
    """One instance of a loop frame (or the root frame): its live iterations and loop invariants."""

    __slots__ = ("name", "parent", "parent_iter", "iterations", "first_iter", "last_iter", "pending_enters",
                 "invariants", "live_exits", "children")

    def __init__(self, name: str, parent: _Frame | None, parent_iter: int, pending_enters: int):
        self.name, self.parent, self.parent_iter = name, parent, parent_iter
        self.iterations: dict[int, _Iteration] = {0: _Iteration()}
        self.first_iter = 0  # the oldest iteration not yet complete
        self.last_iter = 0  # the newest iteration started
        self.pending_enters = pending_enters
        self.invariants: list[tuple[DataflowNode, Any]] = []
        self.live_exits: set[int] = set()
        self.children: dict[tuple[int, str], _Frame] = {}


class DataflowRun:
    """One run of a dataflow plan; see the module docstring."""

    def __init__(self, plan: DataflowPlan):
        self.plan = plan
        self.root = _Frame(ROOT_FRAME, None, 0, 0)
        # (node id, frame, iteration number, its _Iteration, inputs, dead): the iteration object rides
        # along so that the hot loop does not look it up in `frame.iterations` at every step.
        self.queue: deque[tuple[int, _Frame, int, _Iteration, Sequence | None, bool]] = deque()
        self.results: list[Any] = [_MISSING] * len(plan.fetches)
        self._nodes = plan.nodes
        self._program = plan.program
        self._routes = plan.routes
        root_iteration = self.root.iterations[0]
        for node_id in plan.roots:
            self._enqueue(node_id, self.root, 0, root_iteration, (), False)

    # --- public --------------------------------------------------------------------------------------

    def feed(self, index: int, value: Any) -> None:
        """Supply the value of the `index`-th fed tensor (call `run` to compute what it enables)."""
        for i, (source, fed) in enumerate(self.plan.fetches):
            if source == "feed" and fed == index:
                self.results[i] = value
        for dst, slot in self.plan.feeds[index]:
            self._deliver(dst, slot, value, self.root, 0, self.root.iterations[0])

    def run(self) -> None:
        """Run every node that can run now. Kernel failures raise ExecutionError naming the node."""
        queue, program, root = self.queue, self._program, self.root
        normal, forward = Kind.NORMAL, Kind.FORWARD
        # IEEE results (1/0 -> inf) are values in TensorFlow, not warnings.
        with np.errstate(all="ignore"):
            while queue:
                node_id, frame, it, iteration, inputs, dead = queue.popleft()
                kind = program[node_id][0]
                # NOTE: live computing and forwarding nodes are nine in ten of the steps of a lowered
                # loop, so they are handled here rather than through _process.
                if dead or kind != normal and kind != forward:
                    self._process(node_id, frame, it, iteration, inputs, dead)
                elif kind == forward:
                    self._emit(node_id, inputs, _LIVE, frame, it, iteration)
                else:
                    self._emit(node_id, self._compute(node_id, inputs), _LIVE, frame, it, iteration)
                iteration.outstanding -= 1
                if iteration.outstanding == 0 and frame is not root:
                    self._complete_iterations(frame)

    def result(self, index: int) -> Any:
        """The value of the `index`-th fetch; DeadTensorError when it is dead, ExecutionError when the
        graph finished without producing it (its inputs never arrived)."""
        value = self.results[index]
        if value is DEAD:
            raise DeadTensorError(self.plan.fetch_names[index])
        if value is _MISSING:
            name = self.plan.fetch_names[index]
            raise ExecutionError(name.rpartition(":")[0], "", self.plan.device,
                                 f"fetched tensor '{name}' was never computed: its inputs never arrived "
                                 "(a Merge or loop waits on a value that is not produced)")
        return value

    # --- scheduling ----------------------------------------------------------------------------------

    def _enqueue(self, node_id: int, frame: _Frame, it: int, iteration: _Iteration, inputs: Sequence | None,
                 dead: bool) -> None:
        iteration.outstanding += 1
        self.queue.append((node_id, frame, it, iteration, inputs, dead))

    def _deliver(self, dst: int, slot: int, value: Any, frame: _Frame, it: int, iteration: _Iteration) -> None:
        """An input (slot >= 0) or control edge (slot -1, value DEAD or _LIVE) arrives at node `dst`."""
        route = self._routes[dst]
        if route == ROUTE_COUNTED:
            self._count(dst, slot, value, frame, it, iteration)
        elif route == ROUTE_MERGE:
            self._merge(dst, slot, value, frame, it, iteration)
        elif route == ROUTE_DIRECT or value is not DEAD:
            self._enqueue(dst, frame, it, iteration, (value,) if slot >= 0 else (), value is DEAD)
        # else a dead value reached an Exit or NextIteration: it does nothing (the loop goes on, or
        # ends), so it is not queued at all.

    def _count(self, dst: int, slot: int, value: Any, frame: _Frame, it: int, iteration: _Iteration) -> None:
        """An input or control edge arrives at a node that waits for several: the last one queues it."""
        states = iteration.states
        state = states.get(dst)
        if state is None:
            _, _, _, _, _, pending, num_inputs = self._program[dst]
            state = states[dst] = [pending, False, [None] * num_inputs]
        if slot >= 0:
            state[2][slot] = value
        if value is DEAD:
            state[1] = True
        state[0] -= 1
        if state[0] == 0:
            del states[dst]
            kind = self._program[dst][0]
            if not (state[1] and (kind == Kind.EXIT or kind == Kind.NEXT_ITERATION)):  # see _deliver
                self._enqueue(dst, frame, it, iteration, state[2], state[1])

    def _merge(self, dst: int, slot: int, value: Any, frame: _Frame, it: int, iteration: _Iteration) -> None:
        """An input or control edge arrives at a Merge: it fires on its first live input once its control
        edges are in, or outputs dead once every input it can get in this iteration is dead."""
        states = iteration.states
        state = states.get(dst)
        node = self._nodes[dst]
        if state is None:
            state = states[dst] = [node.num_control, 0, -1, None, False]
        if state[4]:
            return  # a Merge fires once per iteration; later inputs are ignored, as in TensorFlow
        if slot < 0:
            state[0] -= 1
        elif value is DEAD:
            state[1] += 1
        elif state[2] < 0:
            state[2], state[3] = slot, value
        if state[0] == 0:
            expected = _expected_merge_inputs(node, it)
            if state[2] >= 0 or state[1] >= expected:
                state[4] = True
                live = state[2] >= 0
                self._enqueue(dst, frame, it, iteration, (state[3], np.int32(state[2])) if live else None, not live)

    def _emit(self, node_id: int, values: Sequence[Any] | None, control: Any, frame: _Frame, it: int,
              iteration: _Iteration) -> None:
        """Send a node's outputs (all DEAD when `values` is None) and control edges to their readers in
        iteration `it` of `frame` (`iteration`)."""
        _, _, edges, control_edges, fetched, _, _ = self._program[node_id]
        queue = self.queue
        # NOTE: the DIRECT route is _deliver's first case inlined: most edges take it, and a method
        # call per edge is a third of the executor's time on a lowered LSTM.
        for k, dst, slot, route in edges:
            value = DEAD if values is None else values[k]
            if route == ROUTE_DIRECT:
                iteration.outstanding += 1
                queue.append((dst, frame, it, iteration, (value,), value is DEAD))
            elif route == ROUTE_COUNTED:
                self._count(dst, slot, value, frame, it, iteration)
            else:
                self._deliver(dst, slot, value, frame, it, iteration)
        if fetched and frame is self.root:
            for k, i in fetched:
                self.results[i] = DEAD if values is None else values[k]
        for dst, route in control_edges:
            if route == ROUTE_DIRECT:
                iteration.outstanding += 1
                queue.append((dst, frame, it, iteration, (), control is DEAD))
            elif route == ROUTE_COUNTED:
                self._count(dst, -1, control, frame, it, iteration)
            else:
                self._deliver(dst, -1, control, frame, it, iteration)

    # --- node kinds ----------------------------------------------------------------------------------

    def _compute(self, node_id: int, inputs: Sequence) -> Sequence:
        try:
            return self._program[node_id][1](*inputs)
        except EngineError:
            raise
        except Exception as e:  # kernels raise whatever numpy raises; name the node for the caller
            node = self._nodes[node_id]
            raise kernel_failure(node.name, node.op, self.plan.device, e) from e

    def _process(self, node_id: int, frame: _Frame, it: int, iteration: _Iteration, inputs: Sequence | None,
                 dead: bool) -> None:
        """Run a node that run()'s fast path does not: a dead one, or one that routes values."""
        kind = self._program[node_id][0]
        if kind == Kind.NORMAL or kind == Kind.FORWARD:
            if dead:
                self._emit(node_id, None, DEAD, frame, it, iteration)
            elif kind == Kind.FORWARD:
                self._emit(node_id, inputs, _LIVE, frame, it, iteration)
            else:
                self._emit(node_id, self._compute(node_id, inputs), _LIVE, frame, it, iteration)
        elif kind == Kind.SWITCH:
            if dead:
                self._emit(node_id, None, DEAD, frame, it, iteration)
                return
            data, pred = inputs
            values = (DEAD, data) if bool(np.asarray(pred)) else (data, DEAD)
            self._emit(node_id, values, _LIVE, frame, it, iteration)
        elif kind == Kind.MERGE:
            self._emit(node_id, None if dead else inputs, DEAD if dead else _LIVE, frame, it, iteration)
        elif kind == Kind.ENTER:
            self._enter(self._nodes[node_id], frame, it, DEAD if dead else inputs[0])
        elif kind == Kind.EXIT:
            if not dead:  # a dead Exit is an iteration that did not leave the loop
                frame.live_exits.add(node_id)
                parent = frame.parent
                self._emit(node_id, inputs, _LIVE, parent, frame.parent_iter, parent.iterations[frame.parent_iter])
        elif kind == Kind.NEXT_ITERATION:
            if not dead:  # a dead NextIteration ends the loop: no next iteration
                nxt = self._next_iteration(self._nodes[node_id], frame, it)
                self._emit(node_id, inputs, _LIVE, frame, nxt, frame.iterations[nxt])
        elif kind == Kind.CONTROL_TRIGGER:
            self._emit(node_id, (), _LIVE, frame, it, iteration)  # live even when its inputs are dead

    def _enter(self, node: DataflowNode, frame: _Frame, it: int, value: Any) -> None:
        key = (it, node.child_frame)
        child = frame.children.get(key)
        if child is None:
            child = _Frame(node.child_frame, frame, it, self.plan.frame_enters.get(node.child_frame, 0))
            frame.children[key] = child
            frame.iterations[it].child_frames += 1
        values = (value,)
        if node.is_constant:
            # A loop invariant: every iteration, present and future, reads the same value.
            child.invariants.append((node, value))
            for k in list(child.iterations):
                self._emit(node.id, values, _LIVE if value is not DEAD else DEAD, child, k, child.iterations[k])
        else:
            self._emit(node.id, values, _LIVE if value is not DEAD else DEAD, child, 0, child.iterations[0])
        child.pending_enters -= 1
        self._complete_iterations(child)

    def _next_iteration(self, node: DataflowNode, frame: _Frame, it: int) -> int:
        nxt = it + 1
        if nxt not in frame.iterations:
            if nxt > self.plan.max_iterations:
                raise LoopLimitError(node.name, frame.name, self.plan.max_iterations)
            iteration = frame.iterations[nxt] = _Iteration()
            frame.last_iter = max(frame.last_iter, nxt)
            for enter, value in frame.invariants:
                self._emit(enter.id, (value,), _LIVE if value is not DEAD else DEAD, frame, nxt, iteration)
        return nxt

    def _complete_iterations(self, frame: _Frame) -> None:
        """Drop finished iterations oldest first; when the last one finishes, the frame instance is
        complete: dead values go out through Exits that never fired, and the parent is checked next."""
        while frame.parent is not None:
            k = frame.first_iter
            state = frame.iterations[k]
            if state.outstanding or state.child_frames or (k == 0 and frame.pending_enters > 0):
                return
            del frame.iterations[k]
            if k < frame.last_iter:
                frame.first_iter = k + 1
                continue
            parent, pit = frame.parent, frame.parent_iter
            del parent.children[(pit, frame.name)]
            for exit_id in self.plan.frame_exits.get(frame.name, ()):
                if exit_id not in frame.live_exits:
                    self._emit(exit_id, None, DEAD, parent, pit, parent.iterations[pit])
            parent.iterations[pit].child_frames -= 1
            frame = parent


def _expected_merge_inputs(node: DataflowNode, it: int) -> int:
    """How many data inputs a Merge can receive in iteration `it`: a loop's Merge gets its Enter input
    in iteration 0 and its NextIteration input afterwards; any other Merge gets all of them."""
    back = sum(node.back_edges)
    if back == 0:
        return node.num_inputs
    return node.num_inputs - back if it == 0 else back


def run_dataflow(plan: DataflowPlan, feed_values: Sequence[Any]) -> list[Any]:
    """Run `plan` with every feed at once; returns the fetches in plan order."""
    step = DataflowRun(plan)
    for i, value in enumerate(feed_values):
        step.feed(i, value)
    step.run()
    return [step.result(i) for i in range(len(plan.fetches))]
