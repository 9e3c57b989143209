"""The image's HEALTHCHECK: is the server in this container alive?

The image runs one of two command lines, on ports of their own: TensorFlow Serving's
`tensorflow_model_server` (the default, through tf_serving_entrypoint.sh: REST on 8501, gRPC on 8500,
both movable by flags) or `tensorgate serve` (HTTP on TENSORGATE_PORT, 8000; gRPC on
TENSORGATE_GRPC_PORT, 8001; flags win over the variables). A fixed port would be wrong for one of them,
so the check reads the server's own command line (/proc/<pid>/cmdline) and asks the port it listens on:

- HTTP served: GET /v2/health/live (liveness, not readiness: a model that fails to load keeps the
  server unready on purpose, and must not get the container restarted in a loop by an orchestrator
  acting on "unhealthy"); over HTTPS when TENSORGATE_TLS_CERT is set, asking for liveness, not identity.
- gRPC alone (`--rest_api_port=0`, TENSORGATE_HTTP=false): a TCP connection to the gRPC port, since
  gRPC's health service answers readiness only.

Exit status 0 when healthy, 1 when not (Docker's contract), with the reason on stdout.

    python healthcheck.py          # finds the server among the container's processes
    python healthcheck.py PID      # the server is process PID
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
import urllib.request
from pathlib import Path

TIMEOUT_S = 2.0
# pydantic's spellings of false, for TENSORGATE_HTTP.
FALSE = {"0", "off", "f", "false", "n", "no"}


def command_line(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def server_arguments(argv: list[str]) -> tuple[str, list[str]] | None:
    """("tfserving" | "tensorgate", the server's flags) when `argv` runs one of the two servers: a
    console script is `python /opt/venv/bin/<name> ...`, or `<name> ...` when started by path."""
    for i, arg in enumerate(argv[:2]):
        name = os.path.basename(arg)
        if name == "tensorflow_model_server":
            return "tfserving", argv[i + 1:]
        if name == "tensorgate" and argv[i + 1:i + 2] == ["serve"]:
            return "tensorgate", argv[i + 2:]
    return None


def find_server() -> tuple[str, list[str]] | None:
    """The server among the container's processes: PID 1 when the entrypoint exec'd it, a child of
    the init process under `docker run --init`; the lowest PID that runs one."""
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
    for pid in pids:
        try:
            found = server_arguments(command_line(pid))
        except OSError:  # the process has exited meanwhile
            continue
        if found is not None:
            return found
    return None


def last_flag(flags: list[str], name: str, default: int, spaced: bool) -> int:
    """The last value of `--name=N` (and of `--name N` where `spaced`: argparse's form), else `default`."""
    value = default
    for i, flag in enumerate(flags):
        if flag.startswith(f"--{name}="):
            value = int(flag.split("=", 1)[1])
        elif spaced and flag == f"--{name}" and i + 1 < len(flags):
            value = int(flags[i + 1])
    return value


def ports(kind: str, flags: list[str]) -> tuple[int, int]:
    """(HTTP port, gRPC port) the server listens on, 0 for one it does not serve."""
    if kind == "tfserving":
        grpc_port = last_flag(flags, "port", 8500, spaced=False)
        rest_port = last_flag(flags, "rest_api_port", 0, spaced=False)
        # TensorFlow Serving skips REST when it is given gRPC's port.
        return (0 if rest_port == grpc_port else rest_port), grpc_port
    http = os.environ.get("TENSORGATE_HTTP", "true").strip().lower() not in FALSE
    http_port = last_flag(flags, "port", int(os.environ.get("TENSORGATE_PORT", "8000")), spaced=True)
    grpc_port = last_flag(flags, "grpc-port", int(os.environ.get("TENSORGATE_GRPC_PORT", "8001")), spaced=True)
    return (http_port if http else 0), grpc_port


def check(kind: str, flags: list[str]) -> str:
    """What answered; OSError (or ValueError for a port that is no number) when nothing did."""
    http_port, grpc_port = ports(kind, flags)
    if http_port:
        tls = bool(os.environ.get("TENSORGATE_TLS_CERT"))
        url = f"{'https' if tls else 'http'}://127.0.0.1:{http_port}/v2/health/live"
        context = ssl._create_unverified_context() if tls else None
        with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=context) as response:
            return f"{kind}: {url} {response.status}"
    if grpc_port:
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=TIMEOUT_S):
            return f"{kind}: gRPC port {grpc_port} accepts connections"
    raise OSError(f"{kind} serves neither HTTP nor a gRPC port")


def main(argv: list[str]) -> int:
    try:
        found = server_arguments(command_line(int(argv[0]))) if argv else find_server()
        if found is None:
            print("unhealthy: no tensorflow_model_server or tensorgate serve process")
            return 1
        print("healthy:", check(*found))
        return 0
    except (OSError, ValueError) as e:
        print("unhealthy:", e)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
