"""Regenerate engine/proto/*_pb2.py from the .proto schemas beside them.

Run `make protos` (installs grpcio-tools, which bundles protoc). The generated modules are committed so
that users never need protoc. `tools/gen_protos.py saver tensor_bundle` regenerates only the named
schemas (leaving the others' committed code, and the protoc version stamped in it, alone). Imports inside them are absolute (`engine.proto.x_pb2`) because the .proto
files import each other as `engine/proto/x.proto` relative to the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "engine" / "proto"


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    paths = [PROTO_DIR / f"{n.removesuffix('.proto')}.proto" for n in names] if names else PROTO_DIR.glob("*.proto")
    missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()] if names else []
    if missing:
        print(f"no such schema: {', '.join(missing)}", file=sys.stderr)
        return 2
    sources = sorted(str(p.relative_to(ROOT)) for p in paths)
    args = ["protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--pyi_out={ROOT}", *sources]
    code = protoc.main(args)
    if code != 0:
        print("protoc failed", file=sys.stderr)
        return code
    print(f"generated {len(sources)} modules in {PROTO_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
