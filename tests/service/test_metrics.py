"""/metrics: the series dashboards and autoscalers read, checked by promtool, counted right."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.service.conftest import EXAMPLES
from tests.service.test_batching import metric

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
