"""What the zoo's exporter and benchmark share: the inputs each model is fed, and the checks that its outputs vary.

A model's `case.json` (written by bench/zoo_export.py under bench/zoo/<name>/) lists its feeds, each with a
generator: how to draw a realistic batch for it. `make_inputs(case, batch, rng)` draws one batch for all feeds
at once, so that a token-id feed and its padding mask agree on each sample's length. Generators:

- `image` {low, high}: smooth random pictures (low-resolution noise scaled up, per-sample brightness and
  contrast, a little pixel noise), so that a network's pooled features differ from sample to sample;
- `normal` {mean, std}, `uniform` {low, high}, `int` {low, high} (high exclusive);
- `tokens` {vocab}: ids in [1, vocab) up to each sample's length, 0 (padding) after; `mask`: 1 up to each
  sample's length, 0 after; lengths lie between half and all of the sequence;
- `jpeg` {height, width}: `image` pictures encoded as JPEG bytes (TensorFlow encodes them);
- `example` {features}: serialized tf.train.Example protos, each feature {type: float|int|bytes, low/high or
  vocab};
- `strings` {vocab}: byte strings drawn from the vocabulary.

`spread(values)` says how much an output varies across a batch: the mean over elements of the standard
deviation across samples, over the mean magnitude. A calibrated model whose outputs hardly move (spread under
MIN_SPREAD) times constant folding, not inference, and is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MIN_SPREAD", "Recipe", "calibrate_batch_norm", "make_inputs", "sample_images", "spread"]

MIN_SPREAD = 1e-2


@dataclass(frozen=True)
class Recipe:
    """How one zoo model is built and exported. `build(out)` writes the model under `out` (a SavedModel in
    out/model, or a frozen GraphDef out/model.pb) and returns the case: format, feeds (alias, generator and,
    where the signature leaves dimensions open, sample_shape), for a GraphDef its fetches, and `exempt`:
    outputs allowed not to vary (sizes, counts). `legacy_keras` runs it with TF_USE_LEGACY_KERAS=1."""

    build: Callable[[Path], dict]
    source: str
    legacy_keras: bool = False


def sample_images(rng: np.random.Generator, batch: int, height: int, width: int, low: float, high: float) -> np.ndarray:
    coarse = rng.standard_normal((batch, 8, 8, 3))
    reps = (-(-height // 8), -(-width // 8))
    smooth = np.repeat(np.repeat(coarse, reps[0], axis=1), reps[1], axis=2)[:, :height, :width]
    contrast = rng.uniform(0.3, 1.0, (batch, 1, 1, 1))
    brightness = rng.uniform(-0.5, 0.5, (batch, 1, 1, 3))
    unit = smooth * contrast * 0.35 + brightness * 0.5 + 0.05 * rng.standard_normal(smooth.shape)
    unit = np.clip(unit + 0.5, 0.0, 1.0)
    return low + (high - low) * unit


def _lengths(rng: np.random.Generator, batch: int) -> np.ndarray:
    return rng.uniform(0.5, 1.0, batch)


def _example_strings(rng: np.random.Generator, batch: int, features: dict) -> np.ndarray:
    import tensorflow as tf

    protos = []
    for _ in range(batch):
        feature = {}
        for name, spec in features.items():
            if spec["type"] == "float":
                value = float(rng.uniform(spec["low"], spec["high"]))
                feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
            elif spec["type"] == "int":
                value = int(rng.integers(spec["low"], spec["high"]))
                feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
            else:
                value = str(rng.choice(spec["vocab"])).encode()
                feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        protos.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return np.array(protos, dtype=object)


def _jpegs(rng: np.random.Generator, batch: int, height: int, width: int) -> np.ndarray:
    import tensorflow as tf

    pixels = sample_images(rng, batch, height, width, 0, 255).astype(np.uint8)
    return np.array([tf.io.encode_jpeg(p, quality=90).numpy() for p in pixels], dtype=object)


def _one_feed(feed: dict, batch: int, lengths: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    gen, dtype, sample = feed["gen"], feed["dtype"], list(feed["sample_shape"])
    shape = [batch, *sample]
    kind = gen["kind"]
    if kind == "image":
        height, width = sample[0], sample[1]
        return sample_images(rng, batch, height, width, gen["low"], gen["high"]).astype(dtype)
    if kind == "normal":
        return (gen.get("mean", 0.0) + gen.get("std", 1.0) * rng.standard_normal(shape)).astype(dtype)
    if kind == "uniform":
        return rng.uniform(gen["low"], gen["high"], shape).astype(dtype)
    if kind == "int":
        return rng.integers(gen["low"], gen["high"], shape).astype(dtype)
    if kind in ("tokens", "mask"):
        seq = sample[-1]
        valid = np.arange(seq)[None, :] < np.maximum(1, np.round(lengths * seq))[:, None]
        if kind == "mask":
            return valid.astype(dtype)
        return np.where(valid, rng.integers(1, gen["vocab"], (batch, seq)), 0).astype(dtype)
    if kind == "jpeg":
        return _jpegs(rng, batch, gen["height"], gen["width"])
    if kind == "example":
        return _example_strings(rng, batch, gen["features"])
    if kind == "strings":
        return np.array([str(v).encode() for v in rng.choice(gen["vocab"], shape)], dtype=object).reshape(shape)
    raise ValueError(f"feed '{feed['alias']}': unknown input generator kind '{kind}'")


def make_inputs(case: dict, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One batch for every feed of `case`, keyed by the feed's alias (its signature key, or tensor name)."""
    lengths = _lengths(rng, batch)
    return {feed["alias"]: _one_feed(feed, batch, lengths, rng) for feed in case["feeds"]}


def spread(values: Any) -> float | None:
    """Variation across the batch relative to magnitude; None for outputs without a batch to vary over."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "fc" or arr.ndim == 0 or arr.shape[0] < 2:
        return None
    arr = arr.astype(np.float64).reshape(arr.shape[0], -1)
    magnitude = float(np.mean(np.abs(arr)))
    if magnitude == 0.0:
        return 0.0
    return float(np.mean(np.std(arr, axis=0))) / magnitude


def calibrate_batch_norm(model: Any, batch: Any, layer_type: type, call: Any = None) -> int:
    """Set every `layer_type` (BatchNormalization) layer's moving statistics to its batch statistics on
    `batch`: momentum 0 for one training-mode forward pass, then the momenta put back. Returns how many
    layers were calibrated. `call(batch)` runs the training-mode pass (default: `model(batch, training=True)`)."""
    layers = [layer for layer in _all_layers(model) if isinstance(layer, layer_type)]
    momenta = [layer.momentum for layer in layers]
    for layer in layers:
        layer.momentum = 0.0
    try:
        if call is None:
            model(batch, training=True)
        else:
            call(batch)
    finally:
        for layer, momentum in zip(layers, momenta):
            layer.momentum = momentum
    return len(layers)


def _all_layers(model: Any) -> list:
    seen: dict[int, Any] = {}
    stack = [model]
    while stack:
        layer = stack.pop()
        if id(layer) in seen:
            continue
        seen[id(layer)] = layer
        flatten = getattr(layer, "_flatten_layers", None)
        if flatten is not None:
            stack.extend(flatten(include_self=False, recursive=False))
        else:
            stack.extend(getattr(layer, "layers", []))
    return list(seen.values())
