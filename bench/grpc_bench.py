"""gRPC against REST: throughput and latency of the same request through five protocols, at 1, 8 and 64
concurrent clients, all against one `tensorgate serve` process.

    .venv/bin/python bench/grpc_bench.py [--quick] [--seconds 10] [--no-hey] [--out DIR]

Protocols, each sending the same input and checking the same answer on every reply:

- `rest-v1-json`: TensorFlow Serving REST, POST /v1/models/<m>:predict with `{"instances": ...}`;
- `rest-v2-json`: KServe v2 (Open Inference Protocol) REST, POST /v2/models/<m>/infer, JSON tensors;
- `rest-v2-binary`: the same with Triton's binary tensor extension (`Inference-Header-Content-Length`);
- `grpc-predict`: tensorflow.serving.PredictionService/Predict, TensorProtos;
- `grpc-infer`: inference.GRPCInferenceService/ModelInfer, raw_input_contents and raw_output_contents.

Models: `mlp`, an MLP 1024-4096-4096-1000 (random float32 weights, seeded as bench/load.py seeds them;
batch-1 requests) with dynamic batching (max batch 32, 1 ms timeout), and `half_plus_two`
(models/half_plus_two, one float in and out, no batching), where the protocol is nearly all the cost.

Load generators, in processes of their own (never the server's: a client in the server's process
measures itself):

- `python`, for every protocol: `--client-processes` spawned processes (default one per core, never
  more than the clients), each running its share of the clients on uvloop as closed loops: a client
  sends a request, waits for the answer, checks it, sends the next. A REST client is an
  httpx.AsyncClient with one connection, a gRPC client a grpc.aio channel with a connection of its own.
  The ratios compare these rows only, generator to same generator.
- `hey` (Go; `apt-get install hey`), for the REST protocols again when it is installed: a far cheaper
  client, which shows how much of the Python rows is the Python client. hey checks status codes, not
  bodies, and reports latencies rounded to 0.1 ms.

Per cell (model, protocol, generator, clients): requests/s (OK answers that finished inside the
measured window), p50 and p99 latency, errors (every failed request or wrong answer, warm-up
included; the commonest messages are kept), rows per batch the server ran (MLP; warm-up included), and
the CPU, in cores, of the generator, the server and everything else over the window (and the first
two per request): on a small machine all three share the cores, so a costly generator slows the server
it measures. A cell during which other processes used more than NOISY_CORES runs again (`--retries`,
default once) and the least disturbed run is kept, its row marked `*` if still disturbed; errors add
up over all runs. Then the ratios gRPC / REST per model and concurrency: requests/s, p50, and the
server's CPU per request, the figure least bent by the generator's own cost.

Raw figures go to `<out>/grpc.json`; `--out` defaults to bench/results/ (gitignored).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import grpc
import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from load import (  # noqa: E402 - the load bench's MLP, process, hey and metrics helpers
    LAYERS,
    batch_counts,
    cpu_seconds,
    hey_command,
    machine_busy_seconds,
    mlp,
    run_hey,
    stop,
)

from engine.graph.tensors import from_array, to_array
from service.protocols.grpc.services import INFERENCE_SERVICE, PREDICTION_SERVICE, Stub
from service.protocols.proto import grpc_service_pb2, predict_pb2

CLIENTS = (1, 8, 64)
PROTOCOLS = ("rest-v1-json", "rest-v2-json", "rest-v2-binary", "grpc-predict", "grpc-infer")
REST_PROTOCOLS = tuple(p for p in PROTOCOLS if p.startswith("rest"))
# (gRPC, REST) pairs whose ratios are printed: each gRPC API against its REST twin, and the raw
# ModelInfer against the REST path that also sends raw bytes.
RATIOS = (("grpc-predict", "rest-v1-json"), ("grpc-infer", "rest-v2-json"), ("grpc-infer", "rest-v2-binary"))
BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 1000, "num_batch_threads": 1, "max_enqueued_batches": 64}
HEADER_LENGTH = "Inference-Header-Content-Length"
# Cores the rest of the machine may use during a cell before the cell counts as disturbed (and runs again).
NOISY_CORES = 0.25


# --- models -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A served model and the one request every client sends it: the input, and the answer it must get."""

    model: str
    input: str
    output: str
    x: np.ndarray
    expected: np.ndarray


