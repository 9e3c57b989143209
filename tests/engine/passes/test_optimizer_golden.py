"""Every optimization pass, alone and as the whole pipeline, keeps every golden fixture's outputs equal
to TensorFlow's, and leaves what no pass may touch (control flow, calls, stateful ops) as it was."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import engine
from engine.errors import GraphError
from engine.graph import Graph, parse_tensor_name
from engine.passes import PIPELINE, PassContext, optimize
from engine.passes.guards import is_opaque
from kernels.control_flow.dataflow import CONTROL_FLOW_OPS
from tests.golden import FIXTURES, GoldenCase, assert_matches, case_dirs, load_case

# The optimized graph is run as it is: the plan must not optimize it again.
AS_GIVEN = engine.SessionOptions(plan=engine.PlanOptions(optimize=False, constant_folding=False))
PASSES = [name for name, _ in PIPELINE] + ["pipeline"]
RAISING = ("functionalize_loops", "functionalize_conds", "pipeline")


@functools.cache
def _loaded(case_dir: Path) -> tuple[GoldenCase, Graph]:
    case = load_case(case_dir)
    return case, engine.load_graph(case.model)


def _moved(before: Graph, after: Graph) -> frozenset[str]:
    """What functionalize_loops and functionalize_conds move into the functions they write (the control flow
    they raise, and whatever its frames and branches hold)."""
    new = [after.library[name] for name in after.library if name not in before.library]
    return frozenset(n.name for f in new for n in f.graph.nodes) | {
        n.name for n in before.nodes if n.op in CONTROL_FLOW_OPS}


def _check_structure(before: Graph, after: Graph, ctx: PassContext, moved: frozenset[str] = frozenset()) -> None:
    """Inputs exist (or are fed), names are unique, pinned and opaque nodes survive unchanged (but those `moved`
    into function bodies)."""
    names = [n.name for n in after.nodes]
    assert len(names) == len(set(names)), "duplicate node names"
    for node in after.nodes:
        for ref in node.inputs:
            assert ref in ctx.fed or after.has_tensor(ref), f"{node.name} reads missing {ref}"
        for ctrl in node.control_inputs:
            assert ctrl in after, f"{node.name} has a control input from missing {ctrl}"
    for name in ctx.preserve:
        assert name in after, f"fetched node {name} was removed"
    for node in before.nodes:
        if is_opaque(node) and node.name not in moved:
            assert node.name in after, f"opaque node {node.name} ({node.op}) was removed"
            kept = after.node(node.name)
            assert (kept.op, dict(kept.attrs).keys()) == (node.op, dict(node.attrs).keys()), f"{node.name} was rewritten"
            assert len(kept.inputs) == len(node.inputs) and len(kept.control_inputs) <= len(node.control_inputs)


@pytest.mark.parametrize("name", PASSES)
@pytest.mark.parametrize("case_dir", case_dirs(), ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_pass_keeps_tensorflow_outputs(case_dir: Path, name: str) -> None:
    try:
        case, graph = _loaded(case_dir)
    except GraphError as e:
        pytest.skip(f"does not load yet: {type(e).__name__}")
    feeds = [parse_tensor_name(n) for n in case.feeds]
    fetches = [parse_tensor_name(n) for n in case.fetches]
    ctx = PassContext(fed=frozenset(feeds), preserve=frozenset(ref.node for ref in fetches))
    optimized = optimize(graph, ctx, None if name == "pipeline" else [name])
    _check_structure(graph, optimized, ctx, _moved(graph, optimized) if name in RAISING else frozenset())

    outs = engine.Session(optimized, options=AS_GIVEN).run(list(case.fetches), case.feeds)
    for (fetch, want), actual in zip(case.fetches.items(), outs):
        assert_matches(f"{fetch} after {name}", actual, want, case.rtol, case.atol)
