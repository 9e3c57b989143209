"""kill -9 during repository writes: a real `tensorgate serve` killed while an upload streams, while an
archive is extracted, during label changes and in the middle of a version delete, then restarted on the
same directory; and every write killed before each of its file-system steps in turn.

After any of these a restart must serve a consistent repository: every version directory complete
and loaded (or absent), config.yaml parsing with labels that name versions on disk, no staging or
trash leftovers, the server ready; and the interrupted change is either wholly there or wholly absent.
SIGKILL loses no page cache, so these check the order of renames, not the fsyncs (those are for
power loss).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from engine import SessionOptions
from service.repository import ModelRepository
from service.repository.archive import ArchiveLimits
from service.repository.management import RepositoryManagement
from service.repository.manager import ModelManager
from service.repository.versions import State
from tests.service.repository.test_repository import predict, scale_graph, states, write_version

ROOT = Path(__file__).resolve().parents[3]
BASE_CONFIG = "version_policy: all\nlabels: {stable: 1, canary: 2}\n"


def base_repository(root: Path) -> Path:
    """m: versions 1, 2, 3 (y = 2x, 3x, 4x), all served, labels stable -> 1 and canary -> 2."""
    for version, k in ((1, 2.0), (2, 3.0), (3, 4.0)):
        write_version(root, "m", version, scale_graph(k))
    (root / "m" / "config.yaml").write_text(BASE_CONFIG)
    return root


def hidden_entries(root: Path) -> list[str]:
    """Staging files and directories, config temp files, trash: anything hidden in the repository."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


def snapshot(root: Path) -> tuple[dict[int, bytes], dict[str, int]]:
    """What the repository holds: each version's model.pb bytes, and the labels config.yaml sets."""
    model_dir = root / "m"
    versions = {int(p.name): (p / "model.pb").read_bytes() for p in model_dir.iterdir() if p.name.isdigit()}
    labels = yaml.safe_load((model_dir / "config.yaml").read_text())["labels"]
    return versions, labels


# --- a real server, killed with SIGKILL ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(root: Path, log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`tensorgate serve` on `root` (HTTP only), ready; SIGKILLed when the block ends if still alive."""
    port = free_port()
    command = [sys.executable, "-m", "service.cli", "serve", "--model-repository", str(root), "--host", "127.0.0.1",
               "--port", str(port), "--grpc-port", "0", "--poll-interval-s", "0.2", "--log-level", "warning"]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, f"server exited with {process.returncode}:\n{log.read_text()[-3000:]}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"server not ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.05)
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=10) == -signal.SIGKILL


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, step: float = 0.001) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(step)


def check_restart(root: Path, log: Path, versions: dict[int, float]) -> None:
    """Restart on `root`: ready, no hidden leftovers, exactly `versions` (version -> factor) served,
    every label resolving to a version on disk."""
    with serving(root, log) as (_, url), httpx.Client(base_url=url, timeout=30) as c:
        assert hidden_entries(root) == []
        assert states(c) == {str(v): "AVAILABLE" for v in versions}
        for version, k in versions.items():
            assert predict(c, f"/v1/models/m/versions/{version}:predict") == k
        labels = yaml.safe_load((root / "m" / "config.yaml").read_text())["labels"]
        for label, version in labels.items():
            assert version in versions
            assert predict(c, f"/v1/models/m/labels/{label}:predict") == versions[version]


def test_kill_while_an_upload_body_streams(tmp_path):
    root, log = base_repository(tmp_path / "repo"), tmp_path / "server.log"
    with serving(root, log) as (process, url):
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as sock:
            head = f"PUT /v1/models/m/versions/7 HTTP/1.1\r\nHost: x\r\nContent-Length: {64 << 20}\r\n\r\n"
            sock.sendall(head.encode() + bytes(1 << 20))  # 1 MiB of the 64 promised
            wait_until(lambda: any(p.name.endswith(".upload") and p.stat().st_size > 0 for p in root.iterdir()))
            kill(process)
    assert [p for p in hidden_entries(root) if p.endswith(".upload")]  # killed mid-body
    check_restart(root, log, {1: 2.0, 2: 3.0, 3: 4.0})


