"""Example model repository: writes `models/`, the repository `make serve` starts on.

    .venv/bin/python tools/make_example_models.py             # rewrites models/
    .venv/bin/python tools/make_example_models.py --out /tmp/m  # somewhere else

- `half_plus_two/1`: TensorFlow Serving's classic example, y = 0.5 * x + 2; no config.yaml, so the
  server derives its default signature (input `x`, output `y`).
- `iris_classifier/1` and `/2`: a 4-8-3 MLP over the Iris measurements, fitted here with numpy on
  Fisher's 150 samples (two seeds, so the two versions differ slightly), with a config.yaml that names
  its signature, keeps both versions and labels them `stable` and `canary`.

No TensorFlow is needed: the graphs are built with engine.builder, which checks every op's dtypes and
shapes as it goes and writes the attrs TensorFlow's op definitions ask for. The output is
deterministic; rerunning rewrites the same bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from engine import builder as gb

ROOT = Path(__file__).resolve().parent.parent


# --- half_plus_two ------------------------------------------------------------------------------------


def half_plus_two() -> gb.GraphBuilder:
    """y = 0.5 * x + 2 over a vector of any length: `x` -> Mul(a, x) -> AddV2(mul, b) `y`."""
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [None], name="x")
        mul = gb.multiply(gb.constant(0.5, name="a"), x, name="mul")
        gb.add(mul, gb.constant(2.0, name="b"), name="y")
    return graph


# --- iris_classifier ----------------------------------------------------------------------------------

# Fisher's Iris data (sepal length, sepal width, petal length, petal width in cm), 50 samples per class,
# 5 a line, with samples 35 and 38 as Fisher printed them (as R and scikit-learn ship them).
IRIS_CLASSES = ("setosa", "versicolor", "virginica")
IRIS = (
    """
    5.1 3.5 1.4 0.2  4.9 3.0 1.4 0.2  4.7 3.2 1.3 0.2  4.6 3.1 1.5 0.2  5.0 3.6 1.4 0.2
    5.4 3.9 1.7 0.4  4.6 3.4 1.4 0.3  5.0 3.4 1.5 0.2  4.4 2.9 1.4 0.2  4.9 3.1 1.5 0.1
    5.4 3.7 1.5 0.2  4.8 3.4 1.6 0.2  4.8 3.0 1.4 0.1  4.3 3.0 1.1 0.1  5.8 4.0 1.2 0.2
    5.7 4.4 1.5 0.4  5.4 3.9 1.3 0.4  5.1 3.5 1.4 0.3  5.7 3.8 1.7 0.3  5.1 3.8 1.5 0.3
    5.4 3.4 1.7 0.2  5.1 3.7 1.5 0.4  4.6 3.6 1.0 0.2  5.1 3.3 1.7 0.5  4.8 3.4 1.9 0.2
    5.0 3.0 1.6 0.2  5.0 3.4 1.6 0.4  5.2 3.5 1.5 0.2  5.2 3.4 1.4 0.2  4.7 3.2 1.6 0.2
    4.8 3.1 1.6 0.2  5.4 3.4 1.5 0.4  5.2 4.1 1.5 0.1  5.5 4.2 1.4 0.2  4.9 3.1 1.5 0.2
    5.0 3.2 1.2 0.2  5.5 3.5 1.3 0.2  4.9 3.6 1.4 0.1  4.4 3.0 1.3 0.2  5.1 3.4 1.5 0.2
    5.0 3.5 1.3 0.3  4.5 2.3 1.3 0.3  4.4 3.2 1.3 0.2  5.0 3.5 1.6 0.6  5.1 3.8 1.9 0.4
    4.8 3.0 1.4 0.3  5.1 3.8 1.6 0.2  4.6 3.2 1.4 0.2  5.3 3.7 1.5 0.2  5.0 3.3 1.4 0.2
    """,
    """
    7.0 3.2 4.7 1.4  6.4 3.2 4.5 1.5  6.9 3.1 4.9 1.5  5.5 2.3 4.0 1.3  6.5 2.8 4.6 1.5
    5.7 2.8 4.5 1.3  6.3 3.3 4.7 1.6  4.9 2.4 3.3 1.0  6.6 2.9 4.6 1.3  5.2 2.7 3.9 1.4
    5.0 2.0 3.5 1.0  5.9 3.0 4.2 1.5  6.0 2.2 4.0 1.0  6.1 2.9 4.7 1.4  5.6 2.9 3.6 1.3
    6.7 3.1 4.4 1.4  5.6 3.0 4.5 1.5  5.8 2.7 4.1 1.0  6.2 2.2 4.5 1.5  5.6 2.5 3.9 1.1
    5.9 3.2 4.8 1.8  6.1 2.8 4.0 1.3  6.3 2.5 4.9 1.5  6.1 2.8 4.7 1.2  6.4 2.9 4.3 1.3
    6.6 3.0 4.4 1.4  6.8 2.8 4.8 1.4  6.7 3.0 5.0 1.7  6.0 2.9 4.5 1.5  5.7 2.6 3.5 1.0
    5.5 2.4 3.8 1.1  5.5 2.4 3.7 1.0  5.8 2.7 3.9 1.2  6.0 2.7 5.1 1.6  5.4 3.0 4.5 1.5
    6.0 3.4 4.5 1.6  6.7 3.1 4.7 1.5  6.3 2.3 4.4 1.3  5.6 3.0 4.1 1.3  5.5 2.5 4.0 1.3
    5.5 2.6 4.4 1.2  6.1 3.0 4.6 1.4  5.8 2.6 4.0 1.2  5.0 2.3 3.3 1.0  5.6 2.7 4.2 1.3
    5.7 3.0 4.2 1.2  5.7 2.9 4.2 1.3  6.2 2.9 4.3 1.3  5.1 2.5 3.0 1.1  5.7 2.8 4.1 1.3
    """,
    """
    6.3 3.3 6.0 2.5  5.8 2.7 5.1 1.9  7.1 3.0 5.9 2.1  6.3 2.9 5.6 1.8  6.5 3.0 5.8 2.2
    7.6 3.0 6.6 2.1  4.9 2.5 4.5 1.7  7.3 2.9 6.3 1.8  6.7 2.5 5.8 1.8  7.2 3.6 6.1 2.5
    6.5 3.2 5.1 2.0  6.4 2.7 5.3 1.9  6.8 3.0 5.5 2.1  5.7 2.5 5.0 2.0  5.8 2.8 5.1 2.4
    6.4 3.2 5.3 2.3  6.5 3.0 5.5 1.8  7.7 3.8 6.7 2.2  7.7 2.6 6.9 2.3  6.0 2.2 5.0 1.5
    6.9 3.2 5.7 2.3  5.6 2.8 4.9 2.0  7.7 2.8 6.7 2.0  6.3 2.7 4.9 1.8  6.7 3.3 5.7 2.1
    7.2 3.2 6.0 1.8  6.2 2.8 4.8 1.8  6.1 3.0 4.9 1.8  6.4 2.8 5.6 2.1  7.2 3.0 5.8 1.6
    7.4 2.8 6.1 1.9  7.9 3.8 6.4 2.0  6.4 2.8 5.6 2.2  6.3 2.8 5.1 1.5  6.1 2.6 5.6 1.4
    7.7 3.0 6.1 2.3  6.3 3.4 5.6 2.4  6.4 3.1 5.5 1.8  6.0 3.0 4.8 1.8  6.9 3.1 5.4 2.1
    6.7 3.1 5.6 2.4  6.9 3.1 5.1 2.3  5.8 2.7 5.1 1.9  6.8 3.2 5.9 2.3  6.7 3.3 5.7 2.5
    6.7 3.0 5.2 2.3  6.3 2.5 5.0 1.9  6.5 3.0 5.2 2.0  6.2 3.4 5.4 2.3  5.9 3.0 5.1 1.8
    """,
)

IRIS_CONFIG = """\
# Written by tools/make_example_models.py.
version_policy: {latest: 2}
labels: {stable: 1, canary: 2}
signatures:
  serving_default:
    inputs: {features: "features:0"}
    outputs: {probabilities: "probabilities:0", class_id: "class_id:0"}
