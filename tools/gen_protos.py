"""Regenerate engine/proto/*_pb2.py from the .proto schemas beside them.

Run `make protos` (installs grpcio-tools, which bundles protoc). The generated modules are committed so
that users never need protoc. Imports inside them are absolute (`engine.proto.x_pb2`) because the .proto
files import each other as `engine/proto/x.proto` relative to the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "engine" / "proto"


def main() -> int:
    sources = sorted(str(p.relative_to(ROOT)) for p in PROTO_DIR.glob("*.proto"))
    args = ["protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--pyi_out={ROOT}", *sources]
    code = protoc.main(args)
    if code != 0:
        print("protoc failed", file=sys.stderr)
        return code
    print(f"generated {len(sources)} modules in {PROTO_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
