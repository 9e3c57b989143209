"""Per-request serving overhead under hey: a bare FastAPI app, today's main and the working tree, in one run.

    .venv/bin/python bench/load.py --hey [--quick]
    .venv/bin/python bench/serving_bench.py [--quick] [--seconds 10] [--warmup 2] [--baseline REV]
        [--only CASE_SUBSTRING] [--servers bare,main,now] [--profile DIR] [--out DIR]

Servers, started one at a time (so that only one is alive while it is measured), each on the same
uvicorn settings (uvloop and httptools, keep-alive 30 s, log level warning):

- `bare`: a bare FastAPI app that does half_plus_two's work by hand (stdlib json, numpy), the floor;
- `main`: `tensorgate serve` from a snapshot of `--baseline` (default 87088c3, "today's main"),
  exported with `git archive` into a temporary directory;
- `now`: `tensorgate serve` from the working tree.

Cases (batch-1 requests, the same body every time):

- `trivial v1 json` and `trivial v2 json`, 8 clients: models/half_plus_two, TensorFlow Serving's
  `{"instances": ...}` and the Open Inference Protocol's JSON tensors (bare, main, now);
- `mlp v2 json batching`, `mlp v2 binary batching` (the binary tensor extension) and
  `mlp v2 json no batching`, 64 clients: bench/load.py's MLP 1024-4096-4096-1000, with dynamic
  batching (max batch 32, 5 ms timeout) and without (main, now).

Each request is sent once with httpx and its answer checked first. Then, per server and case, hey
runs for `--warmup` seconds (not counted) and for `--seconds`, measured: hey's requests/s, p50 and
p99 latency (hey rounds them to 0.1 ms), errors (non-200 answers and transport errors), the server's
CPU per request, and the cores the rest of the machine used meanwhile (`other cpu`: anything above
~0.1 means a neighbour bent the figures). Then the issue's targets, PASS/FAIL; a target whose cells
had errors fails. Raw figures go to `<out>/serving.json` (default bench/results/, gitignored).

Why hey, in a process of its own: on a 2-core machine a Python client costs about as much CPU per
request as the server it drives, so it measures itself; hey (Go) costs a fraction of that.
`--profile DIR` runs hey once more per case against `now` under `py-spy record` (a flame graph per
case in DIR), outside the measured run because the sampler takes CPU from the server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
from load import (
    LAYERS,
    ROOT,
    Request,
    bare_command,
    binary_request,
    cpu_seconds,
    free_port,
    hey_command,
    json_request,
    machine_busy_seconds,
    mlp_graph,
    run_hey,
    running,
    tensorgate_command,
    write_repository,
)

SERVERS = ("bare", "main", "now")
TENSORGATE = ("main", "now")
BASELINE = "87088c3"
BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 5000, "num_batch_threads": 1, "max_enqueued_batches": 64}
TRIVIAL_INPUT = np.array([1.0, 2.0, 5.0], np.float32)
TRIVIAL_ANSWER = [2.5, 3.0, 4.5]
# Cores the rest of the machine may use during a run before its row is flagged as disturbed (as grpc_bench).
NOISY_CORES = 0.25

BARE_APP = '''\
"""A bare FastAPI app that does half_plus_two's work by hand: the floor for a server's overhead."""
import json

import numpy as np
from fastapi import FastAPI, Request, Response

app = FastAPI()


def half_plus_two(values):
    return np.asarray(values, np.float32) * np.float32(0.5) + np.float32(2)


@app.post("/v1/models/half_plus_two:predict")
async def predict(request: Request) -> Response:
    doc = json.loads(await request.body())
    y = half_plus_two(doc["instances"])
    return Response(json.dumps({"predictions": y.tolist()}), media_type="application/json")


@app.post("/v2/models/half_plus_two/infer")
async def infer(request: Request) -> Response:
    tensor = json.loads(await request.body())["inputs"][0]
    y = half_plus_two(tensor["data"]).reshape(tensor["shape"])
    output = {"name": "y", "datatype": "FP32", "shape": list(y.shape), "data": y.ravel().tolist()}
    body = {"model_name": "half_plus_two", "model_version": "1", "outputs": [output]}
    return Response(json.dumps(body), media_type="application/json")
'''

# Run with a server's cwd and environment, it prints the file of each engine/kernels/service module `serve` loads.
IMPORT_CHECK = """\
import json, sys
import service.app, service.cli, service.server
print(json.dumps({name: m.__file__ for name, m in sys.modules.items()
                  if name.split(".")[0] in ("engine", "kernels", "service") and getattr(m, "__file__", None)}))
