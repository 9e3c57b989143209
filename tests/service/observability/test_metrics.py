"""/metrics: the series dashboards and autoscalers read, checked by promtool, counted right."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from engine.devices import gpu_available
from service.observability.metrics import Metrics
from tests.service.conftest import EXAMPLES
from tests.service.inference.test_batching import metric

# Names Triton's dashboards and HPA rules use verbatim; their `_us` unit is Triton's, not ours.
TRITON_NAMES = {"nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us"}


@pytest.fixture
def server(tmp_path, make_server):
    shutil.copytree(EXAMPLES, tmp_path / "repo")
    return make_server(tmp_path / "repo")


def traffic(c):
    for x in ([1.0], [1.0, 2.0, 3.0]):
        assert c.post("/v1/models/half_plus_two:predict", json={"instances": x}).status_code == 200
    body = {"inputs": [{"name": "features", "shape": [2, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2] * 2}]}
    assert c.post("/v2/models/iris_classifier/infer", json=body).status_code == 200
    assert c.post("/v2/models/iris_classifier/infer", json={"inputs": []}).status_code == 400
    assert c.post("/v2/models/no_such_model/infer", json=body).status_code == 404


def test_metrics_count_requests_rows_and_outcomes(server, client):
    c = client(server)
    traffic(c)
    text = c.get("/metrics").text
    for name in ("tensorgate_request_duration_seconds_bucket", "tensorgate_queue_duration_seconds_bucket",
                 "tensorgate_compute_duration_seconds_bucket", "tensorgate_batch_size_bucket", "tensorgate_requests_total",
                 "tensorgate_in_flight_requests", "tensorgate_executor_cache_hits_total", "tensorgate_executor_cache_misses_total",
                 "tensorgate_executor_cache_entries", "tensorgate_plan_build_seconds_total", "tensorgate_model_load_duration_seconds_bucket",
                 "tensorgate_loaded_versions", "process_resident_memory_bytes", "process_cpu_seconds_total",
                 "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count", "nv_inference_exec_count",
                 "nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us"):
        assert f"\n{name}" in text, name
    assert 'le="0.0005"' in text and 'le="10.0"' in text
    assert metric(c, "tensorgate_requests_total", model="half_plus_two", version="1", protocol="v1", outcome="success") == 2
    assert metric(c, "tensorgate_requests_total", model="iris_classifier", version="2", protocol="v2", outcome="success") == 1
    assert metric(c, "tensorgate_requests_total", model="iris_classifier", protocol="v2", outcome="client_error") == 1
    # The signature a request ran (or failed on) is a label; one that failed before a signature was resolved: "".
    assert metric(c, "tensorgate_requests_total", model="half_plus_two", signature="serving_default") == 2
    assert metric(c, "tensorgate_request_duration_seconds_count", model="iris_classifier", signature="serving_default") == 2
    assert metric(c, "tensorgate_requests_total", model="", signature="", outcome="client_error") == 1
    # A made-up model name never becomes a label value.
    assert "no_such_model" not in text
    assert metric(c, "tensorgate_requests_total", model="", outcome="client_error") == 1
    assert metric(c, "nv_inference_count", model="half_plus_two", version="1") == 4  # rows
    assert metric(c, "nv_inference_exec_count", model="half_plus_two", version="1") == 2
    assert metric(c, "nv_inference_request_success", model="iris_classifier", version="2") == 1
    assert metric(c, "nv_inference_request_failure", model="iris_classifier", version="2") == 1
    assert metric(c, "tensorgate_loaded_versions", model="iris_classifier") == 2
    assert metric(c, "tensorgate_executor_cache_hits_total", model="half_plus_two") >= 1
    assert metric(c, "nv_inference_request_duration_us", model="iris_classifier") > 0


def _promtool() -> str | None:
    return shutil.which("promtool")


@pytest.mark.skipif(_promtool() is None, reason="promtool is not installed (Debian package prometheus; .ci/run installs it)")
def test_promtool_check_metrics_is_clean(server, client):
    c = client(server)
    traffic(c)
    result = subprocess.run([_promtool(), "check", "metrics"], input=c.get("/metrics").content, capture_output=True, timeout=60)
    problems = [line for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
    flagged = {line.split()[0] for line in problems}
    # Only Triton's own names draw promtool's unit-abbreviation lint; everything of ours is clean.
    assert flagged <= TRITON_NAMES, problems
    assert all("abbreviated units" in line for line in problems), problems


class FakeCupy:
    """Just the cupy surface the GPU memory collector reads, for two GPUs with made-up numbers:
    memGetInfo and the default memory pool answer for the current device, as cupy's do."""

    GiB = 1024**3

    def __init__(self, uuids=(bytes(range(16)), None)):
        fake = self
        self.current = 0
        self.uuids = uuids

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                self.previous, fake.current = fake.current, self.index
                return self

            def __exit__(self, *exc):
                fake.current = self.previous

        class Runtime:
            @staticmethod
            def getDeviceCount():
                return 2

            @staticmethod
            def memGetInfo():  # (free, total)
                return (fake.GiB * (70 - fake.current), fake.GiB * 80)

            @staticmethod
            def getDeviceProperties(index):
                uuid = fake.uuids[index]
                return {"name": b"Fake GPU"} if uuid is None else {"name": b"Fake GPU", "uuid": uuid}

        class Pool:
            def used_bytes(self):
                return 1000 * (fake.current + 1)

            def total_bytes(self):
                return 4000 * (fake.current + 1)

        self.cuda = type("cuda", (), {"Device": Device, "runtime": Runtime})
        self._pool = Pool()

    def get_default_memory_pool(self):
        return self._pool


