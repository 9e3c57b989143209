"""Offline scoring: `tensorgate score` against TensorFlow's own tf.data + Session.run loop, in one run.

Writes a TFRecord of N serialized tf.Examples (10 float features and 2 string features) and a GraphDef
that parses them (ParseExampleV2) and scores them with a small dense layer, then times both on the same
file and batch size and prints records/s and the ratio, both as a user runs them: TensorFlow's loop as a new
Python process that imports TensorFlow, loads the SavedModel and reads the file with tf.data, against
`tensorgate score` as a new process; each also without its start-up (TensorFlow's loop from the load on,
ours from the scoring on, as `tensorgate score` reports it). Run it with a Python that has TensorFlow (the
fixture venv), from the repository root; tensorgate runs through the project's own venv:

    /tmp/tfvenv/bin/python bench/score_bench.py [--records 100000] [--batch-size 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TENSORGATE = ROOT / ".venv" / "bin" / "tensorgate"
FEATURES = [f"f{i}" for i in range(10)]


def make_model(path: Path) -> None:
    """A SavedModel (one signature: serialized Examples in, score out) that parses 10 float features, a
    string and a var-length string feature: score = tanh(x @ W) . v + len(country) + number of tags."""
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        serialized = tf.compat.v1.placeholder(tf.string, [None], name="examples")
        spec = {name: tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0]) for name in FEATURES}
        spec["country"] = tf.io.FixedLenFeature([], tf.string, default_value="")
        spec["tags"] = tf.io.VarLenFeature(tf.string)
        parsed = tf.io.parse_example(serialized, spec)
        x = tf.concat([parsed[name] for name in FEATURES], axis=1)
        hidden = tf.tanh(tf.matmul(x, tf.constant(rng.normal(size=(10, 16)).astype(np.float32))))
        logit = tf.matmul(hidden, tf.constant(rng.normal(size=(16, 1)).astype(np.float32)))
        tags = tf.sparse.reduce_sum(tf.sparse.map_values(tf.ones_like, tf.sparse.map_values(tf.strings.length,
                                                                                             parsed["tags"])), axis=1)
        score = tf.identity(logit[:, 0] + tf.cast(tf.strings.length(parsed["country"]) + tags, tf.float32),
                            name="score")
        with tf.compat.v1.Session(graph=graph) as sess:
            tf.compat.v1.saved_model.simple_save(sess, str(path), {"examples": serialized}, {"score": score})


def make_records(path: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    countries = [b"fr", b"de", b"jp", b"br"]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            features = {name: tf.train.Feature(float_list=tf.train.FloatList(value=[float(rng.normal())]))
                        for name in FEATURES}
            features["country"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[countries[i % 4]]))
            features["tags"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a", b"b"][: i % 3]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())


def tensorflow_loop(model: Path, records: Path, batch_size: int) -> float:
    """TensorFlow's way: the SavedModel loaded, tf.data reading the file in batches, a Session running the
    signature, the scores kept; seconds from the load to the last batch."""
    start = time.perf_counter()
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as sess:
        tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(model))
        batches = tf.compat.v1.data.make_one_shot_iterator(tf.data.TFRecordDataset(str(records)).batch(batch_size))
        next_batch = batches.get_next()
        scores = []
        while True:
            try:
                batch = sess.run(next_batch)
            except tf.errors.OutOfRangeError:
                break
            scores.append(sess.run("score:0", {"examples:0": batch}))
    np.concatenate(scores)
    return time.perf_counter() - start


def tensorflow_process(model: Path, records: Path, batch_size: int) -> tuple[float, float]:
    """(seconds from process start to the end, seconds of the loop alone) of `tensorflow_loop` run as a
    user runs it: a new Python process that imports TensorFlow first."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--tf-loop", str(model), str(records), str(batch_size)],
                         check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, float(out.strip().splitlines()[-1])


def tensorgate_score(model: Path, records: Path, batch_size: int, out: Path) -> tuple[float, float]:
    """(seconds from process start to the end, seconds of scoring alone as `tensorgate score` reports them)."""
    start = time.perf_counter()
    printed = subprocess.run([str(TENSORGATE), "score", str(model), str(records), "--output", str(out),
                              "--batch-size", str(batch_size)], check=True, capture_output=True, text=True).stderr
    total = time.perf_counter() - start
    # "scored N records from F file(s) in S s ..." on stderr
    return total, float(printed.split(" in ", 1)[1].split(" s", 1)[0])


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--tf-loop":
        print(tensorflow_loop(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each (the best is shown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_model(tmp / "model")
        make_records(tmp / "data.tfrecord", args.records)
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(tensorgate_score(tmp / "model", tmp / "data.tfrecord", args.batch_size, tmp / "out.jsonl"))
            theirs.append(tensorflow_process(tmp / "model", tmp / "data.tfrecord", args.batch_size))
        (our_total, our_loop), (tf_total, tf_loop) = min(ours), min(theirs)
        n = args.records
        print(f"{n} records, batch {args.batch_size}, best of {args.rounds} alternating rounds")
        print(f"tensorgate score: {n / our_total:,.0f} records/s from process start ({our_total:.2f} s; all rounds "
              f"{', '.join(f'{t:.2f}' for t, _ in ours)}), {n / our_loop:,.0f} records/s scoring ({our_loop:.2f} s)")
        print(f"TensorFlow tf.data + Session.run: {n / tf_total:,.0f} records/s from process start ({tf_total:.2f} s; "
              f"all rounds {', '.join(f'{t:.2f}' for t, _ in theirs)}), {n / tf_loop:,.0f} records/s from the load "
              f"({tf_loop:.2f} s)")
        print(f"tensorgate / TensorFlow throughput: {tf_total / our_total:.2f} from process start, "
              f"{tf_loop / our_loop:.2f} scoring alone (ours after the load, TensorFlow's including it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
