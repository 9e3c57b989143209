"""Typed engine errors: every failure the engine reports names the node or tensor it concerns.

Two families matter to callers. `GraphError`s say a graph cannot be loaded or run as written (found at
load or plan time); `RequestError`s say a particular run's feeds/fetches are wrong; `ExecutionError`s
say a kernel failed while running. Nothing here knows about HTTP: the service maps these classes to
status codes in one table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = [
    "DeadTensorError",
    "DuplicateKernelError",
    "DuplicateNodeError",
    "EngineError",
    "ExecutionError",
    "FeedDtypeError",
    "FeedError",
    "FeedShapeError",
    "GraphCycleError",
    "GraphError",
    "GraphParseError",
    "InvalidAttrError",
    "InvalidInputError",
    "KernelNotFoundError",
    "LoopLimitError",
    "OutOfMemoryError",
    "MissingInputError",
    "PartialRunError",
    "PartialRunLimitError",
    "PartialRunNotFoundError",
    "RendezvousAbortedError",
    "RendezvousError",
    "RequestError",
    "ResourceLimitError",
    "SavedModelError",
    "UnfedPlaceholderError",
    "UnknownTensorError",
    "UnsupportedOpError",
    "kernel_failure",
]


class EngineError(Exception):
    """Base of every error the engine raises."""


# --- graphs that cannot be loaded or planned -----------------------------------------------------------


class GraphError(EngineError):
    """The graph itself is invalid or uses something the engine does not support."""


class GraphParseError(GraphError):
    """The bytes or text are not a GraphDef."""


class DuplicateNodeError(GraphError):
    def __init__(self, names: Iterable[str]):
        self.names = sorted(set(names))
        super().__init__(f"duplicate node names in graph: {', '.join(repr(n) for n in self.names)}")


class MissingInputError(GraphError):
    def __init__(self, node: str, input_name: str):
        self.node, self.input_name = node, input_name
        super().__init__(f"node '{node}' has input '{input_name}', but the graph has no such node")


class InvalidInputError(GraphError):
    """An input names a node that exists but an output index that does not, or is malformed."""

    def __init__(self, node: str, input_name: str, reason: str):
        self.node, self.input_name = node, input_name
        super().__init__(f"node '{node}' input '{input_name}': {reason}")


class UnsupportedOpError(GraphError):
    """Ops with no kernel; `ops` maps each op type to the nodes that use it, `origins` each op to where it
    comes from where that is known (engine.graph.op_origin: "TensorFlow" or a custom-op pip package)."""

    def __init__(self, ops: Mapping[str, Iterable[str]], device: str | None = None,
                 origins: Mapping[str, str | None] | None = None):
        self.ops = {op: sorted(nodes) for op, nodes in sorted(ops.items())}
        self.origins = dict(origins or {})
        where = f" on device '{device}'" if device else ""
        parts = []
        for op, nodes in self.ops.items():
            shown = ", ".join(repr(n) for n in nodes[:5])
            more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
            origin = self.origins.get(op)
            source = "" if origin is None else "; a core TensorFlow op" if origin == "TensorFlow" else f"; from {origin}"
            parts.append(f"{op} (nodes {shown}{more}{source})")
        super().__init__(f"unsupported ops{where}: {'; '.join(parts)}")


class InvalidAttrError(GraphError):
    def __init__(self, node: str, op: str, attr: str, reason: str):
        self.node, self.op, self.attr = node, op, attr
        super().__init__(f"node '{node}' ({op}): attr '{attr}' {reason}")


class GraphCycleError(GraphError):
    def __init__(self, nodes: Iterable[str]):
        self.nodes = list(nodes)
        shown = " -> ".join(self.nodes[:10]) + (" -> ..." if len(self.nodes) > 10 else "")
        super().__init__(f"graph has a cycle outside a loop construct: {shown}")


class KernelNotFoundError(GraphError):
    def __init__(self, op: str, device: str):
        self.op, self.device = op, device
        super().__init__(f"no kernel registered for op '{op}' on device '{device}'")


class DuplicateKernelError(EngineError):
    def __init__(self, op: str, device: str):
        self.op, self.device = op, device
        super().__init__(f"a kernel for op '{op}' on device '{device}' is already registered")


class SavedModelError(GraphError):
    """A SavedModel cannot be loaded: no MetaGraphDef with the requested tags, missing or corrupt
    variables (the message names the key and the file), a failed checksum, or a structure the loader
    does not support (sliced variables, unsupported ops such as lookup tables)."""


# --- requests that do not fit the graph --------------------------------------------------------------


class RequestError(EngineError):
    """A run's feeds, fetches or targets do not fit the graph."""


class UnknownTensorError(RequestError):
    def __init__(self, name: str, reason: str = "the graph has no such tensor"):
        self.name = name
        super().__init__(f"tensor '{name}': {reason}")


class UnfedPlaceholderError(RequestError):
    def __init__(self, name: str, dtype: str, shape: str):
        self.name, self.dtype, self.shape = name, dtype, shape
        super().__init__(
            f"You must feed a value for placeholder tensor '{name}' with dtype {dtype} and shape {shape}"
        )


