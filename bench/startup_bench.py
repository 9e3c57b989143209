"""Start-up benchmark: seconds from `tensorgate serve` to ready (`/v2/health/ready` answers 200), before and
after, in one run.

Each start is a new process on a repository: the example models (`models/`) and ResNet50 (from
bench/models/, written by `tools/make_fixtures.py --bench`). Servers: a snapshot of `--baseline` (exported
with `git archive`, as bench/serving_bench.py does) and the working tree; the working tree twice, first with
an empty kernel cache directory (the first start of a new container: every compiled kernel is compiled) and
then with that same directory (every later start: kernels load from numba's cache).

    .venv/bin/python bench/startup_bench.py [--baseline 9fc9a00] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from load import tensorgate_command  # noqa: E402
from serving_bench import export_snapshot  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seconds_to_ready(source: Path, repo: Path, env: dict[str, str], timeout_s: float = 300) -> float:
    """Start `tensorgate serve` with the packages of `source`; seconds until the ready probe answers 200."""
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen([*tensorgate_command(repo, port), "--grpc-port", "0"], cwd=source,
                            env={**env, "PYTHONPATH": str(source)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while time.perf_counter() - start < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"not ready after {timeout_s} s")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def repositories(tmp: Path) -> dict[str, Path]:
    repos = {"examples": ROOT / "models"}
    model = ROOT / "bench" / "models" / "resnet50" / "model.pb"
    if model.exists():
        (tmp / "resnet" / "resnet50" / "1").mkdir(parents=True)
        shutil.copy(model, tmp / "resnet" / "resnet50" / "1" / "model.pb")
        repos["resnet50"] = tmp / "resnet"
    else:
        print("bench/models/resnet50 missing (tools/make_fixtures.py --bench): only the examples")
    return repos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="9fc9a00", help="the revision to compare with (before issue 19)")
    parser.add_argument("--repeat", type=int, default=3, help="starts per cell (the median is shown)")
    args = parser.parse_args(argv)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORGATE_", "NUMBA_"))}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        commit = export_snapshot(args.baseline, tmp / "baseline")
        repos = repositories(tmp)
        print(f"baseline {commit[:10]}; seconds from start to ready, median of {args.repeat}")
        print(f"{'repository':<10} {'before':>8} {'now, cold cache':>16} {'now, warm cache':>16}")
        for name, repo in repos.items():
            before = statistics.median(seconds_to_ready(tmp / "baseline", repo, base_env) for _ in range(args.repeat))
            colds, warms = [], []
            for i in range(args.repeat):
                cache = tmp / f"kernels-{name}-{i}"
                env = {**base_env, "TENSORGATE_KERNEL_CACHE_DIR": str(cache)}
                colds.append(seconds_to_ready(ROOT, repo, env))
                warms.append(seconds_to_ready(ROOT, repo, env))
            print(f"{name:<10} {before:>8.2f} {statistics.median(colds):>16.2f} {statistics.median(warms):>16.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
