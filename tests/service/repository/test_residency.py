"""Many models on one server: lazy loading (TENSORGATE_LOAD_ON_DEMAND), the memory budget
(TENSORGATE_MODEL_MEMORY_BYTES) and idle unloading (TENSORGATE_MODEL_IDLE_UNLOAD_S), on the model manager and
through a running server: one load per version however many requests wait, a failed load answers every
waiter, nothing with requests in flight or waiting is evicted, pinned models stay, and the residency shows
in status, metrics and the dashboard's data."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine import SessionOptions
from engine.runtime.footprint import resident_bytes
from service.errors import DeadlineExceeded, NotFound, Unavailable
from service.repository import ModelRepository
from service.repository.loading import VersionLoader
from service.repository.manager import MemoryPolicy, ModelManager
from service.repository.versions import State
from tests.service.conftest import EXAMPLES

X = {"x:0": np.array([1.0, 2.0, 5.0], np.float32)}


def _repository(root: Path, count: int = 3) -> Path:
    for i in range(count):
        shutil.copytree(EXAMPLES / "half_plus_two", root / f"m{i}")
    return root


def _run(manager: ModelManager, name: str, **kwargs) -> np.ndarray:
    with manager.lease(name, **kwargs) as servable:
        return servable.run(X, ["y:0"])[0]


def _concurrently(request, count: int) -> tuple[list, list]:
    """request() on `count` threads at once: its results and its exceptions."""
    results, errors = [], []

    def run():
        try:
            results.append(request())
        except Exception as e:  # noqa: BLE001 - the caller asserts on it
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors


@pytest.fixture
def events():
    return {"loaded": [], "unloaded": [], "cold": []}


@pytest.fixture
def make_manager(tmp_path, events):
    managers: list[ModelManager] = []

    def make(memory: MemoryPolicy, count: int = 3) -> ModelManager:
        manager = ModelManager(ModelRepository(_repository(tmp_path / f"repo{len(managers)}", count)), SessionOptions(),
                               poll_interval_s=0, memory=memory,
                               on_loaded=lambda m, v, trigger: events["loaded"].append((m, trigger)),
                               on_unload=lambda m, v, reason: events["unloaded"].append((m, reason)),
                               on_cold_start=lambda m, s: events["cold"].append((m, s)))
        managers.append(manager)
        manager.start()
        assert manager.wait_settled(timeout=60)
        return manager

    yield make
    for manager in managers:
        manager.stop()


def _status(manager: ModelManager, name: str):
    (status,) = manager.status(name)
    return status


def test_lazy_versions_are_listed_unloaded_then_loaded_by_their_first_request(make_manager, events):
    manager = make_manager(MemoryPolicy(load_on_demand=True))
    assert events["loaded"] == []
    status = _status(manager, "m1")
    assert status.state is State.START and status.unloaded and "first request" in status.reason
    assert manager.ready() and manager.model_ready("m1")  # a request would be served
    np.testing.assert_allclose(_run(manager, "m1"), [2.5, 3.0, 4.5])
    assert events["loaded"] == [("m1", "request")] and len(events["cold"]) == 1
    status = _status(manager, "m1")
    assert status.state is State.AVAILABLE and not status.unloaded and status.resident_bytes > 0
    _run(manager, "m1")  # loaded now: no second load, no cold start
    assert len(events["loaded"]) == 1 and len(events["cold"]) == 1
    assert _status(manager, "m0").state is State.START  # the others are untouched


def test_requests_waiting_for_one_load_share_it(make_manager, events, monkeypatch):
    manager = make_manager(MemoryPolicy(load_on_demand=True))
    real = VersionLoader.load

    def slow(self, *args, **kwargs):
        time.sleep(0.3)  # long enough for every request to arrive during the load
        return real(self, *args, **kwargs)

    monkeypatch.setattr(VersionLoader, "load", slow)
    results, errors = _concurrently(lambda: _run(manager, "m0"), 8)
    assert errors == [] and len(results) == 8
    assert events["loaded"] == [("m0", "request")]
    assert len(events["cold"]) == 8 and min(s for _, s in events["cold"]) > 0.1


def test_a_failed_lazy_load_answers_every_waiting_request_with_its_error(tmp_path, events, monkeypatch):
    root = _repository(tmp_path / "repo", 1)
    (root / "m0" / "1" / "model.pb").write_bytes(b"this is not a GraphDef")
    attempts = []
    real = VersionLoader.load

    def counted(self, *args, **kwargs):
        attempts.append(1)
        time.sleep(0.2)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(VersionLoader, "load", counted)
    manager = ModelManager(ModelRepository(root), SessionOptions(), poll_interval_s=0,
                           memory=MemoryPolicy(load_on_demand=True))
    manager.start()
    try:
        _, errors = _concurrently(lambda: _run(manager, "m0"), 5)
        assert len(errors) == 5 and all(isinstance(e, NotFound) for e in errors)
        assert all("m0" in str(e) and "GraphDef" in str(e) for e in errors), errors[0]
        with pytest.raises((NotFound, Unavailable), match="GraphDef"):  # later ones get the error, not a load
            _run(manager, "m0")
        assert len(attempts) == 1
        assert _status(manager, "m0").state is State.END
    finally:
        manager.stop()


def test_a_request_gives_up_waiting_at_its_deadline_and_the_load_goes_on(make_manager, monkeypatch):
    manager = make_manager(MemoryPolicy(load_on_demand=True))
    real = VersionLoader.load
    monkeypatch.setattr(VersionLoader, "load", lambda self, *a, **k: (time.sleep(0.5), real(self, *a, **k))[1])
    with pytest.raises(DeadlineExceeded, match="m2.*still loading"):
        _run(manager, "m2", timeout_s=0.05)
    assert manager.wait_settled("m2", timeout=30)
    assert _status(manager, "m2").state is State.AVAILABLE  # the load was not called off
    np.testing.assert_allclose(_run(manager, "m2"), [2.5, 3.0, 4.5])


def _one_model_bytes(manager: ModelManager) -> int:
    _run(manager, "m0")
    return _status(manager, "m0").resident_bytes


def test_past_the_budget_the_least_recently_used_idle_version_is_evicted(make_manager, events):
    probe = make_manager(MemoryPolicy(load_on_demand=True))
    size = _one_model_bytes(probe)
    manager = make_manager(MemoryPolicy(load_on_demand=True, budget_bytes=2 * size + size // 2))
    for name in ("m0", "m1", "m0", "m2"):  # m1 is the least recently used when m2 arrives
        np.testing.assert_allclose(_run(manager, name), [2.5, 3.0, 4.5])
        assert manager.resident_total() <= 2 * size + size // 2
    assert [s.state for s in (_status(manager, n) for n in ("m0", "m1", "m2"))] == [State.AVAILABLE, State.START, State.AVAILABLE]
    evicted = _status(manager, "m1")
    assert evicted.unloaded and evicted.reason.startswith("evicted")
    assert ("m1", "evicted") in events["unloaded"]
    np.testing.assert_allclose(_run(manager, "m1"), [2.5, 3.0, 4.5])  # loaded again by its next request
    assert _status(manager, "m0").state is State.START  # now m0 was the least recently used


def test_versions_with_requests_in_flight_or_pinned_are_never_evicted(make_manager, tmp_path):
    probe = make_manager(MemoryPolicy(load_on_demand=True))
    size = _one_model_bytes(probe)
    manager = make_manager(MemoryPolicy(load_on_demand=True, budget_bytes=size + size // 2))
    with manager.lease("m0") as held:
        _run(manager, "m1")
        _run(manager, "m2")  # m1 goes; m0 has a request in flight
        assert _status(manager, "m0").state is State.AVAILABLE
        np.testing.assert_allclose(held.run(X, ["y:0"])[0], [2.5, 3.0, 4.5])
        assert _status(manager, "m1").state is State.START
    # Released: the budget applies again; m0's request ended last, so m2 is now the least recently used.
    assert _status(manager, "m0").state is State.AVAILABLE and _status(manager, "m2").state is State.START
    assert manager.resident_total() <= size + size // 2


def test_a_resident_model_loads_at_once_and_stays(tmp_path, events):
    root = _repository(tmp_path / "repo", 3)
    (root / "m0" / "config.yaml").write_text("resident: true\n")
    manager = ModelManager(ModelRepository(root), SessionOptions(), poll_interval_s=0,
                           memory=MemoryPolicy(load_on_demand=True, budget_bytes=1, idle_unload_s=0.01),
                           on_unload=lambda m, v, reason: events["unloaded"].append((m, reason)))
    manager.start()
    try:
        assert manager.wait_settled(timeout=60)
        status = _status(manager, "m0")
        assert status.state is State.AVAILABLE and status.pinned
        _run(manager, "m1")  # over a 1-byte budget: m1 stays while in use, m0 always
        time.sleep(0.05)
        manager.unload_idle()
        assert _status(manager, "m0").state is State.AVAILABLE
        assert _status(manager, "m1").state is State.START
        assert [m for m, _ in events["unloaded"]] == ["m1"]
    finally:
        manager.stop()


def test_idle_versions_are_unloaded_and_come_back(make_manager, events):
    manager = make_manager(MemoryPolicy(idle_unload_s=0.2))  # loaded at start, as without lazy loading
    assert all(_status(manager, n).state is State.AVAILABLE for n in ("m0", "m1", "m2"))
    deadline = time.monotonic() + 10
    _run(manager, "m0")
    while _status(manager, "m1").state is not State.START:
        assert time.monotonic() < deadline, "the idle unloader never ran"
        time.sleep(0.05)
    status = _status(manager, "m1")
    assert status.unloaded and status.reason.startswith("unloaded after 0.2 s without requests")
    assert ("m1", "idle") in events["unloaded"]
    np.testing.assert_allclose(_run(manager, "m1"), [2.5, 3.0, 4.5])


def test_footprint_counts_each_buffer_once_and_not_shared_objects():
    a = np.zeros(1000, np.float32)
    views = [a[:10], a[5:], a.reshape(10, 100)]
    assert 4000 <= resident_bytes({"a": a, "views": views}) < 4200  # the buffer once, plus the two keys
    assert resident_bytes(np) == 0  # a module: shared by every model
    assert resident_bytes([b"x" * 1000]) >= 1000

    def closure():
        return a

    assert resident_bytes(closure) == 4000  # a closure's cells hold a model's arrays
