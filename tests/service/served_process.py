"""What the shutdown and overload tests share: a model whose requests take as long as a test needs, and
`tensorgate serve` in a process of its own (signals, exit status and load from outside are the point).

The model feeds `x` ([rows, 64] float32) through an embedding into `width` columns, then `depth`
products with one permutation matrix: the work grows with the rows a request sends, and the answer is
exact, `y = x.sum(axis=1)`, so every response can be checked against its own request.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

import engine.builder as gb

__all__ = ["write_slow_model", "ServedProcess", "console_command", "free_port", "FEATURES"]

FEATURES = 64


def write_slow_model(root: Path, name: str = "slow", *, width: int = 2048, depth: int = 16) -> str:
    """A model in `root` whose request costs about rows x width^2 x depth x 2 floating-point operations."""
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None, FEATURES], name="x")
        embed = np.zeros((FEATURES, width), np.float32)
        embed[np.arange(FEATURES), np.arange(FEATURES)] = 1.0
        permutation = np.eye(width, dtype=np.float32)[np.random.default_rng(0).permutation(width)]
        h = gb.matmul(x, gb.constant(embed))
        p = gb.constant(permutation)
        for _ in range(depth):
            h = gb.matmul(h, p)
        gb.reduce_sum(h, axis=1, name="y")
    (root / name / "1").mkdir(parents=True)
    graph.save(str(root / name / "1" / "model.pb"))
    config = {"signatures": {"serving_default": {"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}}}}
    (root / name / "config.yaml").write_text(yaml.safe_dump(config))
    return name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def console_command(script: str = "tensorgate", module: str = "service.cli") -> list[str]:
    """How to run one of the package's console scripts: the installed script, else its module."""
    path = Path(sys.executable).parent / script
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


class ServedProcess:
    """`tensorgate serve` on free ports of 127.0.0.1, ready when started; killed if still running at the end.

        >>> with ServedProcess(repository, TENSORGATE_SHUTDOWN_GRACE_S="5") as served:
        ...     httpx.get(f"{served.url}/v2/health/ready")
    """

    def __init__(self, repository: Path, *, grpc: bool = True, startup_timeout_s: float = 60.0, **env: str):
        self.port = free_port()
        self.grpc_port = free_port() if grpc else 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        self.log_path = repository.parent / f"server-{self.port}.log"
        self._args = [*console_command(), "serve", "--model-repository", str(repository), "--host", "127.0.0.1",
                      "--port", str(self.port), "--grpc-port", str(self.grpc_port), "--poll-interval-s", "0"]
        self._env = {**os.environ, **env}
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServedProcess:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self._args, env=self._env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            assert self.proc.poll() is None, f"the server exited at start:\n{self.log()}"
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the server did not become ready:\n{self.log()}"
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> float:
        """Send SIGTERM; the monotonic time it was sent."""
        assert self.proc is not None
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return sent

    def __enter__(self) -> ServedProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
