"""Control-flow benchmark: SavedModels whose work is a While loop (Keras LSTM/GRU text classifiers, a
tf.map_fn over rows, a per-image NMS loop), tensorgate against TensorFlow in the same process.

The models are written by TensorFlow into `--models-dir` (kept there between runs; `--rewrite` writes them
again): Embedding(1000, 64) + LSTM(64) / GRU(64) / Bidirectional(LSTM(64)) + Dense(2) over 50 tokens, in
Keras 2 (tf_keras, `tf.saved_model.save`) and Keras 3 (`model.export`), a masked Keras 2 LSTM
(Embedding(mask_zero=True)), a map_fn of an elementwise function over rows, an NMS per image in a map_fn,
and JPEG bytes decoded and resized per image in a map_fn (TensorFlow Serving's image_bytes idiom). Both sides load the same directory: TensorFlow with `tf.saved_model.load(...).signatures
['serving_default']`, tensorgate with its SavedModel loader and a Session. Outputs are compared, then the
two are timed in alternating rounds (interleaved, so that a noisy neighbour slows both) and the median of
each side's per-call times gives the ratio, printed with the range of the per-round ratios:

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/rnn_bench.py [--models k2_lstm,k3_gru] [--batches 1,32]
        [--rounds 7] [--round-time 0.3] [--models-dir /tmp/tensorgate_rnn_models] [--breakdown] [--json out.json]

`--breakdown` prints where our time goes (per op type of the top-level plan; a While is one step).
Needs TensorFlow, tf_keras and keras in the running venv (the fixture venv) besides tensorgate's own
dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine_bench import interleaved

import engine
from engine.runtime.executor import execute_profiled
from engine.saved_model.loader import load_saved_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SEQ_LEN, VOCAB, WIDTH = 50, 1000, 64
TEXT_MODELS = ("k2_lstm", "k2_gru", "k2_bilstm", "k2_lstm_masked", "k3_lstm", "k3_gru")
MODELS = (*TEXT_MODELS, "mapfn", "nms", "image_bytes")


def _write_keras2(kind: str, path: Path) -> None:
    import tensorflow as tf
    import tf_keras as k

    tf.random.set_seed(0)
    tokens = k.Input((SEQ_LEN,), dtype="int32", name="tokens")
    h = k.layers.Embedding(VOCAB, WIDTH, mask_zero=kind == "lstm_masked")(tokens)
    if kind == "gru":
        h = k.layers.GRU(WIDTH)(h)
    elif kind == "bilstm":
        h = k.layers.Bidirectional(k.layers.LSTM(WIDTH))(h)
    else:
        h = k.layers.LSTM(WIDTH)(h)
    model = k.Model(tokens, k.layers.Dense(2, activation="softmax")(h))
    tf.saved_model.save(model, str(path))


def _write_keras3(kind: str, path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    tokens = keras.Input((SEQ_LEN,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(VOCAB, WIDTH)(tokens)
    h = (keras.layers.LSTM(WIDTH) if kind == "lstm" else keras.layers.GRU(WIDTH))(h)
    keras.Model(tokens, keras.layers.Dense(2, activation="softmax")(h)).export(str(path), verbose=False)


def _write_map_fn(path: Path) -> None:
    import tensorflow as tf

    class Model(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(0).standard_normal((WIDTH, WIDTH)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, WIDTH], tf.float32, name="x")])
        def serve(self, x):
            y = tf.map_fn(lambda r: tf.nn.relu(r * 2.0 + 1.0) - tf.tanh(r), x)
            return {"y": tf.matmul(y, self.w)}

    model = Model()
    tf.saved_model.save(model, str(path), signatures=model.serve)


def _write_nms(path: Path) -> None:
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 200, 4], tf.float32, name="boxes"),
                                      tf.TensorSpec([None, 200], tf.float32, name="scores")])
        def serve(self, boxes, scores):
            def one(args):
                b, s = args
                picked = tf.gather(b, tf.image.non_max_suppression(b, s, 20, 0.5, 0.1))
                return tf.pad(picked, [[0, 20 - tf.shape(picked)[0]], [0, 0]])

            return {"det": tf.map_fn(one, (boxes, scores), fn_output_signature=tf.float32)}

    model = Model()
    tf.saved_model.save(model, str(path), signatures=model.serve)


def _write_image_bytes(path: Path) -> None:
    import tensorflow as tf

    class Model(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve(self, image_bytes):
            def decode(data):
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
                return tf.image.resize(image, [32, 32]) / 255.0

            images = tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([32, 32, 3], tf.float32))
            return {"scores": tf.nn.softmax(tf.matmul(tf.reduce_mean(images, axis=[1, 2]), self.w))}

    model = Model()
    tf.saved_model.save(model, str(path), signatures=model.serve)


def _jpegs(batch: int, rng: np.random.Generator) -> np.ndarray:
    import tensorflow as tf

    pixels = rng.integers(0, 256, (batch, 64, 64, 3), dtype=np.uint8)
    return np.array([tf.io.encode_jpeg(p, quality=90).numpy() for p in pixels], dtype=object)


def write_model(name: str, path: Path) -> None:
    family, _, kind = name.partition("_")
    if family == "k2":
        _write_keras2(kind, path)
    elif family == "k3":
        _write_keras3(kind, path)
    elif name == "mapfn":
        _write_map_fn(path)
    elif name == "image_bytes":
        _write_image_bytes(path)
    else:
        _write_nms(path)


def make_feeds(name: str, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs by signature alias: tokens with a padded tail of zeros (random lengths), or floats."""
    if name in TEXT_MODELS:
        tokens = rng.integers(1, VOCAB, size=(batch, SEQ_LEN)).astype(np.int32)
        for row, length in enumerate(rng.integers(SEQ_LEN // 2, SEQ_LEN + 1, size=batch)):
            tokens[row, length:] = 0
        return {"tokens": tokens}
    if name == "mapfn":
        return {"x": rng.standard_normal((batch, WIDTH)).astype(np.float32)}
    if name == "image_bytes":
        return {"image_bytes": _jpegs(batch, rng)}
    corner = rng.uniform(0, 1, size=(batch, 200, 2)).astype(np.float32)
    size = rng.uniform(0.05, 0.3, size=(batch, 200, 2)).astype(np.float32)
    return {"boxes": np.concatenate([corner, corner + size], axis=-1),
            "scores": rng.uniform(0, 1, size=(batch, 200)).astype(np.float32)}


def breakdown(sess: engine.Session, fetches: list[str], feeds: dict[str, np.ndarray], runs: int = 5) -> list:
    plan = sess.plan_for(list(feeds), fetches)
    if not isinstance(plan, engine.Plan) or plan.dataflow is not None:
        return []
    seconds: Counter[str] = Counter()
    values = [feeds[f.name] for f in plan.feeds]
    execute_profiled(plan, values)
    for _ in range(runs):
        for _node, op, s in execute_profiled(plan, values)[1]:
            seconds[op] += s / runs
    return seconds.most_common(6)


def bench(name: str, path: Path, batches: list[int], args: argparse.Namespace) -> list[dict]:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path))
    signature = loaded.signatures["serving_default"]
    sm = load_saved_model(path)
    sess = engine.Session(sm.graph)
    sm.initialize(sess)
    sig = sm.signatures["serving_default"]
    rows = []
    for batch in batches:
        by_alias = make_feeds(name, batch, np.random.default_rng(batch))
        feeds = {t.tensor: by_alias[t.alias] for t in sig.inputs}
        fetches = [t.tensor for t in sig.outputs]
        tf_feeds = {alias: tf.constant(v) for alias, v in by_alias.items()}
        want = {k: v.numpy() for k, v in signature(**tf_feeds).items()}
        got = dict(zip([t.alias for t in sig.outputs], sess.run(fetches, feeds)))
        for alias, value in want.items():
            np.testing.assert_allclose(got[alias], value, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {alias}")
        ours, theirs, ratios = interleaved(lambda f=fetches, d=feeds: sess.run(f, d),
                                           lambda d=tf_feeds: signature(**d), args.rounds, args.round_time)
        row = {"model": name, "batch": batch, "ours_ms": ours * 1e3, "tf_ms": theirs * 1e3, "ratio": ours / theirs,
               "ratio_min": min(ratios), "ratio_max": max(ratios)}
        rows.append(row)
        print(f"{name:>15} batch {batch:>3}: ours {row['ours_ms']:8.3f} ms  TF {row['tf_ms']:8.3f} ms  "
              f"ours/TF {row['ratio']:.2f} (rounds {row['ratio_min']:.2f}-{row['ratio_max']:.2f})", flush=True)
        if args.breakdown:
            for op, s in breakdown(sess, fetches, feeds):
                print(f"{'':>20}{op:<28} {s * 1e3:8.3f} ms")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-time", type=float, default=0.3)
    parser.add_argument("--models-dir", type=Path, default=Path("/tmp/tensorgate_rnn_models"))
    parser.add_argument("--rewrite", action="store_true", help="write the models again")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = args.models.split(",")
    unknown = set(names) - set(MODELS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; known: {', '.join(MODELS)}")
    batches = [int(b) for b in args.batches.split(",")]
    results = []
    for name in names:
        path = args.models_dir / name
        if args.rewrite or not (path / "saved_model.pb").exists():
            write_model(name, path)
        results += bench(name, path, batches, args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
