"""Regenerate the *_pb2.py modules from the .proto schemas beside them, in engine/proto (TensorFlow's
schemas) and service/protocols/proto (TensorFlow Serving's).

Run `make protos` (grpcio-tools 1.72, which bundles protoc 30, in a venv of its own: protoc 30's code loads
on protobuf 6.30 to 7.x, the range pyproject.toml allows). The generated modules are committed so that
users never need protoc. `tools/gen_protos.py saver tensor_bundle` regenerates only the named
schemas (leaving the others' committed code, and the protoc version stamped in it, alone); a name is
looked up in each directory (`service/protocols/proto/model` picks one where two directories have it).
Imports inside them are absolute (`engine.proto.x_pb2`, `service.protocols.proto.x_pb2`) because the
.proto files import each other as `engine/proto/x.proto` relative to the repository root.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIRS = (ROOT / "engine" / "proto", ROOT / "service" / "protocols" / "proto")


def _schemas(name: str) -> list[Path]:
    """The schemas a command-line name means: a path from the root, or a name in any proto directory."""
    stem = name.removesuffix(".proto")
    if "/" in stem:
        return [p for p in [ROOT / f"{stem}.proto"] if p.exists()]
    return [d / f"{stem}.proto" for d in PROTO_DIRS if (d / f"{stem}.proto").exists()]


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    if names:
        found = {n: _schemas(n) for n in names}
        missing = [n for n, paths in found.items() if not paths]
        ambiguous = [n for n, paths in found.items() if len(paths) > 1]
        if missing:
            print(f"no such schema: {', '.join(missing)}", file=sys.stderr)
            return 2
        if ambiguous:
            print(f"ambiguous schema name (give its path): {', '.join(ambiguous)}", file=sys.stderr)
            return 2
        paths = [paths[0] for paths in found.values()]
    else:
        paths = [p for d in PROTO_DIRS for p in d.glob("*.proto")]
    sources = sorted(str(p.relative_to(ROOT)) for p in paths)
    # protobuf's own schemas (google/protobuf/wrappers.proto, any.proto) ship with grpcio-tools.
    well_known = Path(protoc.__file__).resolve().parent / "_proto"
    args = ["protoc", f"-I{ROOT}", f"-I{well_known}", f"--python_out={ROOT}", f"--pyi_out={ROOT}", *sources]
    code = protoc.main(args)
    if code != 0:
        print("protoc failed", file=sys.stderr)
        return code
    where = sorted({str(Path(s).parent) for s in sources})
    print(f"generated {len(sources)} modules in {', '.join(where)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
