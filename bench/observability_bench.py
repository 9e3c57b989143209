"""What observability costs on the request path: tracing and payload logging off, and on with a dead sink.

    .venv/bin/python bench/observability_bench.py [--seconds 10] [--warmup 2] [--rounds 2] [--baseline REV]

Servers (one alive at a time, all on bench/serving_bench.py's models and uvicorn settings, hey as the load):

- `main`: `tensorgate serve` from a snapshot of `--baseline` (default: the commit before tracing and payload
  logging were added);
- `off`: the working tree, tracing and payload logging off (the default): what every deployment pays;
- `log-dead`: the payload log on for every request (`TENSORGATE_PAYLOAD_LOG_URL` to a port nobody listens on):
  each event fails to send, on the logger's thread;
- `trace-dead`: tracing on, every request sampled, the OTLP collector down (the exporter's failures are on
  the SDK's thread).

Cases: bench/serving_bench.py's trivial v1 and v2 JSON (8 clients) and the MLP with batching (64 clients).
Each server runs every case `--rounds` times, the servers interleaved round by round (this machine is noisy);
the table shows each cell's best round and its req/s against `main`'s best.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import serving_bench
from load import free_port
from serving_bench import (
    ROOT,
    Cell,
    all_cases,
    export_snapshot,
    run_server,
    tensorgate_server,
    verify_imports,
    write_models,
)

BASELINE = "ffa8825"
NAMES = ("main", "off", "log-dead", "trace-dead")
serving_bench.SERVERS = ("bare", *NAMES)  # run_server's progress rows compare with `main` by these names
CASES = ("trivial v1 json", "trivial v2 json", "mlp v2 json batching")


def servers(repo: Path, tmp: Path, baseline: str) -> list:
    export_snapshot(baseline, tmp / "baseline")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    now = tensorgate_server("now", ROOT, repo)
    variants = [
        tensorgate_server("main", tmp / "baseline", repo),
        replace(now, name="off"),
        replace(now, name="log-dead", env={**now.env, "TENSORGATE_PAYLOAD_LOG_URL": f"{dead}/events"}),
        replace(now, name="trace-dead", env={**now.env, "TENSORGATE_TRACING_ENDPOINT": f"{dead}/v1/traces",
                                             "OTEL_TRACES_SAMPLER": "always_on"}),
    ]
    for server in variants:
        verify_imports(server)
    return variants


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    args.profile = None
    cases = [case for case in all_cases() if case.name in CASES]
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="tensorgate-observability-") as tmp_name:
        tmp = Path(tmp_name)
        repo = write_models(tmp / "repo")
        variants = servers(repo, tmp, args.baseline)
        for round_ in range(args.rounds):
            order = variants if round_ % 2 == 0 else variants[::-1]
            for server in order:
                print(f"round {round_ + 1}: {server.name}", flush=True)
                cells += run_server(server, cases, args, tmp)
    best = {}
    for cell in cells:
        key = (cell.case, cell.server)
        if key not in best or cell.requests_per_s > best[key].requests_per_s:
            best[key] = cell
    print(f"\n{'case':<24} {'server':<10} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} {'vs main':>7}")
    for case in cases:
        main_cell = best[(case.name, "main")]
        for server in variants:
            cell = best[(case.name, server.name)]
            print(f"{case.name:<24} {server.name:<10} {cell.requests_per_s:>8.0f} {cell.p50_ms:>7.2f} "
                  f"{cell.p99_ms:>7.2f} "
                  f"{cell.errors:>6} {cell.requests_per_s / main_cell.requests_per_s:>7.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "observability.json").write_text(json.dumps([asdict(c) for c in cells], indent=1) + "\n")


if __name__ == "__main__":
    main()