"""


# --- cases --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request that `clients` hey workers send back to back to each of `servers`."""

    name: str
    clients: int
    request: Request
    servers: tuple[str, ...]
    answer: list[float] | None = None  # the numbers the reply must hold, where the bench knows them

    @property
    def slug(self) -> str:
        return self.name.replace(" ", "-")


def all_cases() -> list[Case]:
    x = np.random.default_rng(1).standard_normal((1, LAYERS[0]), dtype=np.float32)  # load.py's seed
    v1 = Request("/v1/models/half_plus_two:predict", json.dumps({"instances": TRIVIAL_INPUT.tolist()}).encode(),
                 {"Content-Type": "application/json"})
    return [
        Case("trivial v1 json", 8, v1, SERVERS, TRIVIAL_ANSWER),
        Case("trivial v2 json", 8, json_request("half_plus_two", TRIVIAL_INPUT), SERVERS, TRIVIAL_ANSWER),
        Case("mlp v2 json batching", 64, json_request("mlp", x), TENSORGATE),
        Case("mlp v2 binary batching", 64, binary_request("mlp", x), TENSORGATE),
        Case("mlp v2 json no batching", 64, json_request("mlp_nobatch", x), TENSORGATE),
    ]


def write_models(root: Path) -> Path:
    """half_plus_two (a copy of models/), `mlp` with batching and `mlp_nobatch` without, under `root`."""
    shutil.copytree(ROOT / "models" / "half_plus_two", root / "half_plus_two")
    graph = mlp_graph(seed=0)
    write_repository(root, "mlp", graph, BATCHING)
    return write_repository(root, "mlp_nobatch", graph, None)


def check_answer(url: str, case: Case) -> None:
    """Send the case's request once; raise unless the reply is 200 (with the right numbers, where known)."""
    request = case.request
    response = httpx.post(url + request.path, content=request.content, headers=request.headers, timeout=60)
    if response.status_code != 200:
        raise RuntimeError(f"{case.name} at {url}: HTTP {response.status_code}: {response.text[:500]}")
    if case.answer is not None:
        doc = response.json()
        got = doc["predictions"] if "predictions" in doc else doc["outputs"][0]["data"]
        if got != case.answer:
            raise RuntimeError(f"{case.name} at {url}: answered {got}, expected {case.answer}")


# --- servers ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """How to start one of the compared servers, and the path that answers 200 once it is up."""

    name: str
    command: Callable[[int], list[str]]  # the command line, given the HTTP port
    cwd: Path
    env: dict[str, str] | None
    ready_path: str


def tensorgate_server(name: str, source: Path, repo: Path) -> Server:
    """`python -m service.cli serve` with the packages of `source` (a checkout or a snapshot)."""
    # With -m, sys.path[0] is the cwd, and PYTHONPATH comes before site-packages; the editable install's
    # finder (a sys.meta_path hook appended after the path finder) only answers for what sys.path does
    # not hold. So the snapshot's packages win (verify_imports checks it; if it ever did not, the fix would be
    # `python -I` with sys.path set by a launcher).
    env = {**os.environ, "PYTHONPATH": str(source)}
    return Server(name, lambda port: [*tensorgate_command(repo, port), "--grpc-port", "0"], source, env,
                  "/v2/health/ready")


def bare_server(app_dir: Path) -> Server:
    """BARE_APP in `app_dir`, on `tensorgate serve`'s uvicorn settings (bare_command) with no access log."""
    (app_dir / "bare_app.py").write_text(BARE_APP)
    return Server("bare", lambda port: [*bare_command(app_dir, port), "--no-access-log"], ROOT, None, "/docs")


