"""The padded, tiled NMS loop recognised in a While (engine.passes.padded_nms_loop) and run as one kernel: both
spellings TensorFlow writes (Model Garden's sorted_non_max_suppression_padded, tf.image.non_max_suppression_padded)
are recognised in TF-written graphs, the fused loop gives TensorFlow's outputs with the compiled tiles and with
their numpy twin, a body that computes anything else is left alone, and inputs the kernel declines run the loop
as written."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import engine
from engine import errors
from engine.graph import Graph
from engine.graph.functions import called_function
from engine.passes.padded_nms_loop import PaddedNmsLoop, recognise
from tests.engine.passes.checks import UNOPTIMIZED
from tests.golden import FIXTURES, assert_matches, case_dirs, load_case

CASES = case_dirs("control_flow/padded_nms")


def spelling_of(case_dir) -> str:
    return "tf_image" if case_dir.name.startswith("tf_image") else "model_garden"


def outer_loops(graph: Graph) -> list:
    """The While nodes of the graph itself (the NMS loops; their inner loops live in the bodies)."""
    return [node for node in graph.nodes if node.op in ("While", "StatelessWhile")]


def recognised(graph: Graph, library=None) -> list:
    library = graph.library if library is None else library
    return [recognise(called_function(w, "cond", library, w.name), called_function(w, "body", library, w.name),
                      library) for w in outer_loops(graph)]


@pytest.fixture
def fused_calls(monkeypatch) -> list[bool]:
    """Whether each padded NMS loop run while the test runs took the kernel (True) or ran as the loop."""
    calls: list[bool] = []
    original = PaddedNmsLoop.__call__

    def recording(self, values):
        result = original(self, values)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(PaddedNmsLoop, "__call__", recording)
    return calls


def test_there_are_cases_of_both_spellings() -> None:
    assert {spelling_of(c) for c in CASES} == {"tf_image", "model_garden"} and len(CASES) >= 8


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_both_spellings_are_recognised(case_dir) -> None:
    graph = engine.load_graph(load_case(case_dir).model)
    found = recognised(graph)
    assert found and all(nms is not None and nms.spelling == spelling_of(case_dir) for nms in found)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_the_fused_loop_gives_tensorflows_outputs(case_dir, compiled, fused_calls) -> None:
    case = load_case(case_dir)
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled))
    outs = engine.Session(engine.load_graph(case.model), options=options).run(list(case.fetches), case.feeds)
    for (name, want), actual in zip(case.fetches.items(), outs):
        assert_matches(name, actual, want, case.rtol, case.atol)
    assert fused_calls and all(fused_calls)


def _with_const(graph: Graph, function_name: str, old: float, new: float) -> dict:
    """The graph's library with function `function_name`'s float Consts equal to `old` holding `new`."""
    library = dict(graph.library.items())
    function = library[function_name]

    def changed(node):
        value = node.attrs.get("value") if node.op == "Const" else None
        if isinstance(value, np.ndarray) and value.dtype == np.float32 and value.shape == () and value == old:
            return dataclasses.replace(node, attrs={**node.attrs, "value": np.asarray(new, np.float32)})
        return node

    nodes = tuple(changed(n) for n in function.graph.nodes)
    assert nodes != function.graph.nodes
    body = Graph(nodes, function.graph.output_counts, library=function.graph.library)
    library[function_name] = dataclasses.replace(function, graph=body)
    return library


def _inner_function(graph: Graph, outer: str, attr: str, which: int) -> str:
    """The name of the `attr` function of the `which`th While in the body of the graph's first loop."""
    body = called_function(outer_loops(graph)[0], "body", graph.library, outer)
    inner = [n for n in body.graph.nodes if n.op in ("While", "StatelessWhile")][which]
    return inner.attrs[attr].name


@pytest.mark.parametrize("what, old, new", [
    ("the IoU's epsilon", 1e-8, 1e-7),
    ("Model Garden's self-suppression threshold", 0.5, 0.4),
])
def test_a_body_computing_something_else_is_left_alone(what, old, new) -> None:
    graph = engine.load_graph(load_case(FIXTURES / "control_flow/padded_nms/model_garden").model)
    assert all(recognised(graph))
    where = _inner_function(graph, "while", "body", 0 if "epsilon" in what else 1)
    assert recognised(graph, _with_const(graph, where, old, new)) == [None]


def _nan_feeds(case) -> dict:
    feeds = dict(case.feeds)
    name = next(n for n in feeds if "boxes" in n)
    boxes = feeds[name].copy()
    boxes[0, 3, 1] = np.nan
    feeds[name] = boxes
    return feeds


@pytest.mark.parametrize("name", ["model_garden", "tf_image"])
def test_boxes_the_kernel_declines_run_the_loop(name, fused_calls) -> None:
    case = load_case(FIXTURES / "control_flow/padded_nms" / name)
    graph = engine.load_graph(case.model)
    feeds = _nan_feeds(case)
    got = engine.Session(graph).run(list(case.fetches), feeds)
    assert fused_calls and not any(fused_calls)
    want = engine.Session(graph, options=UNOPTIMIZED).run(list(case.fetches), feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_the_iteration_limit_stops_the_fused_loop_too(fused_calls) -> None:
    case = load_case(FIXTURES / "control_flow/padded_nms/model_garden")
    graph = engine.load_graph(case.model)
    for optimize in (True, False):
        options = engine.SessionOptions(plan=engine.PlanOptions(optimize=optimize, max_loop_iterations=1))
        with pytest.raises(errors.LoopLimitError, match="limit of 1 iteration"):
            engine.Session(graph, options=options).run(list(case.fetches), case.feeds)
    assert fused_calls == [False]
