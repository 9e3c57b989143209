"""execute_profiled (the per-kernel breakdown of bench/engine_bench.py): the same values as execute, one
timing per instruction in plan order, and the same errors."""

import numpy as np
import pytest

import engine
from engine.errors import ExecutionError
from engine.runtime.executor import execute, execute_profiled
from tests.golden import FIXTURES, load_case


def test_same_values_and_one_timing_per_instruction():
    case = load_case(FIXTURES / "models/mobilenet_block")
    sess = engine.Session(engine.load_graph(case.model))
    plan = sess.plan_for(list(case.feeds), list(case.fetches))
    feeds = [case.feeds[spec.name] for spec in plan.feeds]
    values, timings = execute_profiled(plan, feeds)
    for got, want in zip(values, execute(plan, feeds)):
        np.testing.assert_array_equal(got, want)
    assert [(node, op) for node, op, _ in timings] == [(i.node, i.op) for i in plan.instructions]
    assert all(seconds >= 0 for _, _, seconds in timings)


def test_a_failing_kernel_is_named():
    g = engine.builder.GraphBuilder()
    with g.as_default():
        a = engine.builder.placeholder("float32", [None, 3], name="a")
        b = engine.builder.placeholder("float32", [None, 4], name="b")
        engine.builder.matmul(a, b, name="product")
    plan = engine.Session(g.as_graph_def()).plan_for(["a:0", "b:0"], ["product:0"])
    with pytest.raises(ExecutionError, match="product"):
        execute_profiled(plan, [np.ones((2, 3), np.float32), np.ones((2, 4), np.float32)])
