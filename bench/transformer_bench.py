"""Transformer benchmark: our Session against TensorFlow on SavedModels, timed interleaved in one process.

Any SavedModel directory works; issue 32's set is small random configurations exported with keras-hub
(Llama, Mistral, Gemma, T5, GPT-2, BERT backbones) and raw-TF spellings of attention and RMSNorm. Inputs
are made from the serving signature: integer inputs named like a mask (and boolean ones) are all ones or
True, other integers are token ids below --vocab, float masks are ones and other floats standard normal;
unknown dims are the batch (first) and the sequence length (the rest). Our outputs are checked against
TensorFlow's (largest difference relative to the output's largest value) before timing.

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/transformer_bench.py --export /tmp/tx/models   # once: needs keras_hub
    PYTHONPATH=. /tmp/tfvenv/bin/python bench/transformer_bench.py DIR [DIR ...] [--batches 1,32] [--seq 64]
        [--rounds 30] [--breakdown]

`--export DIR` writes issue 32's set (random weights, not committed): Llama, Mistral (both 2 layers, hidden
256, 4 query heads sharing 2 key/value heads, intermediate 512, vocabulary 1000), Gemma, T5, GPT-2 and BERT
backbones of the same size, a tf.keras MultiHeadAttention block, and tf.function attention and RMSNorm
spellings (attn_q: q scaled before the product, additive mask; attn_s: scores divided after it, causal
where-mask, Einsum output; rms_a: rsqrt form; rms_b: sqrt-division form).

`--padded` makes the masks hide positions (half the batch items lose their last quarter), to check masking.
Timing alternates the two runtimes call by call (`--rounds` rounds of `--per-round` calls each), so that
another process loading the machine slows both alike; the figures are medians of the per-call times.
`--breakdown` prints the time our plan spends in each op type (engine.runtime.executor.execute_profiled).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import engine
from engine.runtime.executor import execute_profiled


def make_feeds(signature, batch: int, seq: int, vocab: int, rng: np.random.Generator,
               padded: bool = False) -> dict[str, np.ndarray]:
    """One array per signature input, keyed by alias (see the module docstring); with `padded`, masks are
    zero (False) over the last quarter of every other batch item's positions."""
    feeds = {}
    for info in signature.inputs:
        if info.shape is None:
            raise ValueError(f"input '{info.alias}' has an unknown rank; give the model a shaped signature")
        shape = tuple((batch if i == 0 else seq) if d is None or d < 0 else d for i, d in enumerate(info.shape))
        dtype = np.dtype(info.dtype)
        masky = "mask" in info.alias.lower()
        segment = "segment" in info.alias.lower()
        if dtype == np.bool_:
            feeds[info.alias] = np.ones(shape, np.bool_)
        elif dtype.kind in "iu":
            feeds[info.alias] = np.ones(shape, dtype) if masky else np.zeros(shape, dtype) if segment else rng.integers(0, vocab, size=shape).astype(dtype)
        elif masky:
            feeds[info.alias] = np.ones(shape, dtype)
        else:
            feeds[info.alias] = rng.standard_normal(shape).astype(dtype)
        if padded and masky and len(shape) >= 2:
            feeds[info.alias][::2, ..., shape[-1] - max(shape[-1] // 4, 1):] = 0
    return feeds


def relative_diff(got: np.ndarray, expected: np.ndarray) -> float:
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    scale = float(np.max(np.abs(expected))) if expected.size else 1.0
    return float(np.max(np.abs(got - expected))) / (scale or 1.0) if expected.size else 0.0


def op_breakdown(sess: engine.Session, feed_tensors: list[str], fetches: list[str], values: list[np.ndarray],
                 runs: int) -> list[tuple[str, float, int]]:
    """Mean seconds per run our plan spends in each op type, most first: [(op, seconds, instructions)]."""
    plan = sess.plan_for(feed_tensors, fetches)
    if not isinstance(plan, engine.Plan):
        return []
    by_name = {str(engine.parse_tensor_name(n)): v for n, v in zip(feed_tensors, values)}
    ordered = [by_name[spec.name] for spec in plan.feeds]
    seconds: Counter[str] = Counter()
    counts = Counter(ins.op for ins in plan.instructions)
    execute_profiled(plan, ordered)
    for _ in range(runs):
        for _node, op, s in execute_profiled(plan, ordered)[1]:
            seconds[op] += s / runs
    return [(op, s, counts[op]) for op, s in seconds.most_common()]


def interleaved(ours, theirs, rounds: int, per_round: int) -> tuple[float, float]:
    """Median per-call seconds of `ours` and `theirs`, called alternately."""
    for _ in range(3):
        ours()
        theirs()
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        for fn, times in ((ours, a), (theirs, b)):
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
    return statistics.median(a), statistics.median(b)


def bench(path: Path, args: argparse.Namespace) -> None:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(path)).signatures["serving_default"]
    sm = engine.load_saved_model(path)
    sess = sm.session()
    sig = sm.signatures["serving_default"]
    fetch_aliases = [t.alias for t in sig.outputs]
    fetches = [t.tensor for t in sig.outputs]
    rng = np.random.default_rng(0)
    for batch in args.batches:
        feeds = make_feeds(sig, batch, args.seq, args.vocab, rng, args.padded)
        ours_feed = {info.tensor: feeds[info.alias] for info in sig.inputs}
        tf_feed = {alias: tf.constant(v) for alias, v in feeds.items()}
        want = {k: v.numpy() for k, v in loaded(**tf_feed).items()}
        got = dict(zip(fetch_aliases, sess.run(fetches, ours_feed)))
        diff = max(relative_diff(got[k], want[k]) for k in want)
        ours_s, tf_s = interleaved(lambda f=ours_feed: sess.run(fetches, f), lambda f=tf_feed: loaded(**f), args.rounds,
                                   args.per_round)
        print(f"{path.name:<12} batch {batch:>3} seq {args.seq:>4}: ours {ours_s * 1e3:8.3f} ms  tf {tf_s * 1e3:8.3f} ms  "
              f"ours/tf {ours_s / tf_s:5.2f}  max|diff|/max|out| {diff:.1e}", flush=True)
        if args.breakdown:
            rows = op_breakdown(sess, list(ours_feed), fetches, list(ours_feed.values()), args.breakdown_runs)
            total = sum(s for _, s, _ in rows) or 1.0
            for op, s, n in rows[: args.breakdown_top]:
                print(f"{'':<16}{op:<34} {n:>4}x {s * 1e3:9.3f} ms {100 * s / total:5.1f}%")
            print(f"{'':<16}{'(total, profiled)':<34} {'':>5} {total * 1e3:9.3f} ms")


def export_models(out: Path) -> None:
    """Write the SavedModels `--export` names (see the module docstring) under `out`."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import keras_hub
    import tensorflow as tf
    import tf_keras

    out.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(0)
    size = {"vocabulary_size": 1000, "num_layers": 2, "hidden_dim": 256, "intermediate_dim": 512}
    backbones = {
        "llama": keras_hub.models.LlamaBackbone(num_query_heads=4, num_key_value_heads=2, **size),
        "mistral": keras_hub.models.MistralBackbone(num_query_heads=4, num_key_value_heads=2, sliding_window=512, **size),
        "gemma": keras_hub.models.GemmaBackbone(num_query_heads=4, num_key_value_heads=2, head_dim=64,
                                                **{**size, "intermediate_dim": 1024}),
        "t5": keras_hub.models.T5Backbone(num_heads=4, **size),
        "gpt2": keras_hub.models.GPT2Backbone(num_heads=4, max_sequence_length=128, **size),
        "bert": keras_hub.models.BertBackbone(num_heads=4, max_sequence_length=128, **size),
    }
    for name, model in backbones.items():
        model.export(str(out / name), format="tf_saved_model", verbose=False)
    d, heads, depth = 256, 4, 64
    inp, mask = tf_keras.Input((None, d)), tf_keras.Input((None, None), dtype="bool")
    block = tf_keras.layers.LayerNormalization()(tf_keras.layers.MultiHeadAttention(heads, depth)(inp, inp, attention_mask=mask) + inp)
    tf_keras.Model([inp, mask], block).save(str(out / "tfk_mha"), save_format="tf")
    rng = np.random.default_rng(0)
    wq, wk, wv, wo = (tf.constant(rng.standard_normal((d, d)).astype(np.float32) * 0.05) for _ in range(4))
    gamma = tf.constant(rng.standard_normal(d).astype(np.float32))

    def split_heads(x):
        return tf.transpose(tf.reshape(x, [tf.shape(x)[0], tf.shape(x)[1], heads, depth]), [0, 2, 1, 3])

    def attn_q(x, mask):
        q = split_heads(tf.matmul(x, wq)) * (1.0 / depth ** 0.5)
        s = tf.matmul(q, split_heads(tf.matmul(x, wk)), transpose_b=True) + (1.0 - mask[:, None, None, :]) * -1e9
        o = tf.transpose(tf.matmul(tf.nn.softmax(s), split_heads(tf.matmul(x, wv))), [0, 2, 1, 3])
        return {"y": tf.matmul(tf.reshape(o, [tf.shape(x)[0], tf.shape(x)[1], d]), wo)}

    def attn_s(x, mask):
        k = tf.transpose(split_heads(tf.matmul(x, wk)), [0, 1, 3, 2])
        s = tf.matmul(split_heads(tf.matmul(x, wq)), k) / depth ** 0.5
        t = tf.shape(x)[1]
        s = tf.where(tf.linalg.band_part(tf.ones([t, t], tf.bool), -1, 0), s, tf.fill(tf.shape(s), -1e9))
        o = tf.einsum("bhqk,bhkd->bqhd", tf.nn.softmax(s), split_heads(tf.matmul(x, wv)))
        return {"y": tf.matmul(tf.reshape(o, [tf.shape(x)[0], t, d]), wo)}

    def rms_a(x):
        return {"y": tf.matmul(x * tf.math.rsqrt(tf.reduce_mean(x * x, -1, keepdims=True) + 1e-6) * gamma, wq)}

    def rms_b(x):
        return {"y": tf.matmul(x / tf.sqrt(tf.reduce_mean(tf.square(x), -1, keepdims=True) + 1e-5) * gamma, wq)}

    x_spec = tf.TensorSpec([None, None, d], tf.float32, name="x")
    mask_spec = tf.TensorSpec([None, None], tf.float32, name="mask")
    for fn, specs in ((attn_q, [x_spec, mask_spec]), (attn_s, [x_spec, mask_spec]), (rms_a, [x_spec]), (rms_b, [x_spec])):
        module = tf.Module()
        module.f = tf.function(fn, input_signature=specs)
        tf.saved_model.save(module, str(out / fn.__name__), signatures={"serving_default": module.f})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*", type=Path, help="SavedModel directories")
    parser.add_argument("--export", type=Path, help="write issue 32's models into this directory, then stop")
    parser.add_argument("--batches", default="1,32", help="comma-separated batch sizes")
    parser.add_argument("--seq", type=int, default=64, help="sequence length")
    parser.add_argument("--vocab", type=int, default=1000, help="token ids are drawn below this")
    parser.add_argument("--rounds", type=int, default=30, help="alternations of the two runtimes")
    parser.add_argument("--per-round", type=int, default=3, help="calls of one runtime per alternation")
    parser.add_argument("--padded", action="store_true", help="masks hide the last quarter of every other item")
    parser.add_argument("--breakdown", action="store_true", help="time per op type of our plan")
    parser.add_argument("--breakdown-runs", type=int, default=5)
    parser.add_argument("--breakdown-top", type=int, default=14)
    args = parser.parse_args(argv)
    if args.export:
        export_models(args.export)
        return 0
    args.batches = [int(b) for b in args.batches.split(",")]
    for path in args.models:
        bench(path, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