def mlp_forward(weights: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for i, (kernel, bias) in enumerate(weights):
        x = x @ kernel + bias
        if i < len(weights) - 1:
            x = np.maximum(x, 0)
    return x


def write_repository(root: Path) -> list[Case]:
    """`mlp` (batching on) and a copy of models/half_plus_two under `root`; the request to each."""
    graph, weights = mlp()
    graph.save(root / "mlp" / "1" / "model.pb")
    (root / "mlp" / "config.yaml").write_text(f"batching: {json.dumps(BATCHING)}\n")
    shutil.copytree(ROOT / "models" / "half_plus_two", root / "half_plus_two")
    x = np.random.default_rng(1).standard_normal((1, LAYERS[0]), dtype=np.float32)
    one = np.array([1.0], np.float32)
    return [Case("mlp", "x", "logits", x, mlp_forward(weights, x)),
            Case("half_plus_two", "x", "y", one, one * np.float32(0.5) + np.float32(2))]


# --- requests and answers -----------------------------------------------------------------------------


class WrongAnswer(Exception):
    """A reply that is not 200/OK, or whose output is not the expected one."""


def rest_request(protocol: str, case: Case) -> tuple[str, bytes, dict[str, str]]:
    """(path, body, headers) of `case`'s request in a REST protocol."""
    x = case.x
    if protocol == "rest-v1-json":
        return (f"/v1/models/{case.model}:predict", json.dumps({"instances": x.tolist()}).encode(),
                {"Content-Type": "application/json"})
    path = f"/v2/models/{case.model}/infer"
    tensor = {"name": case.input, "shape": list(x.shape), "datatype": "FP32"}
    if protocol == "rest-v2-json":
        body = {"inputs": [{**tensor, "data": x.ravel().tolist()}], "outputs": [{"name": case.output}]}
        return path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    data = x.astype("<f4").tobytes()
    header = json.dumps({"inputs": [{**tensor, "parameters": {"binary_data_size": len(data)}}],
                         "outputs": [{"name": case.output, "parameters": {"binary_data": True}}]}).encode()
    return path, header + data, {HEADER_LENGTH: str(len(header)), "Content-Type": "application/octet-stream"}


def rest_answer(protocol: str, case: Case, response: httpx.Response) -> np.ndarray:
    if response.status_code != 200:
        raise WrongAnswer(f"HTTP {response.status_code}: {response.text[:300]}")
    if protocol == "rest-v1-json":
        return np.asarray(response.json()["predictions"], np.float32)
    if protocol == "rest-v2-json":
        (output,) = response.json()["outputs"]
        return np.asarray(output["data"], np.float32).reshape(output["shape"])
    length = int(response.headers[HEADER_LENGTH])
    (output,) = json.loads(response.content[:length])["outputs"]
    size = output["parameters"]["binary_data_size"]
    return np.frombuffer(response.content[length:length + size], "<f4").reshape(output["shape"])


def grpc_call(protocol: str, case: Case, channel: grpc.aio.Channel):
    """(the RPC, its request, a function from its reply to the output array)."""
    if protocol == "grpc-predict":
        request = predict_pb2.PredictRequest()
        request.model_spec.name = case.model
        request.inputs[case.input].CopyFrom(from_array(case.x))
        return Stub(channel, PREDICTION_SERVICE).Predict, request, lambda reply: to_array(reply.outputs[case.output])
    request = grpc_service_pb2.ModelInferRequest(
        model_name=case.model,
        inputs=[grpc_service_pb2.ModelInferRequest.InferInputTensor(name=case.input, datatype="FP32",
                                                                    shape=case.x.shape)],
        outputs=[grpc_service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=case.output)],
        raw_input_contents=[case.x.astype("<f4").tobytes()],
    )

    def answer(reply: grpc_service_pb2.ModelInferResponse) -> np.ndarray:
        (output,) = reply.outputs
        return np.frombuffer(reply.raw_output_contents[0], "<f4").reshape(tuple(output.shape))

    return Stub(channel, INFERENCE_SERVICE).ModelInfer, request, answer


