"""Load benchmark: what dynamic batching buys under concurrent load, and what the server costs per request.

    .venv/bin/python bench/load.py [--quick] [--seconds 10] [--out DIR]

It measures, against a real `tensorgate serve` process (so that the client does not share its GIL):

- closed-loop load: `c` asyncio workers (each with its own httpx.AsyncClient, see `closed_loop`)
  each send batch-1 Open Inference Protocol binary requests back to back to an MLP
  1024-4096-4096-1000 (random float32 weights, seeded), for c in 1, 8, 32, 64, with dynamic batching
  on and off. Per run: throughput (requests completed per second), p50/p95/p99 latency, errors
  (non-200 answers or transport failures), rows per batch the server ran (its /metrics), and the CPU
  the client, the server and everything else used meanwhile (in cores: the machine's cores are
  shared by all three, so a busy neighbour shows up as `other cpu`).
- targets, printed as PASS/FAIL: (a) at c=64, batching on gives >= 4x the throughput of batching off;
  (b) at c=1, batching on costs at most its batch timeout + 2 ms of p50 latency.
- server overhead: p50 latency at c=1 of a trivial graph (Identity on one float, JSON) served by
  tensorgate, against a bare FastAPI app under the same uvicorn settings that parses the same
  request and answers the same body.

It writes `<out>/load.json` (the raw figures) and `<out>/load.png` (throughput and p50/p99 against
concurrency). `--out` defaults to bench/results/ (gitignored).

`--hey` runs bench/serving_bench.py instead: per-request overhead under hey, a Go load generator, of a
bare FastAPI app, today's main and the working tree, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from engine import builder as gb  # noqa: E402

LAYERS = (1024, 4096, 4096, 1000)
CONCURRENCY = (1, 8, 32, 64)
# NOTE: under load a batch forms while the previous one computes (its head has waited past the timeout
# already), so the timeout hardly matters from c=8 up: 0.5, 1 and 2 ms gave the same throughput within
# noise on a 2-core machine. At c=1 it is added latency: about +1.5 ms of p50 at 2 ms.
BATCHING = {"max_batch_size": 64, "batch_timeout_micros": 2000, "num_batch_threads": 1, "max_enqueued_batches": 64}
HEADER_LENGTH = "Inference-Header-Content-Length"
CLK_TCK = os.sysconf("SC_CLK_TCK")

BARE_APP = '''\
"""A bare FastAPI app: parses the request's JSON and answers a fixed body (the floor for overhead)."""
import json
from fastapi import FastAPI, Request, Response

app = FastAPI()
BODY = {body!r}


@app.post("/v2/models/trivial/infer")
async def infer(request: Request) -> Response:
    json.loads(await request.body())
    return Response(BODY, media_type="application/json")
