"""The property every fuzz test checks, and the hypothesis profiles they run under.

`call_parser(fn, *args, allowed=(...), memory_limit=n)` runs one parser call: it must return or raise
one of `allowed` (the parser's documented, typed errors) with a message, and its peak traced memory
(tracemalloc, which numpy reports to) must stay under `memory_limit` bytes, so that a length field
claiming 2**60 bytes or a shape claiming 10**18 elements is refused before anything is allocated.

Profiles, chosen with the environment variable HYPOTHESIS_PROFILE:

- `ci` (the default): 80 examples per test (fewer for slow parsers), derandomized (the same inputs
  on every run), so that `tests/fuzz` stays deterministic and takes well under a minute on two cores
  (about 12 s);
- `long`: thousands of random examples per test, with hypothesis' example database, for a real
  search by hand: `HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest tests/fuzz`.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings

__all__ = ["MiB", "PROFILE", "call_parser", "fuzz_settings"]

MiB = 1 << 20

_SLOW_GENERATION = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
# The deadline catches quadratic (or worse) behaviour; it is loose because two cores are shared.
settings.register_profile("ci", max_examples=80, derandomize=True, database=None, deadline=timedelta(seconds=5),
                          suppress_health_check=_SLOW_GENERATION, print_blob=True)
settings.register_profile("long", max_examples=3000, deadline=timedelta(seconds=5),
                          suppress_health_check=_SLOW_GENERATION, print_blob=True)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def fuzz_settings(scale: float = 1.0) -> settings:
    """The profile's settings, with `scale` times its examples (for parsers slow per call). Applied per
    test, so the profile never changes other tests' hypothesis settings (schemathesis' among them)."""
    return settings(PROFILE, max_examples=max(5, int(PROFILE.max_examples * scale)))


def call_parser(fn: Callable[..., Any], *args: Any, allowed: tuple[type[BaseException], ...], memory_limit: int,
                **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)`'s result, or the allowed exception it raised (returned, not raised). Any
    other exception propagates (hypothesis shrinks and reports it); an allowed one needs a message;
    the call's peak memory above what was allocated before it must stay under `memory_limit`."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    try:
        outcome = fn(*args, **kwargs)
    except allowed as e:
        outcome = e
    finally:
        peak = tracemalloc.get_traced_memory()[1] - before
        if started:
            tracemalloc.stop()
    assert peak <= memory_limit, f"{getattr(fn, '__name__', fn)} allocated {peak} bytes at its peak, over {memory_limit}"
    if isinstance(outcome, BaseException):
        assert str(outcome).strip(), f"{type(outcome).__name__} without a message"
    return outcome