def check(case: Case, got: np.ndarray) -> None:
    if got.shape != case.expected.shape:
        raise WrongAnswer(f"wrong answer: shape {list(got.shape)}, expected {list(case.expected.shape)}")
    if not np.allclose(got, case.expected, rtol=1e-4, atol=1e-4):
        raise WrongAnswer(f"wrong answer: max |difference| {np.abs(got - case.expected).max():.3g}")


def describe(error: Exception) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return f"gRPC {error.code().name}: {error.details()}"[:300]
    return f"{type(error).__name__}: {error}"[:300]


# --- the Python load generator (runs in the client processes) -----------------------------------------


@dataclass(frozen=True)
class Job:
    """One client process's share of a cell: `clients` closed loops from now until `end`; replies that
    finish in [start, end] are measured (`perf_counter` is CLOCK_MONOTONIC, the same in every process)."""

    case: Case
    protocol: str
    clients: int
    http_url: str
    grpc_target: str
    start: float
    end: float


@contextlib.asynccontextmanager
async def open_client(job: Job):
    """One client: an async `send()` that raises unless the answer is right, over its own connection."""
    if job.protocol.startswith("grpc"):
        # A local subchannel pool: otherwise the channels of a process share one connection.
        options = [("grpc.use_local_subchannel_pool", 1)]
        async with grpc.aio.insecure_channel(job.grpc_target, options=options) as channel:
            call, request, answer = grpc_call(job.protocol, job.case, channel)

            async def send_rpc() -> None:
                check(job.case, answer(await call(request, timeout=120)))

            yield send_rpc
    else:
        path, body, headers = rest_request(job.protocol, job.case)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(base_url=job.http_url, limits=limits, timeout=120) as http:

            async def send_post() -> None:
                response = await http.post(path, content=body, headers=headers)
                check(job.case, rest_answer(job.protocol, job.case, response))

            yield send_post


async def closed_loop(send, end: float, samples: list, failures: Counter) -> None:
    """Send back to back until `end`, recording (finish time, latency, ok) of each request."""
    while (t0 := time.perf_counter()) < end:
        try:
            await send()
            ok = True
        except Exception as e:  # every failure is counted and its message kept, none ends the run
            ok = False
            failures[describe(e)] += 1
        t1 = time.perf_counter()
        samples.append((t1, t1 - t0, ok))


async def run_job(job: Job) -> dict:
    samples: list[tuple[float, float, bool]] = []
    failures: Counter = Counter()
    async with contextlib.AsyncExitStack() as stack:
        sends = [await stack.enter_async_context(open_client(job)) for _ in range(job.clients)]
        await asyncio.gather(*(closed_loop(send, job.end, samples, failures) for send in sends))
    return {"latencies": [latency for finished, latency, ok in samples if ok and job.start <= finished <= job.end],
            "failures": dict(failures)}


def client_process(pipe) -> None:
    """A client process's life: run each job it is sent, on uvloop, and send back its samples."""
    import uvloop

    while (job := pipe.recv()) is not None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            pipe.send(runner.run(run_job(job)))


class ClientPool:
    """Spawned load-generator processes (spawned, not forked: nothing of this process's gRPC state).

        >>> pool = ClientPool(2)
        >>> pids = pool.submit([job_a, job_b]); results = pool.collect(2)
    """

    def __init__(self, size: int):
        context = multiprocessing.get_context("spawn")
        self.pipes, self.processes = [], []
        for _ in range(size):
            ours, theirs = context.Pipe()
            process = context.Process(target=client_process, args=(theirs,), daemon=True)
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)

    def submit(self, jobs: list[Job]) -> list[int]:
        for pipe, job in zip(self.pipes, jobs, strict=False):
            pipe.send(job)
        return [process.pid for process in self.processes[:len(jobs)]]

    def collect(self, count: int) -> list[dict]:
        return [pipe.recv() for pipe in self.pipes[:count]]

    def close(self) -> None:
        for pipe, process in zip(self.pipes, self.processes):
            with contextlib.suppress(OSError):  # a process that died already
                pipe.send(None)
            process.join(timeout=10)