def export_snapshot(rev: str, dest: Path) -> str:
    """The tree of `rev` under `dest` (git archive | tar -x); returns the commit's full hash."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def head() -> str:
    return git("rev-parse", "HEAD").strip()


def verify_imports(server: Server) -> dict[str, str]:
    """Import the serving packages as the server would; raise if any module comes from outside its source."""
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=server.cwd, env=server.env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{server.name}: importing its packages failed:\n{result.stderr[-2000:]}")
    files = json.loads(result.stdout)
    source = server.cwd.resolve()
    strays = {name: file for name, file in files.items() if not Path(file).resolve().is_relative_to(source)}
    if strays:
        raise RuntimeError(f"{server.name} would import modules from outside {server.cwd}: {strays}")
    return {"source": str(server.cwd), "modules": len(files),
            **{name: files[name] for name in ("engine", "kernels", "service") if name in files}}


# --- measuring ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One server under one case: hey's figures and the CPU the server and the rest of the machine used."""

    case: str
    server: str
    clients: int
    seconds: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    responses: int
    errors: int
    error_lines: list[str]
    server_cpu_ms_per_request: float
    other_cores: float


def case_hey(url: str, case: Case, body_file: Path, seconds: float) -> list[str]:
    return hey_command(url + case.request.path, case.request.headers, body_file, case.clients, seconds)


def measure(url: str, server: Server, pid: int, case: Case, body_file: Path, args: argparse.Namespace) -> Cell:
    """A warm-up run of hey, then the measured one, with the server's and the machine's CPU around it."""
    run_hey(case_hey(url, case, body_file, args.warmup))
    server_cpu, busy, wall = cpu_seconds(pid), machine_busy_seconds(), time.perf_counter()
    report, hey_cpu = run_hey(case_hey(url, case, body_file, args.seconds))
    server_cpu, busy, wall = cpu_seconds(pid) - server_cpu, machine_busy_seconds() - busy, time.perf_counter() - wall
    responses, failures = sum(report["statuses"].values()), report["failures"]
    error_lines = [f"{kind}: {n}" for kind, n in failures.most_common(5)]
    return Cell(case.name, server.name, case.clients, args.seconds, report["requests_per_s"], report["p50_ms"],
                report["p99_ms"], responses, sum(failures.values()), error_lines,
                server_cpu * 1e3 / max(responses, 1), max(0.0, busy - server_cpu - hey_cpu) / wall)


def profile(url: str, pid: int, case: Case, body_file: Path, args: argparse.Namespace) -> None:
    """One more hey run of `seconds` under py-spy, which writes `<profile>/<case>.svg`; failures are reported."""
    py_spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if py_spy is None:
        print("    py-spy not found (pip install py-spy): no profile", flush=True)
        return
    svg = args.profile / f"{case.slug}.svg"
    command = [py_spy, "record", "-o", str(svg), "--pid", str(pid), "--duration", f"{args.seconds:g}",
               "--rate", "250", "--nonblocking"]
    spy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    run_hey(case_hey(url, case, body_file, args.seconds))
    output, _ = spy.communicate()
    if spy.returncode == 0:
        print(f"    profile: {svg}", flush=True)
    else:  # typically no ptrace permission (not root, or a container without CAP_SYS_PTRACE)
        print(f"    py-spy failed ({spy.returncode}), no profile of {case.name}: {output.strip()[-500:]}", flush=True)


