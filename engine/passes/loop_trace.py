"""Loop functions read symbolically: a While's condition as bounds on its counters, and its body's tensors as
values built from the loop variables, for the recognisers of loops the engine runs as one kernel
(engine.passes.fuse_recurrence).

`loop_bounds` reads a condition that is a conjunction of `Less(loop var, loop var or integer constant)`
(engine.runtime.calls evaluates such a condition in place). A `Tracer` gives each tensor of a body a
symbolic value, by what it computes, never by node names:

- `Invariant`: the same on every iteration (a Const, a loop var the body returns unchanged, or computed
  from those alone), computed when the loop starts from the loop's inputs (`Env`) with the node's kernel;
- `Var`: a loop var the body changes, as it enters the iteration; `Increment`: that var plus one;
- `Step`: item `t` of an unchanged list, `t` a loop var; `Write`: TensorListSetItem on a loop var;
- `Affine`: a sum of products `source @ matrix` plus biases (a step's item, a state, or a reset gate times
  a state, times an invariant matrix), with Split, SplitV and StridedSlice along its last axis taken of
  its matrices and biases; `Gate`: sigmoid or tanh of an Affine;
- `Op`: mul, add, sub, tanh, sigmoid or select (SelectV2 on a boolean Step) of those, compared by
  structure.

Anything else raises NoMatch.

    >>> tracer = Tracer(body, unchanged=frozenset({6, 7, 8}))
    >>> tracer(TensorRef("while/mul_2"))   # Op('mul', (Gate('sigmoid', ...), Op('tanh', ...)))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import kernels
from engine.graph import Node, TensorRef, parse_tensor_name
from engine.graph.functions import Function
from engine.passes.guards import is_opaque
from kernels.array.identity import IDENTITY_OPS

__all__ = [
    "Affine", "Bound", "Env", "Gate", "Increment", "Invariant", "LoopWeights", "NoMatch", "Op", "Step", "Tracer",
    "Var", "Write", "allowed_steps", "is_one", "loop_bounds", "resolve", "scalar_int",
]

_F32 = np.dtype(np.float32)


class NoMatch(Exception):
    """A tensor of the body is not one of the symbolic values below (or not as a caller needs it)."""


@dataclass(frozen=True)
class Bound:
    """One `Less(counter, bound)` of a loop condition: loop var `counter` below loop var `var`, or below
    the constant `value`."""

    counter: int
    var: int | None
    value: int | None


def resolve(nodes: dict[str, Node], ref: TensorRef) -> TensorRef:
    """`ref` with the Identity ops in front of it skipped."""
    while ref.node in nodes and nodes[ref.node].op in IDENTITY_OPS:
        ref = nodes[ref.node].inputs[0]
    return ref


def loop_bounds(cond: Function) -> tuple[Bound, ...] | None:
    """The condition as a conjunction of `Less(loop var, loop var or integer constant)`, or None when it is
    anything else (or runs anything for effect)."""
    if cond.control_rets or len(cond.rets) != 1:
        return None
    nodes = {n.name: n for n in cond.graph.nodes}
    args = {parse_tensor_name(a): i for i, a in enumerate(cond.args)}

    def terms(ref: TensorRef) -> tuple[Bound, ...] | None:
        node = nodes.get(resolve(nodes, ref).node)
        if node is None or len(node.inputs) != 2:
            return None
        if node.op == "LogicalAnd":
            left, right = terms(node.inputs[0]), terms(node.inputs[1])
            return None if left is None or right is None else left + right
        a, b = (resolve(nodes, r) for r in node.inputs)
        if node.op != "Less" or a not in args:
            return None
        if b in args:
            return (Bound(args[a], args[b], None),)
        const = nodes.get(b.node)
        value = const.attrs.get("value") if const is not None and const.op == "Const" else None
        if not isinstance(value, np.ndarray) or value.ndim != 0 or value.dtype.kind not in "iu":
            return None
        return (Bound(args[a], None, int(value)),)

    return terms(parse_tensor_name(cond.rets[0]))


def scalar_int(value: Any) -> int | None:
    """A scalar integer array's value, else None."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        return int(value)
    return None