def samples(text: str, name: str) -> dict[str, float]:
    """{labels: value} of one metric name in an exposition."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name):].rsplit(" ", 1)
            found[labels] = float(value)
    return found


def test_gpu_memory_is_read_per_device_at_scrape_time():
    fake = FakeCupy()
    text = Metrics(gpu=lambda: fake).exposition().decode()
    G = FakeCupy.GiB
    assert samples(text, "tensorgate_gpu_memory_used_bytes") == {'{device="gpu:0"}': 10 * G, '{device="gpu:1"}': 11 * G}
    assert samples(text, "tensorgate_gpu_memory_total_bytes") == {'{device="gpu:0"}': 80 * G, '{device="gpu:1"}': 80 * G}
    assert samples(text, "tensorgate_gpu_memory_pool_used_bytes") == {'{device="gpu:0"}': 1000, '{device="gpu:1"}': 2000}
    assert samples(text, "tensorgate_gpu_memory_pool_total_bytes") == {'{device="gpu:0"}': 4000, '{device="gpu:1"}': 8000}
    # Triton's names, labelled by the GPU's UUID as nvidia-smi prints it, else by the device index.
    uuid = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert samples(text, "nv_gpu_memory_used_bytes") == {f'{{gpu_uuid="{uuid}"}}': 10 * G, '{gpu_uuid="1"}': 11 * G}
    assert samples(text, "nv_gpu_memory_total_bytes") == {f'{{gpu_uuid="{uuid}"}}': 80 * G, '{gpu_uuid="1"}': 80 * G}
    assert "# TYPE tensorgate_gpu_memory_used_bytes gauge" in text and "# TYPE nv_gpu_memory_used_bytes gauge" in text
    assert fake.current == 0  # the current device is put back


def test_gpu_memory_series_are_absent_without_a_gpu(server, client):
    assert "gpu_memory" not in Metrics(gpu=lambda: None).exposition().decode()
    if not gpu_available():
        assert "gpu_memory" not in client(server).get("/metrics").text


def test_a_failing_gpu_read_leaves_the_rest_of_the_scrape_intact():
    class Broken(FakeCupy):
        def get_default_memory_pool(self):
            raise RuntimeError("cudaErrorDevicesUnavailable")

    text = Metrics(gpu=Broken).exposition().decode()
    assert "gpu_memory" not in text and "tensorgate_in_flight_requests" in text


@pytest.mark.skipif(_promtool() is None, reason="promtool is not installed (Debian package prometheus; .ci/run installs it)")
def test_promtool_check_metrics_is_clean_for_gpu_series():
    text = Metrics(gpu=FakeCupy).exposition()
    result = subprocess.run([_promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60)
    problems = [line for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()]
    assert not problems, problems
