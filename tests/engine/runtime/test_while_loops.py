"""Functional While loops at the speed of their bodies, with TensorFlow's meaning kept: a condition that only
compares counters with bounds is evaluated in place (non-scalar predicates still read as TensorFlow reads
them), and a body returning other dtypes than declared still fails naming the loop."""

from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import errors
from tests.engine.graph.test_functions import FunctionBuilder, add, call
from tests.engine.graphs import GraphBuilder

F32, I32, BOOL = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.bool_)


ZERO = np.int32(0)


def _loop(cond, body, counter=ZERO, counter_shape=()) -> GraphBuilder:
    """while cond(i, n, acc): (i, n, acc) = body(i, n, acc), with i starting at `counter`."""
    g = GraphBuilder()
    g.placeholder("n", I32, counter_shape)
    g.placeholder("x", F32, (None,))
    g.const("start", counter)
    call(g, "loop", "StatelessWhile", ["start", "n", "x"], {"cond": cond.signature.name, "body": body.signature.name},
         T=[I32, I32, F32])
    return add(g, cond, body)


def _counting_body(acc_dtype=F32) -> object:
    f = FunctionBuilder("count", {"i": I32, "n": I32, "acc": F32}, {"i2": I32, "n2": I32, "acc2": F32})
    f.const("one", np.int32(1))
    f.const("half", np.float32(0.5))
    f.node("add", "AddV2", ["i", "one:output:0"], T=I32)
    f.node("mul", "Mul", ["acc", "half:output:0"], T=F32)
    ret = "mul:z:0"
    if acc_dtype != F32:
        f.node("cast", "Cast", ["mul:z:0"], SrcT=F32, DstT=acc_dtype)
        ret = "cast:y:0"
    return f.fdef({"i2": "add:z:0", "n2": "n", "acc2": ret})


def _less_and_below(limit: int) -> object:
    """i < n and i < limit."""
    f = FunctionBuilder("bounded", {"i": I32, "n": I32, "acc": F32}, {"go": BOOL})
    f.const("limit", np.int32(limit))
    f.node("below_n", "Less", ["i", "n"], T=I32)
    f.node("below_limit", "Less", ["i", "limit:output:0"], T=I32)
    f.node("both", "LogicalAnd", ["below_n:z:0", "below_limit:z:0"])
    f.node("out", "Identity", ["both:z:0"], T=BOOL)
    return f.fdef({"go": "out:output:0"})


X = np.array([1.0, -2.0, 4.0], np.float32)


@pytest.mark.parametrize("n, trips", [(0, 0), (3, 3), (6, 5), (-2, 0)])
def test_a_conjunction_of_bounds_stops_at_the_first_that_fails(n, trips):
    sess = engine.Session(_loop(_less_and_below(5), _counting_body()).bytes())
    i, acc = sess.run(["loop:0", "loop:2"], {"n:0": np.int32(n), "x:0": X})
    assert i == trips and i.dtype == np.int32
    np.testing.assert_array_equal(acc, X * np.float32(0.5) ** trips)


def test_a_vector_predicate_is_read_as_tensorflow_reads_it():
    # Less of [i] and [n] is a [1] bool, which TensorFlow reads as true (it has elements): the loop never ends.
    g = _loop(_less_and_below(100), _counting_body(), counter=np.array([0], np.int32), counter_shape=(1,))
    sess = engine.Session(g.bytes(), options=engine.SessionOptions(plan=engine.PlanOptions(max_loop_iterations=7)))
    with pytest.raises(errors.LoopLimitError, match="limit of 7 iterations"):
        sess.run("loop:0", {"n:0": np.array([2], np.int32), "x:0": X})


def test_a_body_returning_another_dtype_than_declared_fails_naming_the_loop():
    sess = engine.Session(_loop(_less_and_below(5), _counting_body(acc_dtype=np.dtype(np.float64))).bytes())
    with pytest.raises(errors.ExecutionError, match="output 2 of function 'count' is double; T says float") as info:
        sess.run("loop:2", {"n:0": np.int32(3), "x:0": X})
    assert info.value.node == "loop"