"""


def iris_data() -> tuple[np.ndarray, np.ndarray]:
    """(features [150, 4] float64, class ids [150] int64)."""
    blocks = [np.array(text.split(), dtype=np.float64).reshape(-1, 4) for text in IRIS]
    labels = np.concatenate([np.full(len(block), k) for k, block in enumerate(blocks)])
    return np.concatenate(blocks), labels


def fit_mlp(x: np.ndarray, y: np.ndarray, seed: int, hidden: int = 8, steps: int = 3000) -> list[np.ndarray]:
    """[w1, b1, w2, b2] of softmax(relu(x @ w1 + b1) @ w2 + b2), fitted by full-batch gradient descent
    on the cross-entropy with a little weight decay, rounded to 3 decimals as float32."""
    rng = np.random.default_rng(seed)
    # Fit on standardized features, then fold the standardization into the first layer.
    mean, std = x.mean(axis=0), x.std(axis=0)
    z = (x - mean) / std
    w1, b1 = rng.normal(0.0, 0.5, (x.shape[1], hidden)), np.zeros(hidden)
    w2, b2 = rng.normal(0.0, 0.5, (hidden, 3)), np.zeros(3)
    targets = np.eye(3)[y]
    learning_rate, decay = 0.1, 0.01
    for _ in range(steps):
        h = np.maximum(z @ w1 + b1, 0.0)
        p = softmax(h @ w2 + b2)
        d_logits = (p - targets) / len(y)
        d_h = (d_logits @ w2.T) * (h > 0)
        w2 -= learning_rate * (h.T @ d_logits + decay * w2)
        b2 -= learning_rate * d_logits.sum(axis=0)
        w1 -= learning_rate * (z.T @ d_h + decay * w1)
        b1 -= learning_rate * d_h.sum(axis=0)
    folded = [w1 / std[:, None], b1 - (mean / std) @ w1, w2, b2]
    return [np.round(a, 3).astype(np.float32) for a in folded]


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mlp_accuracy(weights: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of the float32 weights exactly as the graph computes them."""
    w1, b1, w2, b2 = weights
    h = np.maximum(x.astype(np.float32) @ w1 + b1, 0.0)
    return float(((h @ w2 + b2).argmax(axis=1) == y).mean())


