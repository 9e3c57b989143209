"""Access logs: off by default; on, one JSON object per request on stdout (uvicorn's access records,
through JsonAccessFormatter)."""

import copy
import datetime
import json
import logging
import logging.config
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn.config

from service.observability.access_log import JsonAccessFormatter, log_config
from service.server import _config
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
PREDICT_PATH = "/v1/models/half_plus_two:predict"
ISO_MILLIS_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def access_record(*args, created: float | None = None) -> logging.LogRecord:
    """A record shaped like uvicorn's access records."""
    args = args or ("127.0.0.1:5000", "POST", "/v2/models/m/infer", "1.1", 200)
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)
    if created is not None:
        record.created = created
    return record


# --- the formatter ---------------------------------------------------------------------------


def test_formatter_writes_one_json_line():
    text = JsonAccessFormatter().format(access_record())
    assert "\n" not in text
    doc = json.loads(text)
    assert list(doc) == ["time", "client", "method", "path", "http_version", "status"]
    assert doc["client"] == "127.0.0.1:5000"
    assert doc["method"] == "POST"
    assert doc["path"] == "/v2/models/m/infer"
    assert doc["http_version"] == "1.1"
    assert doc["status"] == 200 and type(doc["status"]) is int
    assert ISO_MILLIS_UTC.match(doc["time"]), doc["time"]


def test_formatter_time_is_the_records_in_utc_with_milliseconds():
    moment = datetime.datetime(2026, 11, 24, 10, 0, 0, 123000, tzinfo=datetime.UTC)
    doc = json.loads(JsonAccessFormatter().format(access_record(created=moment.timestamp())))
    assert doc["time"] == "2026-11-24T10:00:00.123Z"
    doc = json.loads(JsonAccessFormatter().format(access_record(created=0.0)))
    assert doc["time"] == "1970-01-01T00:00:00.000Z"


def test_formatter_record_time_is_now():
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    doc = json.loads(JsonAccessFormatter().format(access_record()))
    when = datetime.datetime.fromisoformat(doc["time"].replace("Z", "+00:00"))
    assert before <= when <= datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)


def test_formatter_escapes_what_clients_put_in_the_path():
    path = '/v1/models/m:predict?q="x"\n\u00e9\\'
    text = JsonAccessFormatter().format(access_record("[::1]:1", "GET", path, "2", 404))
    assert "\n" not in text
    doc = json.loads(text)
    assert doc["path"] == path and doc["client"] == "[::1]:1" and doc["status"] == 404


# --- uvicorn's logging configuration ---------------------------------------------------------


def test_log_config_off_keeps_uvicorns_access_formatter():
    before = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config = log_config(False)
    assert config == before
    assert config["formatters"]["access"]["()"] == "uvicorn.logging.AccessFormatter"
    assert uvicorn.config.LOGGING_CONFIG == before


def test_log_config_on_uses_json_formatter():
    before = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config = log_config(True)
    assert config["formatters"]["access"] == {"()": JsonAccessFormatter}
    # only the access formatter changes: handlers still send access records to stdout
    assert config["handlers"] == before["handlers"]
    assert config["loggers"] == before["loggers"]
    assert config["formatters"]["default"] == before["formatters"]["default"]
    assert uvicorn.config.LOGGING_CONFIG == before


def test_log_configs_are_copies():
    before = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for on in (False, True):
        config = log_config(on)
        config["formatters"]["default"]["use_colors"] = "changed"
        config["handlers"]["access"]["stream"] = "changed"
        config["loggers"]["uvicorn"]["level"] = "changed"
    assert uvicorn.config.LOGGING_CONFIG == before


# --- settings and the server's uvicorn Config -------------------------------------------------


def test_access_log_is_off_by_default(monkeypatch):
    monkeypatch.delenv("TENSORGATE_ACCESS_LOG", raising=False)
    assert Settings().access_log is False


@pytest.mark.parametrize("value", ["true", "1", "True"])
def test_access_log_from_environment(monkeypatch, value):
    monkeypatch.setenv("TENSORGATE_ACCESS_LOG", value)
    assert Settings().access_log is True


def test_access_log_off_from_environment(monkeypatch):
    monkeypatch.setenv("TENSORGATE_ACCESS_LOG", "false")
    assert Settings().access_log is False


