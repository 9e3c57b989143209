"""Soak: 64 concurrent clients for ten minutes against one `tensorgate serve`, with a hot reload every
30 s; errors, throughput, latency per stream, and the server's memory over time.

    .venv/bin/python bench/soak_bench.py [--duration 600] [--reload-every 30] [--json PATH]

The server runs in a process of its own on a temporary repository: a copy of models/
(`half_plus_two`, `iris_classifier`), bench/load.py's MLP 1024-4096-4096-1000 as `mlp` (100 MB of
weights, dynamic batching on), and `reload_mlp`, an MLP 256-1024-1024-16 (5 MB) that gets a new
version every `--reload-every` seconds. The load generators run in processes of their own too (hey
and wrk, Go and C; gRPC from a spawned Python process, bench/grpc_bench.py's closed loops), each
stream a fixed request sent back to back by its clients (STREAMS: 64 clients in all; every model,
the five protocols, batches of 1 and 32 rows). Each request is sent once first and its answer
checked (the gRPC clients check every answer; hey and wrk check status codes only).

Hot reload, as a user publishes a version: its files are written to a hidden directory of the
repository (`.soak-*`, never loaded), fsynced, and renamed to `reload_mlp/<n>`; the server polls
every `--poll-interval-s` (0.5), loads and warms the new version up, serves it, and retires the old
one (version policy `latest: 1`) once its in-flight requests finish, all while three streams send
to `reload_mlp`. The bench times each version from its rename to AVAILABLE, and checks that the one
before it reached END. Versions stay on disk, as a user's would.

The server's RSS (VmRSS of /proc/<pid>/status) is sampled every second. Reported: per stream,
requests, errors (non-2xx answers, transport errors and timeouts, wrong answers), requests/s, p50 and
p99; RSS at `--rss-baseline-s` (60; a third of the run when the run is shorter than twice that), at
the end, its peak, and the growth from the baseline to the end (medians over 60 s windows, see
`rss_summary`); the reloads; the server's CPU and
ERROR lines in its log; then the targets, PASS/FAIL: 0 errors, 0 errors on the reloaded model's
streams, every reload served and its predecessor retired, RSS growth < 5 % after the baseline, the
server alive and ready at the end. A printed table, and `--json` (default bench/results/soak.json,
with every RSS sample).

Everything runs unattended: hey and wrk must be installed (`apt-get install hey wrk`). The machine's
cores are shared by the server and the generators, so the figures are the server's under heavy
contention; errors and memory are what the soak is for.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpc_bench import (  # noqa: E402 - gRPC closed loops in spawned processes, the requests and answers
    BATCHING,
    Case,
    ClientPool,
    Job,
    check,
    free_ports,
    mlp_forward,
    rest_answer,
    rest_request,
)
from load import LAYERS, cpu_seconds, hey_command, mlp, run_hey, running, tensorgate_command  # noqa: E402

from engine import builder as gb  # noqa: E402

RELOAD_MODEL = "reload_mlp"
RELOAD_LAYERS = (256, 1024, 1024, 16)
RSS_GROWTH_LIMIT = 0.05


@dataclass(frozen=True)
class Stream:
    """Clients sending one request back to back: `generator` (hey, wrk or python), a protocol of
    grpc_bench's, a Case (model and input: its rows are the batch size)."""

    generator: str
    protocol: str
    case_name: str
    clients: int

    @property
    def name(self) -> str:
        return f"{self.generator} {self.protocol} {self.case_name}"


# 64 clients in all. The reloaded model gets three protocols, so that a reload is seen through each.
STREAMS = (
    Stream("hey", "rest-v1-json", "half_plus_two b1", 8),
    Stream("hey", "rest-v2-json", "iris_classifier b32", 8),
    Stream("wrk", "rest-v2-binary", "mlp b1", 16),
    Stream("python", "grpc-infer", "iris_classifier b32", 8),
    Stream("hey", "rest-v1-json", f"{RELOAD_MODEL} b32", 8),
    Stream("wrk", "rest-v2-binary", f"{RELOAD_MODEL} b1", 8),
    Stream("python", "grpc-predict", f"{RELOAD_MODEL} b1", 8),
)


