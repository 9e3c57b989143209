"""Cheap plans run on the event loop, decided by their measured cost: the figures, and the thread a
request really ran on."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from service.inference.inline import WARM_RUNS, InlineCosts
from tests.service.repository.test_repository import scale_graph, write_version


class _Servable:  # the costs hold servables by identity only
    pass


FEEDS = {"x:0": np.zeros((1, 2), np.float32)}


def test_a_signature_goes_inline_only_after_measured_cheap_runs():
    costs, servable = InlineCosts(threshold_s=50e-6), _Servable()
    key = costs.key(FEEDS, ["y:0"])
    for _ in range(WARM_RUNS - 1):
        costs.record(servable, key, 10e-6)
        assert not costs.cheap(servable, key)
    costs.record(servable, key, 10e-6)
    assert costs.cheap(servable, key)
    # Other shapes, fetches or versions are measured on their own.
    assert not costs.cheap(servable, costs.key({"x:0": np.zeros((8, 2), np.float32)}, ["y:0"]))
    assert not costs.cheap(servable, costs.key(FEEDS, ["z:0"]))
    assert not costs.cheap(_Servable(), key)


def test_a_signature_that_turns_slow_goes_back_to_the_pool():
    costs, servable = InlineCosts(threshold_s=50e-6), _Servable()
    key = costs.key(FEEDS, ["y:0"])
    for _ in range(WARM_RUNS):
        costs.record(servable, key, 10e-6)
    runs = 0
    while costs.cheap(servable, key):
        costs.record(servable, key, 1e-3)
        runs += 1
    assert 1 <= runs <= 3
    assert not costs.cheap(servable, key)


def test_a_slow_first_run_is_forgotten_and_a_threshold_of_zero_is_never_inline():
    costs, servable = InlineCosts(threshold_s=50e-6), _Servable()
    key = costs.key(FEEDS, ["y:0"])
    costs.record(servable, key, 0.5)  # compiling the plan
    for _ in range(60):
        costs.record(servable, key, 10e-6)
    assert costs.cheap(servable, key)
    never = InlineCosts(threshold_s=0)
    for _ in range(10):
        never.record(servable, key, 1e-9)
    assert not never.cheap(servable, key)


def test_memory_is_bounded_and_goes_with_the_servable():
    costs, servable = InlineCosts(threshold_s=50e-6), _Servable()
    for rows in range(200):
        key = costs.key({"x:0": np.zeros((rows, 2), np.float32)}, ["y:0"])
        for _ in range(WARM_RUNS):
            costs.record(servable, key, 1e-6)
    assert len(costs._costs[id(servable)]) == 64
    del servable
    gc.collect()
    assert costs._costs == {}


@pytest.mark.parametrize("inline_us, inline_after_warmup", [(1e6, True), (0, False)])
def test_requests_run_on_the_event_loop_once_measured_cheap(tmp_path, make_server, client, inline_us,
                                                           inline_after_warmup):
    root = tmp_path / "repo"
    write_version(root, "m", 1, scale_graph(2.0))
    server = make_server(root, inline_compute_us=inline_us)
    plane = server.app.state.plane
    threads: list[str] = []
    observe_batch = plane.observe_batch

    def recording(*args):  # called on the thread that ran the model
        threads.append(threading.current_thread().name)
        observe_batch(*args)

    plane.observe_batch = recording
    c = client(server)
    body = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}
    for _ in range(WARM_RUNS + 3):
        r = c.post("/v2/models/m/infer", json=body)
        assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [2.0, 4.0]
    assert all(name.startswith("tensorgate-infer") for name in threads[:WARM_RUNS])
    on_loop = [name == "tensorgate-server" for name in threads[WARM_RUNS:]]
    assert on_loop == [inline_after_warmup] * 3
    # Inline or not, every request is counted, with its compute time.
    metrics = c.get("/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith('tensorgate_compute_duration_seconds_count{model="m"'))
    assert float(line.rsplit(" ", 1)[1]) == WARM_RUNS + 3
