"""Canonical digests of what a function's tensors compute, for recognisers that must prove a loop body is
the computation they replace (engine.passes.padded_nms_loop).

A tensor's digest covers the op that makes it, which output, the attrs that say what it computes, and its
inputs' digests, down to the function's args (by position) and Consts (by dtype, shape and value); it leaves
out node names, Identity ops, attrs that restate input types or hold their defaults, and the order of a
commutative op's operands. A call op (While, If, PartitionedCall) digests the functions it calls the same
way, each over its own args. Two tensors with equal digests compute the same values from the same args.

A recogniser builds the digests of the computation it expects with `Digest.op`, `Digest.arg` and
`Digest.const`, mirroring the TensorFlow code that writes it, and compares them with `FunctionDigests`:

    >>> body = FunctionDigests(function, library)
    >>> x = Digest.arg(0)
    >>> body.ret(0) == Digest.op("AddV2", x, Digest.const(np.int32(1)))
    True   # where the body returns x + 1, however it is spelled
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.graph import TensorRef, parse_tensor_name
from engine.graph.functions import FUNCTION_ATTRS, Function
from kernels.array.identity import IDENTITY_OPS

__all__ = ["Digest", "FunctionDigests", "NotCanonical"]

# Attrs that restate the types of an op's inputs (or the count of a list input), or only steer how TensorFlow
# runs it: the inputs' digests already say all they say.
_INPUT_TYPE_ATTRS = frozenset({
    "T", "Tidx", "Tshape", "Tperm", "Tmultiples", "Tdim", "Tpaddings", "Index", "SrcT", "N", "index_type",
    "Tin", "Tout", "Tcond", "Taxis", "Tindices", "Tparams", "output_shapes", "parallel_iterations",
})
# Attrs at their default values are left out, as TensorFlow leaves them out of older graphs.
_DEFAULTS: dict[str, Any] = {
    "keep_dims": False, "Truncate": False, "incompatible_shape_error": True, "begin_mask": 0, "end_mask": 0,
    "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0, "out_type": np.dtype(np.int32),
}
_AXIS_DEFAULT_OPS = frozenset({"Pack", "Unpack"})  # ops whose `axis` attr defaults to 0
_COMMUTATIVE = frozenset({"Add", "AddV2", "Mul", "Maximum", "Minimum", "LogicalAnd", "LogicalOr", "Equal",
                          "NotEqual"})
# Op names that compute the same thing (a stateless body makes While and StatelessWhile one loop).
_SAME_OP = {"While": "StatelessWhile", "If": "StatelessIf", "StatefulPartitionedCall": "PartitionedCall"}


class NotCanonical(Exception):
    """A function has what digests do not cover (control inputs or control rets, an arg that is not one)."""


def _hash(*parts: Any) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


class Digest:
    """Digests of the expected computation, built as TensorFlow code would write it."""

    @staticmethod
    def arg(position: int) -> bytes:
        """The function's arg `position`."""
        return _hash("arg", position)

    @staticmethod
    def const(value: Any) -> bytes:
        """A Const holding `value` (a numpy array or scalar: its dtype and shape count)."""
        array = np.asarray(value)
        data = array.tobytes() if array.dtype.kind in "biuf" else repr(array.tolist())
        return _hash("const", array.dtype.str, array.shape, data)

    @staticmethod
    def op(op: str, /, *inputs: bytes, index: int = 0, **attrs: Any) -> bytes:
        """Output `index` of `op` over `inputs` with `attrs` (those that say what it computes)."""
        return _op_digest(op, inputs, index, attrs)

    @staticmethod
    def call(op: str, inputs: tuple[bytes, ...], functions: Mapping[str, tuple[bytes, ...]], index: int = 0) -> bytes:
        """Output `index` of call op `op` over `inputs`, calling functions whose rets have the digests
        `functions[attr]` (attr: cond, body, then_branch, ...)."""
        called = tuple(sorted((attr, rets) for attr, rets in functions.items()))
        return _hash("call", _SAME_OP.get(op, op), index, called, inputs)


