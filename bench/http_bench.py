"""HTTP serving overhead: latency of one request through each protocol, against running the same
request on the engine directly in the same process, and throughput with concurrent clients.

    .venv/bin/python bench/http_bench.py [--requests 300] [--clients 16]

Prints, per model and protocol, the median and p99 latency and the ratio to the direct engine call,
then requests per second for the example models with `--clients` concurrent httpx clients.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import tritonclient.http as triton

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from service.server import BackgroundServer  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.golden import load_case  # noqa: E402
from tests.service.conftest import alias, write_fixture_model  # noqa: E402


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _time(fn, n: int) -> list[float]:
    for _ in range(min(20, n)):
        fn()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return samples


def bench_latency(server: BackgroundServer, model: str, case, n: int) -> None:
    servable = server.app.state.manager.servable(model)
    feeds, fetches = case.feeds, list(case.fetches)
    direct = _percentiles(_time(lambda: servable.session.run(fetches, feeds), n))
    http = httpx.Client(base_url=server.url)
    body = json.dumps({"inputs": {alias(t): v.tolist() for t, v in feeds.items()}})
    tc = triton.InferenceServerClient(server.url.removeprefix("http://"))

    def triton_call(binary: bool):
        inputs = []
        for t, v in feeds.items():
            i = triton.InferInput(alias(t), list(v.shape), triton_datatype(v.dtype))
            i.set_data_from_numpy(v, binary_data=binary)
            inputs.append(i)
        outputs = [triton.InferRequestedOutput(alias(t), binary_data=binary) for t in fetches]
        return lambda: tc.infer(model, inputs, outputs=outputs)

    rows = [
        ("engine (direct)", direct),
        ("v1 predict (JSON)", _percentiles(_time(lambda: http.post(f"/v1/models/{model}:predict", content=body), n))),
        ("v2 infer (JSON)", _percentiles(_time(triton_call(False), n))),
        ("v2 infer (binary)", _percentiles(_time(triton_call(True), n))),
    ]
    shape = ", ".join(f"{alias(t)}{list(v.shape)}" for t, v in feeds.items())
    print(f"\n{model}  ({shape})")
    for name, (p50, p99) in rows:
        print(f"  {name:20s} p50 {p50 * 1e3:8.3f} ms   p99 {p99 * 1e3:8.3f} ms   x{p50 / direct[0]:6.1f} of direct")
    http.close()
    tc.close()


def triton_datatype(dtype: np.dtype) -> str:
    from service.protocols.codecs.v2_tensors import datatype_of

    return datatype_of(dtype)


def bench_throughput(server: BackgroundServer, clients: int, seconds: float) -> None:
    count = [0] * clients
    errors = [0]
    stop = threading.Event()
    body = json.dumps({"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]})

    def run(i: int) -> None:
        with httpx.Client(base_url=server.url) as c:
            while not stop.is_set():
                r = c.post("/v2/models/iris_classifier/infer", content=body)
                if r.status_code != 200:
                    errors[0] += 1
                count[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    print(f"\niris_classifier v2 JSON, {clients} concurrent clients (in this process): "
          f"{sum(count) / seconds:.0f} requests/s, {errors[0]} errors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        import shutil

        shutil.copytree(ROOT / "models", repo, dirs_exist_ok=True)
        cases = {}
        for name in ("mlp", "resnet_block"):
            case_dir = ROOT / "tests" / "fixtures" / "models" / name
            write_fixture_model(repo, case_dir)
            cases[name] = load_case(case_dir)
        settings = Settings(model_repository=repo, host="127.0.0.1", port=0, poll_interval_s=0, log_level="warning")
        with BackgroundServer(settings) as server:
            server.app.state.manager.wait_settled()
            for name, case in cases.items():
                bench_latency(server, name, case, args.requests)
            bench_throughput(server, args.clients, args.seconds)


if __name__ == "__main__":
    main()
