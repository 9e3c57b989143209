"""Real servers for the service tests: uvicorn on 127.0.0.1 and a free port, over a model repository
in a temporary directory, stopped when the test (or module) ends."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from service.server import BackgroundServer
from service.settings import Settings
from tests.golden import case_dirs, load_case

EXAMPLES = Path(__file__).resolve().parents[2] / "models"


def alias(tensor: str) -> str:
    """The alias the tests give a fixture tensor: its node name for output 0, as default signatures do."""
    node, _, index = tensor.rpartition(":")
    return node if index == "0" else tensor


def write_fixture_model(root: Path, case_dir: Path, name: str | None = None, version: int = 1) -> str:
    """A golden case as a repository model with a signature over its feeds and fetches."""
    case = load_case(case_dir)
    name = name or case_dir.name
    target = root / name / str(version)
    target.mkdir(parents=True)
    shutil.copy(case.model, target / case.model.name)
    config = {
        "signatures": {
            "serving_default": {
                "inputs": {alias(t): t for t in case.feeds},
                "outputs": {alias(t): t for t in case.fetches},
            }
        }
    }
    (root / name / "config.yaml").write_text(yaml.safe_dump(config))
    return name


def model_cases() -> list[Path]:
    return case_dirs("models")


def start_server(repository: Path, **settings) -> BackgroundServer:
    settings.setdefault("poll_interval_s", 0.1)
    server = BackgroundServer(Settings(model_repository=repository, host="127.0.0.1", port=0, **settings)).start()
    server.app.state.manager.wait_settled(timeout=60)
    return server


def serve_examples(root: Path, *models: str) -> BackgroundServer:
    """A server (no polling) on a repository at `root` holding copies of the example `models`."""
    for name in models:
        shutil.copytree(EXAMPLES / name, root / name)
    return start_server(root, poll_interval_s=0)


@pytest.fixture
def make_server(tmp_path) -> Iterator:
    """Start servers with `make_server(repository, **settings)`; all stop when the test ends."""
    servers: list[BackgroundServer] = []

    def make(repository: Path | None = None, **settings) -> BackgroundServer:
        server = start_server(repository or tmp_path / "repo", **settings)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def client() -> Iterator:
    """httpx clients for a server URL, closed at the end."""
    clients: list[httpx.Client] = []

    def make(server: BackgroundServer, **kwargs) -> httpx.Client:
        c = httpx.Client(base_url=server.url, **{"timeout": 30, **kwargs})
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