def allowed_steps(bounds: Sequence[Bound], values: Sequence[Any], max_iterations: int) -> int | None:
    """How many iterations a loop whose condition is `bounds` runs from the loop vars `values`: None when a
    counter or bound is no scalar integer, or the count is not in [1, max_iterations]."""
    steps = None
    for bound in bounds:
        counter = scalar_int(values[bound.counter])
        limit = bound.value if bound.var is None else scalar_int(values[bound.var])
        if counter is None or limit is None:
            return None
        steps = limit - counter if steps is None else min(steps, limit - counter)
    return steps if steps is not None and 0 < steps <= max_iterations else None


class LoopWeights:
    """A fused loop's weights, `compute(loop vars) -> (weights, loop var indices read)`, reused while the
    same read-only arrays come in; None where compute raises (the loop then runs as it is, with its errors)."""

    def __init__(self, compute: Callable[[Sequence[Any]], tuple[tuple[np.ndarray, ...], frozenset[int]]]):
        self.compute = compute
        # (loop var indices, their values, weights)
        self.cached: tuple[tuple[int, ...], tuple[Any, ...], tuple[np.ndarray, ...]] | None = None

    def __call__(self, values: Sequence[Any]) -> tuple[np.ndarray, ...] | None:
        cached = self.cached
        if cached is not None and all(values[i] is v for i, v in zip(cached[0], cached[1])):
            return cached[2]
        try:
            weights, used = self.compute(values)
        except Exception:  # noqa: BLE001  (weights the body would reject: the loop raises its own error)
            return None
        read = tuple(sorted(used))
        sources = tuple(values[i] for i in read)
        if all(isinstance(v, np.ndarray) and not v.flags.writeable for v in sources):
            self.cached = (read, sources, weights)
        return weights


# --- symbolic values of the body's tensors --------------------------------------------------------------


class Env:
    """The loop's inputs while weights are computed, with each invariant value computed once."""

    def __init__(self, values: Sequence[Any]):
        self.values = values
        self.memo: dict[Any, Any] = {}
        self.used: set[int] = set()  # the loop vars read

    def var(self, i: int) -> Any:
        self.used.add(i)
        return self.values[i]

    def once(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]


@dataclass(eq=False)
class Invariant:
    """A value the same on every iteration: a Const, a loop var the body returns unchanged, or computed
    from those alone."""

    compute: Callable[[Env], Any]
    const: Any = None  # the value of a Const
    var: int | None = None  # the loop var it is

    def get(self, env: Env) -> Any:
        return env.once(self, lambda: self.compute(env))


@dataclass(frozen=True)
class Var:
    """A loop var the body changes, as it is on entry to the iteration."""

    index: int


@dataclass(frozen=True)
class Step:
    """Item `time` (a loop var) of loop var `var`, a list the body does not change."""

    var: int
    time: int
    dtype: np.dtype


@dataclass(frozen=True)
class Increment:
    var: int


@dataclass(frozen=True)
class Write:
    """TensorListSetItem on loop var `var` at loop var `time` (or at the fixed index `fixed`)."""

    var: int
    time: int | None
    fixed: int | None
    value: Any


@dataclass(eq=False)
class Affine:
    """sum of source @ matrix over `matrices`, plus `biases` (keyed by the one source they were added to,
    or None when added to a sum). A source is ("x", step), ("h", var) or ("rh", reset gate, var)."""

    matrices: dict[tuple, Invariant]
    biases: dict[tuple | None, Invariant]


@dataclass(eq=False)
class Gate:
    """sigmoid or tanh of an affine value."""

    kind: str
    affine: Affine


@dataclass(frozen=True)
class Op:
    """mul, add, sub, tanh, sigmoid or select of symbolic values (compared by structure)."""

    name: str
    args: tuple


def is_one(value: Any) -> bool:
    c = value.const if isinstance(value, Invariant) else None
    return isinstance(c, np.ndarray) and c.ndim == 0 and c.dtype.kind == "f" and c == 1


def _const_ints(value: Any) -> list[int] | None:
    c = value.const if isinstance(value, Invariant) else None
    return [int(v) for v in c.reshape(-1)] if isinstance(c, np.ndarray) and c.dtype.kind in "iu" else None


