"""Image-kernel benchmark: SavedModels whose time goes to the image kernels inside a tf.map_fn (NMS per
image, JPEG bytes decoded and resized per image), tensorgate against TensorFlow in the same process.

The models are written by TensorFlow into `--models-dir` (kept between runs; `--rewrite` writes them again):

    nms_v3      boxes [N, 1000, 4], scores [N, 1000] -> map_fn(tf.image.non_max_suppression(100, 0.5, 0.3))
                -> the kept boxes, gathered and padded to 100
    nms_v4      the same through NonMaxSuppressionV4 with pad_to_max_output_size (indices and counts)
    nms_v5      tf.image.non_max_suppression_with_scores (hard, soft_nms_sigma 0): indices and scores
    nms_soft    the same with soft_nms_sigma 0.5 (soft-NMS)
    combined    tf.image.combined_non_max_suppression over [N, 1000, 1, 4] boxes and 10 classes
    jpeg        [N] JPEG strings (320x240) -> map_fn(decode_jpeg(channels=3), tf.image.resize to 224x224,
                / 255) -> a dense layer over every 8th pixel (TensorFlow Serving's image_bytes idiom,
                with a head small next to the decoding)
    jpeg_small  the same with 64x64 JPEGs resized to 32x32
    jpeg_nearest  decode_image(channels=3) -> ResizeNearestNeighbor (uint8) to 224x224 -> cast

Both sides load the same directory: TensorFlow with `tf.saved_model.load(...).signatures['serving_default']`,
tensorgate with its SavedModel loader and a Session. Outputs are compared, then the two are timed in
alternating rounds and the medians of each side's per-call times give the ratio, printed with the range
of the per-round ratios:

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/image_bench.py [--models nms_v3,jpeg] [--batches 1,32]
        [--rounds 7] [--round-time 0.3] [--models-dir /tmp/tensorgate_image_models] [--json out.json]

Needs TensorFlow in the running venv (the fixture venv) besides tensorgate's own dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine_bench import interleaved

import engine
from engine.saved_model.loader import load_saved_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BOXES, MAX_OUT, CLASSES = 1000, 100, 10
NMS_MODELS = ("nms_v3", "nms_v4", "nms_v5", "nms_soft", "combined")
JPEG_MODELS = {"jpeg": ((240, 320), (224, 224)), "jpeg_small": ((64, 64), (32, 32)),
               "jpeg_nearest": ((240, 320), (224, 224))}
MODELS = (*NMS_MODELS, *JPEG_MODELS)


def _nms_body(tf, kind: str):
    def one(args):
        b, s = args
        if kind == "nms_v3":
            picked = tf.gather(b, tf.image.non_max_suppression(b, s, MAX_OUT, 0.5, 0.3))
            return tf.pad(picked, [[0, MAX_OUT - tf.shape(picked)[0]], [0, 0]]), tf.shape(picked)[0]
        if kind == "nms_v4":
            idx, valid = tf.raw_ops.NonMaxSuppressionV4(boxes=b, scores=s, max_output_size=MAX_OUT,
                                                         iou_threshold=0.5, score_threshold=0.3,
                                                         pad_to_max_output_size=True)
            return tf.gather(b, idx), valid
        sigma = 0.0 if kind == "nms_v5" else 0.5
        idx, kept_scores = tf.image.non_max_suppression_with_scores(b, s, MAX_OUT, 0.5, 0.3, soft_nms_sigma=sigma)
        n = tf.shape(idx)[0]
        picked = tf.gather(b, idx) * kept_scores[:, None]
        return tf.pad(picked, [[0, MAX_OUT - n], [0, 0]]), n

    return one


def _write_nms(kind: str, path: Path) -> None:
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, BOXES, 4], tf.float32, name="boxes"),
                                      tf.TensorSpec([None, BOXES], tf.float32, name="scores")])
        def serve(self, boxes, scores):
            if kind == "combined":
                classes = tf.tile(scores[:, :, None], [1, 1, CLASSES]) * tf.linspace(0.5, 1.0, CLASSES)
                out = tf.image.combined_non_max_suppression(boxes[:, :, None, :], classes, MAX_OUT, MAX_OUT,
                                                            0.5, 0.3)
                return {"boxes": out.nmsed_boxes, "scores": out.nmsed_scores, "classes": out.nmsed_classes,
                        "valid": out.valid_detections}
            det, valid = tf.map_fn(_nms_body(tf, kind), (boxes, scores),
                                   fn_output_signature=(tf.float32, tf.int32))
            return {"det": det, "valid": valid}

    model = Model()
    tf.saved_model.save(model, str(path), signatures=model.serve)


def _write_jpeg(kind: str, path: Path) -> None:
    import tensorflow as tf

    out_h, out_w = JPEG_MODELS[kind][1]

    class Model(tf.Module):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.dense = tf.Variable(rng.standard_normal(((out_h // 8) * (out_w // 8) * 3, 10)).astype(np.float32)
                                     * 0.01)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve(self, image_bytes):
            def decode(data):
                if kind == "jpeg_nearest":
                    image = tf.io.decode_image(data, channels=3, expand_animations=False)
                    image = tf.image.resize(image, [out_h, out_w], method="nearest")
                    return tf.cast(image, tf.float32) / 255.0
                image = tf.io.decode_jpeg(data, channels=3)
                return tf.image.resize(image, [out_h, out_w]) / 255.0

            images = tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([out_h, out_w, 3], tf.float32))
            # A head small next to the decoding (a dense layer over every 8th pixel of every 8th row), so
            # that the image kernels decide the time.
            features = tf.reshape(images[:, ::8, ::8, :], [-1, (out_h // 8) * (out_w // 8) * 3])
            return {"scores": tf.nn.softmax(tf.matmul(features, self.dense))}

    model = Model()
    tf.saved_model.save(model, str(path), signatures=model.serve)


def write_model(name: str, path: Path) -> None:
    if name in NMS_MODELS:
        _write_nms(name, path)
    else:
        _write_jpeg(name, path)


def _photo(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A smooth image with some texture (random noise compresses unlike photographs)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 6.28, 3)
    base = np.stack([np.sin(x / (17 + 9 * c) + y / (23 + 5 * c) + phase[c]) for c in range(3)], axis=-1)
    noise = rng.normal(0, 12, (height, width, 3))
    return np.clip(127 + 100 * base + noise, 0, 255).astype(np.uint8)


def make_feeds(name: str, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if name in JPEG_MODELS:
        import tensorflow as tf

        (height, width), _ = JPEG_MODELS[name]
        images = [tf.io.encode_jpeg(_photo(height, width, rng), quality=90).numpy() for _ in range(batch)]
        return {"image_bytes": np.array(images, dtype=object)}
    corner = rng.uniform(0, 1, size=(batch, BOXES, 2)).astype(np.float32)
    size = rng.uniform(0.02, 0.2, size=(batch, BOXES, 2)).astype(np.float32)
    return {"boxes": np.concatenate([corner, corner + size], axis=-1),
            "scores": rng.uniform(0, 1, size=(batch, BOXES)).astype(np.float32)}


def bench(name: str, path: Path, batches: list[int], args: argparse.Namespace) -> list[dict]:
    import tensorflow as tf

    signature = tf.saved_model.load(str(path)).signatures["serving_default"]
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
        print(f"{name:>13} batch {batch:>3}: ours {row['ours_ms']:8.3f} ms  TF {row['tf_ms']:8.3f} ms  "
              f"ours/TF {row['ratio']:.2f} (rounds {row['ratio_min']:.2f}-{row['ratio_max']:.2f})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-time", type=float, default=0.3)
    parser.add_argument("--models-dir", type=Path, default=Path("/tmp/tensorgate_image_models"))
    parser.add_argument("--rewrite", action="store_true", help="write the models again")
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
