"""The image's entrypoint (deploy/docker/tf_serving_entrypoint.sh) and health check
(deploy/docker/healthcheck.py), run here without a Docker engine.

The entrypoint runs under every POSIX shell present (the image's /bin/sh is dash) with stand-ins for
`tensorflow_model_server` and `tensorgate` on the PATH that print what they were given: TensorFlow
Serving's defaults, MODEL_NAME and MODEL_BASE_PATH, arguments passed on as flags (the real flag parser
says which wins), a first argument that is a command, and exec (the server is the entrypoint's own
process). Then the real servers of this checkout start through it on a SavedModel, answer a predict,
pass the health check, and stop on SIGTERM. The health check is also held to stand-in servers that
listen where their command lines say.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from service.tfserving_cli import parse_flags, settings_from_flags
from tests.deploy.conftest import ROOT

ENTRYPOINT = ROOT / "deploy" / "docker" / "tf_serving_entrypoint.sh"
HEALTHCHECK = ROOT / "deploy" / "docker" / "healthcheck.py"
SAVED_MODEL = ROOT / "tests" / "fixtures" / "saved_models" / "half_plus_two_serving" / "model"
SHELLS = [shell for shell in ("sh", "dash", "bash") if shutil.which(shell)]
DEFAULT_FLAGS = ["--port=8500", "--rest_api_port=8501", "--model_name=model", "--model_base_path=/models/model"]

# Prints its name, arguments, process id and the variables the entrypoint deals in, as JSON.
FAKE_SERVER = """#!{python}
import json, os, sys
json.dump({{"program": os.path.basename(sys.argv[0]), "argv": sys.argv[1:], "pid": os.getpid(),
           "env": {{k: v for k, v in os.environ.items() if k.startswith(("TENSORGATE_", "MODEL_"))}}}}, sys.stdout)
"""
# Listens as a server whose command line it carries would: HTTP answering /v2/health/live, or a bare
# TCP port (gRPC alone), on LISTEN_PORT.
FAKE_LISTENER = """
import http.server, os, socket, time

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v2/health/live" else 404)
        self.end_headers()

port = int(os.environ["LISTEN_PORT"])
if os.environ["LISTEN"] == "http":
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
else:
    s = socket.create_server(("127.0.0.1", port))
    while True:
        s.accept()[0].close()
