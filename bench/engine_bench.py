"""Engine benchmark: median Session.run time on the bench models, against TensorFlow and ONNX Runtime.

The models (random weights, frozen by real TensorFlow) come from `tools/make_fixtures.py --bench` and
live in bench/models/ (not committed). TensorFlow and ONNX Runtime are timed in the same process on
the same graph and inputs when they are importable, and their outputs are compared with ours (the
largest difference relative to our output's largest value, since some outputs are small logits):

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/engine_bench.py [--models mlp,resnet50] [--min-time 2]
        [--compare] [--breakdown] [--json results.json]

`--compare` also times our numpy twins (`PlanOptions(compiled_kernels=False)`: every compiled kernel
replaced by the numpy code it is held to); `--breakdown` prints, per model and batch, the time our plan
spends in each op type; `--json` writes every figure (the README's table is made from it). Each model's
line "load + validate" gives the Session's construction, then the first run: the plan's build and one
execution; the compiled kernels' warm-up (numba compiling, or loading its cache) is once per process
and printed first.

Targets (2-core machine): MobileNetV2 batch 32 within 1.0x of TensorFlow and batch 1 within 1.0x of
ONNX Runtime; ResNet50 batch 32 within 1.1x of TensorFlow; BERT-mini batch 1 and 8 within 1.0x of
TensorFlow; MLP batch 1 within 1.5x of ONNX Runtime and under 0.3x of TensorFlow's Session.run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from engine.runtime.executor import execute_profiled  # noqa: E402
from kernels import jit  # noqa: E402

MODELS = ROOT / "bench" / "models"
BATCHES = {"mlp": (1, 32), "mobilenet_v2": (1, 32), "resnet50": (1, 32), "bert_mini": (1, 8),
           "efficientnet_b0": (1, 32), "convnext_tiny": (1, 32)}
# (model, batch, baseline, limit): our time / baseline time must stay under limit.
TARGETS = [
    ("mobilenet_v2", 32, "tf", 1.0),
    ("mobilenet_v2", 1, "ort", 1.0),
    ("resnet50", 32, "tf", 1.1),
    ("bert_mini", 1, "tf", 1.0),
    ("bert_mini", 8, "tf", 1.0),
    ("mlp", 1, "ort", 1.5),
    ("mlp", 1, "tf", 0.3),
]
# The runners of a --compare run, in the order they are timed: ours (compiled kernels), our numpy twins,
# TensorFlow, ONNX Runtime.
RUNNERS = ("ours", "twins", "tf", "ort")
BREAKDOWN_TOP = 8


def median_seconds(fn: Callable[[], object], min_time: float, warmup: int = 3, max_runs: int = 2000) -> float:
    """Median wall time of `fn` after warm-up, over at least 5 runs and about `min_time` seconds."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < min_time and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(ours: Callable[[], object], theirs: Callable[[], object], rounds: int, round_time: float):
    """Per-call medians (ours, theirs) over `rounds` alternating rounds, and each round's ratio."""
    mine: list[float] = []
    tf_times: list[float] = []
    ratios = []
    for fn in (ours, theirs, ours, theirs):  # warm-up
        fn()
    for _ in range(rounds):
        per_round = []
        for fn, times in ((ours, mine), (theirs, tf_times)):
            round_times = []
            start = time.perf_counter()
            while len(round_times) < 3 or time.perf_counter() - start < round_time:
                t0 = time.perf_counter()
                fn()
                round_times.append(time.perf_counter() - t0)
            times.extend(round_times)
            per_round.append(statistics.median(round_times))
        ratios.append(per_round[0] / per_round[1])
    return statistics.median(mine), statistics.median(tf_times), ratios


def make_input(case: dict, batch: int, rng: np.random.Generator) -> np.ndarray:
    feed = case["feeds"][0]
    shape = [batch, *feed["sample_shape"]]
    if feed["dtype"].startswith("int"):
        return rng.integers(0, 1000, size=shape).astype(feed["dtype"])
    return rng.standard_normal(shape).astype(feed["dtype"])


def tf_runner(model_pb: Path, feed: str, fetch: str):
    try:
        import tensorflow as tf
    except ImportError:
        return None
    graph_def = tf.compat.v1.GraphDef.FromString(model_pb.read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    sess = tf.compat.v1.Session(graph=graph)
    return lambda x: sess.run(fetch, {feed: x})


def ort_runner(model_onnx: Path):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    if not model_onnx.exists():
        return None
    sess = ort.InferenceSession(str(model_onnx), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})[0]


