"""How many bytes of memory an object graph keeps alive: a loaded model's weights, constants, compiled plans'
buffers and the parsed graph it holds.

`resident_bytes` walks the objects reachable from its roots (attributes, containers, closures' cells) and
adds up what holds memory: numpy arrays (each buffer once, however many views share it), bytes, strings,
protobuf messages (their serialized size: a parsed GraphDef or a variable's TensorProto) and cupy arrays'
device bytes are left out (they are not host memory). It does not descend into modules, classes, functions'
globals or compiled kernels (numba): what every model shares is not one model's. The count is deterministic and
taken once, when a version loads; against the process RSS a load adds it is measured in bench/many_models_bench.py
(Python objects' own headers, allocator slack and numba's compiled code are not counted).
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable
from typing import Any

import numpy as np
from google.protobuf.message import Message

__all__ = ["resident_bytes"]

# Objects whose referents are shared by every model, not owned by one: never walked into.
_SHARED = (types.ModuleType, type, types.BuiltinFunctionType, types.CodeType, types.FrameType)
# Packages whose objects (compiled kernels' dispatchers, LLVM modules) are shared by every model.
_SHARED_PACKAGES = ("numba", "llvmlite", "threading", "concurrent")


def _array_base(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def resident_bytes(*roots: Any, limit: int = 5_000_000) -> int:
    """Bytes held by arrays, buffers, strings and protobuf messages reachable from `roots` (each counted once);
    stops after visiting `limit` objects (a bound on the time a pathological graph of objects could take)."""
    seen: set[int] = set()
    buffers: set[int] = set()
    total = 0
    stack: list[Any] = list(roots)
    visited = 0
    while stack and visited < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        visited += 1
        if isinstance(obj, np.ndarray):
            base = _array_base(obj)
            if id(base) not in buffers:
                buffers.add(id(base))
                # An array over a foreign buffer (a memoryview, an mmap) holds that buffer's bytes.
                total += base.nbytes if base.base is None or not isinstance(base.base, (bytes, bytearray)) else 0
                if base.dtype == object:
                    stack.extend(base.ravel().tolist())
                elif base.base is not None:
                    stack.append(base.base)
            continue
        if isinstance(obj, (bytes, bytearray, str)):
            total += sys.getsizeof(obj)
            continue
        if isinstance(obj, memoryview):
            total += obj.nbytes
            continue
        if isinstance(obj, Message):
            total += obj.ByteSize()
            continue
        if isinstance(obj, _SHARED) or obj is None or isinstance(obj, (int, float, bool, complex)):
            continue
        if type(obj).__module__.split(".", 1)[0] in _SHARED_PACKAGES:
            continue
        stack.extend(_referents(obj))
    return total


def _referents(obj: Any) -> Iterable[Any]:
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, types.FunctionType):
        # A closure's cells and defaults may hold a model's arrays; its globals are its module's.
        return [*(obj.__closure__ or ()), *(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    if isinstance(obj, types.CellType):
        try:
            return [obj.cell_contents]
        except ValueError:  # an empty cell
            return []
    # Instances (their __dict__ and slots), closures' partials, locks, threads: whatever the collector sees.
    return gc.get_referents(obj)
