"""Zoo benchmark: every model bench/zoo_export.py wrote, run by tensorgate, by TensorFlow (the SavedModel's
serving_default signature called with tensors, as a TF Serving comparison means; a tf.compat.v1 Session for a
frozen GraphDef) and by ONNX Runtime where tf2onnx converts it, timed in the same run:

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/zoo_bench.py [--only mobilenet_v2,bert_hub] [--batches 1,32]
        [--min-time 1] [--rounds 2] [--breakdown] [--json bench/results/zoo.json] [--markdown table.md] [--no-ort]

For each model and batch, one batch is drawn (zoo_common.make_inputs), our outputs are compared with
TensorFlow's (max|ours - tf| / max|tf| per float output; exact for integers and strings; over 1e-3 is
flagged), then ours, TensorFlow and ONNX Runtime are timed in turn (engine_bench.median_seconds), `--rounds`
times over, interleaved; each runner's figure is its best median over the rounds (the spread of the rounds
goes to --json). A model tensorgate cannot load or run is a row with the error: that is a finding.
`--breakdown` prints the time our plan spends per op type (a plan with v1 control flow runs as one dataflow
step, and a While's body counts as its While). The ONNX model is converted once, with tf2onnx's command line in
a process of its own, and kept as bench/zoo/<name>/model.onnx (model.onnx.failed holds why not).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter would bury the table
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from engine_bench import BREAKDOWN_TOP, median_seconds, versions
from zoo_common import make_inputs
from zoo_export import RECIPES

import engine
from engine.runtime.executor import execute_profiled
from kernels import jit

DESCRIPTION = "Time every exported zoo model: tensorgate against TensorFlow and ONNX Runtime, in one run."
ZOO = BENCH / "zoo"
DIFF_LIMIT = 1e-3
ONNX_OPSET = 17
RUNNERS = ("ours", "tf", "ort")
WORST = 5
SLOW_S = 2.0


# --- the three runners: each a function of {alias: array} -> {alias: array} ----------------------------------


def ours(model_dir: Path, case: dict):
    """Our Session on the model, and a runner over it."""
    if case["format"] == "saved_model":
        saved = engine.load_saved_model(model_dir / "model")
        sess = saved.session()
        sig = saved.signatures["serving_default"]
        feeds = {t.alias: t.tensor for t in sig.inputs}
        fetches = {t.alias: t.tensor for t in sig.outputs}
    else:
        sess = engine.Session(engine.load_graph(model_dir / "model.pb"))
        feeds = {f["alias"]: f["alias"] for f in case["feeds"]}
        fetches = {name: name for name in case["fetches"]}
    aliases, tensors = list(fetches), list(fetches.values())

    def run(inputs: dict) -> dict:
        values = sess.run(tensors, {feeds[alias]: value for alias, value in inputs.items()})
        return dict(zip(aliases, values))

    return sess, feeds, tensors, run


def tensorflow_runner(model_dir: Path, case: dict):
    import tensorflow as tf

    if case["format"] == "saved_model":
        fn = tf.saved_model.load(str(model_dir / "model")).signatures["serving_default"]

        def run(inputs: dict) -> dict:
            return {k: v.numpy() for k, v in fn(**inputs).items()}

        return run, lambda inputs: {k: tf.constant(v) for k, v in inputs.items()}
    graph_def = tf.compat.v1.GraphDef.FromString((model_dir / "model.pb").read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    sess = tf.compat.v1.Session(graph=graph)
    fetches = list(case["fetches"])
    return (lambda inputs: dict(zip(fetches, sess.run(fetches, inputs)))), (lambda inputs: inputs)


def convert_to_onnx(model_dir: Path, case: dict, timeout: float) -> Path | None:
    """model.onnx, converted by tf2onnx once (None when it cannot convert; model.onnx.failed says why)."""
    onnx_path, failed = model_dir / "model.onnx", model_dir / "model.onnx.failed"
    if onnx_path.exists():
        return onnx_path
    if failed.exists():
        return None
    command = [sys.executable, "-m", "tf2onnx.convert", "--opset", str(ONNX_OPSET), "--output", str(onnx_path)]
    if case["format"] == "saved_model":
        command += ["--saved-model", str(model_dir / "model"), "--signature_def", "serving_default"]
    else:
        command += ["--graphdef", str(model_dir / "model.pb"), "--inputs", ",".join(f["alias"] for f in case["feeds"]),
                    "--outputs", ",".join(case["fetches"])]
    try:
        proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        why = None if proc.returncode == 0 and onnx_path.exists() else _last_error(proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired:
        why = f"tf2onnx ran over {timeout:.0f} s"
    if why is None:
        return onnx_path
    onnx_path.unlink(missing_ok=True)
    failed.write_text(why + "\n")
    return None


def _last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln.split(" ", 1)[0] or "Unsupported" in ln]
    return (errors or lines or ["tf2onnx failed without a message"])[-1][:300]


def onnx_runner(onnx_path: Path, case: dict, our_feeds: dict):
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = {}
    for alias, tensor in our_feeds.items():
        spellings = {alias, f"{alias}:0", tensor, tensor.split(":")[0]}
        found = [i.name for i in session.get_inputs() if i.name in spellings]
        if not found:
            raise RuntimeError(f"no ONNX input for feed '{alias}' among {[i.name for i in session.get_inputs()]}")
        names[alias] = found[0]
    outputs = [o.name for o in session.get_outputs()]

    def run(inputs: dict) -> dict:
        values = session.run(None, {names[a]: v for a, v in inputs.items()})
        return {name.split(":")[0] if name.split(":")[0] in case["outputs"] else name: v for name, v in zip(outputs, values)}

    return run


# --- comparing and timing ------------------------------------------------------------------------------------


def difference(got: dict, expected: dict) -> tuple[float, dict[str, str]]:
    """The largest difference over outputs (relative for floats; the share of differing elements otherwise),
    and each output's figure as text."""
    worst, each = 0.0, {}
    for alias, want in expected.items():
        want = np.asarray(want)
        if alias not in got:
            worst, each[alias] = float("inf"), "missing"
            continue
        have = np.asarray(got[alias])
        if have.shape != want.shape:
            worst, each[alias] = float("inf"), f"shape {have.shape} != {want.shape}"
            continue
        if want.dtype.kind in "OSU":  # strings: TensorFlow gives bytes, ONNX Runtime str
            have, want = _as_bytes(have), _as_bytes(want)
        if want.dtype.kind in "fc":
            scale = float(np.max(np.abs(want))) if want.size else 0.0
            d = float(np.max(np.abs(have.astype(np.float64) - want))) / (scale or 1.0) if want.size else 0.0
        else:
            d = float(np.mean(have != want)) if want.size else 0.0
        worst = max(worst, d)
        each[alias] = f"{d:.1e}"
    return worst, each


