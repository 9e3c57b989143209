"""kernels.pool.run_tasks: every item runs exactly once, on no more threads than the pool has (the caller one
of them), and an item's error reaches the caller."""

from __future__ import annotations

import threading
import time

import pytest

from kernels import pool


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"threads{n}")
def threads(request):
    pool.configure(request.param)
    yield request.param
    pool.configure(None)


def test_every_part_runs_once_on_at_most_the_pools_threads(threads):
    done: list[int] = []
    running, most = [0], [0]
    lock = threading.Lock()

    def work(part: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.002)  # long enough for the runners to overlap
        with lock:
            running[0] -= 1
            done.append(part)

    pool.run_tasks(work, list(range(23)))
    assert sorted(done) == list(range(23))
    assert most[0] <= min(threads, pool.pool_size())


def test_a_failing_part_stops_the_runners_and_raises(threads):
    done: list[int] = []

    def work(part: int) -> None:
        if part == 3:
            raise ValueError("part 3")
        done.append(part)

    with pytest.raises(ValueError, match="part 3"):
        pool.run_tasks(work, list(range(400)))
    assert 3 not in done and len(done) < 399  # the runners stopped drawing parts


def test_inside_a_pool_task_parts_run_in_order_on_that_thread(threads):
    seen: dict[int, list[tuple[int, str]]] = {0: [], 1: []}

    def outer(item: int) -> None:
        pool.run_tasks(lambda part: seen[item].append((part, threading.current_thread().name)), [10, 11, 12])

    pool.run_tasks(outer, [0, 1])
    for item in (0, 1):
        assert [p for p, _ in seen[item]] == [10, 11, 12] and len({name for _, name in seen[item]}) == 1
