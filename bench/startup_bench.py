"""Start-up benchmark: seconds from `tensorgate serve` to ready (`/v2/health/ready` answers 200), before and
after, in one run.

Each start is a new process on a repository: the example models (`models/`) and ResNet50 (from
bench/models/, written by `tools/make_fixtures.py --bench`). Servers: a snapshot of `--baseline` (exported
with `git archive`, as bench/serving_bench.py does) and the working tree; the working tree twice, first with
an empty kernel cache directory (the first start of a new container: every compiled kernel is compiled) and
then with that same directory (every later start: kernels load from numba's cache).

`--saved-model DIR --tf-python PYTHON` adds the issue-32 comparison with TensorFlow itself, in the same run:
seconds from process start to the first answer, for TensorFlow (a new `PYTHON` process that imports
TensorFlow, runs `tf.saved_model.load` and calls `serving_default` once at batch 1) and for tensorgate
(`tensorgate serve` on a repository holding that SavedModel as version 1, until the first REST predict at
batch 1 is answered), ours with an empty and with a warm kernel cache, starts interleaved:

    .venv/bin/python bench/startup_bench.py [--baseline 9fc9a00] [--repeat 3]
    .venv/bin/python bench/startup_bench.py --saved-model bench/zoo/resnet50/saved_model \
        --tf-python /tmp/tfvenv/bin/python [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from load import tensorgate_command
from serving_bench import export_snapshot


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seconds_to_ready(source: Path, repo: Path, env: dict[str, str], timeout_s: float = 300) -> float:
    """Start `tensorgate serve` with the packages of `source`; seconds until the ready probe answers 200."""
    return _seconds_to_answer(source, repo, env, lambda port: f"http://127.0.0.1:{port}/v2/health/ready", 1, timeout_s)


def _seconds_to_answer(source: Path, repo: Path, env: dict[str, str], request: Callable[[int], Any],
                       request_timeout_s: float, timeout_s: float) -> float:
    """Start `tensorgate serve` with the packages of `source` on `repo`; seconds until `request(port)` (a URL
    or urllib Request) is answered 200. The server is stopped before returning."""
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen([*tensorgate_command(repo, port), "--grpc-port", "0"], cwd=source,
                            env={**env, "PYTHONPATH": str(source)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while time.perf_counter() - start < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(request(port), timeout=request_timeout_s) as r:
                    if r.status == 200:
                        return time.perf_counter() - start
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"no answer after {timeout_s} s")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


_TF_FIRST_ANSWER = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
fn = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
specs = fn.structured_input_signature[1]
fn(**{name: tf.zeros([1, *spec.shape[1:]], spec.dtype) for name, spec in specs.items()})
"""


def tf_seconds_to_first_answer(tf_python: str, saved_model: Path) -> float:
    """Seconds from starting a TensorFlow process to its first `serving_default` answer at batch 1."""
    start = time.perf_counter()
    subprocess.run([tf_python, "-c", _TF_FIRST_ANSWER, str(saved_model)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def first_answer_request(saved_model: Path, tf_python: str) -> bytes:
    """A REST predict body of zeros at batch 1 for the SavedModel's serving_default (inputs read with TF)."""
    code = ("import json, sys, tensorflow as tf\n"
            "specs = tf.saved_model.load(sys.argv[1]).signatures['serving_default'].structured_input_signature[1]\n"
            "print(json.dumps({n: [s.dtype.name, s.shape.as_list()] for n, s in specs.items()}))")
    out = subprocess.run([tf_python, "-c", code, str(saved_model)], check=True, capture_output=True, text=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}).stdout
    specs = json.loads(out.strip().splitlines()[-1])
    inputs = {name: np.zeros([1, *shape[1:]], dtype=dtype).tolist() for name, (dtype, shape) in specs.items()}
    return json.dumps({"inputs": inputs}).encode()


def seconds_to_first_answer(repo: Path, model: str, body: bytes, env: dict[str, str], timeout_s: float = 600) -> float:
    """Start `tensorgate serve` on `repo`; seconds until its first predict of `model` is answered (200).

    The client waits as a deployment's does, on the model's readiness (a GET), and then predicts: polling
    with the predict itself would have the server parse a megabyte of JSON every 20 ms while it loads,
    work TensorFlow's side of the comparison does not do."""
    def ready_then_predict(port: int) -> urllib.request.Request:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{model}/ready", timeout=1) as r:
            r.read()
        return urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/{model}:predict", body)

    return _seconds_to_answer(ROOT, repo, env, ready_then_predict, 60, timeout_s)


def compare_with_tensorflow(saved_model: Path, tf_python: str, repeat: int, base_env: dict[str, str], tmp: Path) -> None:
    """The issue-32 table: TensorFlow's load + first call against ours, cold and warm kernel cache."""
    repo = tmp / "vs-tf"
    (repo / "model").mkdir(parents=True)
    (repo / "model" / "1").symlink_to(saved_model.resolve())
    body = first_answer_request(saved_model, tf_python)
    tfs, colds, warms = [], [], []
    for i in range(repeat):
        tfs.append(tf_seconds_to_first_answer(tf_python, saved_model))
        env = {**base_env, "TENSORGATE_KERNEL_CACHE_DIR": str(tmp / f"kernels-vs-tf-{i}")}
        colds.append(seconds_to_first_answer(repo, "model", body, env))
        warms.append(seconds_to_first_answer(repo, "model", body, env))
    tf_s, cold, warm = (statistics.median(v) for v in (tfs, colds, warms))
    print(f"{saved_model}: seconds from process start to the first answer, median of {repeat} "
          f"(TensorFlow {min(tfs):.2f}-{max(tfs):.2f})")
    print(f"{'TensorFlow':>12} {'ours, cold':>12} {'ours, warm':>12} {'cold/TF':>8} {'warm/TF':>8}")
    print(f"{tf_s:>12.2f} {cold:>12.2f} {warm:>12.2f} {cold / tf_s:>8.2f} {warm / tf_s:>8.2f}", flush=True)


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
    parser.add_argument("--saved-model", type=Path, help="compare with TensorFlow's own start on this SavedModel")
    parser.add_argument("--tf-python", help="a Python with TensorFlow, for --saved-model")
    args = parser.parse_args(argv)
    if bool(args.saved_model) != bool(args.tf_python):
        parser.error("--saved-model and --tf-python go together")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORGATE_", "NUMBA_"))}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.saved_model:
            compare_with_tensorflow(args.saved_model, args.tf_python, args.repeat, base_env, tmp)
            return 0
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
