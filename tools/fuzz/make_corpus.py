"""Seed corpora for the atheris targets (tools/fuzz/fuzz.py), made from the golden fixtures TensorFlow
wrote: .fuzz/corpus/<target>/, one file per seed. `make fuzz` runs this first; rerunning it only adds.

    .venv/bin/python tools/fuzz/make_corpus.py [--out .fuzz/corpus]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.fuzz.seeds import (  # noqa: E402  (the repository root goes on the path first)
    EXAMPLE_CASES,
    bundle_dirs,
    example_seeds,
    graph_defs,
    graph_texts,
    saved_model_dirs,
    tfrecord_files,
)


def _v2_bodies() -> list[bytes]:
    """v2 bodies as tools/fuzz/targets.py's v2_binary takes them: the header length, then the body."""
    floats = struct.pack("<4f", 1, 2, 3, 4)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 16}}]}).encode()
    plain = json.dumps({"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}).encode()
    return [struct.pack("<H", len(header)) + header + floats, b"\xff\xff" + plain]


def seeds() -> dict[str, list[bytes]]:
    return {
        "graph_def": [*graph_defs()[:200], *graph_texts()],
        "saved_model": [(d / "saved_model.pb").read_bytes() for d in saved_model_dirs()[:1]],
        "tensor_bundle": [(d / "ckpt.index").read_bytes() for d in bundle_dirs()],
        # The first byte picks the golden case (see targets.example).
        "example": [bytes([i]) + element for i, case in enumerate(EXAMPLE_CASES)
                    for elements in example_seeds(case).values() for element in elements[:4]],
        "tfrecord": [p.read_bytes() for p in tfrecord_files()],
        "v2_binary": _v2_bodies(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / ".fuzz" / "corpus")
    args = parser.parse_args()
    for target, items in seeds().items():
        directory = args.out / target
        directory.mkdir(parents=True, exist_ok=True)
        for item in items:
            (directory / hashlib.sha1(item).hexdigest()).write_bytes(item)
        print(f"{directory}: {len(list(directory.iterdir()))} seeds")


if __name__ == "__main__":
    main()