def our_session(model_dir: Path, compiled: bool = True, tune_allocator: bool = True) -> engine.Session:
    # A Session tunes the allocator itself unless told not to (--no-tune-allocator).
    options = engine.SessionOptions(plan=engine.PlanOptions(compiled_kernels=compiled), tune_allocator=tune_allocator)
    return engine.Session(engine.load_graph(model_dir / "model.pb"), options=options)


def relative_diff(got: object, expected: np.ndarray) -> float:
    """max|got - expected| / max|expected|: comparable across outputs of any scale."""
    got = np.asarray(got, np.float64)
    scale = float(np.max(np.abs(expected))) or 1.0
    return float(np.max(np.abs(got - expected))) / scale


def op_breakdown(sess: engine.Session, feed: str, fetch: str, x: np.ndarray, runs: int) -> list[tuple[str, float, int]]:
    """Mean seconds per run our plan spends in each op type, most first: [(op, seconds, instructions)]."""
    plan = sess.plan_for([feed], [fetch])
    if not isinstance(plan, engine.Plan):
        return []
    seconds: Counter[str] = Counter()
    counts = Counter(ins.op for ins in plan.instructions)
    execute_profiled(plan, [x])  # warm: first-touch allocations would count against the first ops
    for _ in range(runs):
        for _node, op, s in execute_profiled(plan, [x])[1]:
            seconds[op] += s / runs
    return [(op, s, counts[op]) for op, s in seconds.most_common()]


def print_breakdown(rows: list[tuple[str, float, int]]) -> None:
    total = sum(s for _, s, _ in rows) or 1.0
    shown = rows[:BREAKDOWN_TOP]
    for op, s, n in shown:
        print(f"{'':<13}   {op:<30} {n:>4}x {s * 1e3:9.3f} ms {100 * s / total:5.1f}%")
    rest = sum(s for _, s, _ in rows[BREAKDOWN_TOP:])
    if rest:
        print(f"{'':<13}   {'(other ops)':<30} {'':>5} {rest * 1e3:9.3f} ms {100 * rest / total:5.1f}%")
    print(f"{'':<13}   {'(total, profiled)':<30} {'':>5} {total * 1e3:9.3f} ms")


def header(compare: bool) -> str:
    twins = f" {'twins ms':>9} {'twins/ours':>10}" if compare else ""
    diffs = "tf, ort, twins" if compare else "tf, ort"
    return (f"{'model':<15} {'batch':>5} {'ours ms':>9}{twins} {'tf ms':>9} {'ours/tf':>8} {'ort ms':>9} "
            f"{'ours/ort':>8}  max|diff|/max|out| {diffs}")


def format_row(name: str, batch: int, row: dict, compare: bool) -> str:
    def ms(label: str) -> str:
        return f"{row[label] * 1e3:.3f}" if label in row else "-"

    def ratio(num: str, den: str) -> str:
        return f"{row[num] / row[den]:.2f}" if num in row and den in row else "-"

    twins = f" {ms('twins'):>9} {ratio('twins', 'ours'):>10}" if compare else ""
    labels = ("tf", "ort", "twins") if compare else ("tf", "ort")
    diffs = ", ".join(f"{row['diff'][k]:.1e}" if k in row["diff"] else "-" for k in labels)
    return (f"{name:<15} {batch:>5} {ms('ours'):>9}{twins} {ms('tf'):>9} {ratio('ours', 'tf'):>8} {ms('ort'):>9} "
            f"{ratio('ours', 'ort'):>8}  {diffs}")


