"""Work sharing on the engine's kernel pool: as many runners as the pool has threads, the caller one of them,
each taking the next part of the work as it finishes one.

`kernels.pool.run_tasks` runs the first item on the calling thread and hands every other item to the pool,
whose threads are as many as the cores: with more items than cores, one thread more than there are cores
runs at once until the pool's queue is empty. The scheduler then shares two cores between three threads,
and the last item finishes alone (four equal items on 2 cores: 2.5 items' time instead of 2), each item
paying a hand-off besides. `run_shared` hands the pool only the runners: the parts are drawn from one
counter, so two threads work at once on 2 cores, and a part is as small as its cache blocking wants.

    run_shared(lambda part: work(part.b0, part.b1), chunks(rows, 1, cols, budget))
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from kernels import pool

__all__ = ["run_shared"]


def run_shared(work: Callable[[Any], None], parts: Sequence[Any]) -> None:
    """work(part) for every part, on min(len(parts), pool threads) runners that each draw the next part when
    they finish one; in order on the calling thread when that is one runner, or when the caller is a pool
    task itself. A part's exception is raised here, after the runners stop."""
    runners = min(len(parts), pool.pool_size())
    if runners < 2 or pool.in_pool_task():
        for part in parts:
            work(part)
        return
    # next() on itertools.count is one C call: atomic under the GIL, so no two runners draw the same part.
    drawn = itertools.count()
    failed: list[BaseException] = []

    def runner(_: int) -> None:
        while not failed:
            i = next(drawn)
            if i >= len(parts):
                return
            try:
                work(parts[i])
            except BaseException as e:  # stop the other runners too; run_tasks raises it below
                failed.append(e)
                raise

    pool.run_tasks(runner, list(range(runners)))
