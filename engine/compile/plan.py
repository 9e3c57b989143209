"""A plan: one signature of a graph compiled into plain data that a short loop executes.

Before planning, the signature's pruned graph goes through the optimization passes (engine.passes:
constant folding, arithmetic simplification, batch-norm and affine folding, common subexpressions,
fusion, dead nodes). A plan is a flat tuple of instructions over integer slots. Slot 0 is a sink for
outputs nobody reads; constants (Const nodes and everything folded from them) sit in preset slots,
uploaded once per session on a GPU (ConstantCache); feeds are written into their slots before the
loop; each instruction calls a bound kernel on its input slots, stores its outputs, and frees the
slots it was the last reader of. Identity-like ops and NoOps never become instructions: their outputs
alias their inputs' slots. A call op (If, While, PartitionedCall) is bound to its function bodies,
each compiled into a plan of its own; a signature with v1 control flow compiles into a dataflow plan
instead (engine.compile.dataflow), which engine.runtime.dataflow_executor runs.

    >>> print(compile_plan(graph, ["x:0"], ["out:0"]))
    %3 = MatMul(%1, %2)            # dense/MatMul
    %4 = BiasAdd(%3, %5)  free %3  # dense/BiasAdd
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kernels
from engine import devices
from engine.compile.dataflow import DataflowPlan, compile_dataflow
from engine.compile.prune import prune_to_signature
from engine.devices.rendezvous import RECV_OP, SEND_OP, TRANSFER_OPS, bind_recv, bind_send
from engine.errors import UnfedPlaceholderError, UnknownTensorError
from engine.graph import Graph, Node, TensorRef, dtypes, functions, parse_tensor_name
from engine.passes import PassContext, optimize, pipeline_names
from engine.runtime import calls
from engine.runtime.resources import ResourceManager
from kernels import jit
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS
from kernels.array.identity import IDENTITY_OPS
from kernels.control_flow.functional import CALL_OPS

__all__ = [
    "ConstantCache",
    "FeedSpec",
    "Instruction",
    "Plan",
    "PlanOptions",
    "PreparedSignature",
    "compile_nodes",
    "compile_plan",
    "format_shape",
    "prepare_signature",
]

PLACEHOLDER_OPS = frozenset({"Placeholder", "PlaceholderV2"})
SINK = 0


@dataclass(frozen=True)
class PlanOptions:
    """How plans are built."""

    constant_folding: bool = True
    # A folded result larger than this stays a runtime instruction (e.g. a huge Fill of zeros).
    constant_folding_max_bytes: int = 16 * 1024 * 1024
    # Rewrites that change which kernels run, never the results beyond float rounding: every pass of
    # engine.passes after constant folding (simplification, batch-norm/affine folding into weights,
    # common subexpressions, bias/activation fusion, dead-node removal).
    optimize: bool = True
    # A loop (v1 frames or a functional While) that runs more iterations than this fails with
    # LoopLimitError instead of running away.
    max_loop_iterations: int = 100_000
    # CPU kernels with a compiled (numba) loop use it (kernels.jit); False runs their numpy twins. A plan
    # compiles the loops its ops' kernels call while it is built (once per process, or loaded from
    # numba's cache), so that no request waits for a compiler.
    compiled_kernels: bool = True
    # Compiled loops missing from numba's cache compile on a background thread while the plan runs their
    # numpy twins (kernels.jit.warm_up_in_background), instead of the plan's build waiting for them.
    compile_in_background: bool = False
    # Most bytes one run may ask a kernel to allocate where the size depends on the values or shapes
    # fed (Fill, Tile, Range, broadcasting, ...: kernels.limits); past it the run fails with
    # ResourceLimitError before allocating. None: no limit.
    max_request_memory_bytes: int | None = None
    # Feeds must have the shapes their placeholders declare (a FeedShapeError otherwise), and passes may
    # rely on those shapes. False is TensorFlow's C++ session: a fed value of any shape replaces the
    # placeholder, and plans assume nothing of fed shapes (Grappler's assume_valid_feeds=false), so
    # that a client sending [1] to a [?,1] input gets what TensorFlow Serving gives it.
    check_feed_shapes: bool = True


@dataclass(frozen=True)
class FeedSpec:
    """A fed tensor: its slot, and the dtype and shape its Placeholder declares (None when unknown)."""

    name: str
    slot: int
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None


@dataclass(frozen=True)
class Instruction:
    fn: Callable[..., tuple]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    frees: tuple[int, ...]
    node: str
    op: str
    # Shown after the node name: a _Send's or _Recv's rendezvous key.
    detail: str = ""

    def __str__(self) -> str:
        outs = ", ".join("_" if s == SINK else f"%{s}" for s in self.outputs) or "()"
        ins = ", ".join(f"%{s}" for s in self.inputs)
        free = f"  free {' '.join(f'%{s}' for s in self.frees)}" if self.frees else ""
        detail = f"  [{self.detail}]" if self.detail else ""
        return f"{outs} = {self.op}({ins}){free}  # {self.node}{detail}"


@dataclass(frozen=True)
class Plan:
    """A compiled signature. `initial` holds every slot's value before a run (constants, else None)."""

    device: str
    feeds: tuple[FeedSpec, ...]
    fetches: tuple[str, ...]
    targets: tuple[str, ...]
    instructions: tuple[Instruction, ...]
    initial: tuple[Any, ...]
    fetch_slots: tuple[int, ...]
    # Set when the signature has v1 control flow (or was compiled for partial runs): the executor then
    # runs this dataflow plan instead of the (empty) instruction list.
    dataflow: DataflowPlan | None = None
    # The instructions as plain tuples (fn, inputs, output slot or slots, single-output?, frees): what
    # the executor's loop unpacks, cheaper than attribute lookups on every step.
    program: tuple[tuple, ...] = field(init=False, repr=False)
    # Each feed's and fetch's position by tensor name.
    feed_index: dict[str, int] = field(init=False, repr=False)
    fetch_index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        steps = tuple(
            (i.fn, i.inputs, i.outputs[0] if len(i.outputs) == 1 else i.outputs, len(i.outputs) == 1, i.frees)
            for i in self.instructions
        )
        object.__setattr__(self, "program", steps)
        object.__setattr__(self, "feed_index", {spec.name: i for i, spec in enumerate(self.feeds)})
        object.__setattr__(self, "fetch_index", {name: i for i, name in enumerate(self.fetches)})

    def __str__(self) -> str:
        if self.dataflow is not None:
            return str(self.dataflow)
        lines = [f"plan on {self.device}: {len(self.instructions)} instructions, {len(self.initial)} slots"]
        lines += [f"  feed %{f.slot} <- {f.name}" for f in self.feeds]
        lines += [f"  {ins}" for ins in self.instructions]
        lines += [f"  fetch {name} <- %{slot}" for name, slot in zip(self.fetches, self.fetch_slots)]
        return "\n".join(lines)


