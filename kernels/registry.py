"""The kernel registry: op kernels as pure functions, keyed by (op type, device).

A kernel takes the array module first (`xp`: numpy on CPU, cupy on GPU), then the node's input arrays
as positional arguments, then the node's attrs as keyword-only arguments named exactly as TensorFlow
names them, and returns a tuple with one array per output. Attrs are decoded and bound once, when a
plan is built (`KernelDef.bind`), so the executor only calls `bound(*inputs)`.

    @kernel("Softmax")
    def softmax(xp, logits):
        shifted = logits - logits.max(axis=-1, keepdims=True)
        e = xp.exp(shifted)
        return (e / e.sum(axis=-1, keepdims=True),)

Keyword-only parameters without defaults are required attrs; a `Literal[...]` annotation lists the
values an attr may take, and binding rejects others. Kernels must never modify their inputs: constant
arrays are shared between runs.

Four keyword-only parameter names are not attrs but context, given by the planner when it binds the
kernel: `resources`, the session's ResourceManager (engine.runtime.resources), for ops that create or
look up state living across runs (variables, lookup tables); `node_name`, the node's name (TensorFlow
names a resource after its node when no `shared_name` is given); `compiled`, whether the kernel may
call its compiled (numba) loops rather than their numpy twins (kernels.jit; PlanOptions.compiled_kernels);
and `memory_limit`, the most bytes one request may allocate (PlanOptions.max_request_memory_bytes; None,
unlimited, when bound outside a plan), which kernels whose output size depends on input values check
before allocating (kernels.limits):

    @kernel("VarHandleOp", devices=("cpu",), stateful=True)
    def var_handle(xp, *, dtype, shape, shared_name="", resources, node_name): ...

One body usually serves every device. Where a device needs its own implementation (a CUDA kernel where
the shared body would be slow on a GPU), the device-specific body replaces the shared one explicitly:

    @kernel("Conv2D", devices=("gpu",), override=True)
    def conv2d_gpu(xp, x, filter, *, strides, padding, ...): ...

An override must replace an existing registration (so a typo cannot add a new op), accepts the same attrs
as the body it replaces, keeps its output count and statefulness, and may happen once per (op, device).
Ops that cannot run on a device at all (Python objects, strings) are registered for the others only,
with `devices=("cpu",)`, and placement keeps them there.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_PARAMS",
    "DEVICES",
    "AttrParam",
    "AttrBindError",
    "KernelDef",
    "kernel",
    "register",
    "lookup",
    "has_op",
    "registered_ops",
    "overridden_ops",
]

DEVICES = ("cpu", "gpu")

# Keyword-only kernel parameters filled from the plan's context, not from the node's attrs.
CONTEXT_PARAMS = ("resources", "node_name", "compiled", "memory_limit")

OutputCount = int | Callable[[Mapping[str, Any]], int]


class AttrBindError(ValueError):
    """An attr is missing or has a value the kernel does not accept; the engine adds the node name."""

    def __init__(self, attr: str, reason: str):
        self.attr, self.reason = attr, reason
        super().__init__(f"attr '{attr}' {reason}")


@dataclass(frozen=True)
class AttrParam:
    """One attr a kernel reads: its name, default (`REQUIRED` if none) and allowed values (or None)."""

    name: str
    default: Any
    allowed: tuple[Any, ...] | None

    REQUIRED: typing.ClassVar[object] = inspect.Parameter.empty


@dataclass(frozen=True)
class KernelDef:
    """A registered kernel: its function and what the planner needs to know about it."""

    op: str
    device: str
    fn: Callable[..., tuple]
    outputs: OutputCount
    stateful: bool
    attr_params: tuple[AttrParam, ...]
    # The shared registration this device-specific kernel replaced; None for a shared body.
    replaces: KernelDef | None = None
    # Which of CONTEXT_PARAMS the kernel takes.
    context_params: tuple[str, ...] = ()

    def num_outputs(self, attrs: Mapping[str, Any]) -> int:
        """How many outputs a node of this op with these attrs has."""
        return self.outputs(attrs) if callable(self.outputs) else self.outputs

    def bind_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments the kernel takes from `attrs`; AttrBindError if one is missing or bad."""
        bound = {}
        for p in self.attr_params:
            if p.name in attrs and attrs[p.name] is not None:
                value = attrs[p.name]
            elif p.default is AttrParam.REQUIRED:
                raise AttrBindError(p.name, "is required but missing")
            else:
                continue
            if p.allowed is not None and value not in p.allowed:
                raise AttrBindError(p.name, f"is {value!r}; expected one of {list(p.allowed)}")
            bound[p.name] = value
        return bound

    def bind(self, xp: Any, attrs: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> Callable[..., tuple]:
        """The kernel with its array module, attrs and context (see CONTEXT_PARAMS) fixed: call it with
        the input arrays only. A kernel that takes context cannot be bound without it."""
        bound = self.bind_attrs(attrs)
        for name in self.context_params:
            if name == "compiled" and (context is None or name not in context):
                bound[name] = False  # bound outside a plan (constant folding): the numpy twin
                continue
            if name == "memory_limit" and (context is None or name not in context):
                bound[name] = None  # bound outside a plan: no limit
                continue
            if context is None or name not in context:
                raise ValueError(f"the kernel of '{self.op}' needs '{name}' from its plan, which was not given")
            bound[name] = context[name]
        return functools.partial(self.fn, xp, **bound)


_REGISTRY: dict[tuple[str, str], KernelDef] = {}


def _context_params(fn: Callable) -> tuple[str, ...]:
    sig = inspect.signature(fn)
    return tuple(p.name for p in sig.parameters.values()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name in CONTEXT_PARAMS)


def _attr_params(fn: Callable) -> tuple[AttrParam, ...]:
    sig = inspect.signature(fn, eval_str=True)
    params = []
    for p in sig.parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY or p.name in CONTEXT_PARAMS:
            continue
        allowed = None
        if typing.get_origin(p.annotation) is typing.Literal:
            allowed = typing.get_args(p.annotation)
        params.append(AttrParam(p.name, p.default, allowed))
    return tuple(params)


def register(
    op: str,
    fn: Callable[..., tuple],
    *,
    devices: tuple[str, ...] = DEVICES,
    outputs: OutputCount | None = None,
    stateful: bool | None = None,
    override: bool = False,
) -> None:
    """Register `fn` as the kernel of `op` on each of `devices` (1 output and stateless unless told).

    With `override`, `fn` replaces the kernel already registered for each of `devices` (see the module
    docstring) and takes its output count and statefulness, which it may not restate;
    KernelNotFoundError if there is none, DuplicateKernelError if it was overridden already."""
    params = _attr_params(fn)
    if override and (outputs is not None or stateful is not None):
        raise ValueError(f"an override of '{op}' keeps the output count and statefulness of the kernel it replaces")
    for device in devices:
        if device not in DEVICES:
            raise ValueError(f"unknown device '{device}' for op '{op}'")
        key = (op, device)
        if not override:
            if key in _REGISTRY:
                from engine.errors import DuplicateKernelError  # engine imports kernels: import late

                raise DuplicateKernelError(op, device)
            _REGISTRY[key] = KernelDef(op, device, fn, 1 if outputs is None else outputs, bool(stateful), params,
                                       context_params=_context_params(fn))
            continue
        base = lookup(op, device)
        if base.replaces is not None:
            from engine.errors import DuplicateKernelError  # engine imports kernels: import late

            raise DuplicateKernelError(op, device)
        if {p.name for p in params} != {p.name for p in base.attr_params}:
            raise ValueError(
                f"the '{device}' override of '{op}' takes attrs {sorted(p.name for p in params)}; the kernel "
                f"it replaces takes {sorted(p.name for p in base.attr_params)}"
            )
        _REGISTRY[key] = KernelDef(op, device, fn, base.outputs, base.stateful, params, replaces=base,
                                   context_params=_context_params(fn))


def kernel(
    *ops: str,
    devices: tuple[str, ...] = DEVICES,
    outputs: OutputCount | None = None,
    stateful: bool | None = None,
    override: bool = False,
) -> Callable[[Callable[..., tuple]], Callable[..., tuple]]:
    """Decorator form of `register`: `@kernel("Add", "AddV2")` registers one body for several ops."""

    def decorate(fn: Callable[..., tuple]) -> Callable[..., tuple]:
        for op in ops:
            register(op, fn, devices=devices, outputs=outputs, stateful=stateful, override=override)
        return fn

    return decorate


def lookup(op: str, device: str) -> KernelDef:
    """The kernel for (op, device); KernelNotFoundError when there is none."""
    try:
        return _REGISTRY[(op, device)]
    except KeyError:
        from engine.errors import KernelNotFoundError  # engine imports kernels: import late

        raise KernelNotFoundError(op, device) from None


def has_op(op: str, device: str | None = None) -> bool:
    """Whether `op` has a kernel on `device` (on any device when None)."""
    if device is not None:
        return (op, device) in _REGISTRY
    return any((op, d) in _REGISTRY for d in DEVICES)


def registered_ops(device: str | None = None) -> set[str]:
    """Every op type with a kernel on `device` (on any device when None)."""
    return {op for (op, d) in _REGISTRY if device is None or d == device}


def overridden_ops(device: str) -> set[str]:
    """The ops whose kernel on `device` is a device-specific override of the shared body."""
    return {op for (op, d), kdef in _REGISTRY.items() if d == device and kdef.replaces is not None}