def test_kill_while_an_uploaded_archive_is_extracted(tmp_path):
    root, log = base_repository(tmp_path / "repo"), tmp_path / "server.log"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:  # uncompressed: 32 MiB to extract and fsync
        for name, data in (("model.pb", scale_graph(8.0)), ("assets/padding.bin", os.urandom(32 << 20))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    def staging_dirs() -> list[Path]:
        return [p for p in root.iterdir() if p.name.startswith(".staging-") and p.is_dir()]

    with serving(root, log) as (process, url):
        def upload() -> None:
            with contextlib.suppress(httpx.TransportError):
                httpx.put(f"{url}/v1/models/m/versions/7?format=archive", content=buf.getvalue(), timeout=60)

        sender = threading.Thread(target=upload)
        sender.start()
        wait_until(lambda: bool(staging_dirs()))
        kill(process)
        sender.join()
    assert staging_dirs() and not (root / "m" / "7").exists()  # killed with the version half-made
    check_restart(root, log, {1: 2.0, 2: 3.0, 3: 4.0})


def test_kill_during_label_changes(tmp_path):
    root, log = base_repository(tmp_path / "repo"), tmp_path / "server.log"
    done = []
    with serving(root, log) as (process, url):
        def relabel() -> None:
            with httpx.Client(base_url=url, timeout=30) as c:
                with contextlib.suppress(httpx.TransportError):
                    for i in range(10_000):
                        r = c.put("/v1/models/m/labels/stable", json={"version": 1 + i % 3})
                        assert r.status_code == 200, r.text
                        done.append(i)

        writer = threading.Thread(target=relabel)
        writer.start()
        wait_until(lambda: len(done) >= 25)  # back to back: the kill lands while one is being written
        kill(process)
        writer.join()
    versions, labels = snapshot(root)
    assert labels["canary"] == 2 and labels["stable"] in (1 + len(done) % 3, 1 + (len(done) - 1) % 3)
    check_restart(root, log, {1: 2.0, 2: 3.0, 3: 4.0})


def test_kill_in_the_middle_of_a_version_delete(tmp_path):
    root, log = base_repository(tmp_path / "repo"), tmp_path / "server.log"
    extra = root / "m" / "3" / "extra"  # files a GraphDef version ignores, so that removing it takes a while
    extra.mkdir()
    for i in range(1500):
        (extra / f"{i}.txt").write_bytes(b"x")

    def trash() -> list[Path]:
        return [p for p in (root / "m").iterdir() if p.name.startswith(".deleted-")]

    with serving(root, log) as (process, url):
        def delete() -> None:
            with contextlib.suppress(httpx.TransportError):
                httpx.delete(f"{url}/v1/models/m/versions/3", timeout=60)

        deleter = threading.Thread(target=delete)
        deleter.start()
        wait_until(lambda: bool(trash()))
        kill(process)
        deleter.join()
    assert trash() and not (root / "m" / "3").exists()  # half removed, out of the way already
    check_restart(root, log, {1: 2.0, 2: 3.0})


# --- every write, killed before each of its file-system steps in turn ----------------------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_MUTATIONS = ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.truncate", "os.link",
              "os.symlink", "os.chmod", "os.utime")


def is_repository_write(event: str, args: tuple, root: str) -> bool:
    """Whether an audit event is a step of a write to the repository at `root`."""
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
        return writes and root in str(path)
    if event in _MUTATIONS:
        # rmtree removes what it walks relative to a directory descriptor (dir_fd is set): inside the
        # tree it was asked to remove, which the event for rmtree itself named.
        return root in str(args[0]) or (event in ("os.remove", "os.rmdir") and args[-1] is not None)
    return False