# --- the repository -----------------------------------------------------------------------------------


def reload_mlp(seed: int = 2) -> tuple[gb.GraphBuilder, list[tuple[np.ndarray, np.ndarray]]]:
    """load.mlp's graph, smaller (RELOAD_LAYERS), so that a version loads in well under a reload period
    on a busy machine."""
    return mlp(seed, RELOAD_LAYERS)


def write_repository(repo: Path) -> tuple[dict[str, Case], bytes]:
    """The soak's repository under `repo`; the cases by name (iris_classifier's expected answers are
    filled in later, from the server), and the bytes of every reload_mlp version."""
    shutil.copytree(ROOT / "models", repo, ignore=shutil.ignore_patterns("README.md"))
    graph, weights = mlp()
    graph.save(repo / "mlp" / "1" / "model.pb")
    (repo / "mlp" / "config.yaml").write_text(f"batching: {json.dumps(BATCHING)}\n")
    small, small_weights = reload_mlp()
    version_bytes = small.as_graph_def().SerializeToString()
    publish(repo, 1, version_bytes)
    rng = np.random.default_rng(3)
    one = np.array([1.0], np.float32)
    x_mlp = rng.standard_normal((1, LAYERS[0]), dtype=np.float32)
    x_iris = rng.uniform(0.1, 8.0, (32, 4)).astype(np.float32)
    cases = {
        "half_plus_two b1": Case("half_plus_two", "x", "y", one, one * np.float32(0.5) + np.float32(2)),
        "iris_classifier b32": Case("iris_classifier", "features", "probabilities", x_iris, np.zeros(0, np.float32)),
        "mlp b1": Case("mlp", "x", "logits", x_mlp, mlp_forward(weights, x_mlp)),
    }
    for rows in (1, 32):
        x = rng.standard_normal((rows, RELOAD_LAYERS[0]), dtype=np.float32)
        cases[f"{RELOAD_MODEL} b{rows}"] = Case(RELOAD_MODEL, "x", "logits", x, mlp_forward(small_weights, x))
    return cases, version_bytes


