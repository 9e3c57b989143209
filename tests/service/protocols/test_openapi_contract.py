"""The OpenAPI document is a contract: schemathesis, run against a live server over every operation
with every check, finds no response the document does not promise (statuses, bodies, headers, Allow)
and no request the document admits but the server refuses (or the reverse).

The server runs on a temporary copy of the example repository, since management operations upload,
delete and label. It runs twice: with tokens set (so authentication is documented and enforced) and
without (management open on loopback, inference without a token). Seeded and bounded: deterministic,
about 25 s per run on two busy cores.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import EXAMPLES, start_server

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = Path(__file__).with_name("schemathesis.toml")
ADMIN_TOKEN = "contract-admin-token"
API_TOKEN = "contract-api-token"

pytestmark = pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="schemathesis (a dev dependency) is not installed")


def run_schemathesis(url: str, workdir: Path, *options: str) -> subprocess.CompletedProcess:
    command = [
        str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", f"{url}/openapi.json",
        "--checks", "all",
        "--seed", "20",
        "--max-examples", "10",
        "--workers", "1",
        "--no-color",
        *options,
    ]
    # In `workdir`: schemathesis keeps a cache (.schemathesis/) where it runs.
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=workdir)


@pytest.mark.parametrize("tokens", [True, False], ids=["with-tokens", "open-on-loopback"])
def test_the_server_keeps_its_openapi_contract(tmp_path, tokens):
    repository = tmp_path / "repo"
    shutil.copytree(EXAMPLES, repository)
    settings = {"admin_token": ADMIN_TOKEN, "api_token": API_TOKEN} if tokens else {}
    server = start_server(repository, **settings)
    try:
        # The admin token works wherever the API token does; schemathesis also sends requests
        # without it (and with a wrong one) to check that the documented security is enforced.
        headers = ("-H", f"Authorization: Bearer {ADMIN_TOKEN}") if tokens else ()
        paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
        result = run_schemathesis(server.url, tmp_path, *headers)
    finally:
        server.stop()
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"the server and its OpenAPI document disagree:\n{report[-20000:]}"
    operations = sum(len(item) for item in paths.values())
    assert f"Selected: {operations}/{operations}" in report and f"Tested: {operations}" in report, report[-3000:]
