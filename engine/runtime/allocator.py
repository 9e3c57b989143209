"""Allocator tuning for array-heavy processes: keep freed memory instead of returning it to the OS.

glibc serves large allocations (over 32 MB at most) with fresh mmap'd pages and unmaps them on free,
so every big intermediate tensor is page-faulted in again on every run: on a batch-32 CNN that costs
more than some kernels. TensorFlow avoids it with its own memory pool. `tune_allocator` makes glibc
keep such memory in the heap for reuse. It changes the whole process, once: every Session applies it
when created unless `SessionOptions(tune_allocator=False)` says not to (the server's
`TENSORGATE_TUNE_ALLOCATOR=false`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

__all__ = ["tune_allocator"]

# mallopt parameters from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4


_LOCK = threading.Lock()
_APPLIED: dict[tuple[int, int], bool] = {}


def tune_allocator(keep_bytes: int = 1 << 30, top_pad_bytes: int = 256 << 20) -> bool:
    """Serve every allocation from the heap and keep up to `keep_bytes` of freed memory there.

    Returns False (and changes nothing) where the C library is not glibc. Applied once per process and
    setting; later calls return the first one's answer.
    """
    with _LOCK:
        key = (keep_bytes, top_pad_bytes)
        if key not in _APPLIED:
            _APPLIED[key] = _mallopt(keep_bytes, top_pad_bytes)
        return _APPLIED[key]


def _mallopt(keep_bytes: int, top_pad_bytes: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_MAX, 0)
    ok &= mallopt(_M_TRIM_THRESHOLD, min(keep_bytes, 2**31 - 1))
    ok &= mallopt(_M_TOP_PAD, min(top_pad_bytes, 2**31 - 1))
    return bool(ok)
