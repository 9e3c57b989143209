"""Tools for the deployment checks: helm (fetched by tools/get_helm.py), and rendering the chart.

A tool that cannot be had (no network, nothing cached) skips its tests, saying why; nothing here
needs a cluster or a Docker engine.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "tensorgate"
KUBE_VERSION = "1.32.0"  # helm 3.17's Kubernetes; kubernetes-validate ships its schemas
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"

# The chart's values profiles, as `helm template` arguments.
PROFILES: dict[str, list[str]] = {
    "default": [],
    "gpu": ["-f", str(CHART / "values-gpu.yaml")],
    "autoscaling": ["-f", str(CHART / "values-autoscaling.yaml"), "--api-versions", SERVICE_MONITOR_API,
                    "--set", "adminToken.existingSecret=tensorgate-admin"],
    "s3": ["--set", "models.source=s3", "--set", "models.s3.url=s3://models/prod", "--set", "models.s3.endpoint=http://minio:9000",
           "--set", "models.s3.existingSecret=s3-credentials", "--set", "models.s3.syncIntervalSeconds=60",
           "--set", "adminToken.value=not-a-real-token",
           "--set-json", 'models.configs={"iris_classifier": {"version_policy": {"latest": 2}, "labels": {"stable": 1, "canary": 2}}}'],
}


def _get_helm() -> Path:
    spec = importlib.util.spec_from_file_location("get_helm", ROOT / "tools" / "get_helm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ensure_helm()


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return _get_helm()
    except RuntimeError as e:
        pytest.skip(f"helm could not be had (tools/get_helm.py: {e})")


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.fixture(scope="session")
def render(helm) -> Callable[..., list[dict]]:
    """`render(*helm_template_args)`: the chart's rendered objects (cached per argument list)."""
    cache: dict[tuple, list[dict]] = {}

    def rendered(*args: str) -> list[dict]:
        if args not in cache:
            result = run_helm(helm, "template", "tg", str(CHART), "--namespace", "serving", "--kube-version", KUBE_VERSION, *args)
            assert result.returncode == 0, result.stderr
            cache[args] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[args]

    return rendered


def tool(name: str) -> str | None:
    """A command-line tool from this virtualenv (dev extras) or the PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def find(objects: list[dict], kind: str, name_suffix: str = "") -> dict:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert len(matches) == 1, f"{kind} *{name_suffix}: {[o['metadata']['name'] for o in matches]}"
    return matches[0]