def _as_bytes(values: np.ndarray) -> np.ndarray:
    flat = [v.encode() if isinstance(v, str) else bytes(v) for v in values.ravel()]
    return np.array(flat, dtype=object).reshape(values.shape)


def breakdown(sess, feeds: dict, fetches: list[str], inputs: dict, runs: int) -> list[tuple[str, float, int]]:
    """Mean seconds per run our plan spends in each op type, most first: [(op, seconds, instructions)]."""
    plan = sess.plan_for([feeds[a] for a in inputs], fetches)
    if not isinstance(plan, engine.Plan):
        return []
    by_name = {str(engine.parse_tensor_name(feeds[a])): v for a, v in inputs.items()}
    values = [by_name[spec.name] if spec.dtype is None else np.asarray(by_name[spec.name], spec.dtype)
              for spec in plan.feeds]
    seconds: Counter[str] = Counter()
    counts = Counter(ins.op for ins in plan.instructions)
    for _ in range(2):  # warm: first-touch allocations would count against the first ops
        execute_profiled(plan, values)
    for _ in range(runs):
        for _node, op, s in execute_profiled(plan, values)[1]:
            seconds[op] += s / runs
    return [(op, s, counts[op]) for op, s in seconds.most_common()]


def print_breakdown(rows: list[tuple[str, float, int]]) -> None:
    total = sum(s for _, s, _ in rows) or 1.0
    for op, s, n in rows[:BREAKDOWN_TOP]:
        print(f"{'':<20}   {op:<30} {n:>4}x {s * 1e3:9.3f} ms {100 * s / total:5.1f}%")
    rest = sum(s for _, s, _ in rows[BREAKDOWN_TOP:])
    if rest:
        print(f"{'':<20}   {'(other ops)':<30} {'':>5} {rest * 1e3:9.3f} ms {100 * rest / total:5.1f}%")
    print(f"{'':<20}   {'(total, profiled)':<30} {'':>5} {total * 1e3:9.3f} ms", flush=True)


HEADER = (f"{'model':<20} {'batch':>5} {'ours ms':>9} {'tf ms':>9} {'ort ms':>9} {'ours/tf':>8} {'ours/ort':>8} "
          f"{'diff tf':>8}  note")