def _with_bias(affine: Affine, bias: Invariant) -> Affine:
    key = next(iter(affine.matrices)) if len(affine.matrices) == 1 else None
    if key in affine.biases:
        raise NoMatch
    return Affine(dict(affine.matrices), {**affine.biases, key: bias})


def _merged(a: Affine, b: Affine) -> Affine:
    if set(a.matrices) & set(b.matrices) or set(a.biases) & set(b.biases):
        raise NoMatch
    return Affine({**a.matrices, **b.matrices}, {**a.biases, **b.biases})


class Tracer:
    """Symbolic values of a body's tensors (memoised), for the loop vars in `unchanged` taken as weights."""

    def __init__(self, body: Function, unchanged: frozenset[int]):
        self.nodes = {n.name: n for n in body.graph.nodes}
        self.args = {parse_tensor_name(a): i for i, a in enumerate(body.args)}
        self.unchanged = unchanged
        self.memo: dict[TensorRef, Any] = {}

    def __call__(self, ref: TensorRef) -> Any:
        if ref not in self.memo:
            self.memo[ref] = self._trace(ref)
        return self.memo[ref]

    def _trace(self, ref: TensorRef) -> Any:
        if ref in self.args:
            i = self.args[ref]
            return Invariant(lambda env: env.var(i), var=i) if i in self.unchanged else Var(i)
        node = self.nodes.get(ref.node)
        if node is None:
            raise NoMatch
        if node.op in IDENTITY_OPS or node.op == "IdentityN":
            return self(node.inputs[ref.index if node.op == "IdentityN" else 0])
        if node.op == "Const":
            value = node.attrs["value"]
            return Invariant(lambda env: value, const=value)
        args = [self(r) for r in node.inputs]
        if all(isinstance(a, Invariant) for a in args) and not is_opaque(node):
            return self._invariant(node, ref, args)
        rule = _RULES.get(node.op)
        if rule is None:
            raise NoMatch
        return rule(self, node, ref, args)

    def _invariant(self, node: Node, ref: TensorRef, args: list[Invariant]) -> Invariant:
        try:
            fn = kernels.lookup(node.op, "cpu").bind(np, node.attrs)
        except Exception as e:  # a kernel that needs a plan's context (resources): not a weight
            raise NoMatch from e
        return Invariant(lambda env: env.once(node.name, lambda: fn(*[a.get(env) for a in args]))[ref.index])

    def columns(self, node: Node, ref: TensorRef, affine: Affine, apply: Callable[[Any], tuple]) -> Affine:
        """The affine value with `apply` (the node's kernel over a [rows, columns] array) taken of each
        matrix and bias: exact when the node only selects columns."""

        def part(inv: Invariant, bias: bool) -> Invariant:
            def compute(env: Env) -> Any:
                value = inv.get(env)
                if bias and np.ndim(value) != 1:
                    raise ValueError("a bias that is not a vector")
                parts = env.once((node.name, inv), lambda: apply(value[None] if bias else value))
                return parts[ref.index][0] if bias else parts[ref.index]

            return Invariant(compute)

        return Affine({s: part(m, False) for s, m in affine.matrices.items()},
                       {k: part(b, True) for k, b in affine.biases.items()})


def _bound(node: Node) -> Callable[..., tuple]:
    return kernels.lookup(node.op, "cpu").bind(np, node.attrs)


def _get_item(t: Tracer, node: Node, ref: TensorRef, args: list) -> Step:
    items, index = args[0], args[1]
    if not (isinstance(items, Invariant) and items.var is not None and isinstance(index, Var)):
        raise NoMatch
    return Step(items.var, index.index, np.dtype(node.attrs["element_dtype"]))


def _mat_mul(t: Tracer, node: Node, ref: TensorRef, args: list) -> Affine:
    a, w = args
    if node.attrs.get("transpose_a") or not isinstance(w, Invariant):
        raise NoMatch
    if node.attrs.get("transpose_b"):
        w = Invariant(lambda env, m=w: np.ascontiguousarray(m.get(env).T))
    if isinstance(a, Step) and a.dtype == _F32:
        return Affine({("x", a): w}, {})
    if isinstance(a, Var):
        return Affine({("h", a.index): w}, {})
    if isinstance(a, Op) and a.name == "mul":
        for gate, state in (a.args, a.args[::-1]):
            if isinstance(gate, Gate) and gate.kind == "sigmoid" and isinstance(state, Var):
                return Affine({("rh", gate, state.index): w}, {})
    raise NoMatch