'''


# --- models -------------------------------------------------------------------------------------------


def mlp(seed: int = 0, layers: tuple[int, ...] = LAYERS) -> tuple[gb.GraphBuilder, list[tuple[np.ndarray, np.ndarray]]]:
    """x [None, 1024] -> dense + relu, twice -> dense `logits` [None, 1000] (or `layers`' sizes); the
    graph and its weights."""
    rng = np.random.default_rng(seed)
    weights = [(rng.standard_normal((fan_in, fan_out), dtype=np.float32) / np.float32(np.sqrt(fan_in)),
                rng.standard_normal(fan_out, dtype=np.float32) * np.float32(0.1))
               for fan_in, fan_out in itertools.pairwise(layers)]
    graph = gb.GraphBuilder()
    with graph.as_default():
        h = gb.placeholder("float32", [None, layers[0]], name="x")
        for i, (kernel, bias) in enumerate(weights[:-1], start=1):
            h = gb.layers.dense(h, kernel, bias, activation="relu", name=f"dense{i}")
        kernel, bias = weights[-1]
        with gb.name_scope("logits") as scope:  # the op takes its scope's name, `logits`
            product = gb.matmul(h, gb.constant(kernel, name="kernel"), name="MatMul")
            gb.bias_add(product, gb.constant(bias, name="bias"), name=scope)
    return graph, weights


def mlp_graph(seed: int = 0) -> gb.GraphBuilder:
    """x [None, 1024] -> (MatMul, BiasAdd, Relu) x2 -> MatMul, BiasAdd `logits` [None, 1000]."""
    return mlp(seed)[0]


def trivial_graph() -> gb.GraphBuilder:
    graph = gb.GraphBuilder()
    with graph.as_default():
        gb.identity(gb.placeholder("float32", [None], name="x"), name="y")
    return graph


def write_repository(root: Path, name: str, graph: gb.GraphBuilder, batching: dict | None) -> Path:
    """`root/<name>/1/model.pb`, plus a config.yaml with `batching:` when given; returns root."""
    graph.save(root / name / "1" / "model.pb")
    if batching is not None:
        (root / name / "config.yaml").write_text(f"batching: {json.dumps(batching)}\n")
    return root


# --- server processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tensorgate_command(repo: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "service.cli", "serve", "--model-repository", str(repo),
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


def bare_command(app_dir: Path, port: int) -> list[str]:
    # The same uvicorn settings as `tensorgate serve`: uvloop and httptools (picked by "auto"), keep-alive 30 s.
    return [sys.executable, "-m", "uvicorn", "bare_app:app", "--app-dir", str(app_dir), "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning", "--timeout-keep-alive", "30"]


@contextlib.contextmanager
def running(command: list[str], port: int, log_path: Path, ready_path: str, timeout_s: float = 180,
            cwd: Path = ROOT, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A server process run in `cwd` with `env` (default: this one's), up once GET `ready_path` answers 200;
    SIGTERM (then SIGKILL) when the block ends."""
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(process, f"http://127.0.0.1:{port}{ready_path}", log_path, timeout_s)
        yield process
    finally:
        stop(process)


def wait_ready(process: subprocess.Popen, url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"server not ready after {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU time all cores spent not idle, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


# --- requests -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request, sent unchanged by every worker."""

    path: str
    content: bytes
    headers: dict[str, str]


def binary_request(model: str, x: np.ndarray) -> Request:
    """Open Inference Protocol binary tensor extension: a JSON header, then the raw little-endian tensor."""
    data = x.astype("<f4").tobytes()
    header = json.dumps({
        "inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": True}}],
    }).encode()
    headers = {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}
    return Request(f"/v2/models/{model}/infer", header + data, headers)


def json_request(model: str, x: np.ndarray) -> Request:
    """Open Inference Protocol JSON tensors: `x` as the input `x`."""
    tensor = {"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
    body = json.dumps({"inputs": [tensor]})
    return Request(f"/v2/models/{model}/infer", body.encode(), {"Content-Type": "application/json"})


# --- the load generator -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    """One closed-loop run: the requests that finished inside the measured window of `seconds`."""

    concurrency: int
    seconds: float
    requests: int
    errors: int
    throughput: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    client_cores: float
    server_cores: float
    other_cores: float  # CPU the rest of the machine used meanwhile: anything above ~0.1 skews the figures
    rows_per_batch: float | None = None  # rows per batch the server ran (warm-up included); filled in by load_sweep


async def worker(client: httpx.AsyncClient, request: Request, end: float, samples: list) -> None:
    """Send `request` back to back until `end`; record (finish time, latency, ok) of each."""
    while (t0 := time.perf_counter()) < end:
        try:
            response = await client.post(request.path, content=request.content, headers=request.headers)
            ok = response.status_code == 200
        except httpx.HTTPError:
            ok = False
        t1 = time.perf_counter()
        samples.append((t1, t1 - t0, ok))


async def closed_loop(url: str, request: Request, concurrency: int, seconds: float, warmup: float, server_pid: int,
                      shared_client: bool = False) -> RunResult:
    """`concurrency` workers for `warmup` + `seconds`; only requests that finish in the last `seconds`
    count (throughput is those over `seconds`), and CPU is measured over the same window.

    Each worker has its own httpx.AsyncClient (one connection) unless `shared_client`: one client's
    pool of `concurrency` connections costs the client O(connections) CPU per request (encode/httpx
    #3215), so that at 64 it would measure httpx rather than the server.
    """
    samples: list[tuple[float, float, bool]] = []
    async with contextlib.AsyncExitStack() as stack:
        if shared_client:
            clients = [await stack.enter_async_context(http_client(url, concurrency))] * concurrency
        else:
            clients = [await stack.enter_async_context(http_client(url, 1)) for _ in range(concurrency)]
        start = time.perf_counter() + warmup
        end = start + seconds
        workers = [asyncio.ensure_future(worker(client, request, end, samples)) for client in clients]
        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        before = cpu_snapshot(server_pid)
        await asyncio.sleep(max(0.0, end - time.perf_counter()))
        used = [b - a for a, b in zip(before, cpu_snapshot(server_pid))]
        await asyncio.gather(*workers)
    in_window = [(latency, ok) for finished, latency, ok in samples if start <= finished <= end]
    return summarize(concurrency, in_window, seconds, *used)


def cpu_snapshot(server_pid: int) -> tuple[float, float, float]:
    """CPU seconds so far: this process, the server, the whole machine."""
    return time.process_time(), cpu_seconds(server_pid), machine_busy_seconds()


def http_client(url: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=url, limits=limits, timeout=120)


def summarize(concurrency: int, samples: list[tuple[float, bool]], seconds: float,
              client_cpu: float, server_cpu: float, machine_cpu: float) -> RunResult:
    latencies = np.array([latency for latency, ok in samples if ok]) * 1e3
    p50, p95, p99 = np.percentile(latencies, [50, 95, 99]) if len(latencies) else (float("nan"),) * 3
    return RunResult(
        concurrency=concurrency,
        seconds=seconds,
        requests=len(latencies),
        errors=sum(not ok for _, ok in samples),
        throughput=len(latencies) / seconds,
        p50_ms=float(p50), p95_ms=float(p95), p99_ms=float(p99),
        client_cores=client_cpu / seconds,
        server_cores=server_cpu / seconds,
        other_cores=max(0.0, machine_cpu - client_cpu - server_cpu) / seconds,
    )


def run_async(coroutine):
    """Run on uvloop when it is installed (a cheaper client leaves more CPU to the server)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


# --- hey (a Go load generator, in a process of its own) ----------------------------------------------


def hey_command(url: str, headers: dict[str, str], body_file: Path, clients: int, seconds: float) -> list[str]:
    """hey POSTing `body_file` to `url` from `clients` workers for `seconds`; `headers` holds Content-Type."""
    headers = dict(headers)
    command = ["hey", "-z", f"{seconds:g}s", "-c", str(clients), "-m", "POST", "-T", headers.pop("Content-Type"),
               "-D", str(body_file)]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    return [*command, url]


def run_hey(command: list[str]) -> tuple[dict, float]:
    """hey's summary (`parse_hey`), and the CPU seconds hey used (its own rusage, from wait4: other
    children of this process may be reaped meanwhile)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = process.stdout.read().decode(errors="replace")
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}:\n{text[-2000:]}")
    return parse_hey(text), usage.ru_utime + usage.ru_stime


def parse_hey(text: str) -> dict:
    """Total seconds, requests/s (hey counts failed requests too), p50/p99 (ms), responses per status,
    and failures by kind: non-200 answers (`HTTP <code>`) and the `Error distribution` lines."""
    rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"Total:\s+([\d.]+) secs", text)
    percentiles = {int(p): float(s) * 1e3 for p, s in re.findall(r"^\s+(\d+)% in ([\d.]+) secs", text, re.MULTILINE)}
    statuses = {int(code): int(n) for code, n in re.findall(r"^\s+\[(\d+)\]\s+(\d+) responses", text, re.MULTILINE)}
    failures = Counter({f"HTTP {code}": n for code, n in statuses.items() if code != 200})
    if "Error distribution:" in text:
        for n, message in re.findall(r"^\s+\[(\d+)\]\s+(.*)$", text.split("Error distribution:", 1)[1], re.MULTILINE):
            failures[message[:300]] += int(n)
    return {"total_s": float(total[1]) if total else float("nan"), "requests_per_s": float(rate[1]) if rate else 0.0,
            "statuses": statuses, "failures": failures,
            "p50_ms": percentiles.get(50, float("nan")), "p99_ms": percentiles.get(99, float("nan"))}


# --- the benchmarks -----------------------------------------------------------------------------------


def load_sweep(repo: Path, mode: str, request: Request, args: argparse.Namespace, tmp: Path) -> list[RunResult]:
    """Start tensorgate on `repo` and run the closed loop at every concurrency, printing each row."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    results = []
    with running(tensorgate_command(repo, port), port, tmp / f"server-{mode}.log", "/v2/health/ready") as server:
        for concurrency in CONCURRENCY:
            before = batch_counts(url)
            result = run_async(closed_loop(url, request, concurrency, args.seconds, args.warmup, server.pid,
                                           args.shared_client))
            after = batch_counts(url)
            result = replace(result, rows_per_batch=(after[0] - before[0]) / max(after[1] - before[1], 1))
            print(format_row(mode, result), flush=True)
            results.append(result)
    return results


def batch_counts(url: str) -> tuple[float, float]:
    """(rows, batches) the server has executed, from its Prometheus histogram `tensorgate_batch_size`."""
    totals = {"sum": 0.0, "count": 0.0}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        for kind in totals:
            if line.startswith(f"tensorgate_batch_size_{kind}{{"):
                totals[kind] += float(line.rsplit(" ", 1)[1])
    return totals["sum"], totals["count"]


TABLE_HEADER = (f"{'mode':>4} {'conc':>5} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>6} "
                f"{'rows/batch':>10} {'client cpu':>10} {'server cpu':>10} {'other cpu':>9}")


def format_row(mode: str, r: RunResult) -> str:
    return (f"{mode:>4} {r.concurrency:>5} {r.throughput:>8.1f} {r.p50_ms:>8.2f} {r.p95_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{r.errors:>6} {r.rows_per_batch:>10.1f} {r.client_cores:>10.2f} {r.server_cores:>10.2f} {r.other_cores:>9.2f}")


def check_targets(on: list[RunResult], off: list[RunResult]) -> list[dict]:
    """The two targets as records: name, measured value, limit, passed."""
    top_on, top_off = on[-1], off[-1]
    ratio = top_on.throughput / top_off.throughput
    allowed = off[0].p50_ms + BATCHING["batch_timeout_micros"] / 1e3 + 2.0
    return [
        {"target": f"(a) c={top_on.concurrency}: batching-on throughput >= 4x batching-off",
         "value": f"{top_on.throughput:.1f} vs {top_off.throughput:.1f} req/s = {ratio:.2f}x", "passed": ratio >= 4.0},
        {"target": f"(b) c={on[0].concurrency}: p50 batching on <= p50 off + batch timeout + 2 ms",
         "value": f"{on[0].p50_ms:.2f} ms <= {allowed:.2f} ms ({off[0].p50_ms:.2f} + "
                  f"{BATCHING['batch_timeout_micros'] / 1e3:g} + 2)", "passed": on[0].p50_ms <= allowed},
    ]


def overhead(tmp: Path, args: argparse.Namespace) -> dict:
    """p50 at c=1 of the trivial model on tensorgate against a bare FastAPI app answering the same body."""
    request = json_request("trivial", np.array([1.0], np.float32))
    repo = write_repository(tmp / "repo-trivial", "trivial", trivial_graph(), None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(tensorgate_command(repo, port), port, tmp / "server-trivial.log", "/v2/health/ready") as server:
        body = httpx.post(url + request.path, content=request.content, headers=request.headers).content
        served = run_async(closed_loop(url, request, 1, args.seconds, args.warmup, server.pid))
    (tmp / "bare_app.py").write_text(BARE_APP.format(body=body))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(bare_command(tmp, port), port, tmp / "server-bare.log", "/docs") as server:
        if httpx.post(url + request.path, content=request.content, headers=request.headers).content != body:
            raise RuntimeError("the bare app does not answer the body tensorgate answers")
        bare = run_async(closed_loop(url, request, 1, args.seconds, args.warmup, server.pid))
    return {"response_body": body.decode(), "tensorgate": asdict(served), "bare_fastapi": asdict(bare),
            "overhead_p50_ms": served.p50_ms - bare.p50_ms}


# --- output -------------------------------------------------------------------------------------------


def plot(on: list[RunResult], off: list[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tput, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, results, color in (("batching on", on, "tab:blue"), ("batching off", off, "tab:orange")):
        conc = [r.concurrency for r in results]
        ax_tput.plot(conc, [r.throughput for r in results], "o-", color=color, label=mode)
        ax_lat.plot(conc, [r.p50_ms for r in results], "o-", color=color, label=f"{mode}, p50")
        ax_lat.plot(conc, [r.p99_ms for r in results], "s--", color=color, label=f"{mode}, p99")
    for ax in (ax_tput, ax_lat):
        ax.set_xscale("log", base=2)
        ax.set_xticks(CONCURRENCY, [str(c) for c in CONCURRENCY])
        ax.set_xlabel("concurrent clients (batch-1 requests, closed loop)")
        ax.grid(True, alpha=0.3)
        ax.legend()
    ax_tput.set_ylabel("throughput (requests/s)")
    ax_lat.set_ylabel("latency (ms)")
    ax_lat.set_yscale("log")
    fig.suptitle(f"tensorgate, MLP {'-'.join(map(str, LAYERS))}, binary v2 infer")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def serving_arguments(args: argparse.Namespace) -> list[str]:
    """This bench's arguments that serving_bench shares, as its command line."""
    return [*(["--quick"] if args.quick else []), *(["--seconds", f"{args.seconds:g}"] if args.seconds else []),
            *(["--out", str(args.out)] if args.out else [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s per run (unless --seconds says otherwise)")
    parser.add_argument("--seconds", type=float, help="measured seconds per run (default 10, --quick 3)")
    parser.add_argument("--shared-client", action="store_true",
                        help="one httpx.AsyncClient for all workers (slow at high concurrency: encode/httpx#3215)")
    parser.add_argument("--out", type=Path, help="output directory (default: a new temporary directory)")
    parser.add_argument("--hey", action="store_true",
                        help="run bench/serving_bench.py instead (hey-driven overhead: bare FastAPI, main, now); "
                             "--quick, --seconds, --out and any arguments this parser does not know go to it")
    args, rest = parser.parse_known_args()
    if args.hey:
        import serving_bench  # here, not at the top: serving_bench imports this module

        serving_bench.main(serving_arguments(args) + rest)
        return
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.warmup = 1.0 if args.quick else 2.0
    out = args.out or Path(__file__).resolve().parent / "results"
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="tensorgate-load-") as tmp_name:
        tmp = Path(tmp_name)
        graph = mlp_graph(seed=0)
        repos = {"on": write_repository(tmp / "repo-on", "mlp", graph, BATCHING),
                 "off": write_repository(tmp / "repo-off", "mlp", graph, None)}
        request = binary_request("mlp", np.random.default_rng(1).standard_normal((1, LAYERS[0]), dtype=np.float32))
        print(f"MLP {'-'.join(map(str, LAYERS))}, batching {BATCHING}, {args.seconds:g} s per run after "
              f"{args.warmup:g} s warm-up, {os.cpu_count()} cores\n{TABLE_HEADER}", flush=True)
        sweeps = {mode: load_sweep(repo, mode, request, args, tmp) for mode, repo in repos.items()}
        targets = check_targets(sweeps["on"], sweeps["off"])
        for t in targets:
            print(f"{'PASS' if t['passed'] else 'FAIL'} {t['target']}: {t['value']}")
        costs = overhead(tmp, args)
    print(f"overhead (trivial model, JSON, c=1): tensorgate p50 {costs['tensorgate']['p50_ms']:.3f} ms, "
          f"bare FastAPI p50 {costs['bare_fastapi']['p50_ms']:.3f} ms, difference {costs['overhead_p50_ms']:.3f} ms")

    report = {"model": {"layers": LAYERS}, "batching": BATCHING, "seconds": args.seconds, "warmup_s": args.warmup,
              "cpu_count": os.cpu_count(), "runs": {mode: [asdict(r) for r in rs] for mode, rs in sweeps.items()},
              "targets": targets, "overhead": costs}
    (out / "load.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(sweeps["on"], sweeps["off"], out / "load.png")
    print(f"wrote {out / 'load.json'} and {out / 'load.png'}")


if __name__ == "__main__":
    main()
