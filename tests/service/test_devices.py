"""Devices in the server: `serve --device`, TENSORGATE_DEVICE, a model's `device:` in config.yaml,
what a model meant for a missing GPU does to the others, and what the config endpoint reports.

Without a GPU (CI) the GPU-less behaviour is what is checked; the GPU tests skip unless cupy sees a
CUDA device.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

import service.server
from engine.devices import DeviceError, gpu_available
from service.app import create_app
from service.cli import main
from service.settings import Settings
from tests.service.conftest import EXAMPLES
from tests.service.repository.test_repository import predict, scale_graph, wait_for, write_version

needs_no_gpu = pytest.mark.skipif(gpu_available(), reason="checks what happens on a machine without a GPU")
needs_gpu = pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device (pip install 'tensorgate[gpu]')")


@pytest.fixture
def served(monkeypatch):
    """Run `tensorgate serve ...` up to the point of serving: the Settings it would serve with."""
    seen: list[Settings] = []
    monkeypatch.setattr(service.server, "serve", lambda settings: seen.append(settings) or 0)  # exit status 0
    return seen


def serve_args(tmp_path, *flags: str) -> list[str]:
    (tmp_path / "repo").mkdir(exist_ok=True)
    return ["serve", "--model-repository", str(tmp_path / "repo"), *flags]


def repo_with(tmp_path, **devices: str | None) -> object:
    """A repository of y = x * 2 models, each with config.yaml `device:` as given (None: no key)."""
    root = tmp_path / "repo"
    for name, device in devices.items():
        write_version(root, name, 1, scale_graph(2.0))
        if device is not None:
            (root / name / "config.yaml").write_text(yaml.safe_dump({"device": device}))
    return root


def version_status(c, model: str) -> dict:
    r = c.get(f"/v1/models/{model}")
    assert r.status_code == 200, r.text
    return r.json()["model_version_status"][0]


# --- the server-wide device ----------------------------------------------------------------------


@pytest.mark.parametrize("flag, device", [("cpu", "cpu"), ("cpu:0", "cpu:0"), ("/device:CPU:0", "/device:CPU:0")])
def test_serve_device_flag(tmp_path, served, flag, device):
    assert main(serve_args(tmp_path, "--device", flag)) == 0
    assert served[0].device == device


def test_serve_defaults_to_cpu_and_reads_tensorgate_device(tmp_path, served, monkeypatch):
    assert main(serve_args(tmp_path)) == 0
    assert served[-1].device == "cpu"
    monkeypatch.setenv("TENSORGATE_DEVICE", "cpu:0")
    assert main(serve_args(tmp_path)) == 0
    assert served[-1].device == "cpu:0"
    assert main(serve_args(tmp_path, "--device", "cpu")) == 0  # the flag wins over the variable
    assert served[-1].device == "cpu"


@pytest.mark.parametrize("where", ["flag", "env"])
def test_serve_rejects_a_device_name_that_is_not_one(tmp_path, served, monkeypatch, capsys, where):
    if where == "flag":
        code = main(serve_args(tmp_path, "--device", "tpu:0"))
    else:
        monkeypatch.setenv("TENSORGATE_DEVICE", "tpu:0")
        code = main(serve_args(tmp_path))
    assert code == 2 and not served
    assert "'tpu:0' is not a device name" in capsys.readouterr().err


@needs_no_gpu
@pytest.mark.parametrize("device", ["gpu", "gpu:0", "/device:GPU:0"])
def test_serve_refuses_to_start_on_a_gpu_it_does_not_have(tmp_path, served, capsys, device):
    assert main(serve_args(tmp_path, "--device", device)) == 2
    assert not served
    err = capsys.readouterr().err
    assert "is not available: no GPU found" in err and "tensorgate[gpu]" in err


@needs_no_gpu
def test_app_refuses_a_gpu_it_does_not_have(tmp_path):
    with pytest.raises(DeviceError, match="no GPU found"):
        create_app(Settings(model_repository=tmp_path, device="gpu"))


def test_server_device_cpu_0_serves_and_reports_kind_cpu(tmp_path, make_server, client):
    c = client(make_server(repo_with(tmp_path, m=None), device="cpu:0"))
    assert predict(c) == 2.0
    config = c.get("/v2/models/m/config").json()
    assert config["instance_group"] == [{"name": "m_0", "kind": "KIND_CPU", "count": 1, "gpus": []}]
    assert config["parameters"]["device"] == {"string_value": "cpu:0"}


def test_cuda_graphs_setting_reaches_the_session_options(monkeypatch):
    assert Settings().session_options().cuda_graphs is True
    monkeypatch.setenv("TENSORGATE_CUDA_GRAPHS", "false")
    assert Settings().session_options().cuda_graphs is False


# --- a model's own device ------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:0"])
def test_model_device_cpu_in_any_spelling(tmp_path, make_server, client, device):
    c = client(make_server(repo_with(tmp_path, m=device)))
    assert predict(c) == 2.0
    assert c.get("/v2/models/m/config").json()["parameters"]["device"] == {"string_value": "cpu:0"}


def test_model_on_a_logical_cpu(tmp_path, make_server, client):
    c = client(make_server(repo_with(tmp_path, m="cpu:1")))
    assert predict(c) == 2.0
    config = c.get("/v2/models/m/config").json()
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert config["parameters"]["device"] == {"string_value": "cpu:1"}


def test_model_device_that_is_not_a_device_is_a_config_error(tmp_path, make_server, client):
    root = repo_with(tmp_path, m=None, bad="tpu")
    c = client(make_server(root))
    assert predict(c) == 2.0  # the other model serves
    error = version_status(c, "bad")["status"]["error_message"]
    assert "config.yaml" in error and "device: 'tpu' is not a device name" in error
    # Through the v2 repository API, the same config is a 400 and nothing changes.
    r = c.post("/v2/repository/models/m/load", json={"parameters": {"config": "device: npu:1"}})
    assert r.status_code == 400 and "device: 'npu:1' is not a device name" in r.json()["error"]
    assert not (root / "m" / "config.yaml").exists()
    assert predict(c) == 2.0


@needs_no_gpu
def test_model_on_a_missing_gpu_fails_to_load_while_the_others_serve(tmp_path, make_server, client):
    shutil.copytree(EXAMPLES / "half_plus_two", tmp_path / "repo" / "half_plus_two")
    root = repo_with(tmp_path, m="cpu", on_gpu="gpu")
    server = make_server(root)
    c = client(server)
    status = version_status(c, "on_gpu")
    assert status["state"] == "END"
    assert "device 'gpu' is not available: no GPU found" in status["status"]["error_message"]
    # Requests for it say why; every other model serves.
    r = c.post("/v1/models/on_gpu:predict", json={"instances": [[1.0, 1.0]]})
    assert r.status_code in (404, 503) and "no GPU found" in r.json()["error"]
    assert predict(c) == 2.0
    assert c.post("/v1/models/half_plus_two:predict", json={"instances": [1.0]}).json() == {"predictions": [2.5]}
    assert c.get("/v2/models/m/ready").status_code == 200
    assert c.get("/v2/models/on_gpu/ready").status_code == 503
    # A model that cannot load keeps the server out of rotation, as any failed model does.
    assert c.get("/v2/health/ready").status_code == 503


@needs_no_gpu
def test_moving_a_serving_model_to_a_missing_gpu_keeps_it_on_the_cpu(tmp_path, make_server, client):
    root = repo_with(tmp_path, m="cpu")
    c = client(make_server(root))
    assert predict(c) == 2.0
    (root / "m" / "config.yaml").write_text(yaml.safe_dump({"device": "gpu:1"}))
    wait_for(lambda: "reload failed" in (version_status(c, "m").get("status", {}).get("error_message") or ""))
    status = version_status(c, "m")
    assert status["state"] == "AVAILABLE" and "device 'gpu:1' is not available" in status["status"]["error_message"]
    assert predict(c) == 2.0
    assert c.get("/v2/models/m/config").json()["instance_group"][0]["kind"] == "KIND_CPU"


@needs_no_gpu
def test_upload_to_a_model_on_a_missing_gpu_is_rejected(tmp_path, make_server, client):
    root = tmp_path / "repo"
    (root / "m").mkdir(parents=True)
    (root / "m" / "config.yaml").write_text("device: gpu\n")
    c = client(make_server(root))
    r = c.put("/v1/models/m/versions/1", content=scale_graph(2.0))
    assert r.status_code == 400 and "no GPU found" in r.json()["error"]
    assert not (root / "m" / "1").exists()


# --- with a GPU ----------------------------------------------------------------------------------


@needs_gpu
def test_serve_on_the_gpu_reports_kind_gpu_and_gpu_memory(tmp_path, make_server, client):
    root = repo_with(tmp_path, m=None, on_cpu="cpu")
    c = client(make_server(root, device="gpu"))
    assert predict(c) == 2.0
    assert predict(c, "/v1/models/on_cpu:predict") == 2.0
    config = c.get("/v2/models/m/config").json()
    assert config["instance_group"] == [{"name": "m_0", "kind": "KIND_GPU", "count": 1, "gpus": [0]}]
    assert config["parameters"]["device"] == {"string_value": "gpu:0"}
    assert c.get("/v2/models/on_cpu/config").json()["instance_group"][0]["kind"] == "KIND_CPU"
    text = c.get("/metrics").text
    for name in ("tensorgate_gpu_memory_used_bytes", "tensorgate_gpu_memory_total_bytes", "tensorgate_gpu_memory_pool_used_bytes",
                 "tensorgate_gpu_memory_pool_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"):
        assert f"\n{name}{{" in text, name
    assert 'tensorgate_gpu_memory_total_bytes{device="gpu:0"}' in text


@needs_gpu
def test_serve_refuses_a_gpu_index_beyond_the_last(tmp_path, served, capsys):
    from engine.devices import gpu_count

    assert main(serve_args(tmp_path, "--device", f"gpu:{gpu_count()}")) == 2
    assert "is not available: this machine has" in capsys.readouterr().err
