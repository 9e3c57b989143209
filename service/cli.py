"""The `tensorgate` command: `inspect` a graph, `serve` a model repository."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _inspect(args: argparse.Namespace) -> int:
    from engine.errors import GraphError
    from engine.graph_io import decode_graph, parse_graph_def
    from engine.summary import summarize

    try:
        graph = decode_graph(parse_graph_def(args.model), check_ops=False)
    except GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    summary = summarize(graph)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.format())
    return 0


def _serve(args: argparse.Namespace) -> int:
    print("no server yet: the HTTP server arrives with the next release", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorgate", description="A model server for TensorFlow graphs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="summarize a GraphDef: ops, inputs, outputs, unsupported ops")
    p.add_argument("model", help="path to a GraphDef (.pb binary or .pbtxt text)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_inspect)

    p = sub.add_parser("serve", help="serve a model repository over HTTP")
    p.add_argument("--model-repository", default="models")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=_serve)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