def format_row(name: str, batch: int | str, row: dict) -> str:
    def ms(label: str) -> str:
        return f"{row[label]:.3f}" if label in row else "-"

    def ratio(num: str, den: str) -> str:
        return f"{row[num] / row[den]:.2f}" if num in row and den in row else "-"

    diff = f"{row['diff']:.1e}" if "diff" in row else "-"
    return (f"{name:<20} {batch!s:>5} {ms('ours_ms'):>9} {ms('tf_ms'):>9} {ms('ort_ms'):>9} "
            f"{ratio('ours_ms', 'tf_ms'):>8} {ratio('ours_ms', 'ort_ms'):>8} {diff:>8}  {row.get('note', '')}")


def _error(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if "No Op registered for " in text:  # tf2onnx left a TensorFlow op in the ONNX graph
        op = text.split("No Op registered for ", 1)[1].split(" ")[0]
        return f"tf2onnx left TensorFlow op {op} unconverted (ONNX Runtime cannot load it)"
    if "failed:" in text:  # ONNX Runtime's "Load model from <path> failed:<why>"
        text = text.split("failed:", 1)[1].strip()
    return f"{type(e).__name__}: {text}"[:400]


def time_batch(runners: dict, tf_inputs: dict, inputs: dict, args: argparse.Namespace, first: float) -> dict:
    """Each runner's best median over the rounds (ms) and every round's median. A model whose first call took
    `first` > SLOW_S seconds gets one warm-up call and one round (it would otherwise take many minutes)."""
    arguments = {"ours": inputs, "tf": tf_inputs, "ort": inputs}
    rounds: dict[str, list[float]] = {label: [] for label in runners}
    slow = first > 0.5
    for i in range(1 if first > SLOW_S else args.rounds):
        for label, run in runners.items():
            warmup = 1 if slow or i else 3
            call = partial(run, arguments[label])
            rounds[label].append(median_seconds(call, args.min_time, warmup=warmup) * 1e3)
    return {**{f"{label}_ms": min(ms) for label, ms in rounds.items()}, "rounds_ms": rounds}


def bench_model(name: str, args: argparse.Namespace, rng: np.random.Generator) -> dict:
    model_dir = ZOO / name
    case = json.loads((model_dir / "case.json").read_text())
    figures: dict = {"source": case["source"], "format": case["format"], "batches": {}}
    try:
        start = time.perf_counter()
        sess, feeds, fetches, run_ours = ours(model_dir, case)
        figures["load_ms"] = (time.perf_counter() - start) * 1e3
    except Exception as e:  # noqa: BLE001  (a model we cannot load is a row of the table, not the end of the run)
        figures["error"] = f"load: {_error(e)}"
        traceback.print_exc(limit=-3)
        print(format_row(name, "-", {"note": "TENSORGATE " + figures["error"]}), flush=True)
        return figures
    run_tf, to_tf = tensorflow_runner(model_dir, case)
    run_ort, ort_note = None, ""
    if not args.no_ort:
        try:
            onnx_path = convert_to_onnx(model_dir, case, args.onnx_timeout)
            if onnx_path is None:
                ort_note = "no ORT: " + (model_dir / "model.onnx.failed").read_text().strip()[:120]
            else:
                run_ort = onnx_runner(onnx_path, case, feeds)
        except Exception as e:  # noqa: BLE001
            ort_note = f"no ORT: {_error(e)[:120]}"
    for batch in args.batches:
        row: dict = {}
        inputs = make_inputs(case, batch, rng)
        tf_inputs = to_tf(inputs)
        try:
            expected = run_tf(tf_inputs)
        except Exception as e:  # noqa: BLE001
            row["error"] = row["note"] = f"TensorFlow failed: {_error(e)}"
            figures["batches"][batch] = row
            print(format_row(name, batch, row), flush=True)
            continue
        try:
            start = time.perf_counter()
            got = run_ours(inputs)
            row["first_run_ms"] = (time.perf_counter() - start) * 1e3  # builds the plan at the first batch
            start = time.perf_counter()
            run_ours(inputs)
            second = time.perf_counter() - start
        except Exception as e:  # noqa: BLE001
            row["error"] = f"run: {_error(e)}"
            traceback.print_exc(limit=-3)
            row["note"] = "TENSORGATE " + row["error"]
            figures["batches"][batch] = row
            print(format_row(name, batch, row), flush=True)
            continue
        row["diff"], row["diff_outputs"] = difference(got, expected)
        notes = [f"DIFF {row['diff_outputs']}"] if row["diff"] > DIFF_LIMIT else []
        runners = {"ours": run_ours, "tf": run_tf}
        if run_ort is not None:
            try:
                row["ort_diff"], ort_outputs = difference(run_ort(inputs), expected)
                runners["ort"] = run_ort
                if row["ort_diff"] > DIFF_LIMIT:
                    notes.append(f"ORT differs from TF: {ort_outputs}")
            except Exception as e:  # noqa: BLE001
                ort_note = f"ORT failed: {_error(e)[:120]}"
        notes.append(ort_note)
        row.update(time_batch(runners, tf_inputs, inputs, args, second))
        row["note"] = "; ".join(n for n in notes if n)
        figures["batches"][batch] = row
        print(format_row(name, batch, row), flush=True)
        if args.breakdown:
            rows = breakdown(sess, feeds, fetches, inputs, args.breakdown_runs)
            print_breakdown(rows)
            row["breakdown"] = [{"op": op, "ms": s * 1e3, "instructions": n} for op, s, n in rows]
    return figures


def summary(results: dict) -> list[dict]:
    print("\n" + HEADER + "\n" + "-" * len(HEADER))
    ranked = []
    for name, figures in results.items():
        if "error" in figures:
            print(format_row(name, "-", {"note": "TENSORGATE " + figures["error"]}))
            continue
        for batch, row in figures["batches"].items():
            print(format_row(name, batch, row))
            if "ours_ms" in row and "tf_ms" in row:
                ranked.append({"model": name, "batch": batch, "ours_over_tf": row["ours_ms"] / row["tf_ms"]})
    ranked.sort(key=lambda r: -r["ours_over_tf"])
    print(f"\nworst {WORST} ours/tf:")
    for r in ranked[:WORST]:
        print(f"  {r['model']:<20} batch {r['batch']:>3}: {r['ours_over_tf']:.2f}")
    over = [r for r in ranked if r["ours_over_tf"] > 1.0]
    print(f"target ours/tf <= 1.0: met by {len(ranked) - len(over)} of {len(ranked)} rows")
    return ranked


def markdown_table(results: dict) -> str:
    """The table for the README: one row per model and batch (ours/ORT only where ORT's outputs match TF's)."""
    lines = ["| model | exported by | batch | ours ms | TF ms | ORT ms | ours/TF | ours/ORT |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, figures in results.items():
        if "error" in figures:
            lines.append(f"| {name} | {figures['source']} | - | tensorgate: {figures['error']} | | | | |")
            continue
        for batch, row in figures["batches"].items():
            ort_ok = "ort_ms" in row and row.get("ort_diff", 0.0) <= DIFF_LIMIT
            cells = [f"{row['ours_ms']:.2f}" if "ours_ms" in row else row.get("error", "-"),
                     f"{row['tf_ms']:.2f}" if "tf_ms" in row else "-",
                     f"{row['ort_ms']:.2f}" if ort_ok else "-",
                     f"{row['ours_ms'] / row['tf_ms']:.2f}" if "ours_ms" in row and "tf_ms" in row else "-",
                     f"{row['ours_ms'] / row['ort_ms']:.2f}" if ort_ok else "-"]
            lines.append(f"| {name} | {figures['source']} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--only", help="comma-separated model names (default: every model in bench/zoo/)")
    parser.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds to time each runner per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of ours, tf, ort timed in turn")
    parser.add_argument("--breakdown", action="store_true", help="print our time per op type, per model and batch")
    parser.add_argument("--breakdown-runs", type=int, default=5, help="profiled runs averaged by --breakdown")
    parser.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    parser.add_argument("--onnx-timeout", type=float, default=300, help="seconds tf2onnx may take on one model")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    parser.add_argument("--markdown", type=Path, help="write the table (for the README) to this file")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    found = {p.parent.name for p in ZOO.glob("*/case.json")}
    exported = [n for n in RECIPES if n in found] + sorted(found - set(RECIPES))  # the recipes' order: by kind
    names = args.only.split(",") if args.only else exported
    missing = [n for n in names if n not in exported]
    if missing or not names:
        parser.error(f"not exported: {missing or 'nothing in ' + str(ZOO)}; run bench/zoo_export.py first")
    warm_up = jit.warm_up()
    print(f"compiled kernels: {len(jit.registered())} functions, warm-up {warm_up * 1e3:.0f} ms")
    print(HEADER + "\n" + "-" * len(HEADER), flush=True)
    rng = np.random.default_rng(0)
    results = {}
    for name in names:
        results[name] = bench_model(name, args, rng)
        gc.collect()
    ranked = summary(results)
    if args.json:
        report = {"versions": versions(), "min_time_s": args.min_time, "rounds": args.rounds,
                  "batches": args.batches, "models": results, "worst": ranked[:WORST]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nfigures written to {args.json}")
    if args.markdown:
        args.markdown.write_text(markdown_table(results))
        print(f"table written to {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