def bench_model(name: str, args: argparse.Namespace, rng: np.random.Generator) -> dict | None:
    """Time one model at each of its batches; print its rows; return its figures (None when missing)."""
    model_dir = MODELS / name
    if not (model_dir / "model.pb").exists():
        print(f"{name:<15} missing: run tools/make_fixtures.py --bench")
        return None
    case = json.loads((model_dir / "case.json").read_text())
    feed, fetch = case["feeds"][0]["name"], case["fetches"][0]["name"]
    batches = BATCHES.get(name, (1,))
    inputs = {batch: make_input(case, batch, rng) for batch in batches}

    start = time.perf_counter()
    sess = our_session(model_dir, tune_allocator=not args.no_tune_allocator)
    load_seconds = time.perf_counter() - start
    start = time.perf_counter()
    sess.run(fetch, {feed: inputs[batches[0]]})
    first_run_seconds = time.perf_counter() - start

    runners: dict[str, Callable | None] = {"ours": lambda x: sess.run(fetch, {feed: x})}
    if args.compare:
        twins = our_session(model_dir, compiled=False, tune_allocator=not args.no_tune_allocator)
        runners["twins"] = lambda x: twins.run(fetch, {feed: x})
    runners["tf"] = tf_runner(model_dir / "model.pb", feed, fetch)
    runners["ort"] = ort_runner(model_dir / "model.onnx")

    figures: dict = {"load_ms": load_seconds * 1e3, "first_run_ms": first_run_seconds * 1e3, "batches": {}}
    for batch, x in inputs.items():
        row: dict = {"diff": {}}
        expected = np.asarray(runners["ours"](x), np.float64)
        for label in RUNNERS:
            run = runners.get(label)
            if run is None:
                continue
            row[label] = median_seconds(lambda: run(x), args.min_time)
            if label != "ours":
                row["diff"][label] = relative_diff(run(x), expected)
        print(format_row(name, batch, row, args.compare), flush=True)
        figures["batches"][batch] = {**{f"{k}_ms": row[k] * 1e3 for k in RUNNERS if k in row}, "diff": row["diff"]}
        if args.breakdown:
            rows = op_breakdown(sess, feed, fetch, x, args.breakdown_runs)
            print_breakdown(rows)
            figures["batches"][batch]["breakdown"] = [{"op": op, "ms": s * 1e3, "instructions": n} for op, s, n in rows]
    stats = sess.cache_stats()
    print(f"{'':<15} load + validate {load_seconds * 1e3:.0f} ms; first run {first_run_seconds * 1e3:.0f} ms "
          f"(plan build {stats.build_seconds * 1e3:.0f} ms, batch {batches[0]}); plan cache {stats}")
    figures["plan_build_ms"] = stats.build_seconds * 1e3
    return figures


def check_targets(results: dict) -> list[dict]:
    print("\ntargets:")
    verdicts = []
    for name, batch, base, limit in TARGETS:
        row = results.get(name, {}).get("batches", {}).get(batch, {})
        if f"{base}_ms" not in row:
            print(f"  {name} batch {batch} vs {base}: not measured")
            continue
        ratio = row["ours_ms"] / row[f"{base}_ms"]
        met = ratio <= limit
        print(f"  {name} batch {batch}: ours/{base} = {ratio:.2f} (target <= {limit}) {'met' if met else 'MISSED'}")
        verdicts.append({"model": name, "batch": batch, "baseline": base, "limit": limit, "ratio": ratio, "met": met})
    return verdicts


def versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "machine": platform.machine(), "cpus": str(os.cpu_count())}
    for package in ("numpy", "numba", "tensorflow", "tensorflow-cpu", "onnxruntime"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(BATCHES), help="comma-separated model names")
    parser.add_argument("--min-time", type=float, default=2.0, help="seconds to time each configuration")
    parser.add_argument("--compare", action="store_true", help="also time our numpy twins (compiled_kernels=False)")
    parser.add_argument("--breakdown", action="store_true", help="time per op type of our plan, per model and batch")
    parser.add_argument("--breakdown-runs", type=int, default=5, help="profiled runs averaged by --breakdown")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--no-tune-allocator", action="store_true", help="leave glibc's allocator as it is")
    args = parser.parse_args(argv)
    print("allocator: " + ("left as glibc configures it" if args.no_tune_allocator else "tuned by each Session, as in the server"))
    warm_up_seconds = jit.warm_up()
    print(f"compiled kernels: {len(jit.registered())} functions, warm-up {warm_up_seconds * 1e3:.0f} ms "
          f"(numba {'present' if jit.AVAILABLE else 'missing'}; once per process, from numba's cache after the first)")

    rng = np.random.default_rng(0)
    results: dict[str, dict] = {}
    print(header(args.compare))
    print("-" * len(header(args.compare)))
    for name in args.models.split(","):
        figures = bench_model(name, args, rng)
        if figures is not None:
            results[name] = figures
    verdicts = check_targets(results)
    if args.json:
        report = {"versions": versions(), "min_time_s": args.min_time, "jit_warm_up_ms": warm_up_seconds * 1e3,
                  "models": results, "targets": verdicts}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
