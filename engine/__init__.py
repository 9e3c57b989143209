"""tensorgate's engine: loads TensorFlow GraphDefs and runs them, one cached plan per signature.

    >>> import engine
    >>> graph = engine.load_graph("model.pb")
    >>> sess = engine.Session(graph, device="cpu")
    >>> y, z = sess.run(["out:0", "layer2/z:0"], {"x:0": x})
    >>> sm = engine.load_saved_model("export/1")   # a SavedModel: variables frozen, signatures
"""

from engine import builder, errors
from engine.cache import CacheStats, ExecutorCache
from engine.graph import Graph, Node, TensorRef, parse_tensor_name
from engine.graph_io import load_graph, parse_graph_def, save_graph
from engine.plan import Plan, PlanOptions, compile_plan
from engine.saved_model import SavedModel, load_saved_model
from engine.session import Session, SessionOptions

__all__ = [
    "builder",
    "errors",
    "CacheStats",
    "ExecutorCache",
    "Graph",
    "Node",
    "TensorRef",
    "parse_tensor_name",
    "load_graph",
    "parse_graph_def",
    "save_graph",
    "SavedModel",
    "load_saved_model",
    "Plan",
    "PlanOptions",
    "compile_plan",
    "Session",
    "SessionOptions",
]
