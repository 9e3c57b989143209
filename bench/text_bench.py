"""Tokenizer benchmark: TensorFlow Text's tokenizers inside a SavedModel, tensorgate against TensorFlow (with
tensorflow-text) in the same run, on the same model file and the same sentences.

A SavedModel per tokenizer is written by TensorFlow into a temporary directory: its signature takes a batch of
sentences and returns the BERT inputs (ids and mask, padded to 128). Both sides load that directory: TensorFlow
with tf.saved_model.load, tensorgate with its SavedModel loader and a Session; the outputs are compared, then
each side's median time over repeated calls is printed with the ratio.

    PYTHONPATH=. /tmp/tfvenv/bin/python bench/text_bench.py [--sentences 1000] [--words 20] [--min-time 3]
        [--tokenizers bert,fast_bert] [--json results.json]

Needs TensorFlow and tensorflow-text in the running venv (the fixture venv), besides tensorgate's own
dependencies. The vocabulary (~4,000 entries: whole words, then "##" continuations) and the sentences are
drawn from a seeded generator of syllables, so that words split into several pieces and ~3% of words
are unknown.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402
from engine.saved_model.loader import load_saved_model  # noqa: E402

SEQ_LEN = 128
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def corpus(rng: np.random.Generator, sentences: int, words: int) -> tuple[list[str], list[str]]:
    """(vocabulary, sentences): words of 1-4 syllables with Zipf-like frequencies, some capitalised, with
    punctuation and an occasional accented letter."""
    lexicon = sorted({"".join(rng.choice(SYLLABLES, rng.integers(1, 5))) for _ in range(6000)})
    rng.shuffle(lexicon)
    weights = 1.0 / np.arange(1, len(lexicon) + 1)
    weights /= weights.sum()
    known = lexicon[:3000]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *".,!?;:'\"()-", *known,
             *(f"##{s}" for s in SYLLABLES), *(f"##{s}{t}" for s in SYLLABLES[:40] for t in SYLLABLES[:20])]
    lines = []
    for _ in range(sentences):
        picked = rng.choice(len(lexicon), words, p=weights)
        tokens = [lexicon[i].capitalize() if rng.random() < 0.1 else lexicon[i] for i in picked]
        tokens = [t.replace("e", "é", 1) if rng.random() < 0.02 else t for t in tokens]
        lines.append(" ".join(tokens[:-1]) + rng.choice([".", "!", "?", ", " + tokens[-1] + "."]))
    return vocab, lines


def write_models(directory: Path, vocab: list[str], names: list[str]) -> dict[str, Path]:
    import tensorflow as tf
    import tensorflow_text as text

    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")

    def bert_inputs(pieces):
        trimmed = text.RoundRobinTrimmer(max_seq_length=SEQ_LEN - 2).trim([pieces])
        ids, _ = text.combine_segments(trimmed, start_of_sequence_id=2, end_of_segment_id=3)
        ids, mask = text.pad_model_inputs(ids, max_seq_length=SEQ_LEN)
        return {"input_word_ids": ids, "input_mask": mask}

    class Bert(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = text.BertTokenizer(str(vocab_file), lower_case=True, token_out_type=tf.int64)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serve(self, sentences):
            return bert_inputs(self.tokenizer.tokenize(sentences).merge_dims(-2, -1))

    class FastBert(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = text.FastBertTokenizer(vocab=vocab, token_out_type=tf.int64,
                                                    lower_case_nfd_strip_accents=True)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serve(self, sentences):
            return bert_inputs(self.tokenizer.tokenize(sentences))

    builders = {"bert": Bert, "fast_bert": FastBert}
    paths = {}
    for name in names:
        module = builders[name]()
        paths[name] = directory / name
        tf.saved_model.save(module, str(paths[name]), signatures=module.serve)
    return paths


def median_time(fn, min_time: float) -> float:
    fn()
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < min_time or len(times) < 5:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name: str, path: Path, lines: list[str], min_time: float) -> dict:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel holds)

    batch = np.array([s.encode() for s in lines], dtype=object)
    loaded = tf.saved_model.load(str(path)).signatures["serving_default"]
    tf_input = tf.constant(batch)
    want = {k: v.numpy() for k, v in loaded(text=tf_input).items()}

    sm = load_saved_model(path)
    sess = engine.Session(sm.graph)
    sm.initialize(sess)
    sig = sm.signatures["serving_default"]
    feed = {sig.inputs[0].tensor: batch}
    fetch_names = [t.alias for t in sig.outputs]
    fetches = [t.tensor for t in sig.outputs]
    got = dict(zip(fetch_names, sess.run(fetches, feed)))
    for alias, value in want.items():
        np.testing.assert_array_equal(got[alias], value, err_msg=f"{name}: {alias} differs from TensorFlow's")

    ours = median_time(lambda: sess.run(fetches, feed), min_time)
    theirs = median_time(lambda: loaded(text=tf_input), min_time)
    tokens = int(want["input_mask"].sum())
    return {"tokenizer": name, "sentences": len(lines), "tokens": tokens, "tensorgate_ms": ours * 1e3,
            "tensorflow_ms": theirs * 1e3, "ratio": ours / theirs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--words", type=int, default=20)
    parser.add_argument("--min-time", type=float, default=3.0)
    parser.add_argument("--tokenizers", default="bert,fast_bert")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    vocab, lines = corpus(np.random.default_rng(0), args.sentences, args.words)
    names = args.tokenizers.split(",")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in write_models(Path(tmp), vocab, names).items():
            r = bench(name, path, lines, args.min_time)
            results.append(r)
            print(f"{name:>10}  {r['sentences']} sentences, {r['tokens']} tokens: tensorgate {r['tensorgate_ms']:.1f} ms, "
                  f"TensorFlow {r['tensorflow_ms']:.1f} ms, ratio {r['ratio']:.2f}x (outputs equal)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
