"""The chart and the image on a real cluster, checked as a user would (run by deploy/e2e/k8s.sh).

    .venv/bin/python deploy/e2e/k8s_checks.py --kubeconfig /tmp/kr/kubeconfig --bin /tmp/kr/bin --image tensorgate:0.1.0
        [--interface tensorgate|tfserving] [--keep]

In a namespace of its own: the example models (and a slow one, below) on a hostPath PersistentVolume mounted as
the model repository (models.source=pvc, ReadWriteMany), `helm install` of helm/tensorgate with two replicas and a
NodePort Service, then, through the NodePorts on 127.0.0.1 (kube-proxy's):

 1. the pods become Ready;
 2. TensorFlow Serving REST predict (httpx); the Open Inference Protocol with tritonclient over HTTP (binary
    tensors) and over gRPC; TensorFlow Serving's PredictionService over gRPC (our stubs);
 3. /metrics and the dashboard (page and data);
 4. a model copied into the repository volume is served after the poll;
 5. `helm upgrade` to a new image tag under load from hey (another process): 0 failed requests;
 6. a pod deleted under load from a client that retries a refused or reset connection once: failures beyond those
    retries (0 expected), and how many were retried;
 7. `kubectl delete pod` with slow requests in flight: every one of them answers 200 (preStop, then the server's
    grace period);
 8. the release's own helm test.

Each check prints PASS/FAIL with its figures; the exit status is the number of failed checks. The namespace is
deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine import builder as gb  # noqa: E402
from load import hey_command, parse_hey  # noqa: E402

NAMESPACE = "tg-e2e"
RELEASE = "tg"
HOST_MODELS = Path("/tmp/tg-e2e-models")
SLOW_SIZE = 1536  # the slow model multiplies SLOW_SIZE x SLOW_SIZE matrices SLOW_STEPS times: a few seconds
SLOW_STEPS = 24


class Cluster:
    def __init__(self, kubeconfig: str, bin_dir: Path):
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}
        self.kubectl_path, self.helm_path = str(bin_dir / "kubectl"), str(bin_dir / "helm")

    def kubectl(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        done = subprocess.run([self.kubectl_path, "-n", NAMESPACE, *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        done = subprocess.run([self.helm_path, "-n", NAMESPACE, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"helm {' '.join(args)}: {done.stderr.strip()}")
        return done

    def json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def pods(self) -> list[dict]:
        items = self.json("get", "pods", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
        return [p for p in items if "deletionTimestamp" not in p["metadata"] and p["metadata"]["name"].count("-test-") == 0]


results: list[tuple[str, bool, str]] = []


def check(name: str, passed: bool, detail: str = "") -> bool:
    results.append((name, passed, detail))
    print(f"{'PASS' if passed else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return passed


def write_slow_model(root: Path) -> None:
    """x (a scalar) filled into a square matrix, multiplied by a fixed one SLOW_STEPS times: seconds per request."""
    rng = np.random.default_rng(0)
    graph = gb.GraphBuilder()
    with graph.as_default():
        x = gb.placeholder("float32", [], name="x")
        h = gb.fill(gb.constant(np.array([SLOW_SIZE, SLOW_SIZE], np.int32)), x)
        w = gb.constant((rng.standard_normal((SLOW_SIZE, SLOW_SIZE)) / SLOW_SIZE ** 0.5).astype(np.float32))
        for _ in range(SLOW_STEPS):
            h = gb.matmul(h, w)
        gb.identity(gb.reduce_sum(h, [0, 1]), name="y")
    (root / "slow" / "1").mkdir(parents=True)
    graph.save(str(root / "slow" / "1" / "model.pb"))
    (root / "slow" / "config.yaml").write_text('signatures: {serving_default: {inputs: {x: "x:0"}, outputs: {y: "y:0"}}}\n')


def prepare_repository() -> None:
    shutil.rmtree(HOST_MODELS, ignore_errors=True)
    shutil.copytree(ROOT / "models", HOST_MODELS)
    write_slow_model(HOST_MODELS)
    subprocess.run(["chown", "-R", "10001:10001", str(HOST_MODELS)], check=True)


def volume_objects() -> str:
    return f"""
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {NAMESPACE}-models}}
spec:
  capacity: {{storage: 5Gi}}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: e2e-hostpath
  hostPath: {{path: {HOST_MODELS}, type: Directory}}
  claimRef: {{namespace: {NAMESPACE}, name: models}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: models, namespace: {NAMESPACE}}}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: e2e-hostpath
  resources: {{requests: {{storage: 5Gi}}}}
