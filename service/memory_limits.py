"""How much memory this process may use: the container's limit (cgroup v2 or v1) where there is one,
else the machine's physical memory. The default per-request memory budget is a share of it."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["memory_limit_bytes", "default_request_memory", "REQUEST_SHARE"]

# One request may take this share of the memory limit: a few large requests at once (and the models'
# weights) still fit.
REQUEST_SHARE = 0.25

# cgroup v2's limit file, then v1's; "max" (v2) or a huge number (v1's "unlimited") mean no limit.
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
_NO_LIMIT = 1 << 60


def _cgroup_limit(files: tuple[str, ...]) -> int | None:
    for name in files:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < _NO_LIMIT else None
    return None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit_bytes(cgroup_files: tuple[str, ...] = _CGROUP_FILES) -> int | None:
    """The container's memory limit, else the machine's physical memory (the smaller of the two when
    both are known); None when neither can be read."""
    known = [v for v in (_cgroup_limit(cgroup_files), _physical_memory()) if v]
    return min(known) if known else None


def default_request_memory() -> int:
    """A quarter of `memory_limit_bytes()`; 1 GiB when the limit cannot be read."""
    limit = memory_limit_bytes()
    return int(limit * REQUEST_SHARE) if limit else 1 << 30
