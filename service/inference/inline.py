"""Which requests run on the event loop: those whose plan measured cheaper than the hop to a worker.

Handing a request to the worker pool and back costs tens of microseconds of event-loop time (a
submit, a wake-up, the future's callbacks), more than a small model's whole computation; Triton
runs such models on the HTTP thread for the same reason. The decision comes from measurement, never
from a guess: every run of a version with the same feeds (names, dtypes, shapes) and fetches is
timed, and once `WARM_RUNS` of them averaged at most the threshold, that request signature runs
inline; runs inline keep being timed, so a signature that turns slower goes back to the pool.

    >>> costs = InlineCosts(threshold_s=50e-6)
    >>> key = costs.key(feeds, fetches)
    >>> costs.cheap(servable, key)     # False until measured cheap
    >>> costs.record(servable, key, 12e-6)
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["InlineCosts", "WARM_RUNS"]

WARM_RUNS = 4  # runs measured before a signature may go inline
_SMOOTHING = 0.2  # weight of the newest run in the moving average
_MAX_KEYS = 64  # signatures tracked per version; a client sending ever new shapes cannot grow memory


class _Cost:
    __slots__ = ("runs", "average_s")

    def __init__(self) -> None:
        self.runs = 0
        self.average_s = 0.0


class InlineCosts:
    """Measured compute time per version (held weakly: an unloaded version's figures go with it) and
    request signature; `threshold_s` 0 never runs anything inline."""

    def __init__(self, threshold_s: float):
        self.threshold_s = threshold_s
        # By the servable's id (servables compare by value, and hold unhashable fields); an entry
        # goes when its servable does.
        self._costs: dict[int, dict[tuple, _Cost]] = {}

    @staticmethod
    def key(feeds: Mapping[str, np.ndarray], fetches: Sequence[str]) -> tuple:
        return tuple((name, a.dtype.str, a.shape) for name, a in feeds.items()), tuple(fetches)

    def cheap(self, servable: object, key: tuple) -> bool:
        """Whether this signature measured cheap enough to run on the event loop."""
        cost = self._costs.get(id(servable), {}).get(key)
        return cost is not None and cost.runs >= WARM_RUNS and cost.average_s <= self.threshold_s

    def record(self, servable: object, key: tuple, seconds: float) -> None:
        """One run's compute time (from a worker or inline). Races between threads may lose a sample:
        an average needs no lock."""
        if not self.threshold_s:
            return
        costs = self._costs.get(id(servable))
        if costs is None:
            costs = self._costs[id(servable)] = {}
            weakref.finalize(servable, self._costs.pop, id(servable), None)
        cost = costs.get(key)
        if cost is None:
            if len(costs) >= _MAX_KEYS:
                return
            cost = costs[key] = _Cost()
        cost.average_s = seconds if cost.runs == 0 else cost.average_s + _SMOOTHING * (seconds - cost.average_s)
        cost.runs += 1
