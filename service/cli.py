"""The `tensorgate` command: `inspect` a graph, `serve` a model repository."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _inspect_saved_model(args: argparse.Namespace) -> int:
    from engine.errors import GraphError
    from engine.saved_model.loader import load_saved_model
    from engine.saved_model.summary import summarize_saved_model

    if args.optimized or args.output:
        print("error: --optimized and --output inspect a GraphDef; for a SavedModel, inspect shows each signature",
              file=sys.stderr)
        return 2
    try:
        summary = summarize_saved_model(load_saved_model(args.model, check_ops=False))
    except GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.format())
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from engine.errors import GraphError
    from engine.graph import parse_tensor_name
    from engine.graph.graph_def import decode_graph, parse_graph_def
    from engine.summary import optimization_report, summarize

    if Path(args.model).is_dir():
        return _inspect_saved_model(args)
    try:
        graph = decode_graph(parse_graph_def(args.model), check_ops=False)
    except GraphError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.optimized:
        for name in args.output or ():
            try:
                ref = parse_tensor_name(name)
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 1
            if not graph.has_tensor(ref):
                print(f"error: the graph has no tensor '{name}'", file=sys.stderr)
                return 1
        report = optimization_report(graph, args.output)
        print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
        return 0
    summary = summarize(graph)
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.format())
    return 0


def _score(args: argparse.Namespace) -> int:
    from engine.errors import EngineError
    from service.inference.scoring import ScoringError, load_for_scoring, score

    try:
        servable = load_for_scoring(args.model)
        stats = score(servable, args.inputs, args.output, signature=args.signature, batch_size=args.batch_size,
                      output_format=args.format)
    except (ScoringError, EngineError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rate = stats.records / stats.seconds if stats.seconds else 0.0
    print(f"scored {stats.records} records from {stats.files} file(s) in {stats.seconds:.2f} s "
          f"({rate:,.0f} records/s) -> {args.output}", file=sys.stderr)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from engine.devices import DeviceError
    from service.repository.config import ConfigError
    from service.server import serve
    from service.settings import Settings, check_device_available

    # Flags given on the command line win over TENSORGATE_* variables; the rest come from those.
    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as e:
        print(f"error: invalid settings: {e}", file=sys.stderr)
        return 2
    try:
        # As TensorFlow Serving does: a server asked for a GPU it lacks refuses to start rather than
        # quietly serving every model on the CPU.
        check_device_available(settings.device)
    except DeviceError as e:
        print(f"error: --device / TENSORGATE_DEVICE: {e}", file=sys.stderr)
        return 2
    if settings.serves_repository() and not settings.model_repository.is_dir():
        print(f"error: model repository '{settings.model_repository}' is not a directory", file=sys.stderr)
        return 2
    try:
        # SIGTERM/SIGINT shut down gracefully: 0 when every request in flight finished within the grace.
        return serve(settings)
    except ConfigError as e:  # TensorFlow Serving's config files are read before the server starts
        print(f"error: {e}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorgate", description="A model server for TensorFlow graphs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="summarize a GraphDef (ops, inputs, outputs, unsupported ops; or what the optimizer "
                       "does to it) or a SavedModel directory (per signature; init ops, tables, live variables)")
    p.add_argument("model", help="path to a GraphDef (.pb binary or .pbtxt text) or a SavedModel directory")
    p.add_argument("--json", action="store_true", help="print the summary (or the optimization report) as JSON")
    p.add_argument(
        "--optimized",
        action="store_true",
        help="run the optimizer on the default signature pass by pass: node counts and ops added/removed by each pass",
    )
    p.add_argument(
        "--output",
        action="append",
        metavar="TENSOR",
        help="with --optimized: a tensor the signature fetches instead of the default outputs (repeatable)",
    )
    p.set_defaults(func=_inspect)

    p = sub.add_parser(
        "score",
        help="score TFRecord files of serialized tf.Examples offline with a model's signature",
        description="Feed the records of TFRecord files (globs and .gz allowed) in batches to a signature with one "
        "string input (serialized tf.Examples) and write one output record per input record, in order.",
    )
    p.add_argument("model", help="a version directory (SavedModel or model.pb) or a GraphDef file")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="TFRecord files or glob patterns")
    p.add_argument("--output", required=True, help="where to write the outputs")
    p.add_argument("--signature", help="signature to run (default: serving_default)")
    p.add_argument("--batch-size", type=int, default=256, help="records per run (default: 256)")
    p.add_argument("--format", choices=("jsonl", "tfrecord"), default="jsonl",
                   help="JSON lines, one object per record, or a TFRecord of tf.Examples (default: jsonl)")
    p.set_defaults(func=_score)

    p = sub.add_parser(
        "serve",
        help="serve a model repository over HTTP and gRPC",
        description="Serve a model repository. Every setting can also come from a TENSORGATE_* variable "
        "(TENSORGATE_ADMIN_TOKEN, TENSORGATE_POLL_INTERVAL_S, ...); flags win over variables.",
    )
    p.add_argument("--model-repository", type=Path, help="repository directory (default: models)")
    p.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port to listen on (default: 8000)")
    p.add_argument("--grpc-port", type=int, help="gRPC port (TensorFlow Serving's and KServe v2's gRPC services), on the "
                   "same host; 0 turns gRPC off (default: 8001)")
    p.add_argument("--poll-interval-s", type=float, help="repository poll interval; 0 turns hot reload off (default: 2)")
    p.add_argument("--device", help="device models run on unless their config.yaml says otherwise: cpu, cpu:N, gpu, gpu:N (default: cpu)")
    p.add_argument("--log-level", help="uvicorn log level (default: info)")
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=None,
                   help="log every HTTP request as a JSON line on stdout (default: off)")
    # TensorFlow Serving's config files; its own flag spellings are accepted too.
    p.add_argument("--model-config-file", "--model_config_file", dest="model_config_file", type=Path, metavar="FILE",
                   help="TensorFlow Serving's model config file (ModelServerConfig text proto); without --model-repository "
                   "only its models are served")
    p.add_argument("--model-config-file-poll-wait-seconds", "--model_config_file_poll_wait_seconds",
                   dest="model_config_file_poll_wait_seconds", type=float, metavar="SECONDS",
                   help="re-read the model config file this often; 0 reads it once (default: 0)")
    p.add_argument("--batching-parameters-file", "--batching_parameters_file", dest="batching_parameters_file", type=Path,
                   metavar="FILE", help="TensorFlow Serving's batching parameters file (BatchingParameters text proto); turns batching on")
    p.add_argument("--monitoring-config-file", "--monitoring_config_file", dest="monitoring_config_file", type=Path,
                   metavar="FILE", help="TensorFlow Serving's monitoring config file (MonitoringConfig text proto): the Prometheus path")
    p.set_defaults(func=_serve)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