def run_server(server: Server, cases: list[Case], args: argparse.Namespace, tmp: Path) -> list[Cell]:
    """Start `server`, check then measure each case it serves, stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cells = []
    with running(server.command(port), port, tmp / f"server-{server.name}.log", server.ready_path,
                 cwd=server.cwd, env=server.env) as process:
        for case in cases:
            check_answer(url, case)
        for case in cases:
            body_file = tmp / f"{case.slug}.body"
            body_file.write_bytes(case.request.content)
            cells.append(cell := measure(url, server, process.pid, case, body_file, args))
            print(f"  {format_row(cell, {})}", flush=True)
            if args.profile and server.name == "now":
                profile(url, process.pid, case, body_file, args)
    return cells


# --- output -------------------------------------------------------------------------------------------

TABLE_HEADER = (f"{'case':<30} {'server':<6} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
                f"{'cpu ms/req':>10} {'vs bare':>7} {'vs main':>7} {'other cpu':>9}")


def format_row(cell: Cell, by_key: dict[tuple[str, str], Cell]) -> str:
    """A table row. `vs bare` and `vs main`: req/s over that server's on the same case (from `by_key`), shown
    on that server's row and those after it in SERVERS (bare's row has no `vs main`)."""
    references = [by_key.get((cell.case, other)) if SERVERS.index(other) <= SERVERS.index(cell.server) else None
                  for other in ("bare", "main")]
    vs = [f"{cell.requests_per_s / ref.requests_per_s:>7.2f}" if ref and ref.requests_per_s else " " * 7
          for ref in references]
    return (f"{cell.case + f' c={cell.clients}':<30} {cell.server:<6} {cell.requests_per_s:>8.0f} {cell.p50_ms:>7.2f} "
            f"{cell.p99_ms:>7.2f} {cell.errors:>6} {cell.server_cpu_ms_per_request:>10.3f} {vs[0]} {vs[1]} "
            f"{cell.other_cores:>9.2f}")


@dataclass(frozen=True)
class Target:
    """`now` on `case` against a reference cell: req/s ratio >= limit, p99 ratio <= limit, or p99 <= limit ms."""

    text: str
    case: str
    measure: str  # "req/s", "p99" or "p99 ms"
    limit: float
    reference: tuple[str, str] | None = None  # (case, server)


TARGETS = (
    Target("trivial v1 json: now >= 0.6x bare req/s", "trivial v1 json", "req/s", 0.6, ("trivial v1 json", "bare")),
    Target("trivial v1 json: now p99 <= 2x bare p99", "trivial v1 json", "p99", 2.0, ("trivial v1 json", "bare")),
    Target("trivial v2 json: now >= 0.6x bare req/s", "trivial v2 json", "req/s", 0.6, ("trivial v2 json", "bare")),
    Target("trivial v2 json: now p99 <= 2x bare p99", "trivial v2 json", "p99", 2.0, ("trivial v2 json", "bare")),
    Target("MLP v2 json batching: now >= 2.5x main req/s", "mlp v2 json batching", "req/s", 2.5,
           ("mlp v2 json batching", "main")),
    Target("MLP v2 json batching: now p99 <= 150 ms", "mlp v2 json batching", "p99 ms", 150.0),
    Target("MLP v2 binary batching: now >= 2x main req/s", "mlp v2 binary batching", "req/s", 2.0,
           ("mlp v2 binary batching", "main")),
    Target("MLP v2 json: now with batching >= 4x now without", "mlp v2 json batching", "req/s", 4.0,
           ("mlp v2 json no batching", "now")),
)


def check_target(target: Target, by_key: dict[tuple[str, str], Cell]) -> dict | None:
    """The target as a record (text, value, passed), or None when its cells were not run."""
    cell = by_key.get((target.case, "now"))
    reference = by_key.get(target.reference) if target.reference else None
    if cell is None or (target.reference and reference is None):
        return None
    if target.measure == "req/s":
        value = cell.requests_per_s / reference.requests_per_s if reference.requests_per_s else 0.0
        shown = f"{cell.requests_per_s:.0f} / {reference.requests_per_s:.0f} req/s = {value:.2f}x"
        passed = value >= target.limit
    elif target.measure == "p99":
        value = cell.p99_ms / reference.p99_ms
        shown = f"{cell.p99_ms:.2f} / {reference.p99_ms:.2f} ms = {value:.2f}x"
        passed = value <= target.limit
    else:
        shown, passed = f"{cell.p99_ms:.2f} ms", cell.p99_ms <= target.limit
    # A server that fails requests fast is not fast: errors in either cell fail the target.
    errors = cell.errors + (reference.errors if reference else 0)
    if errors:
        shown, passed = f"{shown}, {errors} errors", False
    return {"target": target.text, "value": shown, "passed": passed}


def hey_version() -> str:
    """hey has no --version; ask the package manager that installed it."""
    result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "hey"], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "unknown"


# --- main ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s runs after 1 s of warm-up (unless given)")
    parser.add_argument("--seconds", type=float, help="measured seconds per run (default 10, --quick 3)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per run, not counted (default 2, --quick 1)")
    parser.add_argument("--baseline", default=BASELINE, help=f"git revision served as `main` (default {BASELINE})")
    parser.add_argument("--only", help="run only the cases whose name holds this string")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated subset of bare,main,now")
    parser.add_argument("--profile", type=Path, help="write a py-spy flame graph of `now` per case into this directory")
    parser.add_argument("--out", type=Path, help="output directory (default bench/results/)")
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 2.0)
    args.servers = args.servers.split(",")
    if unknown := set(args.servers) - set(SERVERS):
        parser.error(f"unknown servers {sorted(unknown)}; choose from {','.join(SERVERS)}")
    args.out = args.out or Path(__file__).resolve().parent / "results"
    return args


def measure_all(servers: list[str], cases: list[Case], args: argparse.Namespace) -> tuple[list[Cell], dict]:
    """Each server in turn, on the cases it serves; the cells, and where each tensorgate server's packages came from
    (with the baseline's commit)."""
    cells, provenance = [], {}
    with tempfile.TemporaryDirectory(prefix="tensorgate-serving-") as tmp_name:
        tmp = Path(tmp_name)
        repo = write_models(tmp / "repo")
        for name in servers:
            if name == "bare":
                server = bare_server(tmp)
            else:
                source = ROOT if name == "now" else tmp / "baseline"
                commit = export_snapshot(args.baseline, source) if name == "main" else f"{head()} + working tree"
                server = tensorgate_server(name, source, repo)
                provenance[name] = {"commit": commit, **verify_imports(server)}
                print(f"  {name}: {provenance[name]['modules']} modules of engine/kernels/service, all from {source}",
                      flush=True)
            cells += run_server(server, [case for case in cases if name in case.servers], args, tmp)
    return cells, provenance


def print_table(cells: list[Cell], cases: list[Case], servers: list[str]) -> list[dict]:
    """The table, case by case, then the targets it has the cells for; returns the targets' records."""
    by_key = {(cell.case, cell.server): cell for cell in cells}
    print(f"\n{TABLE_HEADER}")
    for case in cases:
        for name in servers:
            if (case.name, name) in by_key:
                print(format_row(by_key[(case.name, name)], by_key))
    if noisy := [cell for cell in cells if cell.other_cores > NOISY_CORES]:
        print(f"NOTE: on {len(noisy)} rows other processes used more than {NOISY_CORES:g} cores (`other cpu`): "
              "a neighbour took CPU from the server or hey, so those figures are low")
    targets = [record for target in TARGETS if (record := check_target(target, by_key))]
    for record in targets:
        print(f"{'PASS' if record['passed'] else 'FAIL'} {record['target']}: {record['value']}")
    return targets


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cases = [case for case in all_cases() if args.only is None or args.only in case.name]
    servers = [name for name in SERVERS if name in args.servers and any(name in case.servers for case in cases)]
    if not servers:
        sys.exit(f"nothing to run: no case matches --only {args.only!r} on servers {','.join(args.servers)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    hey = hey_version()
    print(f"{args.seconds:g} s per run after {args.warmup:g} s of warm-up, hey {hey}, {os.cpu_count()} cores, "
          f"baseline {args.baseline}\n  {TABLE_HEADER}", flush=True)
    cells, provenance = measure_all(servers, cases, args)
    targets = print_table(cells, cases, servers)
    report = {"hey_version": hey, "cpu_count": os.cpu_count(), "seconds": args.seconds, "warmup_s": args.warmup,
              "baseline": args.baseline, "servers": provenance, "batching": BATCHING,
              "cells": [asdict(cell) for cell in cells], "targets": targets}
    (args.out / "serving.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'serving.json'}")


if __name__ == "__main__":
    main()
