"""Cold start of a lazily loaded model: request to answer for a 25 MB CNN SavedModel, and where the time goes.

    .venv/bin/python bench/cold_start_bench.py --tf-python /tmp/tfvenv/bin/python [--saved-model DIR] [--repeat 5]

The SavedModel (a Keras CNN on 64x64x3 images, three conv/batch-norm/pool stages and a 8192x768 dense layer:
25 MB of float32 weights, exported by TensorFlow with `tf.saved_model.save`) is written once with `--tf-python`.
Then:

1. in this process, the load's phases, each timed on its own, after one load that compiled the kernels (a warm
   kernel cache): reading and parsing the SavedModel, the Session, restoring the variables, the optimizer's
   passes with the plan's compilation, the first run, and measuring the footprint;
2. `tensorgate serve` with TENSORGATE_LOAD_ON_DEMAND=true and TENSORGATE_MODEL_IDLE_UNLOAD_S=1 in a process of
   its own (started once, so its compiled-kernel cache on disk is warm from step 1): the first request after
   start, then `--repeat` more after the version was unloaded for idleness, each timed from the client
   (request to answer) with the server's own `Tensorgate-Load-Wait-Ms`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXPORT = r"""
import sys, numpy as np, tensorflow as tf
out = sys.argv[1]
rng = np.random.default_rng(0)
inputs = tf.keras.Input((64, 64, 3), name="image")
h = inputs
for filters in (32, 64, 128):
    h = tf.keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(h)
    h = tf.keras.layers.BatchNormalization()(h)
    h = tf.keras.layers.ReLU()(h)
    h = tf.keras.layers.MaxPooling2D()(h)
h = tf.keras.layers.Flatten()(h)
h = tf.keras.layers.Dense(768, activation="relu")(h)
model = tf.keras.Model(inputs, tf.keras.layers.Dense(10, name="logits")(h))
# Batch-norm statistics from a batch, so that outputs vary with the input.
x = rng.random((16, 64, 64, 3), dtype=np.float32)
for layer in model.layers:
    if isinstance(layer, tf.keras.layers.BatchNormalization):
        sub = tf.keras.Model(inputs, layer.input)
        a = sub(x).numpy()
        layer.moving_mean.assign(a.mean((0, 1, 2)))
        layer.moving_variance.assign(a.var((0, 1, 2)) + 1e-3)

class Serving(tf.Module):
    def __init__(self):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, 64, 64, 3], tf.float32, name="image")])
    def serve(self, image):
        return {"logits": self.model(image)}

serving = Serving()
tf.saved_model.save(serving, out, signatures={"serving_default": serving.serve})
"""


def export(saved_model: Path, tf_python: str) -> None:
    if (saved_model / "saved_model.pb").exists():
        return
    saved_model.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([tf_python, "-c", EXPORT, str(saved_model)], check=True, capture_output=True)


def phases(saved_model: Path) -> dict[str, float]:
    """Milliseconds per phase of one load, as service.repository.servable.load_servable runs them."""
    from engine import SessionOptions
    from engine.runtime.footprint import resident_bytes
    from engine.runtime.session import Session
    from service.repository import servable as sv
    from service.repository.config import ModelConfig

    sv.load_servable("warm", 1, saved_model, ModelConfig(), SessionOptions())  # compiles the kernels once
    t = [time.perf_counter()]
    loaded = sv._load_graph(saved_model)
    t.append(time.perf_counter())
    # As load_servable: the session gets the graph without the GraphDef it was decoded from.
    session = Session(dataclasses.replace(loaded.graph, graph_def=None), options=SessionOptions())
    t.append(time.perf_counter())
    loaded.initialize(session)
    t.append(time.perf_counter())
    (signature,) = [s for name, s in loaded.declared.items() if not name.startswith("__")]
    feeds = [spec.tensor for spec in signature.inputs]
    fetches = [spec.tensor for spec in signature.outputs]
    session.plan_for(feeds, fetches)
    t.append(time.perf_counter())
    session.run(fetches, {feeds[0]: np.zeros((1, 64, 64, 3), np.float32)})
    t.append(time.perf_counter())
    size = resident_bytes(session)
    t.append(time.perf_counter())
    names = ["read and parse", "session", "restore variables", "passes and plan", "first run", "footprint"]
    result = {name: (b - a) * 1e3 for name, a, b in zip(names, t, t[1:])}
    result["total"] = (t[-1] - t[0]) * 1e3
    result["resident MB"] = size / 1e6
    return result


def served(saved_model: Path, repeat: int, port: int, settle_s: float) -> tuple[list[float], list[float]]:
    """Request-to-answer and the server's load wait (ms) of the first request, then of `repeat` more."""
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repo"
        (repository / "cnn").mkdir(parents=True)
        os.symlink(saved_model.resolve(), repository / "cnn" / "1")
        env = {**os.environ, "TENSORGATE_LOAD_ON_DEMAND": "true", "TENSORGATE_MODEL_IDLE_UNLOAD_S": "1",
               "TENSORGATE_POLL_INTERVAL_S": "0", "TENSORGATE_GRPC_PORT": "0"}
        server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--model-repository", str(repository),
                                   "--host", "127.0.0.1", "--port", str(port)], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            time.sleep(settle_s)  # the server compiles its kernels in the background after start: let it finish
            body = {"instances": np.random.default_rng(0).random((1, 64, 64, 3), dtype=np.float32).tolist()}
            totals, waits = [], []
            with httpx.Client(base_url=url, timeout=60) as http:
                for i in range(repeat + 1):
                    while i and http.get("/v2/models/cnn/versions/1/ready").status_code == 200 and \
                            "unloaded" not in str(http.post("/v2/repository/index", json={}).json()):
                        time.sleep(0.2)  # until the idle unloader has parked it again
                    t = time.perf_counter()
                    r = http.post("/v1/models/cnn:predict", json=body)
                    totals.append((time.perf_counter() - t) * 1e3)
                    assert r.status_code == 200, r.text
                    waits.append(float(r.headers.get("Tensorgate-Load-Wait-Ms", "nan")))
            return totals, waits
        finally:
            server.terminate()
            server.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saved-model", type=Path, default=Path("/tmp/cold_start_cnn/1"))
    parser.add_argument("--tf-python", default="/tmp/tfvenv/bin/python")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--settle-s", type=float, default=10.0, help="seconds between the server's start and the first request")
    args = parser.parse_args(argv)
    export(args.saved_model, args.tf_python)
    size = sum(f.stat().st_size for f in args.saved_model.rglob("*") if f.is_file())
    print(f"SavedModel: {size / 1e6:.1f} MB on disk")
    for name, ms in phases(args.saved_model).items():
        print(f"  {name:<20} {ms:8.1f}" + ("" if name == "resident MB" else " ms"))
    totals, waits = served(args.saved_model, args.repeat, args.port, args.settle_s)
    print(f"served, first request after start: {totals[0]:.0f} ms (load wait {waits[0]:.0f} ms)")
    print(f"served, after an idle unload: median {statistics.median(totals[1:]):.0f} ms "
          f"(min {min(totals[1:]):.0f}, max {max(totals[1:]):.0f}; load wait median {statistics.median(waits[1:]):.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
