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
used without declaring it). A model without such ops loads none.

Compiling takes seconds per function where loading from the cache takes milliseconds, so a first start
(an empty cache: a new container) would wait for the compiler before it can answer. `warm_up_in_background(ops)`
loads what is cached at once and queues the rest for one background thread; it returns a `Readiness`
that is false until those functions are compiled, and kernels given it as their `compiled` flag run their
numpy twins until then (same results, slower): the server answers as soon as the plan is built and
turns to the compiled loops when they are ready (ResNet50 on 2 cores: first answer after 6 s instead of
17 s with an empty cache). `configure(cache_dir=...)` picks the cache directory (numba's default is
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

__all__ = [
    "AVAILABLE",
    "CompiledFunction",
    "Readiness",
    "compiled",
    "configure",
    "preload_cached",
    "readonly",
    "registered",
    "use_compiled",
    "warm_up",
    "warm_up_in_background",
]

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

    @property
    def ready(self) -> bool:
        return self._dispatcher is not None

    def cached(self) -> bool:
        """Whether numba's cache holds this function for every signature (loading it is then quick).
        Reads numba's cache index (a private API: where it is missing or changed, False: compile)."""
        try:
            import numba

            index = numba.njit(nogil=True, cache=True)(self.py)._cache._cache_file._load_index()
            return len(index) >= len(self.signatures)
        except Exception:  # noqa: BLE001  (any failure only means "compile it in the background")
            return False

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


def preload_cached() -> threading.Thread | None:
    """Load every compiled function numba's cache holds, on a background thread (None without numba): a server
    that loads its models lazily does it at start, so that the first request for a model does not pay numba's
    import and the cache loads (~0.8 s for a CNN) on top of the model's own load. Functions not cached are
    left to the loads that need them."""
    if not AVAILABLE:
        return None

    def load() -> None:
        for function in list(_FUNCTIONS):
            try:
                if not function.ready and function.cached():
                    function.compile()
            except Exception:  # noqa: BLE001 - a function that fails here compiles when a model needs it
                continue

    thread = threading.Thread(target=load, name="tensorgate-kernel-preload", daemon=True)
    thread.start()
    return thread


class Readiness:
    """True once every compiled function of some ops is compiled: a kernel's `compiled` flag while they
    compile in the background (kernels run their twins until then)."""

    __slots__ = ("_functions", "_ready")

    def __init__(self, functions: Iterable[CompiledFunction]):
        self._functions = tuple(functions)
        self._ready = all(f.ready for f in self._functions)

    def __bool__(self) -> bool:
        if not self._ready:
            self._ready = all(f.ready for f in self._functions)
        return self._ready

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ready (or `timeout` seconds); returns whether it is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            with _QUEUE_DONE:
                _QUEUE_DONE.wait(0.05)
        return True

    def __repr__(self) -> str:
        return f"<Readiness {bool(self)} of {len(self._functions)} function(s)>"


_PENDING: list[CompiledFunction] = []  # queued for the background thread, in order
_QUEUE_DONE = threading.Condition()
_WORKER: threading.Thread | None = None


def _compile_queued() -> None:
    global _WORKER
    while True:
        with _QUEUE_DONE:
            if not _PENDING:
                _WORKER = None
                return
            function = _PENDING[0]
        try:
            function.compile()
        except Exception:  # noqa: BLE001  (a function that cannot compile leaves its kernels on their twins)
            import logging

            logging.getLogger(__name__).exception("compiling %s failed; its kernels run their numpy twins", function.name)
        with _QUEUE_DONE:
            _PENDING.remove(function)
            _QUEUE_DONE.notify_all()


def warm_up_in_background(ops: Iterable[str]) -> Readiness | bool:
    """Like `warm_up`, except that functions numba's cache lacks compile on a background thread: returns a
    Readiness, false until they are compiled (True at once when everything was cached or compiled; False
    without numba). Kernels take it as their `compiled` flag."""
    global _WORKER
    if not AVAILABLE:
        return False
    wanted = frozenset(ops)
    functions = [f for f in _FUNCTIONS if f.ops & wanted]
    for function in functions:
        if not function.ready and function not in _PENDING and function.cached():
            function.compile()
    readiness = Readiness(functions)
    if readiness:
        return True
    with _QUEUE_DONE:
        _PENDING.extend(f for f in functions if not f.ready and f not in _PENDING)
        if _WORKER is None:
            _WORKER = threading.Thread(target=_compile_queued, name="tensorgate-kernel-compiler", daemon=True)
            _WORKER.start()
    return readiness


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
