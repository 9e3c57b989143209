"""One environment with tritonclient: `pip install -e . "tritonclient[all]"` in a fresh venv, as a user
does, leaves a working server and client.

tritonclient's [grpc] and [all] extras pin protobuf < 7, TensorFlow 2.21 and tensorflow-serving-api accept
6.30 and newer; our generated schemas must load on every protobuf pip may then choose (the suite itself
runs on the newest, 7.x). In the fresh venv a server is started on the example models and answered by
tritonclient over gRPC and HTTP and by a TensorFlow Serving Predict through our stubs; then protobuf is
taken down to 6.31.1, the floor pyproject.toml declares (ydf asks for it), and every generated module and a golden model
must still load and run.

Needs a package index (PyPI, or the machine's configured one): without one it skips, saying why. It
takes about a minute, most of it pip.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 600

# Runs inside the fresh venv: every import a user makes, then a served request over each client.
SERVE_AND_ASK = textwrap.dedent("""
    import sys
    import grpc
    import numpy as np
    import google.protobuf
    import tritonclient.grpc as triton_grpc
    import tritonclient.http as triton_http

    import engine
    import service
    from engine.graph.tensors import from_array
    from service.protocols.grpc.services import PREDICTION_SERVICE, Stub
    from service.protocols.proto import predict_pb2
    from service.server import BackgroundServer
    from service.settings import Settings

    print("protobuf", google.protobuf.__version__)
    assert google.protobuf.__version__.split(".")[0] == sys.argv[2], google.protobuf.__version__
    settings = Settings(model_repository=sys.argv[1], host="127.0.0.1", port=0, poll_interval_s=0)
    server = BackgroundServer(settings).start()
    try:
        server.app.state.manager.wait_settled(timeout=60)
        x = np.array([1.0, 2.0, 5.0], np.float32)

        client = triton_grpc.InferenceServerClient(server.grpc_target)
        inp = triton_grpc.InferInput("x", [3], "FP32")
        inp.set_data_from_numpy(x)
        assert client.infer("half_plus_two", [inp]).as_numpy("y").tolist() == [2.5, 3.0, 4.5]
        client.close()

        client = triton_http.InferenceServerClient(server.url.removeprefix("http://"))
        inp = triton_http.InferInput("x", [3], "FP32")
        inp.set_data_from_numpy(x)
        assert client.infer("half_plus_two", [inp]).as_numpy("y").tolist() == [2.5, 3.0, 4.5]
        client.close()

        with grpc.insecure_channel(server.grpc_target) as channel:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "half_plus_two"
            request.inputs["x"].CopyFrom(from_array(x))
            reply = Stub(channel, PREDICTION_SERVICE).Predict(request)
            assert list(reply.outputs["y"].float_val) == [2.5, 3.0, 4.5], reply
    finally:
        server.stop()
    print("served")
""")

# Runs inside the fresh venv after protobuf is taken down to the floor: every generated module loads, and a
# golden model (its GraphDef parsed by the generated code) computes TensorFlow's numbers.
LOAD_AT_FLOOR = textwrap.dedent("""
    import importlib, pkgutil, sys
    from pathlib import Path
    import google.protobuf
    import engine.proto, service.protocols.proto
    from engine import Session, load_graph
    from tests.golden import assert_matches, load_case

    print("protobuf", google.protobuf.__version__)
    assert google.protobuf.__version__ == sys.argv[2], google.protobuf.__version__
    for package in (engine.proto, service.protocols.proto):
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    case = load_case(Path(sys.argv[1]) / "tests" / "fixtures" / "models" / "mlp")
    outs = Session(load_graph(case.model)).run(list(case.fetches), case.feeds)
    for (name, want), got in zip(case.fetches.items(), outs):
        assert_matches(name, got, want, case.rtol, case.atol)
    print("loaded")
""")

FLOOR = "6.31.1"


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, **kwargs)


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> Path:
    """A new venv with `pip install -e . "tritonclient[all]"`; skips when no package index answers."""
    where = tmp_path_factory.mktemp("install") / "venv"
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    probe = _run([python, "-m", "pip", "download", "-q", "--no-deps", "-d", where / "probe", "tritonclient"], timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"no package index reachable: {probe.stderr.strip().splitlines()[-1:]}")
    done = _run([python, "-m", "pip", "install", "-q", "-e", ROOT, "tritonclient[all]"], timeout=PIP_TIMEOUT_S)
    assert done.returncode == 0, f"pip install -e . tritonclient[all] failed:\n{done.stdout}\n{done.stderr}"
    return python


def test_package_and_tritonclient_all_share_one_environment(fresh_venv: Path) -> None:
    # tritonclient[all] holds protobuf below 7: pip must have picked a 6.x that the package accepts.
    ran = _run([fresh_venv, "-c", SERVE_AND_ASK, ROOT / "models", "6"], cwd="/", timeout=180)
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    assert "served" in ran.stdout


def test_generated_schemas_load_on_the_oldest_protobuf_allowed(fresh_venv: Path) -> None:
    done = _run([fresh_venv, "-m", "pip", "install", "-q", f"protobuf=={FLOOR}"], timeout=PIP_TIMEOUT_S)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    ran = _run([fresh_venv, "-c", LOAD_AT_FLOOR, ROOT, FLOOR], cwd=ROOT, timeout=180)
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    assert "loaded" in ran.stdout