"""


def chart_values(args: argparse.Namespace, tag: str) -> list[str]:
    repository, _, _ = args.image.partition(":")
    values = ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
              "--set", "replicaCount=2", "--set", "service.type=NodePort",
              "--set", "models.source=pvc", "--set", "models.pvc.existingClaim=models",
              "--set", "settings.poll_interval_s=1", "--set", "settings.log_level=warning",
              # Two pods (and a surge pod) on a 2-core node. (helm 3.8 here: no --set-json.)
              "--set", "resources.requests.cpu=100m", "--set", "resources.requests.memory=256Mi"]
    if args.interface == "tfserving":
        values += ["--set", "server.interface=tfserving", "--set", "server.tfserving.modelName=half_plus_two",
                   "--set", "server.tfserving.modelBasePath=/models/half_plus_two"]
    return values


def wait_rollout(cluster: Cluster, timeout_s: int = 300) -> None:
    cluster.kubectl("rollout", "status", f"deployment/{RELEASE}-tensorgate", f"--timeout={timeout_s}s", timeout=timeout_s + 30)


def node_ports(cluster: Cluster) -> dict[str, int]:
    service = cluster.json("get", "service", f"{RELEASE}-tensorgate")
    return {port["name"]: port["nodePort"] for port in service["spec"]["ports"]}


def predict(http: httpx.Client, model: str = "half_plus_two") -> httpx.Response:
    return http.post(f"/v1/models/{model}:predict", json={"instances": [1.0, 2.0, 5.0]})


def retrying_load(url: str, seconds: float, clients: int) -> dict:
    """`clients` threads predicting back to back for `seconds`, each retrying once a request whose connection was
    refused or reset (what a client of a Service does when an endpoint goes away under it)."""
    stop = time.monotonic() + seconds
    counts: Counter = Counter()
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            while time.monotonic() < stop:
                outcome = "ok"
                for attempt in range(2):
                    try:
                        r = predict(http)
                        outcome = "ok" if r.status_code == 200 else f"HTTP {r.status_code}"
                        if r.status_code == 503 and attempt == 0:  # a draining pod's answer: retried too
                            with lock:
                                counts["retried"] += 1
                            continue
                        break
                    except httpx.TransportError as e:
                        outcome = type(e).__name__
                        if attempt == 0:
                            with lock:
                                counts["retried"] += 1
                with lock:
                    counts[outcome] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(counts)


def run(args: argparse.Namespace) -> None:
    cluster = Cluster(args.kubeconfig, Path(args.bin))
    interface_ports = {"tensorgate": ("http", "grpc"), "tfserving": ("http", "grpc")}[args.interface]
    print(f"namespace {NAMESPACE}, image {args.image}, interface {args.interface}", flush=True)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=180s", check=False, timeout=240)
    subprocess.run([cluster.kubectl_path, "delete", "pv", f"{NAMESPACE}-models", "--ignore-not-found"], env=cluster.env,
                   capture_output=True)
    subprocess.run([cluster.kubectl_path, "create", "namespace", NAMESPACE], env=cluster.env, check=True,
                   capture_output=True)
    prepare_repository()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(volume_objects())
        f.flush()
        cluster.kubectl("apply", "-f", f.name)

    # 1. install, pods Ready
    t0 = time.monotonic()
    repository, _, tag = args.image.partition(":")
    cluster.helm("install", RELEASE, str(ROOT / "helm" / "tensorgate"), *chart_values(args, tag))
    wait_rollout(cluster)
    pods = cluster.pods()
    ready = [p for p in pods if all(c["ready"] for c in p["status"].get("containerStatuses", []))]
    check("pods Ready", len(ready) == 2, f"{len(ready)}/2 in {time.monotonic() - t0:.1f} s after helm install")

    ports = node_ports(cluster)
    url, target = f"http://127.0.0.1:{ports[interface_ports[0]]}", f"127.0.0.1:{ports[interface_ports[1]]}"
    http = httpx.Client(base_url=url, timeout=60)

    # 2. the protocols, with real clients
    r = predict(http)
    check("TF Serving REST predict", r.status_code == 200 and r.json() == {"predictions": [2.5, 3.0, 4.5]}, r.text[:200])
    import tritonclient.grpc as triton_grpc
    import tritonclient.http as triton_http

    x = triton_http.InferInput("x", [3], "FP32")
    x.set_data_from_numpy(np.array([1.0, 2.0, 5.0], np.float32), binary_data=True)
    out = triton_http.InferRequestedOutput("y", binary_data=True)
    y = triton_http.InferenceServerClient(url.split("://")[1]).infer("half_plus_two", [x], outputs=[out]).as_numpy("y")
    check("v2 infer, tritonclient HTTP (binary)", y.tolist() == [2.5, 3.0, 4.5], str(y))
    g = triton_grpc.InferInput("x", [3], "FP32")
    g.set_data_from_numpy(np.array([1.0, 2.0, 5.0], np.float32))
    y = triton_grpc.InferenceServerClient(target).infer("half_plus_two", [g]).as_numpy("y")
    check("v2 infer, tritonclient gRPC", y.tolist() == [2.5, 3.0, 4.5], str(y))
    import grpc

    from service.protocols.grpc.services import PREDICTION_SERVICE, Stub
    from service.protocols.proto import model_pb2, predict_pb2

    with grpc.insecure_channel(target) as channel:
        request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name="half_plus_two"))
        request.inputs["x"].dtype = 1
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.inputs["x"].float_val.append(4.0)
        reply = Stub(channel, PREDICTION_SERVICE).Predict(request, timeout=30)
    check("TF Serving gRPC Predict", list(reply.outputs["y"].float_val) == [4.0], str(reply.outputs["y"].float_val))

    # 3. metrics and the dashboard
    metrics = http.get("/metrics")
    check("/metrics", metrics.status_code == 200 and "tensorgate_requests_total" in metrics.text,
          f"{len(metrics.text.splitlines())} lines")
    page, data = http.get("/dashboard"), http.get("/dashboard/data")
    check("dashboard", page.status_code == 200 and "<html" in page.text.lower() and data.status_code == 200
          and "models" in data.json(), f"page {len(page.text)} bytes, data models {list(data.json().get('models', {}))}")

    # 4. a model added to the repository volume
    if args.interface == "tensorgate":
        shutil.copytree(ROOT / "models" / "half_plus_two", HOST_MODELS / "added_model")
        subprocess.run(["chown", "-R", "10001:10001", str(HOST_MODELS / "added_model")], check=True)
        t = time.monotonic()
        served = False
        while time.monotonic() - t < 60 and not served:
            served = all(predict(httpx.Client(base_url=url, timeout=10), "added_model").status_code == 200
                         for _ in range(4))  # both pods (the Service spreads the requests)
            time.sleep(0.2)
        check("a model added to the volume is served", served, f"after {time.monotonic() - t:.1f} s (poll 1 s)")

    # 5. helm upgrade to a new image tag under load
    new_tag = f"{tag}-e2e-upgrade"
    subprocess.run(["docker", "tag", args.image, f"{repository}:{new_tag}"], check=True)
    body = Path(tempfile.mkstemp(suffix=".json")[1])
    body.write_text(json.dumps({"instances": [1.0, 2.0, 5.0]}))
    hey = subprocess.Popen(hey_command(f"{url}/v1/models/half_plus_two:predict", {"Content-Type": "application/json"},
                                       body, 4, 75), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(3)
    t = time.monotonic()
    cluster.helm("upgrade", RELEASE, str(ROOT / "helm" / "tensorgate"), *chart_values(args, new_tag))
    wait_rollout(cluster)
    rolled = time.monotonic() - t
    report = parse_hey(hey.communicate()[0])
    images = {c["image"] for p in cluster.pods() for c in p["spec"]["containers"]}
    failed = sum(report["failures"].values())
    check("helm upgrade under load (hey)", failed == 0 and images == {f"{repository}:{new_tag}"},
          f"{sum(report['statuses'].values())} responses, {failed} failed {dict(report['failures'])}, "
          f"p99 {report['p99_ms']:.0f} ms; rollout {rolled:.0f} s; images {sorted(images)}")

    # 6. a pod deleted under load (the client retries a refused or reset connection once)
    victim = cluster.pods()[0]["metadata"]["name"]
    results_box: dict = {}
    loader = threading.Thread(target=lambda: results_box.update(retrying_load(url, 40, 4)))
    loader.start()
    time.sleep(5)
    cluster.kubectl("delete", "pod", victim, "--wait=false")
    loader.join()
    wait_rollout(cluster)
    counts = results_box
    failures = {k: v for k, v in counts.items() if k not in ("ok", "retried")}
    check("a pod deleted under load", not failures,
          f"{counts.get('ok', 0)} ok, {counts.get('retried', 0)} retried once, failures beyond retries: {failures}")

    # 7. kubectl delete of a pod with requests in flight: they finish
    if args.interface == "tensorgate":
        slow = httpx.Client(base_url=url, timeout=120)
        body = {"inputs": 1.0}  # the slow model's x is a scalar
        for _ in range(2):  # the first compiles the plan
            t = time.monotonic()
            r = slow.post("/v1/models/slow:predict", json=body)
            one = time.monotonic() - t
        if r.status_code != 200:
            raise RuntimeError(f"the slow model answered {r.status_code}: {r.text[:300]}")
        pods_now = [p["metadata"]["name"] for p in cluster.pods()]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(lambda: httpx.post(f"{url}/v1/models/slow:predict", json=body, timeout=120))
                       for _ in range(6)]
            time.sleep(min(1.0, one / 3))
            cluster.kubectl("delete", "pod", *pods_now, "--wait=false")
            answers = []
            for f in futures:
                try:
                    answers.append(f.result().status_code)
                except httpx.HTTPError as e:
                    answers.append(type(e).__name__)
        wait_rollout(cluster)
        check("requests in flight finish when their pods are deleted", answers == [200] * 6,
              f"answers {answers}; one slow request {one:.1f} s; both pods deleted while 6 were in flight")

    # 8. the chart's own test
    done = cluster.helm("test", RELEASE, "--timeout", "180s", check=False)
    check("helm test", done.returncode == 0, (done.stdout + done.stderr).strip().splitlines()[-1] if done.stdout else "")

    if not args.keep:
        cluster.helm("uninstall", RELEASE, check=False)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--timeout=180s", check=False, timeout=240)
        subprocess.run([cluster.kubectl_path, "delete", "pv", f"{NAMESPACE}-models"], env=cluster.env, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--bin", required=True, help="the directory holding kubectl and helm")
    parser.add_argument("--image", required=True)
    parser.add_argument("--interface", choices=("tensorgate", "tfserving"), default="tensorgate")
    parser.add_argument("--keep", action="store_true", help="leave the release and namespace installed")
    args = parser.parse_args()
    try:
        run(args)
    except Exception as e:  # noqa: BLE001 - a check that could not run is a failed check, named
        check("e2e run", False, f"{type(e).__name__}: {e}")
    failed = [name for name, passed, _ in results if not passed]
    print(f"\n{len(results) - len(failed)} of {len(results)} checks passed" + (f"; failed: {failed}" if failed else ""))
    return len(failed)


if __name__ == "__main__":
    raise SystemExit(main())
