"""Many models on one server: a repository far larger than its memory budget, under Zipf-distributed load.

    .venv/bin/python bench/many_models_bench.py [--models 1000] [--total-gb 8] [--budget-gb 1] [--minutes 10]
        [--clients 8] [--zipf 1.1] [--repository /tmp/many_models] [--json FILE]

Writes `--models` GraphDef models (MLPs and small CNNs built with engine.builder, random weights, 1-30 MB
each, about `--total-gb` in all; reused when the directory already holds them), starts `tensorgate serve` with
TENSORGATE_LOAD_ON_DEMAND=true and TENSORGATE_MODEL_MEMORY_BYTES=budget in a process of its own, and drives it
from another process (this one, `--clients` threads with kept-alive connections) with models drawn from a Zipf
law: hot models stay resident, the tail is loaded on demand and evicted again. It prints errors, p50/p99 of
hits and of cold starts (a request is a cold start when its answer has a `Tensorgate-Load-Wait-Ms` header: it
waited for its version to load), evictions per second, and the server's RSS at start, after one minute and at the
end, beside the resident bytes it reports (tensorgate_models_resident_bytes) and the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import builder as gb

FEATURES = 64


def write_model(path: Path, rng: np.random.Generator, megabytes: float) -> None:
    """An MLP (two of three models) or a small CNN over 16x16x4 images whose weights take about `megabytes`."""
    graph = gb.GraphBuilder()
    floats = int(megabytes * 1e6 / 4)
    with graph.as_default():
        if rng.random() < 2 / 3:
            width = max(16, int(floats ** 0.5))  # the width x width layer holds most of the weights
            x = gb.placeholder("float32", [None, FEATURES], name="x")
            h = gb.layers.dense(x, rng.normal(0, 0.1, (FEATURES, width)).astype(np.float32),
                                np.zeros(width, np.float32), activation="relu")
            h = gb.layers.dense(h, rng.normal(0, 1 / width ** 0.5, (width, width)).astype(np.float32),
                                np.zeros(width, np.float32), activation="relu")
            gb.identity(gb.layers.dense(h, rng.normal(0, 0.1, (width, 10)).astype(np.float32)), name="y")
        else:
            x = gb.placeholder("float32", [None, FEATURES], name="x")
            image = gb.reshape(x, [-1, 4, 4, 4])
            filters = rng.normal(0, 0.2, (3, 3, 4, 32)).astype(np.float32)
            h = gb.relu(gb.conv2d(image, gb.constant(filters), strides=[1, 1, 1, 1], padding="SAME"))
            flat = gb.reshape(h, [-1, 4 * 4 * 32])
            width = max(16, int(floats / (512 + 10)))  # the dense layer after the convolution holds the weights
            h = gb.layers.dense(flat, rng.normal(0, 0.05, (512, width)).astype(np.float32), np.zeros(width, np.float32),
                                activation="relu")
            gb.identity(gb.layers.dense(h, rng.normal(0, 0.1, (width, 10)).astype(np.float32)), name="y")
    (path / "1").mkdir(parents=True, exist_ok=True)
    graph.save(str(path / "1" / "model.pb"))
    (path / "config.yaml").write_text('signatures: {serving_default: {inputs: {x: "x:0"}, outputs: {y: "y:0"}}}\n')


def write_repository(root: Path, models: int, total_gb: float, seed: int = 0) -> int:
    """`models` models of 1-30 MB (log-uniform, scaled to about `total_gb`); returns the bytes written."""
    marker = root / f".complete-{models}-{total_gb}-v2"  # v2: MLPs of the size asked
    if marker.exists():
        return sum(f.stat().st_size for f in root.rglob("model.pb"))
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(1), np.log(30), models))
    sizes = np.clip(sizes * total_gb * 1e3 / sizes.sum(), 1, 30)
    for i, size in enumerate(sizes):
        write_model(root / f"model_{i:04d}", rng, float(size))
    marker.write_text("")
    return sum(f.stat().st_size for f in root.rglob("model.pb"))


def footprint_against_rss(root: Path, count: int) -> dict:
    """Load `count` of the models in this process (after one load that imports and compiles what every model
    shares) and compare the footprints the manager would count with the RSS the loads added."""
    import gc

    from engine import SessionOptions
    from engine.runtime.footprint import resident_bytes
    from service.repository.config import ModelConfig
    from service.repository.residency import TRIM_HEAP
    from service.repository.servable import load_servable

    paths = sorted(root.glob("model_*/1/model.pb"))
    load_servable("warm", 1, paths[-1], ModelConfig(), SessionOptions())
    gc.collect()
    before = rss_bytes(os.getpid())
    kept = []
    for path in paths[:count]:
        kept.append(load_servable(path.parent.parent.name, 1, path, ModelConfig(), SessionOptions()))
        TRIM_HEAP()  # as the server does after each load
    gc.collect()
    added = rss_bytes(os.getpid()) - before
    counted = sum(resident_bytes(s) for s in kept)
    on_disk = sum(p.stat().st_size for p in paths[:count])
    del kept
    return {"models": count, "footprint_mb": round(counted / 1e6, 1), "rss_added_mb": round(added / 1e6, 1),
            "graphdefs_mb": round(on_disk / 1e6, 1), "rss_over_footprint": round(added / counted, 3)}


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def metric(text: str, name: str, label: str = "") -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")) and label in line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--total-gb", type=float, default=8.0)
    parser.add_argument("--budget-gb", type=float, default=1.0)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--zipf", type=float, default=1.1, help="the Zipf law's exponent (model k drawn ~ 1/k^s)")
    parser.add_argument("--repository", type=Path, default=Path("/tmp/many_models"))
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--footprint-models", type=int, default=100,
                        help="models loaded in this process to compare footprints with RSS (0: skip)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    written = write_repository(args.repository, args.models, args.total_gb)
    print(f"repository: {args.models} models, {written / 1e9:.2f} GB of GraphDefs ({time.perf_counter() - start:.0f} s)",
          flush=True)
    footprint = footprint_against_rss(args.repository, args.footprint_models) if args.footprint_models else None
    if footprint:
        print(f"footprint against RSS: {footprint}", flush=True)
    budget = int(args.budget_gb * 1e9)
    env = {**os.environ, "TENSORGATE_LOAD_ON_DEMAND": "true", "TENSORGATE_MODEL_MEMORY_BYTES": str(budget),
           "TENSORGATE_POLL_INTERVAL_S": "0", "TENSORGATE_GRPC_PORT": "0", "TENSORGATE_LOG_LEVEL": "warning"}
    log = open(args.repository.parent / "many_models_server.log", "wb")  # noqa: SIM115 - closed at the end
    server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--model-repository", str(args.repository),
                               "--host", "127.0.0.1", "--port", str(args.port)], env=env, cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start: see many_models_server.log")
            time.sleep(0.2)
        print(f"server ready in {time.perf_counter() - start:.1f} s (from the repository written), "
              f"RSS {rss_bytes(server.pid) / 1e6:.0f} MB", flush=True)
        result = drive(args, url, server.pid, budget)
        result["footprint_against_rss"] = footprint
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if result["errors"] == 0 else 1


def drive(args: argparse.Namespace, url: str, pid: int, budget: int) -> dict:
    names = sorted(p.name for p in args.repository.iterdir() if p.is_dir())
    weights = 1.0 / np.arange(1, len(names) + 1) ** args.zipf
    weights /= weights.sum()
    body = {"instances": np.random.default_rng(1).random((1, FEATURES)).round(3).tolist()}
    stop = time.monotonic() + args.minutes * 60
    hits: list[float] = []
    colds: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpx.Client(base_url=url, timeout=120) as http:
            while time.monotonic() < stop:
                name = names[rng.choice(len(names), p=weights)]
                t = time.perf_counter()
                try:
                    r = http.post(f"/v1/models/{name}:predict", json=body)
                    cold = "tensorgate-load-wait-ms" in r.headers  # it waited for its version to load
                    ok = r.status_code == 200
                    text = r.text[:200]
                except httpx.HTTPError as e:
                    ok, cold, text = False, False, repr(e)
                seconds = time.perf_counter() - t
                with lock:
                    if not ok:
                        errors.append(f"{name}: {text}")
                    (colds if cold else hits).append(seconds)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
    began = time.monotonic()
    for t in threads:
        t.start()
    rss = {"start": rss_bytes(pid)}
    resident = {}
    samples = []
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        elapsed = time.monotonic() - began
        text = httpx.get(f"{url}/metrics", timeout=30).text
        samples.append((elapsed, rss_bytes(pid), metric(text, "tensorgate_models_resident_bytes"),
                        metric(text, "tensorgate_model_unloads_total", 'reason="evicted"')))
        if "1min" not in rss and elapsed >= 60:
            rss["1min"], resident["1min"] = samples[-1][1], samples[-1][2]
        print(f"{elapsed:6.0f} s  RSS {samples[-1][1] / 1e6:7.0f} MB  resident {samples[-1][2] / 1e6:6.0f} MB  "
              f"evictions {samples[-1][3]:.0f}  requests {len(hits) + len(colds)}  cold {len(colds)}  "
              f"errors {len(errors)}", flush=True)
    rss["end"], resident["end"] = samples[-1][1], samples[-1][2]
    duration = time.monotonic() - began
    pct = lambda xs, q: round(float(np.percentile(xs, q)) * 1e3, 2) if xs else None
    result = {
        "models": len(names), "budget_bytes": budget, "minutes": args.minutes, "clients": args.clients,
        "requests": len(hits) + len(colds), "errors": len(errors), "first_errors": errors[:5],
        "hit_p50_ms": pct(hits, 50), "hit_p99_ms": pct(hits, 99), "hits": len(hits),
        "cold_p50_ms": pct(colds, 50), "cold_p99_ms": pct(colds, 99), "cold_starts": len(colds),
        "evictions_per_s": round(samples[-1][3] / duration, 2),
        "rss_mb": {k: round(v / 1e6) for k, v in rss.items()}, "resident_mb": {k: round(v / 1e6) for k, v in resident.items()},
        "rss_growth_1min_to_end": round(rss["end"] / rss["1min"] - 1, 4) if "1min" in rss else None,
        # One sample is noisy (a load in progress holds its parsed graph): each minute's mean too.
        "rss_mean_per_minute_mb": [round(float(np.mean([r for t, r, _, _ in samples if m * 60 <= t < (m + 1) * 60])) / 1e6)
                                   for m in range(int(duration // 60))],
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    raise SystemExit(main())
