"""`tensorgate inspect`: what a user sees about a graph before serving it."""

import json
import subprocess
import sys

import numpy as np

from service.cli import main
from tests.engine.graphs import GraphBuilder

F32 = np.dtype(np.float32)


def graph_file(tmp_path, *, unsupported=False):
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 4))
    g.const("w", np.ones((4, 2), np.float32))
    g.node("dense/MatMul", "MatMul", ["x", "w"], T=F32)
    g.node("dense/Relu", "Relu", ["dense/MatMul"], T=F32)
    g.node("probs", "Softmax", ["dense/Relu"], T=F32)
    if unsupported:
        g.node("weird", "FancyOp", ["x"])
        g.node("weird2", "FancyOp", ["weird:1"])
    path = tmp_path / "model.pb"
    path.write_bytes(g.bytes())
    return path


def test_inspect_prints_summary(tmp_path, capsys):
    assert main(["inspect", str(graph_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "nodes: 5" in out
    assert "x:0  float  [?,4]" in out
    assert "default outputs:\n  probs:0" in out
    assert "unsupported ops: none" in out


def test_inspect_lists_unsupported_ops_with_nodes(tmp_path, capsys):
    assert main(["inspect", "--json", str(graph_file(tmp_path, unsupported=True))]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unsupported_ops"] == {"FancyOp": ["weird", "weird2"]}
    assert summary["op_counts"]["FancyOp"] == 2
    # An unknown op's output count is inferred from its consumers: weird:0 is unused, weird:1 is read.
    assert summary["outputs"] == ["probs:0", "weird:0", "weird2:0"]
    assert summary["inputs"] == [{"name": "x:0", "dtype": "float", "shape": [None, 4], "has_default": False}]


def test_inspect_names_the_package_of_a_custom_op(tmp_path, capsys):
    """A custom op is reported with the pip package that registers it: from the registries tensorgate knows
    (core TensorFlow, TF Text, TF-DF) or from the package's op-name prefix (TF Addons' `Addons>`)."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 4))
    g.node("resample", "Addons>Resampler", ["x", "x"], T=F32)
    g.node("tree", "SimpleMLUnloadModel", [])
    g.node("audio", "DecodeWav", ["x"])  # core TensorFlow, no kernel in tensorgate
    g.node("weird", "FancyOp", ["x"])
    path = tmp_path / "model.pb"
    path.write_bytes(g.bytes())
    assert main(["inspect", "--json", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unsupported_op_origins"] == {
        "Addons>Resampler": "tensorflow-addons", "SimpleMLUnloadModel": "tensorflow-decision-forests",
        "DecodeWav": "TensorFlow"}
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "  Addons>Resampler (from tensorflow-addons): resample" in out
    assert "  DecodeWav (core TensorFlow): audio" in out
    assert "  FancyOp: weird" in out


def test_loading_a_custom_op_graph_names_the_package(tmp_path):
    import pytest

    import engine
    from engine.errors import UnsupportedOpError

    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 4))
    g.node("resample", "Addons>Resampler", ["x", "x"], T=F32)
    path = tmp_path / "model.pb"
    path.write_bytes(g.bytes())
    with pytest.raises(UnsupportedOpError, match=r"Addons>Resampler \(nodes 'resample'; from tensorflow-addons\)"):
        engine.load_graph(path)


def test_inspect_bad_file_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xff\xff garbage")
    assert main(["inspect", str(bad)]) == 1
    assert "not a GraphDef" in capsys.readouterr().err


def conv_bn_graph_file(tmp_path):
    """x -> Conv2D -> Mul(scale) -> AddV2(shift) -> Relu -> Softmax, with a dead constant and x * 1."""
    g = GraphBuilder()
    g.placeholder("x", np.float32, (None, 5, 5, 2))
    g.const("one", np.float32(1))
    g.node("x1", "Mul", ["x", "one"], T=F32)
    g.const("w", np.ones((3, 3, 2, 4), np.float32))
    g.node("conv", "Conv2D", ["x1", "w"], T=F32, strides=[1, 1, 1, 1], padding="SAME")
    g.const("var", np.full(4, 4.0, np.float32))
    g.node("rsqrt", "Rsqrt", ["var"], T=F32)
    g.node("bn/mul", "Mul", ["conv", "rsqrt"], T=F32)
    g.const("shift", np.arange(4, dtype=np.float32))
    g.node("bn/add", "AddV2", ["bn/mul", "shift"], T=F32)
    g.node("relu", "Relu", ["bn/add"], T=F32)
    g.node("probs", "Softmax", ["relu"], T=F32)
    path = tmp_path / "model.pb"
    path.write_bytes(g.bytes())
    return path


def test_inspect_optimized_shows_each_pass(tmp_path, capsys):
    assert main(["inspect", "--optimized", str(conv_bn_graph_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "signature: 1 feed(s) x:0; 1 fetch(es) probs:0" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert lines["fold_constants"].split()[1:3] == ["11", "11"] and "+Const 1, -Rsqrt 1" in lines["fold_constants"]
    assert "+Identity 1, -Mul 1" in lines["simplify_arithmetic"]
    assert "+_FusedConv2D 1" in lines["fuse_activation"] and "-Relu 1" in lines["fuse_activation"]
    assert "(no change)" in lines["fold_batch_norm"]
    assert "optimized ops:" in out


def test_inspect_optimized_json_and_chosen_outputs(tmp_path, capsys):
    path = conv_bn_graph_file(tmp_path)
    assert main(["inspect", "--optimized", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passes"][0]["pass"] == "functionalize_loops"
    assert report["passes"][-1]["pass"] == "remove_dead_nodes"
    first, last = report["passes"][0], report["passes"][-1]
    assert report["signature_nodes"] == first["nodes_before"] == 11
    assert report["optimized_nodes"] == last["nodes_after"] < 11
    assert report["optimized_op_counts"] == {"Const": 2, "Identity": 1, "Softmax": 1, "_FusedConv2D": 1}
    # Fetching the Mul keeps the chain from folding past it.
    assert main(["inspect", "--optimized", "--json", "--output", "bn/mul:0", "--output", "probs", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fetches"] == ["bn/mul:0", "probs:0"]
    assert report["optimized_op_counts"].get("Relu") == 1
    assert main(["inspect", "--optimized", "--output", "nope:0", str(path)]) == 1
    assert "no tensor 'nope:0'" in capsys.readouterr().err


def test_console_script_runs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "inspect", str(graph_file(tmp_path))], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "MatMul" in proc.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_starts_a_server_configured_by_flags_and_environment(tmp_path):
    """`tensorgate serve` serves the repository; TENSORGATE_* variables fill what flags leave out."""
    import os
    import shutil
    import signal
    import time

    import httpx

    from tests.service.conftest import EXAMPLES

    shutil.copytree(EXAMPLES, tmp_path / "models")
    port = _free_port()
    env = {**os.environ, "TENSORGATE_PORT": str(port), "TENSORGATE_API_TOKEN": "t0ken"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--model-repository", str(tmp_path / "models"), "--host", "127.0.0.1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.1)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/models/half_plus_two:predict", json={"instances": [1.0, 2.0, 5.0]},
                       headers={"Authorization": "Bearer t0ken"})
        assert r.json() == {"predictions": [2.5, 3.0, 4.5]}
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal so that the exit status tells.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in proc.stdout.read().decode()


def test_serve_rejects_a_missing_repository(tmp_path, capsys):
    assert main(["serve", "--model-repository", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_inspect_a_saved_model_lists_signatures_tables_and_live_variables(capsys):
    from tests.golden import FIXTURES

    assert main(["inspect", "--json", str(FIXTURES / "saved_models" / "counter" / "model")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in summary["signatures"]] == ["read", "serving_default"]
    default = summary["signatures"][1]
    assert default["inputs"] == [{"alias": "step", "tensor": "serving_default_step:0", "dtype": "int64", "shape": "[]"}]
    assert default["op_counts"]["AssignAddVariableOp"] == 1 and default["unsupported_ops"] == {}
    assert summary["live_variables"] == ["count (int64, [])"]

    assert main(["inspect", str(FIXTURES / "saved_models" / "lookup_tables_tf2" / "model")]) == 0
    out = capsys.readouterr().out
    assert "lookup tables: " in out and "HashTableV2: string -> int64" in out
    assert "unsupported ops: none" in out


def test_inspect_a_saved_model_names_unsupported_ops_with_their_nodes(capsys):
    from tests.golden import FIXTURES

    assert main(["inspect", str(FIXTURES / "saved_models" / "unsupported" / "decode_wav" / "model")]) == 0
    out = capsys.readouterr().out
    assert "unsupported ops:\n    DecodeWav (core TensorFlow): PartitionedCall/PartitionedCall/DecodeWav" in out


def test_inspect_refuses_optimizer_flags_for_a_saved_model(capsys):
    from tests.golden import FIXTURES

    assert main(["inspect", "--optimized", str(FIXTURES / "saved_models" / "counter" / "model")]) == 2
    assert "--optimized" in capsys.readouterr().err