class FeedError(RequestError):
    """A fed value cannot be used for its tensor."""

    def __init__(self, name: str, message: str):
        self.name = name
        super().__init__(message)


class FeedDtypeError(FeedError):
    def __init__(self, name: str, expected: str, got: str):
        self.expected, self.got = expected, got
        super().__init__(name, f"feed '{name}' expects dtype {expected}, got {got}")


class FeedShapeError(FeedError):
    def __init__(self, name: str, expected: str, got: str):
        self.expected, self.got = expected, got
        super().__init__(name, f"feed '{name}' expects shape {expected}, got {got}")


# --- failures while running ----------------------------------------------------------------------------


class ExecutionError(EngineError):
    """A kernel failed; the message ends with TensorFlow's `[[{{node NAME}}]]` marker."""

    def __init__(self, node: str, op: str, device: str, message: str):
        self.node, self.op, self.device = node, op, device
        super().__init__(f"{op} on {device} failed: {message}\n\t [[{{{{node {node}}}}}]]")


class DeadTensorError(ExecutionError):
    """A fetched tensor lies on a branch that was not taken (TensorFlow: "does not have value")."""

    def __init__(self, name: str):
        self.name = name
        EngineError.__init__(
            self, f"fetched tensor '{name}' has no value: it is on a branch of a conditional that was not taken"
        )
        self.node, self.op, self.device = name.rpartition(":")[0] or name, "", ""


class LoopLimitError(ExecutionError):
    """A loop ran more iterations than the configured limit (a runaway loop is stopped, not hung)."""

    def __init__(self, node: str, frame: str, limit: int):
        self.node, self.op, self.device, self.frame, self.limit = node, "", "", frame, limit
        EngineError.__init__(
            self,
            f"loop '{frame}' exceeded the limit of {limit} iterations (PlanOptions.max_loop_iterations / "
            f"TENSORGATE_MAX_LOOP_ITERATIONS)\n\t [[{{{{node {node}}}}}]]",
        )


class ResourceLimitError(ExecutionError):
    """A kernel would have allocated more than the per-request memory budget; refused before
    allocating (kernels.limits). `requested` and `limit` are bytes."""

    def __init__(self, node: str, op: str, device: str, requested: int, limit: int, what: str = ""):
        self.requested, self.limit, self.what = requested, limit, what
        subject = what or "its output"
        super().__init__(node, op, device,
                         f"{subject} would take {requested} bytes, more than the limit of {limit} bytes per request "
                         "(TENSORGATE_MAX_REQUEST_MEMORY_BYTES / PlanOptions.max_request_memory_bytes)")


class OutOfMemoryError(ExecutionError):
    """A kernel ran out of memory (a MemoryError while it ran): the machine, not the request's budget,
    was exhausted."""

    def __init__(self, node: str, op: str, device: str, detail: str = ""):
        extra = f" ({detail})" if detail else ""
        super().__init__(node, op, device, f"out of memory{extra}")


def kernel_failure(node: str, op: str, device: str, error: Exception) -> ExecutionError:
    """The ExecutionError an executor raises for a kernel that raised `error`: a refused allocation
    (kernels.limits.AllocationTooLarge) is a ResourceLimitError, a MemoryError an OutOfMemoryError, and
    anything else (kernels raise whatever numpy raises) a plain ExecutionError with its message. Only
    called on failure, so the executors' normal path pays nothing for it."""
    from kernels.limits import AllocationTooLarge  # kernels import this module: import late

    if isinstance(error, AllocationTooLarge):
        return ResourceLimitError(node, op, device, error.requested, error.limit, error.what)
    if isinstance(error, MemoryError):
        return OutOfMemoryError(node, op, device, str(error))
    return ExecutionError(node, op, device, str(error) or type(error).__name__)


# --- partial runs ----------------------------------------------------------------------------------------


class PartialRunError(RequestError):
    """A partial-run call does not fit its setup (feeds/fetches not declared, repeated, not computable)."""


class PartialRunNotFoundError(PartialRunError):
    """The handle is unknown, already finished, closed, or expired."""

    def __init__(self, handle: str, reason: str = "no such partial run (it finished, was closed or expired)"):
        self.handle = handle
        super().__init__(f"partial run '{handle}': {reason}")


class PartialRunLimitError(PartialRunError):
    """Too many partial runs are open on this session."""

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"too many open partial runs (limit {limit}); finish or close one first")


# --- devices and partitions --------------------------------------------------------------------------


class RendezvousError(ExecutionError):
    """A transfer between partitions failed: a key sent twice, a receive that timed out, or a
    _Send/_Recv run outside a partitioned run."""

    def __init__(self, message: str):
        self.node, self.op, self.device = "", "", ""
        EngineError.__init__(self, message)


class RendezvousAbortedError(RendezvousError):
    """A receive woken because another partition of the same run failed first. The run reports that
    first error (`cause`), never this one."""

    def __init__(self, key: str, cause: BaseException):
        self.key, self.cause = key, cause
        super().__init__(f"receive of '{key}' aborted: {type(cause).__name__}: {cause}")