# --- the server and CPU accounting ---------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    pid: int
    http_url: str
    grpc_target: str


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


@contextlib.contextmanager
def serving(repo: Path, cases: list[Case], log_path: Path):
    """`tensorgate serve` on `repo`, HTTP and gRPC on free ports, up once every model answers ready."""
    http_port, grpc_port = free_ports(2)
    command = [sys.executable, "-m", "service.cli", "serve", "--model-repository", str(repo), "--host", "127.0.0.1",
               "--port", str(http_port), "--poll-interval-s", "0", "--log-level", "warning"]
    env = {**os.environ, "TENSORGATE_GRPC_PORT": str(grpc_port)}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(process.pid, f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}")
    try:
        deadline = time.monotonic() + 180
        for path in ["/v2/health/ready", *(f"/v2/models/{case.model}/ready" for case in cases)]:
            while not ready(server.http_url + path):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server not ready ({process.poll()=}):\n{log_path.read_text()[-3000:]}")
                time.sleep(0.2)
        with grpc.insecure_channel(server.grpc_target) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        yield server
    finally:
        stop(process)


def ready(url: str) -> bool:
    with contextlib.suppress(httpx.TransportError):
        return httpx.get(url, timeout=2).status_code == 200
    return False


# --- cells --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (model, protocol, generator, clients) measurement."""

    model: str
    protocol: str
    generator: str
    clients: int
    seconds: float
    requests: int
    errors: int
    throughput: float
    p50_ms: float
    p99_ms: float
    generator_cores: float
    server_cores: float
    other_cores: float  # the rest of the machine over the window: above ~0.1, a neighbour skews the figures
    rows_per_batch: float | None
    failures: dict[str, int]  # error message -> count
    runs: int = 1  # how many times the cell ran (see `measure`); errors and failures add up over all

    @property
    def generator_ms_per_request(self) -> float:
        return self.generator_cores * self.seconds * 1e3 / max(self.requests, 1)

    @property
    def server_ms_per_request(self) -> float:
        return self.server_cores * self.seconds * 1e3 / max(self.requests, 1)

    def to_json(self) -> dict:
        return {**asdict(self), "generator_cpu_ms_per_request": self.generator_ms_per_request,
                "server_cpu_ms_per_request": self.server_ms_per_request}


def python_cell(pool: ClientPool, server: Server, case: Case, protocol: str, clients: int, args) -> Cell:
    shares = [clients // args.client_processes + (i < clients % args.client_processes)
              for i in range(min(clients, args.client_processes))]
    start = time.perf_counter() + args.warmup
    end = start + args.seconds
    pids = pool.submit([Job(case, protocol, share, server.http_url, server.grpc_target, start, end)
                        for share in shares])
    time.sleep(max(0.0, start - time.perf_counter()))
    before = [cpu_seconds(server.pid), sum(map(cpu_seconds, pids)), machine_busy_seconds()]
    time.sleep(max(0.0, end - time.perf_counter()))
    after = [cpu_seconds(server.pid), sum(map(cpu_seconds, pids)), machine_busy_seconds()]
    results = pool.collect(len(shares))
    latencies = np.array([latency for r in results for latency in r["latencies"]]) * 1e3
    failures = sum((Counter(r["failures"]) for r in results), Counter())
    server_cpu, client_cpu, busy = (b - a for a, b in zip(before, after))
    p50, p99 = np.percentile(latencies, [50, 99]) if len(latencies) else (float("nan"),) * 2
    return Cell(case.model, protocol, "python", clients, args.seconds, len(latencies), sum(failures.values()),
                len(latencies) / args.seconds, float(p50), float(p99), client_cpu / args.seconds,
                server_cpu / args.seconds, max(0.0, busy - client_cpu - server_cpu) / args.seconds, None,
                dict(failures.most_common(5)))