def format_shape(shape: tuple[int | None, ...] | None) -> str:
    """A shape as TensorFlow prints it in messages: [?,4], or <unknown>."""
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _resolve_refs(graph: Graph, names: Sequence[str]) -> list[TensorRef]:
    refs = []
    for name in names:
        try:
            ref = parse_tensor_name(name)
        except ValueError as e:
            raise UnknownTensorError(str(name), str(e)) from None
        if ref.node not in graph:
            raise UnknownTensorError(str(ref), "the graph has no such node")
        if not graph.has_tensor(ref):
            count = graph.output_counts[ref.node]
            raise UnknownTensorError(str(ref), f"node '{ref.node}' has {count} output(s)")
        refs.append(ref)
    return refs


def _readonly(value: Any) -> np.ndarray:
    # Constants are shared by every run: read-only arrays make an in-place kernel fail loudly instead
    # of corrupting later runs, and views of them that reach a caller are copied (see Session).
    arr = np.asarray(value)
    arr.flags.writeable = False
    return arr


class ConstantCache:
    """Constants uploaded to a device, shared by every plan (and function body) of one session, so
    that a model version's weights are copied to its GPU once, not once per signature or request.

    Keyed by Const node name and the identity of its host value (kept alive here): signatures that
    fold the same node differently get their own upload instead of a wrong one.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int, str], tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        self.uploads = 0  # how many arrays were copied to a device

    def get(self, name: str, value: Any, device: str) -> Any:
        key = (name, id(value), device)
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None:
            return entry[1]
        uploaded = devices.to_device(value, device)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = (value, uploaded)
                self.uploads += 1
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)


def _uploadable(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "biufc"


class _Builder:
    """Mutable state while one plan is compiled."""

    def __init__(
        self,
        graph: Graph,
        device: str,
        options: PlanOptions,
        constants: ConstantCache | None = None,
        host_nodes: frozenset[str] = frozenset(),
        resources: ResourceManager | None = None,
    ):
        self.graph, self.options = graph, options
        # Variables and tables live across runs in the session's manager; a plan compiled on its
        # own gets a private one.
        self.resources = resources if resources is not None else ResourceManager()
        self.device = devices.canonical_device(device)
        self.kind = devices.device_kind(device)
        self.xp = devices.array_module(self.device)  # numpy on CPUs, cupy on GPUs
        self.constants = constants if constants is not None else ConstantCache()
        # On a GPU: nodes whose values stay in host memory (shapes and their int arithmetic), as
        # TensorFlow's HostMemory kernels do; see engine.devices.placement.host_memory_nodes.
        self.host_nodes = host_nodes
        self.slot_of: dict[TensorRef, int] = {}
        self.initial: list[Any] = [None]  # slot 0: the sink
        self.constant: set[int] = set()
        self.steps: list[tuple[Callable, tuple[int, ...], tuple[int, ...], Node]] = []
        self.function_runs: dict[str, calls.BodyRun] = {}  # compiled function bodies, by name

    def new_slot(self, value: Any = None) -> int:
        self.initial.append(value)
        return len(self.initial) - 1

    def constant_slot(self, value: Any, name: str = "") -> int:
        value = _readonly(value)
        if self.kind != "cpu" and name not in self.host_nodes and _uploadable(value):
            value = self.constants.get(name, value, self.device)
        slot = self.new_slot(value)
        self.constant.add(slot)
        return slot

    def bind(self, node: Node) -> Callable[..., tuple]:
        """The node's kernel bound to its attrs; a call op (If, While, ...) bound to its functions'
        bodies, each compiled into a plan of its own; a _Send/_Recv bound to its rendezvous key."""
        if node.op == SEND_OP:
            return bind_send(node.attrs["key"])
        if node.op == RECV_OP:
            convert = None
            if devices.device_kind(node.attrs["src_device"]) != self.kind:
                device = self.device
                convert = lambda value: devices.to_device(value, device)
            return bind_recv(node.attrs["key"], convert, node.attrs.get("timeout"))
        if node.op in CALL_OPS:
            return calls.bind_call(
                node, self.graph.library, self.compile_function, self.options.max_loop_iterations, self.device,
                bind_kernel=self.bind if self.options.optimize else None,  # (fused recurrences: float rounding)
            )
        kdef = kernels.lookup(node.op, self.kind)
        context = None
        if kdef.context_params:
            compiled = self.options.compiled_kernels and jit.AVAILABLE and self.kind == "cpu"
            if compiled and "compiled" in kdef.context_params:
                if self.options.compile_in_background:
                    compiled = jit.warm_up_in_background((node.op,))
                else:
                    jit.warm_up((node.op,))
            context = {"resources": self.resources, "node_name": node.name, "compiled": compiled,
                       "memory_limit": self.options.max_request_memory_bytes}
        return kdef.bind(np if node.name in self.host_nodes else self.xp, node.attrs, context)

    def compile_function(self, function: functions.Function) -> calls.BodyRun:
        """A function body compiled once per plan build, run by the executor."""
        from engine.runtime.executor import execute  # the executor imports this module

        run = self.function_runs.get(function.name)
        if run is None:
            plan = compile_plan(function.graph, function.args, function.rets, function.control_rets,
                                device=self.device, options=self.options, constants=self.constants,
                                resources=self.resources)
            run = self.function_runs[function.name] = calls.body_runner(plan, function, execute)
        return run

    def add_node(self, node: Node) -> None:
        outputs = [TensorRef(node.name, i) for i in range(self.graph.output_counts[node.name])]
        if all(ref in self.slot_of for ref in outputs) and outputs:
            return  # every output is fed
        if node.op in PLACEHOLDER_OPS:
            raise UnfedPlaceholderError(
                node.name,
                dtypes.tf_name_of_numpy(node.attrs.get("dtype", np.float32)),
                format_shape(node.attrs.get("shape")),
            )
        if node.op in IDENTITY_OPS or node.op == "IdentityN":
            for ref, source in zip(outputs, node.inputs):
                self.slot_of.setdefault(ref, self.slot_of[source])
            return
        if node.op == "NoOp":
            return
        in_slots = tuple(self.slot_of[ref] for ref in node.inputs)
        if node.op == "Const":
            self.slot_of.setdefault(outputs[0], self.constant_slot(node.attrs["value"], node.name))
            return
        fn = self.bind(node)
        out_slots = []
        for ref in outputs:
            if ref in self.slot_of:  # fed: the run must not overwrite the fed value
                out_slots.append(SINK)
            else:
                self.slot_of[ref] = self.new_slot()
                out_slots.append(self.slot_of[ref])
        self.steps.append((fn, in_slots, tuple(out_slots), node))

    def instructions(self, keep: set[int]) -> tuple[Instruction, ...]:
        """Instructions with last-use frees; slots in `keep` (fetches, constants) are never freed."""
        last_use: dict[int, int] = {}
        for i, (_, ins, _, _) in enumerate(self.steps):
            for s in ins:
                last_use[s] = i
        frees: dict[int, list[int]] = {}
        for slot, i in last_use.items():
            if slot not in keep:
                frees.setdefault(i, []).append(slot)
        for i, (_, _, outs, _) in enumerate(self.steps):
            # Outputs nobody reads are dropped right away.
            dead = [s for s in outs if s != SINK and s not in last_use and s not in keep]
            if dead:
                frees.setdefault(i, []).extend(dead)
        return tuple(
            Instruction(fn, ins, outs, tuple(sorted(frees.get(i, ()))), node.name, node.op,
                        node.attrs.get("key", "") if node.op in TRANSFER_OPS else "")
            for i, (fn, ins, outs, node) in enumerate(self.steps)
        )


@dataclass(frozen=True)
class PreparedSignature:
    """A signature pruned and optimized, before placement and planning: `nodes` in topological order
    (loop back edges aside), fed tensors sorted with their declared (dtype, shape) where known."""

    graph: Graph
    nodes: tuple[Node, ...]
    feeds: tuple[TensorRef, ...]
    feed_types: tuple[tuple[np.dtype | None, tuple[int | None, ...] | None], ...]
    fetches: tuple[TensorRef, ...]
    targets: tuple[str, ...]


def prepare_signature(
    graph: Graph,
    feeds: Sequence[str],
    fetches: Sequence[str],
    targets: Sequence[str] = (),
    *,
    device: str = "cpu",
    options: PlanOptions | None = None,
    partial_run: bool = False,
) -> PreparedSignature:
    """Resolve names, prune to the signature and run the optimization passes (for `device`'s kind; for
    partial runs, whose feeds arrive a few at a time, with `partial_run`).

    Raises UnknownTensorError for names the graph lacks."""
    options = options or PlanOptions()
    feed_refs = sorted(set(_resolve_refs(graph, feeds)))
    fetch_refs = list(dict.fromkeys(_resolve_refs(graph, fetches)))
    for target in targets:
        if target.lstrip("^") not in graph:
            raise UnknownTensorError(target, "the graph has no such node to run as a target")
    target_names = tuple(dict.fromkeys(t.lstrip("^") for t in targets))

    feed_types = []
    for ref in feed_refs:
        node = graph.node(ref.node)
        declared = node.op in PLACEHOLDER_OPS or node.op == "PlaceholderWithDefault"
        shape = node.attrs.get("shape") if options.check_feed_shapes else None
        feed_types.append((node.attrs.get("dtype"), shape) if declared else (None, None))
    nodes = prune_to_signature(graph, feed_refs, fetch_refs, target_names)
    passes = pipeline_names(constant_folding=options.constant_folding, optimize=options.optimize)
    if passes:
        ctx = PassContext(
            fed=frozenset(feed_refs),
            preserve=frozenset(ref.node for ref in fetch_refs) | frozenset(target_names),
            constant_folding_max_bytes=options.constant_folding_max_bytes,
            device=devices.device_kind(device),
            fed_shapes={ref: shape for ref, (_, shape) in zip(feed_refs, feed_types)},
            partial_run=partial_run,
        )
        graph = optimize(Graph(nodes=tuple(nodes), output_counts=graph.output_counts, library=graph.library), ctx, passes)
        nodes = prune_to_signature(graph, feed_refs, fetch_refs, target_names)
    return PreparedSignature(graph, tuple(nodes), tuple(feed_refs), tuple(feed_types), tuple(fetch_refs), target_names)


def compile_nodes(
    graph: Graph,
    nodes: Sequence[Node],
    feeds: Sequence[TensorRef],
    feed_types: Sequence[tuple[Any, Any]],
    fetches: Sequence[TensorRef],
    targets: Sequence[str],
    *,
    device: str,
    options: PlanOptions,
    dataflow: bool = False,
    constants: ConstantCache | None = None,
    host_nodes: frozenset[str] = frozenset(),
    resources: ResourceManager | None = None,
) -> Plan:
    """Lay out slots and instructions for `nodes` (already pruned, optimized and placed on `device`;
    `graph` supplies output counts and the function library). Raises UnfedPlaceholderError for a
    needed Placeholder that is not fed."""
    b = _Builder(graph, device, options, constants, host_nodes, resources)
    feed_specs = []
    for ref, (dtype, shape) in zip(feeds, feed_types):
        b.slot_of[ref] = b.new_slot()
        feed_specs.append(FeedSpec(str(ref), b.slot_of[ref], dtype, shape))
    target_names = tuple(targets)
    if dataflow or any(node.op in CONTROL_FLOW_OPS for node in nodes):
        for node in nodes:
            if node.op in PLACEHOLDER_OPS:
                b.add_node(node)  # raises UnfedPlaceholderError: every needed placeholder must be fed
        flow = compile_dataflow(
            nodes, list(feeds), list(fetches), target_names, graph.output_counts, b.bind,
            max_iterations=options.max_loop_iterations, device=b.device,
        )
        instructions, initial, fetch_slots = (), (), ()
    else:
        flow = None
        for node in nodes:
            b.add_node(node)
        fetch_slots = tuple(b.slot_of[ref] for ref in fetches)
        instructions = b.instructions(keep=set(fetch_slots) | b.constant | {SINK})
        initial = tuple(b.initial)
    return Plan(
        device=b.device,
        feeds=tuple(feed_specs),
        fetches=tuple(str(ref) for ref in fetches),
        targets=target_names,
        instructions=instructions,
        initial=initial,
        fetch_slots=fetch_slots,
        dataflow=flow,
    )


def compile_plan(
    graph: Graph,
    feeds: Sequence[str],
    fetches: Sequence[str],
    targets: Sequence[str] = (),
    *,
    device: str = "cpu",
    options: PlanOptions | None = None,
    dataflow: bool = False,
    constants: ConstantCache | None = None,
    resources: ResourceManager | None = None,
) -> Plan:
    """Prune `graph` to the signature, optimize it, and lay out slots and instructions, every node on
    `device` (engine.devices.partition splits a signature across devices).

    Raises UnknownTensorError for names the graph lacks and UnfedPlaceholderError for a needed
    Placeholder that is not fed. A signature with v1 control flow (or any, with `dataflow=True`)
    compiles into a DataflowPlan for engine.runtime.dataflow_executor.
    """
    options = options or PlanOptions()
    prepared = prepare_signature(graph, feeds, fetches, targets, device=device, options=options, partial_run=dataflow)
    return compile_nodes(
        prepared.graph, prepared.nodes, prepared.feeds, prepared.feed_types, prepared.fetches, prepared.targets,
        device=device, options=options, dataflow=dataflow, constants=constants, resources=resources,
    )
