"""The example models and their README: every documented request gets the documented response."""

from __future__ import annotations

import json
import re
import shlex

import numpy as np
import pytest

from tests.service.conftest import EXAMPLES, start_server

README = EXAMPLES / "README.md"
# A ```sh block holding one curl command, then a ```json block holding its response.
_PAIR = re.compile(r"```sh\n(curl .*?)```\n```json\n(.*?)```", re.S)


def documented_requests() -> list[tuple[str, str, str | None, object]]:
    pairs = []
    for command, response in _PAIR.findall(README.read_text()):
        args = shlex.split(command.replace("\\\n", " "))
        method = args[args.index("-X") + 1] if "-X" in args else "GET"
        url = next(a for a in args if a.startswith("http://"))
        data = args[args.index("-d") + 1] if "-d" in args else None
        pairs.append((method, url.removeprefix("http://127.0.0.1:8000"), data, json.loads(response)))
    return pairs


def _assert_same(actual, expected, where="response"):
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), f"{where}: {actual} != {expected}"
        for k in expected:
            _assert_same(actual[k], expected[k], f"{where}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {actual} != {expected}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_same(a, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert np.isclose(actual, expected, rtol=1e-6, atol=0), f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, f"{where}: {actual} != {expected}"


@pytest.fixture(scope="module")
def server():
    server = start_server(EXAMPLES, poll_interval_s=0)
    yield server
    server.stop()


def test_readme_documents_requests():
    assert len(documented_requests()) >= 5


@pytest.mark.parametrize("method,path,data,expected", documented_requests(), ids=lambda v: v if isinstance(v, str) and v.startswith("/") else "")
def test_documented_request(server, client, method, path, data, expected):
    r = client(server).request(method, path, content=data)
    assert r.status_code == 200, r.text
    _assert_same(r.json(), expected)
