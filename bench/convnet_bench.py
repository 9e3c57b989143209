"""Convnet benchmark: Keras' EfficientNet and MobileNetV3 SavedModels, ours against TensorFlow and ONNX Runtime.

The models are keras.applications' (Keras 3, `model.export`) and tf_keras' (Keras 2, `tf.saved_model.save`)
with random weights and batch-norm statistics calibrated on a random batch (momentum 0, one training
forward pass), so activations have realistic scales; `--export` writes them into `--dir` (not committed):

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/convnet_bench.py --export [--dir /tmp/convnets]
    PYTHONPATH=. /tmp/tfvenv/bin/python bench/convnet_bench.py [--models k3_efficientnet_b0,...]
        [--batches 1,32] [--min-time 3] [--breakdown] [--no-ort]

Ours (engine.load_saved_model + engine.Session), TensorFlow (the SavedModel's serving_default concrete
function) and ONNX Runtime (the SavedModel converted by tf2onnx, cached beside it as model.onnx) are timed
interleaved, one run of each in turn, in the same process, so that the machine's load falls on all of them
alike; each line gives the medians and the ratios ours/TF and ours/ORT, and the largest difference of each
output from ours relative to our output's largest value. `--breakdown` prints where our plan spends its
time per op type (bench/engine_bench.py's op_breakdown).

Targets (issue 32, 2-core machine): ours/TF <= 1.0 at batch 1 and 32 on every model; EfficientNetB0 at
batch 1 within 1.5x of ONNX Runtime.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from engine_bench import op_breakdown, print_breakdown

import engine
from kernels import jit

# name -> (package, application): k3_ models are Keras 3's, k2_ models tf_keras'.
MODELS = {
    "k3_efficientnet_b0": ("keras", "EfficientNetB0"),
    "k3_efficientnet_v2_b0": ("keras", "EfficientNetV2B0"),
    "k3_mobilenet_v3_small": ("keras", "MobileNetV3Small"),
    "k3_mobilenet_v3_large": ("keras", "MobileNetV3Large"),
    "k2_efficientnet_b0": ("tf_keras", "EfficientNetB0"),
    "k2_mobilenet_v3_small": ("tf_keras", "MobileNetV3Small"),
}
IMAGE = (224, 224, 3)


def export(name: str, directory: Path) -> None:
    """Write model `name` as a SavedModel in directory/name, its batch norms calibrated on a random batch."""
    import tensorflow as tf

    package, application = MODELS[name]
    keras = __import__(package)
    model = getattr(keras.applications, application)(weights=None, classifier_activation=None, input_shape=IMAGE)
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.0  # one training pass makes the moving statistics that batch's
    model(np.random.default_rng(0).uniform(0, 255, size=(8, *IMAGE)).astype(np.float32), training=True)
    target = directory / name
    if package == "keras":
        model.export(str(target))
    else:
        spec = tf.TensorSpec([None, *IMAGE], tf.float32, name="inputs")
        serve = tf.function(lambda x: model(x, training=False), input_signature=[spec])
        tf.saved_model.save(model, str(target), signatures={"serving_default": serve})
    print(f"wrote {target}", flush=True)


def ours_runner(model_dir: Path) -> tuple[engine.Session, str, str, Callable[[np.ndarray], object]]:
    sm = engine.load_saved_model(model_dir)
    signature = sm.signatures["serving_default"]
    feed, fetch = signature.inputs[0].tensor, signature.outputs[0].tensor
    sess = sm.session()
    return sess, feed, fetch, lambda x: sess.run(fetch, {feed: x})


def tf_runner(model_dir: Path) -> Callable[[np.ndarray], object]:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_dir))
    fn = loaded.signatures["serving_default"]
    key = next(iter(fn.structured_input_signature[1]))
    out = next(iter(fn.structured_outputs))
    # Keep `loaded` alive: the concrete function's variables belong to it.
    return lambda x, loaded=loaded: fn(**{key: tf.constant(x)})[out].numpy()


def ort_runner(model_dir: Path) -> Callable[[np.ndarray], object] | None:
    """ONNX Runtime on the SavedModel converted by tf2onnx (cached as model_dir/../<name>.onnx); None when the
    conversion fails."""
    import onnxruntime as ort

    onnx_path = model_dir.parent / f"{model_dir.name}.onnx"
    if not onnx_path.exists():
        # tf2onnx's Python API has no SavedModel entry point; its command line has.
        command = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(model_dir), "--opset", "17",
                   "--output", str(onnx_path)]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0 or not onnx_path.exists():
            print(f"  tf2onnx could not convert {model_dir.name}: {done.stderr.strip().splitlines()[-1:]}", flush=True)
            return None
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda x: sess.run(None, {name: x})[0]


def interleaved_medians(runners: dict[str, Callable[[], object]], min_time: float) -> dict[str, float]:
    """Median seconds of each runner, timed one run of each in turn, for about `min_time` seconds each (at
    least 5 runs), after two warm-up runs of each."""
    for run in runners.values():
        run()
        run()
    times: dict[str, list[float]] = {label: [] for label in runners}
    spent = 0.0
    while len(next(iter(times.values()))) < 5 or spent < min_time * len(runners):
        for label, run in runners.items():
            start = time.perf_counter()
            run()
            took = time.perf_counter() - start
            times[label].append(took)
            spent += took
    return {label: statistics.median(t) for label, t in times.items()}


def relative_diff(got: object, expected: object) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected))) / (float(np.max(np.abs(expected))) or 1.0)


def bench(name: str, args: argparse.Namespace) -> None:
    model_dir = args.dir / name
    if not model_dir.exists():
        print(f"{name:<24} missing: run with --export")
        return
    sess, feed, fetch, ours = ours_runner(model_dir)
    baselines = {"tf": tf_runner(model_dir)}
    if not args.no_ort:
        baselines["ort"] = ort_runner(model_dir)
    rng = np.random.default_rng(0)
    for batch in args.batches:
        x = rng.uniform(0, 255, size=(batch, *IMAGE)).astype(np.float32)
        runners = {"ours": lambda x=x: ours(x)}
        runners.update({label: (lambda run=run, x=x: run(x)) for label, run in baselines.items() if run is not None})
        mine = np.asarray(ours(x))
        diffs = {label: relative_diff(run(x), mine) for label, run in baselines.items() if run is not None}
        medians = interleaved_medians(runners, args.min_time)
        ms = "  ".join(f"{label} {medians[label] * 1e3:8.2f} ms" for label in runners)
        ratios = "  ".join(f"ours/{label} {medians['ours'] / medians[label]:.2f}" for label in runners if label != "ours")
        diff = ", ".join(f"{label} {d:.1e}" for label, d in diffs.items())
        print(f"{name:<24} {batch:>3}  {ms}  {ratios}  max|diff|/max|out| {diff}", flush=True)
        if args.breakdown:
            print_breakdown(op_breakdown(sess, feed, fetch, x, args.breakdown_runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/convnets"), help="where the SavedModels are")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
    parser.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--min-time", type=float, default=3.0, help="seconds to time each runner per batch")
    parser.add_argument("--export", action="store_true", help="write the SavedModels into --dir and stop")
    parser.add_argument("--no-ort", action="store_true", help="leave out ONNX Runtime")
    parser.add_argument("--breakdown", action="store_true", help="time per op type of our plan")
    parser.add_argument("--breakdown-runs", type=int, default=5, help="profiled runs averaged by --breakdown")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    names = args.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {list(MODELS)}")
    if args.export:
        args.dir.mkdir(parents=True, exist_ok=True)
        for name in names:
            export(name, args.dir)
        return 0
    print(f"compiled kernels warm-up {jit.warm_up() * 1e3:.0f} ms", flush=True)
    for name in names:
        bench(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
