"""Export the benchmark zoo: models built by code others wrote (keras.applications, keras-hub, tf_keras, Model
Garden, tf.feature_column, TensorFlow Recommenders, TF1 graph mode), each saved as its users save it, under
bench/zoo/<name>/ (not committed) with a case.json that bench/zoo_bench.py reads:

    /tmp/tfvenv/bin/python bench/zoo_export.py [--only mobilenet_v2,bert_hub] [--force] [--list]

Each model is built in a process of its own (its framework's globals, TF_USE_LEGACY_KERAS for the Keras 2
ones, and its memory stay there), seeded, with random weights in a small configuration; BatchNorm layers
are calibrated on a realistic batch (zoo_common.calibrate_batch_norm) and heads give logits. The export is
then loaded back with TensorFlow and run on a batch of 8: an output that hardly varies across the batch
(zoo_common.spread under MIN_SPREAD) makes the export fail, since timing it would time a constant.

case.json holds: format (saved_model: bench/zoo/<name>/model/, signature serving_default; graph_def:
model.pb with its fetches), feeds (alias: the signature key, or the tensor name of a GraphDef; dtype;
per-sample shape; input generator, see zoo_common), outputs, each output's spread, export time and size.
The recipes live in zoo_recipes_vision.py, zoo_recipes_text.py and zoo_recipes_structured.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zoo_recipes_structured
import zoo_recipes_text
import zoo_recipes_vision
from zoo_common import MIN_SPREAD, Recipe, make_inputs, spread

DESCRIPTION = "Export the benchmark zoo (models built by code others wrote) under bench/zoo/."
ZOO = Path(__file__).resolve().parent / "zoo"
RECIPES: dict[str, Recipe] = {**zoo_recipes_vision.RECIPES, **zoo_recipes_text.RECIPES,
                              **zoo_recipes_structured.RECIPES}
SEED = 0
CHECK_BATCH = 8
LARGE_MB = 120
# What a child prints about its model (the rest is TensorFlow's logging, shown only when it fails).
REPORT_LINES = ("  calibrated", "  output", "  exported", "  note")


class ExportError(RuntimeError):
    """A recipe's export cannot be used: wrong feeds, or outputs that do not vary."""


def _seed(legacy_keras: bool) -> None:
    import random

    import tensorflow as tf

    random.seed(SEED)
    np.random.seed(SEED)
    tf.random.set_seed(SEED)
    if not legacy_keras:
        import keras

        keras.utils.set_random_seed(SEED)


def _dtype_name(dtype) -> str:
    return "string" if dtype.name == "string" else dtype.name


def _sample_shape(alias: str, spec_shape, given: list[int] | None) -> list[int]:
    dims = list(spec_shape)[1:]
    if given is None:
        if any(d is None for d in dims):
            raise ExportError(f"feed '{alias}' has open dimensions {dims}: the recipe must give sample_shape")
        return [int(d) for d in dims]
    if len(given) != len(dims) or any(d is not None and d != g for d, g in zip(dims, given)):
        raise ExportError(f"feed '{alias}': sample_shape {given} does not fit the signature's {dims}")
    return list(given)


def _saved_model_case(model_dir: Path, case: dict) -> tuple[dict, dict]:
    """The case completed from the exported signature, and the outputs of a check batch."""
    import tensorflow as tf

    fn = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    feeds = {f["alias"]: f for f in case["feeds"]}
    if "*" in feeds:
        if len(specs) != 1 or len(feeds) != 1:
            raise ExportError(f"recipe gave one feed for all, but the signature takes {sorted(specs)}")
        feeds = {next(iter(specs)): {**feeds["*"], "alias": next(iter(specs))}}
    if set(feeds) != set(specs):
        raise ExportError(f"recipe feeds {sorted(feeds)} differ from the signature's inputs {sorted(specs)}")
    case["feeds"] = [{"alias": alias, "dtype": _dtype_name(spec.dtype),
                      "sample_shape": _sample_shape(alias, spec.shape, feeds[alias].get("sample_shape")),
                      "gen": feeds[alias]["gen"]} for alias, spec in specs.items()]
    inputs = make_inputs(case, CHECK_BATCH, np.random.default_rng(SEED))
    results = fn(**{alias: tf.constant(value) for alias, value in inputs.items()})
    case["outputs"] = sorted(results)
    return case, {k: v.numpy() for k, v in results.items()}


