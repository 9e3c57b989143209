"""The compiled-kernel layer: numba functions that kernels call on CPU where numpy's per-op passes are slow.

A compiled function is a plain Python loop over arrays, compiled by numba for explicit float32
signatures, releasing the GIL (`nogil`) so that request threads and the engine's thread pool run it in
parallel; never `parallel=True`, whose threading layer aborts when two request threads enter parallel
code at once. Kernels split work into tiles on the engine's pool (kernels.pool.run_chunks) instead.

    @compiled("void(float32[:, ::1], float32[::1])", ops=("_FusedMatMul",))
    def _bias_rows(y, bias): ...

    if use_compiled(xp, compiled, x.dtype):
        _bias_rows(y, bias)          # the compiled loop
    else:
        y += bias                    # its numpy twin: the living definition

Every compiled function has a numpy twin in the kernel that calls it: the twin is what the kernel
computes where numba is missing, where the plan was built with `PlanOptions(compiled_kernels=False)`
(the server's `TENSORGATE_COMPILED_KERNELS=false`), for dtypes other than the compiled signatures, and on
GPUs; tests hold each compiled function to its twin.

Compilation never happens on a request: each compiled function names the ops whose kernels call it, and
`warm_up(ops)` compiles those of a plan's ops (or loads them from numba's on-disk cache) while the plan is
built, which in the server is a version's load and warm-up (whose runs would compile any function a kernel
used without declaring it). A model without such ops loads none. `configure(cache_dir=...)` picks the cache directory (numba's default is
a `__pycache__` beside this package, or a per-user cache where that is read-only).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy

__all__ = ["AVAILABLE", "CompiledFunction", "compiled", "configure", "readonly", "registered", "use_compiled", "warm_up"]

AVAILABLE = importlib.util.find_spec("numba") is not None

_FUNCTIONS: list[CompiledFunction] = []
_LOCK = threading.Lock()


class CompiledFunction:
    """A Python loop and its float32 signatures, compiled on first use (or by `warm_up`)."""

    def __init__(self, fn: Callable[..., Any], signatures: tuple[str, ...], ops: tuple[str, ...]):
        self.py = fn  # the uncompiled loop: what tests step through, never what serving runs
        self.signatures = signatures
        self.ops = frozenset(ops)  # the ops whose CPU kernels call it
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self._dispatcher: Any = None
        self.compile_seconds = 0.0

    def compile(self) -> Any:
        """The numba dispatcher, compiled for every signature (or loaded from the cache)."""
        with _LOCK:
            if self._dispatcher is None:
                import numba

                start = time.perf_counter()
                self._dispatcher = numba.njit(list(self.signatures), nogil=True, cache=True, fastmath=False)(self.py)
                self.compile_seconds = time.perf_counter() - start
        return self._dispatcher

    def __call__(self, *args: Any) -> Any:
        dispatcher = self._dispatcher
        if dispatcher is None:
            dispatcher = self.compile()
        return dispatcher(*args)

    def __repr__(self) -> str:
        return f"<compiled {self.name}>"


def compiled(*signatures: str, ops: tuple[str, ...]) -> Callable[[Callable[..., Any]], CompiledFunction]:
    """Declare a compiled function for `signatures` (numba's signature strings), called by the CPU kernels
    of `ops` (what warm_up compiles it for)."""

    def wrap(fn: Callable[..., Any]) -> CompiledFunction:
        function = CompiledFunction(fn, signatures, tuple(ops))
        _FUNCTIONS.append(function)
        return function

    return wrap


def readonly(ndim: int) -> str:
    """The signature type of a C-contiguous float32 input array that may be read-only (constants and
    caller-owned feeds are): writable arrays match it too, so inputs should be declared with it."""
    return f"Array(float32, {ndim}, 'C', readonly=True)"


def registered() -> tuple[CompiledFunction, ...]:
    return tuple(_FUNCTIONS)


def configure(cache_dir: str | Path | None = None) -> None:
    """Where numba keeps compiled kernels between processes (created if missing). Call before the first
    compilation; the server calls it at start-up from TENSORGATE_KERNEL_CACHE_DIR."""
    if cache_dir is None or not AVAILABLE:
        return
    path = Path(cache_dir)
    path.mkdir(parents=True, exist_ok=True)
    # numba reads the variable when it is first imported; importing it here only to set it would cost a
    # model without compiled kernels numba's import time at start-up.
    os.environ["NUMBA_CACHE_DIR"] = str(path)
    if "numba" in sys.modules:
        sys.modules["numba"].config.CACHE_DIR = str(path)


def warm_up(ops: Iterable[str] | None = None) -> float:
    """Compile (or load from the cache) the compiled functions that the kernels of `ops` call (all of
    them when `ops` is None), each once per process; returns the seconds it took (0 when nothing was
    left to do or numba is missing). Thread-safe: concurrent callers wait for one compilation."""
    if not AVAILABLE:
        return 0.0
    wanted = None if ops is None else frozenset(ops)
    start = time.perf_counter()
    for function in _FUNCTIONS:
        if function._dispatcher is None and (wanted is None or function.ops & wanted):
            function.compile()
    return time.perf_counter() - start


_FLOAT32 = numpy.dtype(numpy.float32)


def use_compiled(xp: Any, compiled: bool, *dtypes: Any) -> bool:
    """Whether a kernel should call its compiled loop: asked for by the plan, numba present, on numpy
    (not cupy), and every operand float32 (the compiled signatures). Called on every kernel call, so it
    compares dtype objects directly (a batch-1 dense layer takes microseconds)."""
    if not (compiled and AVAILABLE and xp is numpy):
        return False
    for d in dtypes:
        if d is not _FLOAT32 and d != _FLOAT32:
            return False
    return True