def hey_cell(server: Server, case: Case, protocol: str, clients: int, args, tmp: Path) -> Cell:
    """hey for `warmup` seconds (counted for errors only), then for `seconds`, measured."""
    path, body, headers = rest_request(protocol, case)
    body_file = tmp / f"{case.model}-{protocol}.body"
    body_file.write_bytes(body)
    url = server.http_url + path
    warm, _ = run_hey(hey_command(url, headers, body_file, clients, args.warmup))
    before = [cpu_seconds(server.pid), machine_busy_seconds(), time.perf_counter()]
    report, hey_cpu = run_hey(hey_command(url, headers, body_file, clients, args.seconds))
    server_cpu, busy, wall = (b - a for a, b in zip(before, [cpu_seconds(server.pid), machine_busy_seconds(),
                                                             time.perf_counter()]))
    failures = warm["failures"] + report["failures"]
    ok = report["statuses"].get(200, 0)
    return Cell(case.model, protocol, "hey", clients, report["total_s"], ok, sum(failures.values()),
                ok / report["total_s"], report["p50_ms"], report["p99_ms"], hey_cpu / wall, server_cpu / wall,
                max(0.0, busy - hey_cpu - server_cpu) / wall, None, dict(failures.most_common(5)))


# --- output -------------------------------------------------------------------------------------------

TABLE_HEADER = (f"{'model':<13} {'protocol':<14} {'generator':<9} {'clients':>7} {'req/s':>8} {'p50 ms':>8} "
                f"{'p99 ms':>8} {'errors':>6} {'rows/batch':>10} {'gen cpu':>7} {'gen ms/req':>10} "
                f"{'server cpu':>10} {'srv ms/req':>10} {'other cpu':>9}")


def format_row(c: Cell) -> str:
    rows = f"{c.rows_per_batch:>10.1f}" if c.rows_per_batch is not None else f"{'-':>10}"
    noisy = " *" if c.other_cores > NOISY_CORES else ""
    return (f"{c.model:<13} {c.protocol:<14} {c.generator:<9} {c.clients:>7} {c.throughput:>8.1f} {c.p50_ms:>8.2f} "
            f"{c.p99_ms:>8.2f} {c.errors:>6} {rows} {c.generator_cores:>7.2f} {c.generator_ms_per_request:>10.3f} "
            f"{c.server_cores:>10.2f} {c.server_ms_per_request:>10.3f} {c.other_cores:>9.2f}{noisy}")


def ratios(cells: list[Cell]) -> list[dict]:
    """gRPC / REST requests/s, p50 and server CPU per request, per model and clients, between the
    Python generator's rows."""
    by_key = {(c.model, c.protocol, c.clients): c for c in cells if c.generator == "python"}
    out = []
    for model, clients in dict.fromkeys((c.model, c.clients) for c in cells):
        for grpc_protocol, rest_protocol in RATIOS:
            g, r = by_key[model, grpc_protocol, clients], by_key[model, rest_protocol, clients]
            out.append({"model": model, "clients": clients, "grpc": grpc_protocol, "rest": rest_protocol,
                        "throughput_ratio": ratio(g.throughput, r.throughput), "p50_ratio": ratio(g.p50_ms, r.p50_ms),
                        "server_cpu_per_request_ratio": ratio(g.server_ms_per_request, r.server_ms_per_request)})
    return out


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def print_ratios(rows: list[dict]) -> None:
    print("\ngRPC / REST, the Python generator on both sides: req/s (>1: gRPC serves more), p50 (<1: gRPC answers "
          "sooner), server CPU per request (<1: gRPC costs the server less)")
    print(f"{'model':<13} {'clients':>7}  " + "  ".join(f"{g} / {r}".ljust(36) for g, r in RATIOS))
    for model, clients in dict.fromkeys((r["model"], r["clients"]) for r in rows):
        mine = [r for r in rows if r["model"] == model and r["clients"] == clients]
        cells = [f"{r['throughput_ratio']:.2f}x req/s {r['p50_ratio']:.2f}x p50 "
                 f"{r['server_cpu_per_request_ratio']:.2f}x cpu".ljust(36) for r in mine]
        print(f"{model:<13} {clients:>7}  " + "  ".join(cells))


# --- the run ------------------------------------------------------------------------------------------


