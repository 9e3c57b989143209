"""The memory limit the default per-request budget is a share of: cgroup v2, cgroup v1, the machine."""

from service import memory_limits
from service.memory_limits import REQUEST_SHARE, default_request_memory, memory_limit_bytes


def test_cgroup_v2_limit_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_limits, "_physical_memory", lambda: 64 << 30)
    (tmp_path / "memory.max").write_text("2147483648\n")
    assert memory_limit_bytes((str(tmp_path / "memory.max"),)) == 2 << 30


def test_no_cgroup_limit_falls_back_to_the_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_limits, "_physical_memory", lambda: 8 << 30)
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")
    assert memory_limit_bytes((str(v2),)) == 8 << 30
    v1.write_text(str(2**63 - 4096))  # cgroup v1's "unlimited"
    assert memory_limit_bytes((str(v1),)) == 8 << 30
    assert memory_limit_bytes((str(tmp_path / "absent"),)) == 8 << 30


def test_the_smaller_of_container_and_machine_wins(tmp_path, monkeypatch):
    """A container limit above the machine's memory (a common misconfiguration) does not count."""
    monkeypatch.setattr(memory_limits, "_physical_memory", lambda: 4 << 30)
    (tmp_path / "memory.max").write_text(str(16 << 30))
    assert memory_limit_bytes((str(tmp_path / "memory.max"),)) == 4 << 30


def test_default_budget_is_a_share_of_the_limit(monkeypatch):
    monkeypatch.setattr(memory_limits, "memory_limit_bytes", lambda: 8 << 30)
    assert default_request_memory() == int((8 << 30) * REQUEST_SHARE)
    monkeypatch.setattr(memory_limits, "memory_limit_bytes", lambda: None)
    assert default_request_memory() == 1 << 30


def test_settings_take_the_default_and_the_environment(monkeypatch):
    from service.settings import Settings

    monkeypatch.setattr(memory_limits, "memory_limit_bytes", lambda: 8 << 30)
    assert Settings().max_request_memory_bytes == 2 << 30
    monkeypatch.setenv("TENSORGATE_MAX_REQUEST_MEMORY_BYTES", "1000")
    assert Settings().max_request_memory_bytes == 1000