def _graph_def_case(model_pb: Path, case: dict) -> tuple[dict, dict]:
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef.FromString(model_pb.read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    inputs = make_inputs(case, CHECK_BATCH, np.random.default_rng(SEED))
    with tf.compat.v1.Session(graph=graph) as sess:
        values = sess.run(case["fetches"], inputs)
    case["outputs"] = list(case["fetches"])
    return case, dict(zip(case["fetches"], values))


def _check_spread(name: str, case: dict, outputs: dict) -> dict[str, float | None]:
    spreads = {alias: spread(value) for alias, value in outputs.items()}
    for alias, value in spreads.items():
        shape = tuple(np.shape(outputs[alias]))
        shown = "not checked (not a float batch)" if value is None else f"{value:.3g}"
        print(f"  output {alias} {shape}: spread across samples {shown}")
    flat = [a for a, v in spreads.items() if v is not None and v < MIN_SPREAD and a not in case.get("exempt", ())]
    if flat:
        raise ExportError(f"{name}: outputs {flat} are near-constant across a batch (spread < {MIN_SPREAD}): "
                          "calibrate its BatchNorm or scale its head")
    if not any(v is not None for a, v in spreads.items() if a not in case.get("exempt", ())):
        raise ExportError(f"{name}: no float output to check for variation")
    return spreads


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def export_one(name: str) -> None:
    """Build, export, check and write bench/zoo/<name>/ (in this process)."""
    recipe = RECIPES[name]
    _seed(recipe.legacy_keras)
    partial = ZOO / f".{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    start = time.perf_counter()
    case = recipe.build(partial)
    seconds = time.perf_counter() - start
    if case["format"] == "saved_model":
        case, outputs = _saved_model_case(partial / "model", case)
    else:
        case, outputs = _graph_def_case(partial / "model.pb", case)
    spreads = _check_spread(name, case, outputs)
    size = _size_mb(partial)
    if size > LARGE_MB:
        print(f"  note: {size:.0f} MB on disk")
    import tensorflow as tf

    case.update(name=name, source=recipe.source, spread=spreads, export_seconds=round(seconds, 1),
                size_mb=round(size, 1), tensorflow=tf.__version__)
    (partial / "case.json").write_text(json.dumps(case, indent=2) + "\n")
    shutil.rmtree(ZOO / name, ignore_errors=True)
    partial.rename(ZOO / name)
    print(f"  exported in {seconds:.0f} s, {size:.1f} MB")


def run_child(name: str, legacy_keras: bool, timeout: float) -> str | None:
    """Export `name` in a fresh process; None when it succeeded, else why not."""
    env = dict(os.environ)
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", name], check=False, env=env, timeout=timeout,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    lines = proc.stdout.splitlines()
    if proc.returncode != 0:
        print("\n".join(lines[-25:]), flush=True)
        errors = [ln for ln in lines if ln and not ln.startswith(" ")]
        return errors[-1] if errors else f"exit status {proc.returncode}"
    print("\n".join(ln for ln in lines if ln.startswith(REPORT_LINES)), flush=True)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--only", help="comma-separated model names (default: all)")
    parser.add_argument("--list", action="store_true", help="list the models and what exports them, then stop")
    parser.add_argument("--force", action="store_true", help="export again models already in bench/zoo/")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one model's export may take")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        export_one(args.child)
        return 0
    if args.list:
        for name, recipe in RECIPES.items():
            done = "exported" if (ZOO / name / "case.json").exists() else "-"
            print(f"{name:<20} {done:<9} {recipe.source}")
        return 0
    names = args.only.split(",") if args.only else list(RECIPES)
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        parser.error(f"unknown models {unknown}; --list shows them")
    failures = {}
    for name in names:
        if (ZOO / name / "case.json").exists() and not args.force:
            print(f"{name}: already exported (--force to redo)")
            continue
        print(f"{name}: {RECIPES[name].source}", flush=True)
        start = time.perf_counter()
        error = run_child(name, RECIPES[name].legacy_keras, args.timeout)
        print(f"{name}: {'FAILED: ' + error if error else 'ok'} ({time.perf_counter() - start:.0f} s)", flush=True)
        if error:
            failures[name] = error
    if failures:
        print(f"\n{len(failures)} failed:\n" + "\n".join(f"  {n}: {e}" for n, e in failures.items()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
