"""engine.builder: build TensorFlow graphs in Python, without TensorFlow.

It works like TensorFlow's graph mode: op functions add ops to the default graph (the innermost
`with graph.as_default():`), `name_scope` prefixes names, names are made unique (`dense`, `dense_1`),
`control_dependencies` orders ops, and every op function checks its inputs' dtypes and static shapes as
it builds, raising a BuildError that names the op. The result is a GraphDef that engine.Session runs
and TensorFlow imports, with the names and attrs TensorFlow's graph mode writes (less attrs that newer
TensorFlow versions added with defaults, so that older versions import it too).

    import numpy as np
    import engine
    from engine import builder as gb

    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, 4], name="x")
        h = gb.layers.dense(x, np.ones((4, 8), np.float32), np.zeros(8, np.float32), activation="relu")
        y = gb.softmax(gb.layers.dense(h, np.ones((8, 3), np.float32)), name="y")
    graph.save("models/demo/1/model.pb")                # or graph.as_graph_def()
    engine.Session(graph.as_graph_def()).run(y.name, {x.name: np.ones((2, 4), np.float32)})
"""

from engine.builder import layers
from engine.builder.dtypes import as_dtype
from engine.builder.errors import BuildError
from engine.builder.graph import (
    GRAPH_DEF_PRODUCER,
    GraphBuilder,
    control_dependencies,
    get_default_graph,
    name_scope,
    reset_default_graph,
)
from engine.builder.ops import *
from engine.builder.ops import __all__ as _ops_all
from engine.builder.tensor import Operation, Tensor

__all__ = [
    "BuildError",
    "GraphBuilder",
    "Operation",
    "Tensor",
    "GRAPH_DEF_PRODUCER",
    "get_default_graph",
    "reset_default_graph",
    "name_scope",
    "control_dependencies",
    "as_dtype",
    "layers",
    *_ops_all,
]
