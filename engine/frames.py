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

from engine.dataflow import ROOT_FRAME, DataflowNode, DataflowPlan, Kind
from engine.errors import DeadTensorError, EngineError, ExecutionError, LoopLimitError

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
        self.queue: deque[tuple[int, _Frame, int, list | None, bool]] = deque()
        self.results: list[Any] = [_MISSING] * len(plan.fetches)
        self._nodes = plan.nodes
        # node id -> [(output index, fetch index)] for fetched outputs
        self._fetch_of: dict[int, list[tuple[int, int]]] = {}
        for i, (source, index) in enumerate(plan.fetches):
            if source != "feed":
                self._fetch_of.setdefault(source, []).append((index, i))
        for node_id in plan.roots:
            self._enqueue(node_id, self.root, 0, [], False)

    # --- public --------------------------------------------------------------------------------------

    def feed(self, index: int, value: Any) -> None:
        """Supply the value of the `index`-th fed tensor (call `run` to compute what it enables)."""
        for i, (source, fed) in enumerate(self.plan.fetches):
            if source == "feed" and fed == index:
                self.results[i] = value
        for dst, slot in self.plan.feeds[index]:
            self._deliver(dst, slot, value, self.root, 0)

    def run(self) -> None:
        """Run every node that can run now. Kernel failures raise ExecutionError naming the node."""
        queue, nodes = self.queue, self._nodes
        # IEEE results (1/0 -> inf) are values in TensorFlow, not warnings.
        with np.errstate(all="ignore"):
            while queue:
                node_id, frame, it, inputs, dead = queue.popleft()
                self._process(nodes[node_id], frame, it, inputs, dead)
                iteration = frame.iterations[it]
                iteration.outstanding -= 1
                if iteration.outstanding == 0 and frame is not self.root:
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

    def _enqueue(self, node_id: int, frame: _Frame, it: int, inputs: list | None, dead: bool) -> None:
        frame.iterations[it].outstanding += 1
        self.queue.append((node_id, frame, it, inputs, dead))

    def _deliver(self, dst: int, slot: int, value: Any, frame: _Frame, it: int) -> None:
        """An input (slot >= 0) or control edge (slot -1, value DEAD or _LIVE) arrives at node `dst`."""
        node = self._nodes[dst]
        if node.pending == 1 and node.kind != Kind.MERGE:  # the common chain: nothing to wait for
            self._enqueue(dst, frame, it, [value] if slot >= 0 else [], value is DEAD)
            return
        states = frame.iterations[it].states
        state = states.get(dst)
        if node.kind != Kind.MERGE:
            if state is None:
                state = states[dst] = [node.pending, False, [None] * node.num_inputs]
            if slot >= 0:
                state[2][slot] = value
            if value is DEAD:
                state[1] = True
            state[0] -= 1
            if state[0] == 0:
                del states[dst]
                self._enqueue(dst, frame, it, state[2], state[1])
        else:
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
                    self._enqueue(dst, frame, it, [state[3], np.int32(state[2])] if live else None, not live)

    def _emit(self, node: DataflowNode, values: Sequence[Any] | None, control: Any, frame: _Frame, it: int) -> None:
        """Send a node's outputs (all DEAD when `values` is None) and control edges to their readers."""
        for k, edges in enumerate(node.outputs):
            value = DEAD if values is None else values[k]
            for dst, slot in edges:
                self._deliver(dst, slot, value, frame, it)
        if frame is self.root and node.id in self._fetch_of:
            for k, i in self._fetch_of[node.id]:
                self.results[i] = DEAD if values is None else values[k]
        for dst in node.control_out:
            self._deliver(dst, -1, control, frame, it)

    # --- node kinds ----------------------------------------------------------------------------------

    def _process(self, node: DataflowNode, frame: _Frame, it: int, inputs: list | None, dead: bool) -> None:
        kind = node.kind
        if kind == Kind.NORMAL:
            if dead:
                self._emit(node, None, DEAD, frame, it)
                return
            try:
                values = node.fn(*inputs)
            except EngineError:
                raise
            except Exception as e:  # kernels raise whatever numpy raises; name the node for the caller
                raise ExecutionError(node.name, node.op, self.plan.device, str(e) or type(e).__name__) from e
            self._emit(node, values, _LIVE, frame, it)
        elif kind == Kind.SWITCH:
            if dead:
                self._emit(node, None, DEAD, frame, it)
                return
            data, pred = inputs
            taken = 1 if bool(np.asarray(pred)) else 0
            values = [DEAD, DEAD]
            values[taken] = data
            self._emit(node, values, _LIVE, frame, it)
        elif kind == Kind.MERGE:
            self._emit(node, None if dead else inputs, DEAD if dead else _LIVE, frame, it)
        elif kind == Kind.ENTER:
            self._enter(node, frame, it, DEAD if dead else inputs[0])
        elif kind == Kind.EXIT:
            if not dead:  # a dead Exit is an iteration that did not leave the loop
                frame.live_exits.add(node.id)
                self._emit(node, [inputs[0]], _LIVE, frame.parent, frame.parent_iter)
        elif kind == Kind.NEXT_ITERATION:
            if not dead:  # a dead NextIteration ends the loop: no next iteration
                self._emit(node, [inputs[0]], _LIVE, frame, self._next_iteration(node, frame, it))
        elif kind == Kind.CONTROL_TRIGGER:
            self._emit(node, (), _LIVE, frame, it)  # live even when its inputs are dead

    def _enter(self, node: DataflowNode, frame: _Frame, it: int, value: Any) -> None:
        key = (it, node.child_frame)
        child = frame.children.get(key)
        if child is None:
            child = _Frame(node.child_frame, frame, it, self.plan.frame_enters.get(node.child_frame, 0))
            frame.children[key] = child
            frame.iterations[it].child_frames += 1
        values = [value]
        if node.is_constant:
            # A loop invariant: every iteration, present and future, reads the same value.
            child.invariants.append((node, value))
            for k in list(child.iterations):
                self._emit(node, values, _LIVE if value is not DEAD else DEAD, child, k)
        else:
            self._emit(node, values, _LIVE if value is not DEAD else DEAD, child, 0)
        child.pending_enters -= 1
        self._complete_iterations(child)

    def _next_iteration(self, node: DataflowNode, frame: _Frame, it: int) -> int:
        nxt = it + 1
        if nxt not in frame.iterations:
            if nxt > self.plan.max_iterations:
                raise LoopLimitError(node.name, frame.name, self.plan.max_iterations)
            frame.iterations[nxt] = _Iteration()
            frame.last_iter = max(frame.last_iter, nxt)
            for enter, value in frame.invariants:
                self._emit(enter, [value], _LIVE if value is not DEAD else DEAD, frame, nxt)
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
                    self._emit(self._nodes[exit_id], None, DEAD, parent, pit)
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