def _op_digest(op: str, inputs: tuple[bytes, ...], index: int, attrs: Mapping[str, Any]) -> bytes:
    op = _SAME_OP.get(op, op)
    if op in _COMMUTATIVE:
        inputs = tuple(sorted(inputs))
    kept = tuple(sorted((k, _attr_repr(v)) for k, v in attrs.items() if _keeps(op, k, v)))
    return _hash("op", op, index, kept, inputs)


def _keeps(op: str, name: str, value: Any) -> bool:
    if name.startswith("_") or name in _INPUT_TYPE_ATTRS:
        return False
    if name == "axis" and op in _AXIS_DEFAULT_OPS:
        return value != 0
    return name not in _DEFAULTS or not _equal(value, _DEFAULTS[name])


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _attr_repr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return repr((value.dtype.str, value.shape, value.tolist()))
    if isinstance(value, (list, tuple)):
        return repr(tuple(_attr_repr(v) for v in value))
    return repr(value)


class FunctionDigests:
    """The digests of one function's tensors, computed on demand (and of the functions its calls call)."""

    def __init__(self, function: Function, library: Mapping[str, Function],
                 _cache: dict[str, tuple[bytes, ...]] | None = None):
        if function.control_rets:
            raise NotCanonical(f"function '{function.name}' has control rets")
        self.function = function
        self.library = library
        self.nodes = {n.name: n for n in function.graph.nodes}
        self.args = {parse_tensor_name(a).node: i for i, a in enumerate(function.args)}
        self.memo: dict[TensorRef, bytes] = {}
        self.functions = _cache if _cache is not None else {}  # rets digests of called functions, by name

    def ret(self, position: int) -> bytes:
        """The digest of ret `position`."""
        return self.tensor(parse_tensor_name(self.function.rets[position]))

    def rets(self) -> tuple[bytes, ...]:
        return tuple(self.ret(i) for i in range(len(self.function.rets)))

    def tensor(self, ref: TensorRef) -> bytes:
        """The digest of tensor `ref` of the function's graph; NotCanonical where it cannot have one."""
        # Depth first without recursion (a body can be deeper than Python's stack): a tensor is digested
        # once the tensors it reads are.
        stack: list[tuple[TensorRef, bool]] = [(ref, False)]
        ancestors: set[TensorRef] = set()
        while stack:
            top, reads_done = stack.pop()
            if reads_done:
                self.memo[top] = self._digest(top)
                ancestors.discard(top)
                continue
            if top in self.memo:
                continue
            if top in ancestors:
                raise NotCanonical(f"tensor '{top}' of function '{self.function.name}' is part of a cycle")
            ancestors.add(top)
            stack.append((top, True))
            stack.extend((r, False) for r in self._reads(top) if r not in self.memo)
        return self.memo[ref]

    def _node(self, ref: TensorRef):
        node = self.nodes.get(ref.node)
        if node is None:
            raise NotCanonical(f"'{ref}' is not a tensor of function '{self.function.name}'")
        if node.control_inputs:
            raise NotCanonical(f"node '{node.name}' has control inputs")
        return node

    def _reads(self, ref: TensorRef) -> tuple[TensorRef, ...]:
        node = self._node(ref)
        if node.name in self.args or node.op == "Const":
            return ()
        return node.inputs[:1] if node.op in IDENTITY_OPS else node.inputs

    def _digest(self, ref: TensorRef) -> bytes:
        """The digest of `ref`, the tensors it reads digested already."""
        node = self._node(ref)
        if node.name in self.args:
            return Digest.arg(self.args[node.name])
        if node.op in IDENTITY_OPS:
            return self.memo[node.inputs[0]]
        if node.op == "Const":
            return Digest.const(node.attrs["value"])
        inputs = tuple(self.memo[r] for r in node.inputs)
        if node.op in FUNCTION_ATTRS:
            called = {attr: self._function(node.attrs[attr].name) for attr in FUNCTION_ATTRS[node.op]}
            return Digest.call(node.op, inputs, called, ref.index)
        return _op_digest(node.op, inputs, ref.index, node.attrs)

    def _function(self, name: str) -> tuple[bytes, ...]:
        if name not in self.functions:
            if name not in self.library:
                raise NotCanonical(f"function '{name}' is not in the library")
            self.functions[name] = FunctionDigests(self.library[name], self.library, self.functions).rets()
        return self.functions[name]
