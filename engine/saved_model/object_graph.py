"""Variables found through a TF2 SavedModel's object graph, the way TensorFlow 2's own loader finds them.

A TF2 SavedModel describes the Python objects it saved twice: `MetaGraphDef.object_graph_def` (a
SavedObjectGraph: the objects, and for each traced function the objects bound to its captured
inputs) and the checkpoint's `_CHECKPOINTABLE_OBJECT_GRAPH` entry (a TrackableObjectGraph: the same
objects, each variable naming the checkpoint key of its value). `tf.saved_model.load` restores
variables by walking both from the root, matching objects by the names of the edges that lead to
them, and binds them to the functions' captures.

The restore op (engine.saved_model.restore) usually reaches every variable too, and is what TensorFlow
Serving runs; but not always: Keras 3 layers held by a `tf.Module` export their variables twice, and
the restore op restores one copy (`Variable`, `Variable_1`, ...) while the signatures capture the
other (`dense/bias`). Following a signature call's captured inputs to their objects, and the objects
to their checkpoint keys, finds those too.

    >>> object_graph_sources(meta_graph, bundle)
    {'dense_2/bias': Checkpointed(key='project/bias/.ATTRIBUTES/VARIABLE_VALUE', ...), ...}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from google.protobuf import message as _message

from engine.errors import SavedModelError
from engine.proto import meta_graph_pb2, saved_object_graph_pb2, trackable_object_graph_pb2
from engine.saved_model.inline import input_node
from engine.saved_model.restore import Checkpointed
from engine.saved_model.tensor_bundle import TensorBundle
from kernels.control_flow.functional import PARTITIONED_CALL_OPS

__all__ = ["OBJECT_GRAPH_KEY", "captured_variables", "object_graph_sources"]

# The checkpoint entry holding the serialized TrackableObjectGraph.
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VARIABLE_VALUE = "VARIABLE_VALUE"


def captured_variables(meta_graph: meta_graph_pb2.MetaGraphDef) -> dict[str, int]:
    """VarHandleOp node -> the id of the saved object bound to it, for every variable passed as a
    captured input to a call of a traced function at the graph's top level (signature wrappers)."""
    saved = meta_graph.object_graph_def
    nodes = {nd.name: nd for nd in meta_graph.graph_def.node}
    found: dict[str, int] = {}
    for nd in meta_graph.graph_def.node:
        if nd.op not in PARTITIONED_CALL_OPS:
            continue
        function = saved.concrete_functions.get(nd.attr["f"].func.name)
        if function is None or not function.bound_inputs:
            continue
        data = [text for text in nd.input if not text.startswith("^")]
        # The captured inputs follow the caller's: the last len(bound_inputs) inputs.
        captured = data[len(data) - len(function.bound_inputs):]
        for text, object_id in zip(captured, function.bound_inputs):
            source = nodes.get(input_node(text))
            if (source is not None and source.op == "VarHandleOp" and 0 <= object_id < len(saved.nodes)
                    and saved.nodes[object_id].WhichOneof("kind") == "variable"):
                found.setdefault(source.name, object_id)
    return found


def _match_objects(saved: saved_object_graph_pb2.SavedObjectGraph,
                   trackable: trackable_object_graph_pb2.TrackableObjectGraph) -> dict[int, int]:
    """Saved object id -> checkpoint object id, walking both graphs from their roots along edges of
    the same name (what tf.saved_model.load does)."""
    if not saved.nodes or not trackable.nodes:
        return {}
    matched = {0: 0}
    pending = deque([0])
    while pending:
        s = pending.popleft()
        by_name = {child.local_name: child.node_id for child in trackable.nodes[matched[s]].children}
        for child in saved.nodes[s].children:
            t = by_name.get(child.local_name)
            if t is None or child.node_id in matched or not 0 <= t < len(trackable.nodes):
                continue
            matched[child.node_id] = t
            pending.append(child.node_id)
    return matched


def object_graph_sources(meta_graph: meta_graph_pb2.MetaGraphDef, bundle: Callable[[], TensorBundle],
                         wanted: set[str] | None = None) -> dict[str, Checkpointed]:
    """VarHandleOp node -> its checkpoint entry, through the object graphs (see the module docstring),
    for the captured variables (those in `wanted`, when given). `bundle` opens the checkpoint, which is
    only read when some variable needs it."""
    captured = captured_variables(meta_graph)
    if wanted is not None:
        captured = {name: object_id for name, object_id in captured.items() if name in wanted}
    if not captured:
        return {}
    checkpoint = bundle()
    if OBJECT_GRAPH_KEY not in checkpoint:
        return {}
    try:
        trackable = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
            checkpoint.read(OBJECT_GRAPH_KEY).item())
    except (_message.DecodeError, ValueError, AttributeError) as e:
        raise SavedModelError(f"the checkpoint's {OBJECT_GRAPH_KEY} entry is not an object graph: {e}") from None
    matched = _match_objects(meta_graph.object_graph_def, trackable)
    sources = {}
    for name, object_id in captured.items():
        t = matched.get(object_id)
        if t is None:
            continue
        for attribute in trackable.nodes[t].attributes:
            if attribute.name == _VARIABLE_VALUE and attribute.checkpoint_key in checkpoint:
                sources[name] = Checkpointed(attribute.checkpoint_key)
                break
    return sources