def run_killed_at(root: Path, step: int, operation: Callable[[RepositoryManagement], object]) -> bool:
    """Run `operation` on a fresh manager over `root` in a forked child that SIGKILLs itself just
    before the `step`-th file-system step of the write (open for writing, mkdir, rename, remove, ...;
    Python's audit events, so the code under test is untouched). True when it was killed; False when
    the write finished in fewer steps."""
    pid = os.fork()
    if pid == 0:  # the child: start as the server does, then write
        try:
            manager = ModelManager(ModelRepository(root), SessionOptions(), poll_interval_s=0)
            manager.start()
            manager.wait_settled()
            count = 0

            def crash(event: str, args: tuple) -> None:
                nonlocal count
                if is_repository_write(event, args, str(root)):
                    count += 1
                    if count == step:
                        os.kill(os.getpid(), signal.SIGKILL)

            sys.addaudithook(crash)
            operation(RepositoryManagement(manager))
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    deadline = time.monotonic() + 60
    while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the write killed at step {step} hung")
        time.sleep(0.005)
    status = waited[1]
    assert os.WIFSIGNALED(status) or os.waitstatus_to_exitcode(status) == 0, f"the write failed at step {step}"
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def restarted(root: Path) -> tuple[dict[int, bytes], dict[str, int]]:
    """Start a manager on `root` as `tensorgate serve` starts, check it serves a consistent repository,
    and return what the repository holds (`snapshot`)."""
    manager = ModelManager(ModelRepository(root), SessionOptions(), poll_interval_s=0)
    try:
        manager.start()
        assert manager.wait_settled(timeout=60)
        assert hidden_entries(root) == []
        versions, labels = snapshot(root)
        served = {s.version: s.state for s in manager.status("m")}
        assert served == {v: State.AVAILABLE for v in versions}, served
        assert set(labels.values()) <= set(versions)
        assert manager.ready()
        return versions, labels
    finally:
        manager.stop()


def upload_streamed(management: RepositoryManagement) -> None:
    with management.upload_file("m") as path:
        path.write_bytes(scale_graph(8.0))
        management.upload("m", 7, path)


def upload_archive(management: RepositoryManagement) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("7/model.pb", scale_graph(8.0)), ("7/assets/vocab.txt", b"a\nb\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    management.upload_archive("m", 7, buf.getvalue(), ArchiveLimits())


WRITES = {
    "upload": upload_streamed,
    "upload-archive": upload_archive,
    "set-label": lambda management: management.set_label("m", "stable", 3),
    "delete-label": lambda management: management.delete_label("m", "canary"),
    "delete-version": lambda management: management.delete("m", 3),
    "v2-load": lambda management: management.load_model(
        "m", "version_policy: all\nlabels: {stable: 7}\n", {"7/model.pb": scale_graph(8.0)}),
}
# A v2 `load` of versions and a config renames each into place in turn: killed in between, the new
# versions are there with the old config (whose labels name versions still there).
PARTIAL = {"v2-load": lambda before, after: (after[0], before[1])}


@pytest.mark.parametrize("write", WRITES)
def test_a_write_killed_at_any_step_is_wholly_there_or_absent(tmp_path, write):
    base = base_repository(tmp_path / "base")
    before = snapshot(base)
    finished = tmp_path / "finished"
    shutil.copytree(base, finished)
    assert not run_killed_at(finished, 0, WRITES[write])
    after = restarted(finished)
    assert after != before
    killed_at = []
    for step in range(1, 100):
        root = tmp_path / f"killed-{step}"
        shutil.copytree(base, root)
        if not run_killed_at(root, step, WRITES[write]):
            assert restarted(root) == after  # every step ran: the write is complete
            break
        killed_at.append(step)
        allowed = [before, after] + ([PARTIAL[write](before, after)] if write in PARTIAL else [])
        assert restarted(root) in allowed, f"killed before step {step}: a partial write"
        shutil.rmtree(root)
    assert len(killed_at) >= 2, killed_at  # the write has steps to be killed at
