"""Bench models without their weights, to carry to a machine that cannot make them (a lent GPU machine has
no TensorFlow and takes at most 64 MiB of files; ResNet50's frozen graph alone is 100 MB).

`pack` writes, beside each bench model's `model.pb`, a `model.slim.pb`: the same GraphDef with every
large floating-point constant's values dropped and its mean and standard deviation kept in two attrs.
`unpack` writes `model.pb` back from it, refilling those constants with seeded normal values of the
same mean and spread. Small constants (BatchNorm statistics, biases, shapes, indices) travel verbatim,
so a refilled model computes finite, varying outputs; its numbers are not TensorFlow's, so a refilled
model is for timing only (correctness is the golden fixtures' job).

    .venv/bin/python tools/bench_slim.py pack   [--models resnet50,bert_mini]   # here, after --bench
    python3 tools/bench_slim.py unpack [--models ...]                            # there
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.proto import graph_pb2, types_pb2  # noqa: E402

MODELS = ROOT / "bench" / "models"
# Constants of more elements than this are refilled; BatchNorm vectors (<= 2048) and every shape,
# axis or index constant stay as they are.
SLIM_ABOVE = 4096
MEAN, STD = "_slim_mean", "_slim_std"


def _float_constants(graph: graph_pb2.GraphDef):
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    for node in nodes:
        if node.op != "Const":
            continue
        tensor = node.attr["value"].tensor
        if tensor.dtype == types_pb2.DT_FLOAT:
            yield node, tensor


def pack(graph: graph_pb2.GraphDef) -> int:
    """Drop the values of `graph`'s large float32 constants in place; the number of bytes dropped."""
    dropped = 0
    for node, tensor in _float_constants(graph):
        shape = tuple(d.size for d in tensor.tensor_shape.dim)
        if int(np.prod(shape, dtype=np.int64)) <= SLIM_ABOVE or not tensor.tensor_content:
            continue
        values = np.frombuffer(tensor.tensor_content, np.float32)
        node.attr[MEAN].f, node.attr[STD].f = float(values.mean()), float(values.std())
        dropped += len(tensor.tensor_content)
        tensor.ClearField("tensor_content")
    return dropped


def unpack(graph: graph_pb2.GraphDef) -> int:
    """Refill the constants `pack` emptied, in place; the number of constants refilled."""
    refilled = 0
    for node, tensor in _float_constants(graph):
        if MEAN not in node.attr:
            continue
        shape = tuple(d.size for d in tensor.tensor_shape.dim)
        rng = np.random.default_rng(zlib.crc32(node.name.encode()))
        values = rng.normal(node.attr[MEAN].f, node.attr[STD].f, shape).astype(np.float32)
        tensor.tensor_content = values.tobytes()
        del node.attr[MEAN], node.attr[STD]
        refilled += 1
    return refilled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("pack", "unpack"))
    parser.add_argument("--models", help="comma-separated bench model names (default: every one found)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else sorted(p.name for p in MODELS.iterdir() if p.is_dir())
    for name in names:
        src = MODELS / name / ("model.pb" if args.command == "pack" else "model.slim.pb")
        if not src.exists():
            print(f"{name}: no {src.name}, skipped")
            continue
        graph = graph_pb2.GraphDef.FromString(src.read_bytes())
        if args.command == "pack":
            dropped = pack(graph)
            (MODELS / name / "model.slim.pb").write_bytes(graph.SerializeToString())
            print(f"{name}: {dropped / 1e6:.1f} MB of weights dropped")
        else:
            refilled = unpack(graph)
            (MODELS / name / "model.pb").write_bytes(graph.SerializeToString())
            print(f"{name}: {refilled} constants refilled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