def _add(t: Tracer, node: Node, ref: TensorRef, args: list) -> Any:
    a, b = args
    if node.op == "BiasAdd":
        if node.attrs.get("data_format", "NHWC") != "NHWC" or not isinstance(a, Affine) or not isinstance(b, Invariant):
            raise NoMatch
        return _with_bias(a, b)
    if isinstance(a, Affine) and isinstance(b, Affine):
        return _merged(a, b)
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Affine) and isinstance(y, Invariant):
            return _with_bias(x, y)
        if isinstance(x, Var) and _const_ints(y) == [1] and np.ndim(y.const) == 0:
            return Increment(x.index)
    return Op("add", (a, b))


def _split(t: Tracer, node: Node, ref: TensorRef, args: list) -> Affine:
    fn = _bound(node)
    if node.op == "Split":
        dim, value = args
        axis = _const_ints(dim)
        apply = lambda m: fn(dim.const, m)
    elif node.op == "SplitV":
        value, sizes, dim = args
        axis = _const_ints(dim) if _const_ints(sizes) is not None else None
        apply = lambda m: fn(m, sizes.const, dim.const)
    else:  # StridedSlice: [:, a:b:s] only, every other dim kept whole
        value, begin, end, strides = args
        b, e, s = _const_ints(begin), _const_ints(end), _const_ints(strides)
        masks = [node.attrs.get(k, 0) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                 "shrink_axis_mask")]
        whole_rows = (b is not None and e is not None and s is not None and len(b) == len(e) == len(s) == 2
                      and s[0] == 1 and (masks[0] & 1 or b[0] == 0) and masks[1] & 1 and not any(masks[2:]))
        axis = [1] if whole_rows else None
        apply = lambda m: fn(m, begin.const, end.const, strides.const)
    if not isinstance(value, Affine) or axis not in ([1], [-1]):
        raise NoMatch
    return t.columns(node, ref, value, apply)


def _activation(t: Tracer, node: Node, ref: TensorRef, args: list) -> Any:
    kind = node.op.lower()
    return Gate(kind, args[0]) if isinstance(args[0], Affine) else Op(kind, (args[0],))


def _tile(t: Tracer, node: Node, ref: TensorRef, args: list) -> Step:
    multiples = _const_ints(args[1])
    if not (isinstance(args[0], Step) and args[0].dtype == np.bool_ and multiples and set(multiples) == {1}):
        raise NoMatch
    return args[0]


def _select(t: Tracer, node: Node, ref: TensorRef, args: list) -> Op:
    if not (isinstance(args[0], Step) and args[0].dtype == np.bool_):
        raise NoMatch
    return Op("select", tuple(args))


def _set_item(t: Tracer, node: Node, ref: TensorRef, args: list) -> Write:
    items, index, value = args
    fixed = _const_ints(index)
    if (not isinstance(items, Var) or node.attrs.get("resize_if_index_out_of_bounds")
            or np.dtype(node.attrs["element_dtype"]) != _F32):
        raise NoMatch
    if isinstance(index, Var):
        return Write(items.index, index.index, None, value)
    if fixed is None or np.ndim(index.const) != 0:
        raise NoMatch
    return Write(items.index, None, fixed[0], value)


_RULES: dict[str, Callable[[Tracer, Node, TensorRef, list], Any]] = {
    "TensorListGetItem": _get_item,
    "MatMul": _mat_mul,
    "BiasAdd": _add, "Add": _add, "AddV2": _add,
    "Sub": lambda t, node, ref, args: Op("sub", tuple(args)),
    "Mul": lambda t, node, ref, args: Op("mul", tuple(args)),
    "Split": _split, "SplitV": _split, "StridedSlice": _split,
    "Sigmoid": _activation, "Tanh": _activation,
    "Tile": _tile,
    "SelectV2": _select,
    "TensorListSetItem": _set_item,
}