def measure(pool: ClientPool, server: Server, case: Case, protocol: str, generator: str, clients: int, args,
            tmp: Path) -> Cell:
    """One cell, run again (up to `--retries` times) while the rest of the machine used more than
    NOISY_CORES meanwhile; the least disturbed run is kept."""
    runs = []
    while len(runs) <= args.retries and (not runs or runs[-1].other_cores > NOISY_CORES):
        before = batch_counts(server.http_url)
        if generator == "python":
            cell = python_cell(pool, server, case, protocol, clients, args)
        else:
            cell = hey_cell(server, case, protocol, clients, args, tmp)
        after = batch_counts(server.http_url)
        rows_per_batch = (after[0] - before[0]) / (after[1] - before[1]) if after[1] > before[1] else None
        runs.append(replace(cell, rows_per_batch=rows_per_batch, runs=len(runs) + 1))
    # Errors are never retried away: the kept run carries the failures of every run.
    failures = sum((Counter(r.failures) for r in runs), Counter())
    best = min(runs, key=lambda r: r.other_cores)
    return replace(best, errors=sum(r.errors for r in runs), failures=dict(failures.most_common(5)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s per cell after 1 s of warm-up (unless --seconds)")
    parser.add_argument("--seconds", type=float, help="measured seconds per cell (default 10, --quick 3)")
    parser.add_argument("--client-processes", type=int, default=os.cpu_count() or 1,
                        help="Python load-generator processes (default: one per core)")
    parser.add_argument("--retries", type=int, default=1,
                        help=f"runs more of a cell while other processes used > {NOISY_CORES} cores (default 1)")
    parser.add_argument("--no-hey", action="store_true", help="skip the hey rows even when hey is installed")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                        help="output directory (default: bench/results)")
    args = parser.parse_args()
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.warmup = 1.0 if args.quick else 2.0
    use_hey = not args.no_hey and shutil.which("hey") is not None
    args.out.mkdir(parents=True, exist_ok=True)

    cells: list[Cell] = []
    pool = ClientPool(args.client_processes)
    try:
        with tempfile.TemporaryDirectory(prefix="tensorgate-grpc-bench-") as tmp_name:
            tmp = Path(tmp_name)
            cases = write_repository(tmp / "repo")
            print(f"one tensorgate serve; mlp {'-'.join(map(str, LAYERS))} batching {BATCHING}; half_plus_two no "
                  f"batching; {args.seconds:g} s per cell after {args.warmup:g} s warm-up; {os.cpu_count()} cores\n"
                  f"generators: python = {args.client_processes} processes of uvloop closed loops (httpx, grpc.aio), "
                  f"every protocol; hey = Go, REST only{'' if use_hey else ' (skipped)'}\n{TABLE_HEADER}", flush=True)
            with serving(tmp / "repo", cases, tmp / "server.log") as server:
                for case, clients in itertools.product(cases, CLIENTS):
                    runs = [(p, "python") for p in PROTOCOLS] + [(p, "hey") for p in REST_PROTOCOLS if use_hey]
                    for protocol, generator in runs:
                        cells.append(measure(pool, server, case, protocol, generator, clients, args, tmp))
                        print(format_row(cells[-1]), flush=True)
            server_log = (tmp / "server.log").read_text().splitlines()
    finally:
        pool.close()

    table = ratios(cells)
    print_ratios(table)
    print(f"\n* other processes used > {NOISY_CORES} cores during the kept run (after {args.retries} retries): noisy")
    failed = [c for c in cells if c.errors]
    for c in failed:
        print(f"errors in {c.model} {c.protocol} {c.generator} c={c.clients}: {c.failures}")
    print(f"{len(failed)} cells had errors" if failed else
          f"no errors: every reply was 200/OK and the Python generator checked all {sum(c.requests for c in cells)} "
          "answers against numpy (hey: status codes only)")
    print(f"server log ({len(server_log)} lines):" + "".join(f"\n  {line}" for line in server_log[-40:]))
    report = {"model": {"mlp_layers": LAYERS, "batching": BATCHING}, "seconds": args.seconds, "warmup_s": args.warmup,
              "cpu_count": os.cpu_count(), "client_processes": args.client_processes, "hey": use_hey,
              "cells": [c.to_json() for c in cells], "ratios": table, "server_log": server_log}
    (args.out / "grpc.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'grpc.json'}")


if __name__ == "__main__":
    main()
