"""Resource variables: state a graph reads and writes across runs (VarHandleOp and the ops on it).

Variables that a serving signature only reads are frozen into constants when a SavedModel loads
(engine.saved_model.freeze) and never reach these kernels. A variable that a signature writes (a
counter, Keras' seed-generator state) stays live: its VarHandleOp yields a `Variable` from the
session's ResourceManager, initialised with the checkpoint's value, which the loader puts in the
node's `_tensorgate_initial_value` attr; ReadVariableOp, AssignVariableOp, AssignAddVariableOp, ...
receive it through the handle.

Guarantees under concurrent runs (TensorFlow's own, with `use_locking`): every write is atomic, so
concurrent AssignAddVariableOps never lose an update; a read returns one whole value, never a torn one
(writes replace the value instead of mutating it); within one run, a read that a control edge orders
after a write sees that write or a later one. Runs are not isolated from each other: two concurrent
runs that each increment and then read a counter may both read the value after both increments.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from engine.graph.dtypes import tf_name_of_numpy
from engine.runtime.resources import Resource, ResourceManager, resource_name
from kernels.array.indexing import gather_v2
from kernels.registry import kernel

__all__ = ["Variable", "INITIAL_VALUE_ATTR"]

# The attr the SavedModel loader gives a live variable's VarHandleOp: its value from the checkpoint.
INITIAL_VALUE_ATTR = "_tensorgate_initial_value"


class Variable(Resource):
    """A mutable tensor of fixed dtype. Its value array is never modified in place: a write stores a
    new array, so a reader holding the old one keeps a consistent value."""

    kind = "variable"
    mutable = True

    def __init__(self, name: str, dtype: np.dtype, shape: tuple[int | None, ...] | None, value: Any = None):
        super().__init__(name)
        self.dtype, self.shape = np.dtype(dtype), shape
        self._lock = threading.Lock()
        self._value: np.ndarray | None = None
        if value is not None:
            self.assign(value)

    def describe(self) -> str:
        shape = "unknown" if self._value is None else list(self._value.shape)
        return f"variable '{self.name}' ({tf_name_of_numpy(self.dtype)}, shape {shape})"

    def read(self) -> np.ndarray:
        value = self._value
        if value is None:
            # TensorFlow's words for the same mistake, so that users recognise it.
            raise ValueError(f"Error while reading resource variable {self.name}. This could mean that the "
                             "variable was uninitialized.")
        return value

    def _checked(self, value: Any) -> np.ndarray:
        array = np.asarray(value)
        if array.dtype != self.dtype:
            raise TypeError(f"trying to assign a {tf_name_of_numpy(array.dtype)} value to variable '{self.name}' "
                            f"of dtype {tf_name_of_numpy(self.dtype)}")
        array = np.array(array, copy=True)
        array.setflags(write=False)
        return array

    def assign(self, value: Any) -> None:
        new = self._checked(value)
        with self._lock:
            self._value = new

    def update(self, op: str, delta: Any) -> None:
        """`value = value <op> delta`, atomically (AssignAdd/AssignSub)."""
        delta = np.asarray(delta)
        with self._lock:
            old = self.read()
            if delta.shape != old.shape and delta.size != 1:
                raise ValueError(f"cannot {op} a value of shape {list(delta.shape)} to variable '{self.name}' of "
                                 f"shape {list(old.shape)}")
            new = old + delta if op == "add" else old - delta
            self._value = self._checked(new.astype(self.dtype, copy=False))

    def scatter(self, op: str, indices: Any, updates: Any) -> None:
        """ResourceScatter*: rows of the value at `indices` combined with `updates`, atomically."""
        indices = np.asarray(indices)
        with self._lock:
            new = np.array(self.read(), copy=True)
            rows = new.shape[0] if new.ndim else 0
            bad = indices[(indices < 0) | (indices >= rows)]
            if bad.size:
                raise ValueError(f"indices[{int(np.flatnonzero((indices < 0) | (indices >= rows))[0])}] = "
                                 f"{int(bad[0])} is not in [0, {rows})")
            updates = np.broadcast_to(np.asarray(updates, dtype=self.dtype), indices.shape + new.shape[1:])
            _SCATTER[op](new, indices, updates)
            self._value = self._checked(new)


def _set(target: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> None:
    target[indices] = updates


_SCATTER = {
    "update": _set,
    "add": np.add.at,
    "sub": np.subtract.at,
    "mul": np.multiply.at,
    "div": np.divide.at,
    "min": np.minimum.at,
    "max": np.maximum.at,
}


def _handle(handle: Any, op: str) -> Variable:
    if not isinstance(handle, Variable):
        raise TypeError(f"{op} needs a variable handle, got {type(handle).__name__}")
    return handle


@kernel("VarHandleOp", devices=("cpu",), stateful=True)
def var_handle_op(xp, *, dtype, shape, container: str = "", shared_name: str = "",
                  _tensorgate_initial_value: Any = None, resources: ResourceManager, node_name: str) -> tuple:
    """The session's variable under this node's name, created (with the checkpoint's value, when the
    loader gave one) on first use."""
    name = resource_name(container, shared_name, node_name)
    initial = _tensorgate_initial_value
    return (resources.get_or_create(name, Variable, lambda: Variable(name, dtype, shape, initial)),)


@kernel("ReadVariableOp", devices=("cpu",), stateful=True)
def read_variable_op(xp, handle, *, dtype) -> tuple:
    variable = _handle(handle, "ReadVariableOp")
    value = variable.read()
    if value.dtype != np.dtype(dtype):
        raise TypeError(f"trying to read variable '{variable.name}' as {tf_name_of_numpy(np.dtype(dtype))}, "
                        f"but it is {tf_name_of_numpy(value.dtype)}")
    return (value,)


@kernel("AssignVariableOp", devices=("cpu",), outputs=0, stateful=True)
def assign_variable_op(xp, handle, value, *, dtype, validate_shape: bool = False) -> tuple:
    variable = _handle(handle, "AssignVariableOp")
    if validate_shape and variable.shape is not None and len(variable.shape) == np.ndim(value) and any(
        want is not None and want != got for want, got in zip(variable.shape, np.shape(value))
    ):
        raise ValueError(f"trying to assign a value of shape {list(np.shape(value))} to variable '{variable.name}' "
                         f"of shape {list(variable.shape)}")
    variable.assign(value)
    return ()


@kernel("AssignAddVariableOp", devices=("cpu",), outputs=0, stateful=True)
def assign_add_variable_op(xp, handle, value, *, dtype) -> tuple:
    _handle(handle, "AssignAddVariableOp").update("add", value)
    return ()


@kernel("AssignSubVariableOp", devices=("cpu",), outputs=0, stateful=True)
def assign_sub_variable_op(xp, handle, value, *, dtype) -> tuple:
    _handle(handle, "AssignSubVariableOp").update("sub", value)
    return ()


def _scatter_kernel(op: str, name: str):
    def scatter(xp, handle, indices, updates, *, dtype, Tindices) -> tuple:
        _handle(handle, name).scatter(op, indices, updates)
        return ()

    scatter.__name__ = f"resource_scatter_{op}"
    scatter.__doc__ = f"{name}: the variable's rows at `indices` {op}d with `updates`, atomically."
    return scatter


for _op, _name in [("update", "ResourceScatterUpdate"), ("add", "ResourceScatterAdd"), ("sub", "ResourceScatterSub"),
                   ("mul", "ResourceScatterMul"), ("div", "ResourceScatterDiv"), ("min", "ResourceScatterMin"),
                   ("max", "ResourceScatterMax")]:
    kernel(_name, devices=("cpu",), outputs=0, stateful=True)(_scatter_kernel(_op, _name))


@kernel("ResourceGather", devices=("cpu",), stateful=True)
def resource_gather(xp, handle, indices, *, dtype, batch_dims: int = 0, validate_indices: bool = True) -> tuple:
    """GatherV2 on the variable's current value, axis = batch_dims."""
    return gather_v2(xp, _handle(handle, "ResourceGather").read(), indices, np.int64(batch_dims), batch_dims=batch_dims)


@kernel("VariableShape", devices=("cpu",), stateful=True)
def variable_shape(xp, handle, *, out_type=np.dtype(np.int32)) -> tuple:
    return (np.array(_handle(handle, "VariableShape").read().shape, dtype=out_type),)


@kernel("VarIsInitializedOp", devices=("cpu",), stateful=True)
def var_is_initialized(xp, handle) -> tuple:
    return (np.array(_handle(handle, "VarIsInitializedOp")._value is not None),)