@pytest.fixture
def dict_configs(monkeypatch) -> list[dict]:
    """The logging configurations uvicorn's Config applies, recorded instead of applied; uvicorn's
    loggers are put back as they were, so that building a Config leaves this process's logging alone."""
    applied: list[dict] = []
    monkeypatch.setattr(logging.config, "dictConfig", lambda config: applied.append(copy.deepcopy(config)))
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")]
    saved = [(lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers]
    yield applied
    for lg, (level, handlers, propagate, disabled) in zip(loggers, saved, strict=True):
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate
        lg.disabled = disabled


def test_server_config_access_log_off_by_default(tmp_path, monkeypatch, dict_configs):
    monkeypatch.delenv("TENSORGATE_ACCESS_LOG", raising=False)
    config = _config(Settings(model_repository=tmp_path, poll_interval_s=0), None)
    assert config.access_log is False
    assert config.app is not None
    assert config.log_config["formatters"]["access"]["()"] == "uvicorn.logging.AccessFormatter"
    assert [c["formatters"]["access"]["()"] for c in dict_configs] == ["uvicorn.logging.AccessFormatter"]


def test_server_config_access_log_on(tmp_path, dict_configs):
    config = _config(Settings(model_repository=tmp_path, poll_interval_s=0, access_log=True), None)
    assert config.access_log is True
    assert config.log_config["formatters"]["access"] == {"()": JsonAccessFormatter}
    assert [c["formatters"]["access"] for c in dict_configs] == [{"()": JsonAccessFormatter}]


def test_server_config_in_a_thread_leaves_logging_alone(tmp_path, dict_configs):
    config = _config(Settings(model_repository=tmp_path, poll_interval_s=0, access_log=True), None,
                     configure_logging=False)
    assert config.access_log is True
    assert config.log_config is None
    assert dict_configs == []


# --- end to end: `tensorgate serve` --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_and_predict(tmp_path: Path, *flags: str) -> tuple[str, str]:
    """Start `tensorgate serve` over the example models, send one predict, stop it; its stdout and stderr."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORGATE_")}
    env["PYTHONUNBUFFERED"] = "1"
    out_path, err_path = tmp_path / f"stdout-{port}.txt", tmp_path / f"stderr-{port}.txt"
    command = [sys.executable, "-m", "service.cli", "serve", "--model-repository", "models", "--host", "127.0.0.1",
               "--port", str(port), "--grpc-port", "0", "--poll-interval-s", "0", *flags]
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            with httpx.Client(base_url=url, timeout=10) as client:
                while True:
                    assert process.poll() is None, f"the server exited: {err_path.read_text()[-2000:]}"
                    try:
                        if client.get("/v2/health/ready").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    assert time.monotonic() < deadline, f"not ready in 60 s: {err_path.read_text()[-2000:]}"
                    time.sleep(0.1)
                response = client.post(PREDICT_PATH, json={"instances": [1.0, 2.0, 5.0]})
                assert response.status_code == 200, response.text
                assert response.json() == {"predictions": [2.5, 3.0, 4.5]}
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    return out_path.read_text(), err_path.read_text()


def _json_lines(text: str) -> list[dict]:
    docs = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def access_log_stdout(tmp_path_factory) -> str:
    """stdout of one `tensorgate serve --access-log` that answered one predict."""
    stdout, _ = _serve_and_predict(tmp_path_factory.mktemp("access-log"), "--access-log")
    return stdout


def test_serve_with_access_log_writes_json_lines(access_log_stdout):
    predicts = [doc for doc in _json_lines(access_log_stdout) if doc.get("path") == PREDICT_PATH]
    assert len(predicts) == 1, access_log_stdout
    (doc,) = predicts
    assert doc["method"] == "POST" and doc["status"] == 200 and doc["http_version"] == "1.1"
    assert doc["client"].startswith("127.0.0.1:")
    assert ISO_MILLIS_UTC.match(doc["time"])
    assert list(doc) == ["time", "client", "method", "path", "http_version", "status"]
    # the readiness probes are logged too, and every line on stdout is one JSON object
    assert any(d.get("path") == "/v2/health/ready" and d.get("method") == "GET" for d in _json_lines(access_log_stdout))
    assert len(_json_lines(access_log_stdout)) == len(access_log_stdout.splitlines())


def test_serve_access_log_path_is_the_path_sent(access_log_stdout):
    assert any(doc.get("path") == PREDICT_PATH and doc.get("method") == "POST" and doc.get("status") == 200
               for doc in _json_lines(access_log_stdout)), access_log_stdout


def test_serve_without_access_log_logs_no_requests(tmp_path):
    stdout, stderr = _serve_and_predict(tmp_path)
    for text in (stdout, stderr):
        assert ":predict" not in text and "%3Apredict" not in text
        assert "/v2/health/ready" not in text
    assert _json_lines(stdout) == []