def publish(repo: Path, version: int, data: bytes) -> Path:
    """Publish a reload_mlp version as a user would: write it to a hidden directory of the repository
    (on the same filesystem, never loaded), fsync it, and rename it into place."""
    staging = repo / f".soak-{RELOAD_MODEL}-{version}"
    staging.mkdir()
    with open(staging / "model.pb", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    target = repo / RELOAD_MODEL / str(version)
    target.parent.mkdir(exist_ok=True)
    os.rename(staging, target)
    return target


# --- checking the answers before (and after) the load -------------------------------------------------


def ask(url: str, case: Case, protocol: str) -> np.ndarray:
    path, body, headers = rest_request(protocol, case)
    return rest_answer(protocol, case, httpx.post(url + path, content=body, headers=headers, timeout=60))


def check_streams(url: str, cases: dict[str, Case]) -> dict[str, Case]:
    """Send each stream's request once and check the answer; iris_classifier's expected answer is the
    server's first (models/README.md documents the model; the soak checks that it never changes)."""
    iris = cases["iris_classifier b32"]
    cases = {**cases, "iris_classifier b32": replace(iris, expected=ask(url, iris, "rest-v2-json"))}
    for stream in STREAMS:
        if stream.generator != "python":
            check(cases[stream.case_name], ask(url, cases[stream.case_name], stream.protocol))
    return cases


# --- the generators -----------------------------------------------------------------------------------


@dataclass
class StreamResult:
    stream: str
    generator: str
    protocol: str
    model: str
    rows: int
    clients: int
    requests: int
    errors: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    failures: dict[str, int]


WRK_SCRIPT = """\
wrk.method = "POST"
local f = assert(io.open({body}, "rb"))
wrk.body = f:read("*a")
f:close()
{headers}
"""
WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk_command(url: str, headers: dict[str, str], body_file: Path, script: Path, clients: int, seconds: float) -> list[str]:
    """wrk POSTing `body_file` with `headers` (through a Lua script) from `clients` connections."""
    lines = "\n".join(f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items())
    script.write_text(WRK_SCRIPT.format(body=json.dumps(str(body_file)), headers=lines))
    return ["wrk", "-t", str(min(2, clients)), "-c", str(clients), "-d", f"{seconds:g}s", "--timeout", "60s",
            "--latency", "-s", str(script), url]


def parse_wrk(text: str) -> dict:
    """wrk's summary: requests (answered), requests/s, p50/p99 (ms), and failures: non-2xx/3xx answers
    and socket errors by kind."""
    requests = re.search(r"(\d+) requests in", text)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
    latency = {int(p): float(v) * WRK_UNITS[unit]
               for p, v, unit in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", text, re.MULTILINE)}
    failures = Counter()
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", text):
        failures["non-2xx/3xx answer"] = int(m[1])
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        for kind, n in zip(("connect", "read", "write", "timeout"), m.groups()):
            if int(n):
                failures[f"socket {kind} error"] = int(n)
    return {"requests": int(requests[1]) if requests else 0, "requests_per_s": float(rate[1]) if rate else 0.0,
            "p50_ms": latency.get(50, float("nan")), "p99_ms": latency.get(99, float("nan")), "failures": failures}


def run_wrk(command: list[str]) -> dict:
    process = subprocess.run(command, capture_output=True, text=True)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}:\n{process.stderr[-2000:]}")
    return parse_wrk(process.stdout)


def external_stream(stream: Stream, case: Case, url: str, seconds: float, tmp: Path) -> StreamResult:
    """A hey or wrk stream, run to its end (call it from a thread of its own)."""
    path, body, headers = rest_request(stream.protocol, case)
    slug = stream.name.replace(" ", "-")
    body_file = tmp / f"{slug}.body"
    body_file.write_bytes(body)
    if stream.generator == "hey":
        command = hey_command(url + path, headers, body_file, stream.clients, seconds)
        command[1:1] = ["-t", "60"]  # hey's own timeout (20 s) would count a slow answer as an error
        report, _ = run_hey(command)
        answered = sum(report["statuses"].values())
        failures = report["failures"]
        requests = answered + sum(n for kind, n in failures.items() if not kind.startswith("HTTP "))
        rate = report["requests_per_s"]
    else:
        report = run_wrk(wrk_command(url + path, headers, body_file, tmp / f"{slug}.lua", stream.clients, seconds))
        failures, requests, rate = report["failures"], report["requests"], report["requests_per_s"]
        requests += sum(n for kind, n in failures.items() if kind.startswith("socket"))
    return StreamResult(stream.name, stream.generator, stream.protocol, case.model, len(case.x), stream.clients,
                        requests, sum(failures.values()), rate, report["p50_ms"], report["p99_ms"], dict(failures))


def python_result(stream: Stream, case: Case, result: dict, seconds: float) -> StreamResult:
    latencies = np.array(result["latencies"]) * 1e3
    errors = sum(result["failures"].values())
    p50, p99 = np.percentile(latencies, [50, 99]) if len(latencies) else (float("nan"),) * 2
    return StreamResult(stream.name, stream.generator, stream.protocol, case.model, len(case.x), stream.clients,
                        len(latencies) + errors, errors, len(latencies) / seconds, float(p50), float(p99),
                        result["failures"])


# --- what the bench watches meanwhile -----------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def sample_rss(pid: int, t0: float, samples: list[tuple[float, int]], stop: threading.Event) -> None:
    """(seconds since t0, VmRSS in KiB) every second until `stop`."""
    while not stop.is_set():
        with contextlib.suppress(OSError):
            samples.append((time.monotonic() - t0, rss_kib(pid)))
        stop.wait(1.0 - (time.monotonic() - t0) % 1.0)


def version_states(url: str) -> dict[int, str]:
    r = httpx.get(f"{url}/v1/models/{RELOAD_MODEL}", timeout=30)
    return {int(s["version"]): s["state"] for s in r.json().get("model_version_status", [])}


def reload_loop(repo: Path, url: str, data: bytes, every: float, end: float, reloads: list[dict]) -> None:
    """Publish reload_mlp version 2, 3, ... every `every` seconds until `end`; time each from its rename
    to AVAILABLE, and to its predecessor's END."""
    for version in itertools.count(2):
        due = time.monotonic() + every
        if due > end - 1:
            return
        time.sleep(max(0.0, due - time.monotonic()))
        published = time.monotonic()
        publish(repo, version, data)
        record = {"version": version, "available_after_s": None, "previous_retired_after_s": None}
        reloads.append(record)
        while time.monotonic() < published + every and None in record.values():
            with contextlib.suppress(httpx.HTTPError, ValueError):
                states = version_states(url)
                if record["available_after_s"] is None and states.get(version) == "AVAILABLE":
                    record["available_after_s"] = round(time.monotonic() - published, 3)
                if record["previous_retired_after_s"] is None and states.get(version - 1) == "END":
                    record["previous_retired_after_s"] = round(time.monotonic() - published, 3)
            time.sleep(0.1)


# --- the run ------------------------------------------------------------------------------------------


def soak(args: argparse.Namespace, tmp: Path) -> dict:
    repo = tmp / "repo"
    cases, version_bytes = write_repository(repo)
    http_port, grpc_port = free_ports(2)
    url = f"http://127.0.0.1:{http_port}"
    env = {**os.environ, "TENSORGATE_GRPC_PORT": str(grpc_port), "TENSORGATE_POLL_INTERVAL_S": f"{args.poll_interval_s:g}"}
    log = tmp / "server.log"
    grpc_streams = [s for s in STREAMS if s.generator == "python"]
    pool = ClientPool(len(grpc_streams))  # spawned before the server: nothing of it in their memory
    try:
        with running(tensorgate_command(repo, http_port), http_port, log, "/v2/health/ready", env=env) as server:
            cases = check_streams(url, cases)
            print(f"server pid {server.pid} ready; {sum(s.clients for s in STREAMS)} clients in {len(STREAMS)} "
                  f"streams for {args.duration:g} s, a new {RELOAD_MODEL} version every {args.reload_every:g} s",
                  flush=True)
            t0 = time.monotonic()
            start, end = time.perf_counter() + 1.0, time.perf_counter() + 1.0 + args.duration
            pool.submit([Job(cases[s.case_name], s.protocol, s.clients, url, f"127.0.0.1:{grpc_port}", start, end)
                         for s in grpc_streams])
            rss: list[tuple[float, int]] = []
            stop_sampling = threading.Event()
            sampler = threading.Thread(target=sample_rss, args=(server.pid, t0, rss, stop_sampling), daemon=True)
            sampler.start()
            cpu_before = cpu_seconds(server.pid)
            results: dict[str, StreamResult | BaseException] = {}

            def run_external(stream: Stream) -> None:
                try:
                    results[stream.name] = external_stream(stream, cases[stream.case_name], url, args.duration, tmp)
                except BaseException as e:  # reported as the stream's failure
                    results[stream.name] = e

            threads = [threading.Thread(target=run_external, args=(s,)) for s in STREAMS if s.generator != "python"]
            for thread in threads:
                thread.start()
            reloads: list[dict] = []
            if args.reload_every > 0:
                reload_loop(repo, url, version_bytes, args.reload_every, time.monotonic() + args.duration, reloads)
            for thread in threads:
                thread.join()
            for stream, result in zip(grpc_streams, pool.collect(len(grpc_streams))):
                results[stream.name] = python_result(stream, cases[stream.case_name], result, args.duration)
            server_cores = (cpu_seconds(server.pid) - cpu_before) / (time.monotonic() - t0)
            stop_sampling.set()
            sampler.join()
            alive = server.poll() is None
            ready = alive and httpx.get(f"{url}/v2/health/ready", timeout=30).status_code == 200
            answers_after = check_after(url, cases) if alive else "server died"
            final_states = version_states(url) if alive else {}
    finally:
        pool.close()
    log_text = log.read_text(errors="replace")
    error_lines = [line for line in log_text.splitlines() if "ERROR" in line or line.startswith("Traceback")]
    return {"streams": results, "rss": rss, "reloads": reloads, "server_cores": server_cores, "alive": alive,
            "ready": ready, "answers_after": answers_after, "final_states": final_states,
            "log_error_lines": error_lines[:50]}


def check_after(url: str, cases: dict[str, Case]) -> str:
    """Every REST stream's request once more, its answer checked: 'ok', or the first problem."""
    try:
        for stream in STREAMS:
            if stream.generator != "python":
                check(cases[stream.case_name], ask(url, cases[stream.case_name], stream.protocol))
    except Exception as e:
        return f"{stream.name}: {e}"
    return "ok"


def rss_summary(samples: list[tuple[float, int]], baseline_s: float) -> dict:
    """RSS (MiB) at the sample nearest `baseline_s` and at the last one, its peak after the baseline,
    and the growth. The growth compares medians over a window (60 s; a third of the time after the
    baseline when that is shorter) from the baseline on and at the end: the heap's RSS steps up and
    down by ~6 % over about 30 s as arenas grow and are trimmed (seen in 60-90 s runs), so two
    single samples would measure those steps rather than a trend."""
    if not samples:
        return {}
    at = min(samples, key=lambda s: abs(s[0] - baseline_s))
    end = samples[-1]
    window = min(60.0, (end[0] - at[0]) / 3)
    first = statistics.median(kib for t, kib in samples if at[0] <= t < at[0] + window)
    last = statistics.median(kib for t, kib in samples if t > end[0] - window)
    return {"baseline_s": round(at[0], 1), "baseline_mib": at[1] / 1024, "end_s": round(end[0], 1),
            "end_mib": end[1] / 1024, "peak_after_baseline_mib": max(kib for t, kib in samples if t >= at[0]) / 1024,
            "window_s": round(window, 1), "baseline_window_median_mib": first / 1024, "end_window_median_mib": last / 1024,
            "growth_pct": 100.0 * (last - first) / first, "point_growth_pct": 100.0 * (end[1] - at[1]) / at[1]}


def report(args: argparse.Namespace, run: dict) -> dict:
    streams = []
    for stream in STREAMS:
        result = run["streams"].get(stream.name)
        if isinstance(result, BaseException) or result is None:
            print(f"{stream.name}: the generator failed: {result!r}")
            streams.append({"stream": stream.name, "generator_failed": repr(result)})
            continue
        streams.append(asdict(result))
    ok = [s for s in streams if "generator_failed" not in s]
    print(f"\n{'stream':<48} {'clients':>7} {'requests':>9} {'errors':>6} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for s in ok:
        print(f"{s['stream']:<48} {s['clients']:>7} {s['requests']:>9} {s['errors']:>6} {s['requests_per_s']:>8.1f} "
              f"{s['p50_ms']:>8.1f} {s['p99_ms']:>8.1f}")
        for message, n in list(s["failures"].items())[:3]:
            print(f"{'':>8}{n} x {message}")
    total_errors = sum(s["errors"] for s in ok) + (len(streams) - len(ok))
    reload_errors = sum(s["errors"] for s in ok if s["model"] == RELOAD_MODEL)
    rss = rss_summary(run["rss"], args.rss_baseline_s)
    reloads = run["reloads"]
    served = [r["available_after_s"] for r in reloads if r["available_after_s"] is not None]
    retired = [r for r in reloads if r["previous_retired_after_s"] is not None]
    print(f"\nserver: {run['server_cores']:.2f} cores on average; RSS {rss.get('baseline_mib', 0):.1f} MiB at "
          f"{rss.get('baseline_s', 0):g} s, {rss.get('end_mib', 0):.1f} MiB at {rss.get('end_s', 0):g} s (peak after "
          f"the baseline {rss.get('peak_after_baseline_mib', 0):.1f} MiB): {rss.get('point_growth_pct', float('nan')):+.2f} %; "
          f"medians over {rss.get('window_s', 0):g} s from the baseline and at the end {rss.get('baseline_window_median_mib', 0):.1f} "
          f"and {rss.get('end_window_median_mib', 0):.1f} MiB: {rss.get('growth_pct', float('nan')):+.2f} %")
    if reloads:
        print(f"reloads: {len(reloads)} versions published, {len(served)} served (rename to AVAILABLE: median "
              f"{statistics.median(served) if served else float('nan'):.2f} s, max {max(served, default=float('nan')):.2f} s), "
              f"{len(retired)} predecessors retired; final states {run['final_states']}")
    print(f"answers after the run: {run['answers_after']}; ERROR lines in the server log: {len(run['log_error_lines'])}")
    for line in run["log_error_lines"][:5]:
        print(f"    {line[:200]}")
    targets = [
        ("0 failed requests", f"{total_errors} errors", total_errors == 0),
        (f"0 failed requests to {RELOAD_MODEL} while it reloads", f"{reload_errors} errors",
         reload_errors == 0 and bool(reloads) == (args.reload_every > 0)),
        ("every reload served, its predecessor retired", f"{len(served)} and {len(retired)} of {len(reloads)}",
         len(served) == len(retired) == len(reloads)),
        (f"RSS growth < {RSS_GROWTH_LIMIT:.0%} after {rss.get('baseline_s', 0):g} s (window medians)",
         f"{rss.get('growth_pct', float('nan')):+.2f} %", rss.get("growth_pct", 1e9) < 100 * RSS_GROWTH_LIMIT),
        ("server alive and ready, same answers, no ERROR in its log",
         f"alive {run['alive']}, ready {run['ready']}, answers {run['answers_after']}, {len(run['log_error_lines'])} ERROR lines",
         run["alive"] and run["ready"] and run["answers_after"] == "ok" and not run["log_error_lines"]),
    ]
    print()
    for name, value, passed in targets:
        print(f"{'PASS' if passed else 'FAIL'} {name}: {value}")
    return {"duration_s": args.duration, "reload_every_s": args.reload_every, "poll_interval_s": args.poll_interval_s,
            "cpu_count": os.cpu_count(), "clients": sum(s.clients for s in STREAMS), "streams": streams,
            "rss": rss, "rss_samples_kib": run["rss"], "reloads": reloads, "final_states": run["final_states"],
            "server_cores": run["server_cores"], "answers_after": run["answers_after"],
            "log_error_lines": run["log_error_lines"],
            "targets": [{"target": n, "value": v, "passed": p} for n, v, p in targets]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    parser.add_argument("--reload-every", type=float, default=30,
                        help=f"seconds between new {RELOAD_MODEL} versions; 0: no reloads (default 30)")
    parser.add_argument("--poll-interval-s", type=float, default=0.5, help="the server's repository poll (default 0.5)")
    parser.add_argument("--rss-baseline-s", type=float, default=60,
                        help="RSS growth is measured from here to the end (default 60; a third of a shorter run)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "soak.json", help="where the figures go")
    args = parser.parse_args()
    for tool in ("hey", "wrk"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed (apt-get install hey wrk)")
    if args.duration < 2 * args.rss_baseline_s:
        args.rss_baseline_s = args.duration / 3
    with tempfile.TemporaryDirectory(prefix="tensorgate-soak-") as tmp:
        figures = report(args, soak(args, Path(tmp)))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.json}")
    sys.exit(0 if all(t["passed"] for t in figures["targets"]) else 1)


if __name__ == "__main__":
    main()