def iris_classifier(weights: list[np.ndarray]) -> gb.GraphBuilder:
    """features [-1, 4] -> dense 8 + relu -> dense 3 `logits` -> `probabilities` (softmax) and `class_id`
    (argmax). The node names are the ones config.yaml and models/README.md use."""
    w1, b1, w2, b2 = weights
    graph = gb.GraphBuilder()
    with graph.as_default():
        features = gb.placeholder("float32", [None, 4], name="features")
        hidden = gb.layers.dense(features, w1, b1, activation="relu", name="hidden")
        # The logits layer's output node is `logits` itself: an op named with its own scope
        # ("logits/") takes the scope's name, as in TensorFlow.
        with gb.name_scope("logits") as scope:
            kernel = gb.constant(w2, name="kernel")
            product = gb.matmul(hidden, kernel, name="MatMul")
            logits = gb.bias_add(product, gb.constant(b2, name="bias"), name=scope)
        probabilities = gb.softmax(logits, name="probabilities")
        gb.argmax(probabilities, axis=1, output_type="int64", name="class_id")
    return graph


# --- the repository -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "models", help="the model repository to write")
    out = parser.parse_args().out

    half_plus_two().save(out / "half_plus_two" / "1" / "model.pb")
    print(f"{out / 'half_plus_two'}: y = 0.5 * x + 2, version 1")

    x, y = iris_data()
    for version, seed in ((1, 1), (2, 2)):
        weights = fit_mlp(x, y, seed)
        iris_classifier(weights).save(out / "iris_classifier" / str(version) / "model.pb")
        accuracy = mlp_accuracy(weights, x, y)
        print(f"{out / 'iris_classifier'}: version {version} (seed {seed}), accuracy {accuracy:.1%} on Iris")
    (out / "iris_classifier" / "config.yaml").write_text(IRIS_CONFIG)


if __name__ == "__main__":
    main()
