"""GPU benchmark: launch-bound latency eager and with CUDA graphs, and throughput against PyTorch eager.

Needs cupy and a CUDA device, and the bench models (tools/make_fixtures.py --bench; on a machine without
TensorFlow, carried by tools/bench_slim.py). Everything is timed in this one process, so the ratios
compare like with like:

- latency: BERT-mini and MobileNetV2 at batch 1 on device gpu, launched kernel by kernel (cuda_graphs
  off) and replayed as CUDA graphs (on), median of `--runs` after warm-up, with the number of CUDA
  graphs captured (0 means the plan ran eagerly: see engine.devices.cuda_graphs);
- throughput: ResNet50 at batch 64 on device gpu, and torchvision's ResNet50 (the same architecture,
  float32, NCHW, eval mode) on PyTorch eager when torch and torchvision import, in images per second.

    python3 bench/gpu_bench.py [--runs 50] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from bench.engine_bench import MODELS, make_input  # noqa: E402
from engine.devices import gpu_available  # noqa: E402
from engine.devices.cuda_graphs import CudaGraphRunner  # noqa: E402

LATENCY = (("bert_mini", 1), ("mobilenet_v2", 1))
THROUGHPUT = ("resnet50", 64)


def median_ms(fn: Callable[[], object], runs: int, warmup: int = 5, sync: Callable[[], None] = lambda: None) -> float:
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def model_input(name: str, batch: int) -> tuple[str, str, np.ndarray]:
    """The model's feed and fetch names and an input batch, made as bench/engine_bench.py makes them."""
    case = json.loads((MODELS / name / "case.json").read_text())
    x = make_input(case, batch, np.random.default_rng(0))
    return case["feeds"][0]["name"], case["fetches"][0]["name"], x


def gpu_session(name: str, cuda_graphs: bool) -> engine.Session:
    options = engine.SessionOptions(cuda_graphs=cuda_graphs)
    return engine.Session(engine.load_graph(MODELS / name / "model.pb"), device="gpu", options=options)


def captures(sess: engine.Session, feed: str, fetch: str) -> int:
    plan = sess.plan_for([feed], [fetch])
    return sum(p.runner.captures for p in getattr(plan, "partitions", ()) if isinstance(p.runner, CudaGraphRunner))


def latency(name: str, batch: int, runs: int) -> dict:
    feed, fetch, x = model_input(name, batch)
    row: dict = {"model": name, "batch": batch}
    outputs = {}
    for label, graphs in (("eager", False), ("cuda_graphs", True)):
        sess = gpu_session(name, graphs)
        row[f"{label}_ms"] = median_ms(lambda: sess.run(fetch, {feed: x}), runs)
        outputs[label] = sess.run(fetch, {feed: x})
        if graphs:
            row["graphs_captured"] = captures(sess, feed, fetch)
    scale = float(np.max(np.abs(outputs["eager"]))) or 1.0
    row["graphs_vs_eager_diff"] = float(np.max(np.abs(outputs["cuda_graphs"] - outputs["eager"]))) / scale
    print(f"{name:<13} b{batch:<3} eager {row['eager_ms']:8.3f} ms   cuda graphs {row['cuda_graphs_ms']:8.3f} ms "
          f"({row['graphs_captured']} captured)   eager/graphs {row['eager_ms'] / row['cuda_graphs_ms']:.2f}x", flush=True)
    return row


def torch_resnet50(batch: int, runs: int) -> float | None:
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    model = torchvision.models.resnet50(weights=None).cuda().eval()
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((batch, 3, 224, 224), np.float32))

    def run():
        with torch.inference_mode():
            return model(x.cuda()).cpu()  # host in, host out, as a server's request is

    return median_ms(run, runs, sync=torch.cuda.synchronize)


def throughput(runs: int) -> dict:
    name, batch = THROUGHPUT
    feed, fetch, x = model_input(name, batch)
    row: dict = {"model": name, "batch": batch}
    for label, graphs in (("eager", False), ("cuda_graphs", True)):
        sess = gpu_session(name, graphs)
        row[f"ours_{label}_ms"] = median_ms(lambda: sess.run(fetch, {feed: x}), runs)
    torch_ms = torch_resnet50(batch, runs)
    best = min(row["ours_eager_ms"], row["ours_cuda_graphs_ms"])
    line = (f"{name:<13} b{batch:<3} ours eager {row['ours_eager_ms']:8.2f} ms, cuda graphs {row['ours_cuda_graphs_ms']:8.2f} ms "
            f"= {batch / best * 1e3:7.0f} img/s")
    if torch_ms is not None:
        row["torch_eager_ms"] = torch_ms
        line += f"   PyTorch eager {torch_ms:8.2f} ms = {batch / torch_ms * 1e3:7.0f} img/s   ours/torch {best / torch_ms:.2f}x"
    print(line, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="timed runs per configuration (the median is kept)")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args(argv)
    if not gpu_available():
        print("no GPU: cupy and a CUDA device are needed")
        return 1
    missing = [m for m in (*(n for n, _ in LATENCY), THROUGHPUT[0]) if not (MODELS / m / "model.pb").exists()]
    if missing:
        print(f"missing bench models {missing}: tools/make_fixtures.py --bench (or tools/bench_slim.py unpack)")
        return 1
    import cupy

    # A failed capture is logged (at INFO) with its reason: print it, since 0 captured is the figure to explain.
    logging.basicConfig(format="%(name)s: %(message)s")
    logging.getLogger("tensorgate.cuda_graphs").setLevel(logging.INFO)
    props = cupy.cuda.runtime.getDeviceProperties(0)
    results = {"device": props["name"].decode(), "cupy": cupy.__version__,
               "latency": [latency(name, batch, args.runs) for name, batch in LATENCY],
               "throughput": throughput(args.runs)}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