"""

pytestmark = [
    pytest.mark.skipif(not SHELLS, reason="needs a POSIX sh"),
    pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="the health check reads /proc"),
]


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in ("tensorflow_model_server", "tensorgate"):
        (directory / name).write_text(FAKE_SERVER.format(python=sys.executable))
        (directory / name).chmod(0o755)
    return directory


def entrypoint(shell: str, path: Path, *args: str, **env: str) -> dict:
    """What the program the entrypoint ran was given."""
    process = subprocess.Popen([shell, str(ENTRYPOINT), *args], env={"PATH": f"{path}:/usr/bin:/bin", **env},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    ran = json.loads(out)
    # exec: the server is the entrypoint's process itself, so `docker stop`'s SIGTERM reaches it.
    assert ran["pid"] == process.pid
    return ran


@pytest.mark.parametrize("shell", SHELLS)
def test_defaults_are_the_tensorflow_serving_images(shell, fake_bin):
    ran = entrypoint(shell, fake_bin)
    assert ran["program"] == "tensorflow_model_server"
    assert ran["argv"] == DEFAULT_FLAGS
    # Nothing of tensorgate's own is set for it: it serves its one model, not a repository beside it.
    assert "TENSORGATE_MODEL_REPOSITORY" not in ran["env"]


@pytest.mark.parametrize("shell", SHELLS)
def test_model_name_and_base_path_come_from_the_environment(shell, fake_bin):
    ran = entrypoint(shell, fake_bin, MODEL_NAME="half_plus_two", MODEL_BASE_PATH="/mnt/models")
    assert ran["argv"] == ["--port=8500", "--rest_api_port=8501", "--model_name=half_plus_two",
                           "--model_base_path=/mnt/models/half_plus_two"]
    ran = entrypoint(shell, fake_bin, MODEL_NAME="resnet")
    assert ran["argv"][2:] == ["--model_name=resnet", "--model_base_path=/models/resnet"]


@pytest.mark.parametrize("shell", SHELLS)
def test_arguments_are_more_flags_and_a_later_flag_wins(shell, fake_bin):
    ran = entrypoint(shell, fake_bin, "--rest_api_port=0", "--model_config_file=/models/models.config", "--enable_batching")
    assert ran["argv"] == [*DEFAULT_FLAGS, "--rest_api_port=0", "--model_config_file=/models/models.config", "--enable_batching"]
    # As TensorFlow Serving's parser, ours: the user's --rest_api_port=0 turns REST off, the config file
    # replaces the entrypoint's model name and base path.
    given, unknown = parse_flags(ran["argv"])
    assert not unknown and given["rest_api_port"] == 0 and given["port"] == 8500
    fields = settings_from_flags(given, environ={})
    assert fields["http"] is False and str(fields["model_config_file"]) == "/models/models.config"
    assert "model_base_path" not in fields and fields["batching"] is True


@pytest.mark.parametrize("shell", SHELLS)
def test_a_first_argument_that_is_no_flag_is_a_command(shell, fake_bin):
    ran = entrypoint(shell, fake_bin, "tensorgate", "serve", "--port", "9000")
    assert ran["program"] == "tensorgate" and ran["argv"] == ["serve", "--port", "9000"]
    # tensorgate serve's repository is MODEL_BASE_PATH, /models unless told otherwise.
    assert ran["env"]["TENSORGATE_MODEL_REPOSITORY"] == "/models"
    ran = entrypoint(shell, fake_bin, "tensorgate", "serve", MODEL_BASE_PATH="/mnt/models")
    assert ran["env"]["TENSORGATE_MODEL_REPOSITORY"] == "/mnt/models"
    ran = entrypoint(shell, fake_bin, "tensorgate", "serve", TENSORGATE_MODEL_REPOSITORY="/data/repository")
    assert ran["env"]["TENSORGATE_MODEL_REPOSITORY"] == "/data/repository"
    # Any command, not only the servers.
    out = subprocess.run([shell, str(ENTRYPOINT), "sh", "-c", 'echo "$0:$1"', "a", "b"], env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout == "a:b\n", out.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthcheck(pid: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HEALTHCHECK), str(pid)], capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"]})


def wait_for(url: str, process: subprocess.Popen, timeout_s: float = 120) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, process.stderr.read()
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("command", ["tensorflow_model_server", "tensorgate serve"])
def test_the_real_servers_start_through_the_entrypoint_and_pass_the_health_check(tmp_path, command):
    """As the image runs them: the user's flags move the ports (8500/8501 and 8000/8001 may be taken
    here), the model is a SavedModel at MODEL_BASE_PATH/half_plus_two/1."""
    shutil.copytree(SAVED_MODEL, tmp_path / "models" / "half_plus_two" / "1")
    http_port, grpc_port = free_port(), free_port()
    if command == "tensorflow_model_server":
        args = [f"--port={grpc_port}", f"--rest_api_port={http_port}"]
    else:
        args = ["tensorgate", "serve", "--port", str(http_port), "--grpc-port", str(grpc_port)]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "TENSORGATE_HOST": "127.0.0.1",
           "MODEL_NAME": "half_plus_two", "MODEL_BASE_PATH": str(tmp_path / "models")}
    process = subprocess.Popen([SHELLS[0], str(ENTRYPOINT), *args], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{http_port}"
        wait_for(f"{base}/v2/health/ready", process)
        request = urllib.request.Request(f"{base}/v1/models/half_plus_two:predict", data=b'{"instances": [[1.0], [2.0], [5.0]]}')
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.load(response) == {"predictions": [[2.5], [3.0], [4.5]]}
        check = healthcheck(process.pid)
        assert check.returncode == 0, check.stdout + check.stderr
        assert f"127.0.0.1:{http_port}/v2/health/live 200" in check.stdout
        process.send_signal(signal.SIGTERM)  # `docker stop`: the server itself shuts down gracefully
        assert process.wait(timeout=60) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    check = healthcheck(process.pid)
    assert check.returncode == 1


def listener(fake_bin: Path, program: str, args: list[str], listen: str, port: int) -> subprocess.Popen:
    """A stand-in server: `program args` on its command line, listening on `port` (HTTP or bare TCP)."""
    script = fake_bin / program
    script.write_text(FAKE_LISTENER)
    process = subprocess.Popen([sys.executable, str(script), *args], env={"LISTEN": listen, "LISTEN_PORT": str(port)})
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("program", "args", "listen", "asked"),
    [
        # TensorFlow Serving's command line: the last --rest_api_port is the REST port.
        ("tensorflow_model_server", [*DEFAULT_FLAGS[:2], "--rest_api_port={port}"], "http", "/v2/health/live 200"),
        # REST off: gRPC alone, whose port must accept connections.
        ("tensorflow_model_server", [*DEFAULT_FLAGS, "--port={port}", "--rest_api_port=0"], "tcp", "gRPC port"),
        # tensorgate serve: --port (argparse's two spellings), else TENSORGATE_PORT.
        ("tensorgate", ["serve", "--port", "{port}"], "http", "/v2/health/live 200"),
        ("tensorgate", ["serve", "--port={port}"], "http", "/v2/health/live 200"),
    ],
    ids=["tfserving-rest", "tfserving-grpc-only", "tensorgate", "tensorgate-equals"],
)
def test_health_check_asks_the_port_the_command_line_names(fake_bin, program, args, listen, asked):
    port = free_port()
    process = listener(fake_bin, program, [a.format(port=port) for a in args], listen, port)
    try:
        check = healthcheck(process.pid)
        assert check.returncode == 0 and asked in check.stdout, check.stdout + check.stderr
        assert str(port) in check.stdout
    finally:
        process.kill()
        process.wait()


def test_health_check_fails_when_nothing_answers_or_no_server_runs(fake_bin):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--port=1"])
    try:
        check = healthcheck(process.pid)
        assert check.returncode == 1 and "no tensorflow_model_server or tensorgate serve process" in check.stdout
    finally:
        process.kill()
        process.wait()
    # A server's command line, but nothing listening on its port.
    script = fake_bin / "tensorflow_model_server"
    script.write_text("import time; time.sleep(60)")
    process = subprocess.Popen([sys.executable, str(script), "--port=8500", f"--rest_api_port={port}"])
    try:
        check = healthcheck(process.pid)
        assert check.returncode == 1 and check.stdout.startswith("unhealthy:"), check.stdout + check.stderr
    finally:
        process.kill()
        process.wait()
