"""Tools for the deployment checks: helm (fetched by tools/get_helm.py), rendering the chart, and reading
what it rendered (the server container, its variables, the Settings it starts with, NOTES.txt).

A tool that cannot be had (no network, nothing cached) skips its tests, saying why; nothing here
needs a cluster or a Docker engine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
import yaml

from service.settings import Settings
from service.tfserving_cli import parse_flags, settings_from_flags

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "tensorgate"
KUBE_VERSION = "1.32.0"  # helm 3.17's Kubernetes; kubernetes-validate ships its schemas
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
GRPC_PROBES = ("--set", "probes.type=grpc")

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
    # TensorFlow Serving's command line, serving one of the image's example models.
    "tfserving": ["--set", "server.interface=tfserving", "--set", "server.tfserving.modelName=half_plus_two"],
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


def server(objects: list[dict]) -> dict:
    return next(c for c in find(objects, "Deployment")["spec"]["template"]["spec"]["containers"] if c["name"] == "tensorgate")


def pod_spec(objects: list[dict]) -> dict:
    return find(objects, "Deployment")["spec"]["template"]["spec"]


def settings_of(objects: list[dict]) -> Settings:
    """The Settings the rendered server container starts with, built by its own command line's parser:
    `tensorgate serve` reads its TENSORGATE_* variables; tensorflow_model_server its flags, then those."""
    container, env = server(objects), environment(objects)
    with mock.patch.dict(os.environ, env, clear=True):
        if container["command"] == ["tensorgate", "serve"]:
            assert "args" not in container
            return Settings()
        assert container["command"] == ["tensorflow_model_server"]
        given, unknown = parse_flags(container["args"])
        assert not unknown, unknown
        return Settings(**settings_from_flags(given, environ=env))


def environment(objects: list[dict]) -> dict[str, str]:
    """The server's TENSORGATE_* variables with literal values: its settings ConfigMap (envFrom), then its env."""
    container = server(objects)
    assert container["envFrom"] == [{"configMapRef": {"name": "tg-tensorgate-settings"}}]
    variables = dict(find(objects, "ConfigMap", "-settings")["data"])
    variables.update({e["name"]: e["value"] for e in container.get("env") or [] if "value" in e})
    return variables


def notes(helm, tmp_path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` leaves NOTES out, so a copy of the chart
    renders it as a string inside an object."""
    chart = tmp_path / "tensorgate"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}' + (CHART / "templates" / "NOTES.txt").read_text() + "{{- end }}")
    (chart / "templates" / "notes.yaml").write_text('notes: {{ include "notes" . | toJson }}\n')
    result = run_helm(helm, "template", "tg", str(chart), "--namespace", "serving", "--kube-version", KUBE_VERSION,
                      "--show-only", "templates/notes.yaml", *args)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["notes"]
