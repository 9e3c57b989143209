"""The helm chart, without a cluster: `helm lint --strict`, `helm template` of every values profile,
every rendered object validated against Kubernetes' own schemas (kubernetes-validate --strict; the
CRD kinds against schemas of ours in schemas/), and what a deployment relies on asserted on the
rendered YAML: probes, security context, ports (HTTP and gRPC), TLS, labels, storage, autoscaling.
TensorFlow Serving's command line (server.interface=tfserving) has test_chart_tfserving.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from unittest import mock

import jsonschema
import pytest
import yaml

from service.settings import Settings
from tests.deploy.conftest import (
    CHART,
    GRPC_PROBES,
    KUBE_VERSION,
    PROFILES,
    ROOT,
    SERVICE_MONITOR_API,
    environment,
    find,
    notes,
    pod_spec,
    run_helm,
    server,
    tool,
)

SCHEMAS = Path(__file__).parent / "schemas"
# Kinds kubernetes-validate has no schema for (it would only warn and pass them): each is checked
# against a strict schema of ours covering the fields this project writes.
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-monitoring.coreos.com-v1.json",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): SCHEMAS / "servingruntime-serving.kserve.io-v1alpha1.json",
}
KSERVE_RUNTIME = ROOT / "deploy" / "kserve" / "servingruntime.yaml"
# Settings the chart owns: host/ports/repository are fixed by the pod layout, the tokens come from Secrets,
# the TLS files from Secrets mounted by grpc.tls and http.tls; HTTP is always served (probes, Service,
# ServiceMonitor and helm test use it); the one model of TensorFlow Serving's command line comes from
# server.tfserving.
CHART_MANAGED_SETTINGS = {"model_repository", "host", "port", "grpc_port", "admin_token", "api_token",
                          "tls_cert", "tls_key", "tls_ca", "grpc_tls_cert", "grpc_tls_key", "grpc_tls_ca",
                          "http", "model_name", "model_base_path"}
# Listener variants beside the profiles: gRPC health probes; TLS on both ports (mutual on gRPC); mutual
# TLS on HTTP, probed over gRPC (the kubelet has no client certificate for HTTPS).
TLS = ("--set", "grpc.tls.existingSecret=tg-grpc-tls", "--set", "grpc.tls.verifyClients=true",
       "--set", "http.tls.existingSecret=tg-http-tls", "--api-versions", SERVICE_MONITOR_API)
MUTUAL_HTTP_TLS = (*GRPC_PROBES, "--set", "http.tls.existingSecret=tg-http-tls", "--set", "http.tls.verifyClients=true")
LISTENER_VARIANTS = {"grpc-probes": GRPC_PROBES, "tls": TLS, "mutual-http-tls": MUTUAL_HTTP_TLS}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_helm_lint_strict(helm, profile):
    args = list(PROFILES[profile])
    if "--api-versions" in args:  # a `helm template` flag only
        del args[args.index("--api-versions"):args.index("--api-versions") + 2]
    result = run_helm(helm, "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_objects_validate_against_kubernetes_schemas(render, tmp_path):
    validator = tool("kubernetes-validate")
    if validator is None:
        pytest.skip("kubernetes-validate is not installed (a dev extra: pip install -e '.[dev]')")
    files, custom = [], []
    for profile, args in [*sorted(PROFILES.items()), *LISTENER_VARIANTS.items()]:
        core = []
        for obj in render(*args):
            (custom if (obj["apiVersion"], obj["kind"]) in CRD_SCHEMAS else core).append(obj)
        files.append(tmp_path / f"{profile}.yaml")
        files[-1].write_text(yaml.safe_dump_all(core))
    runtime = yaml.safe_load(KSERVE_RUNTIME.read_text())
    custom.append(runtime)
    # The runtime's containers are core Containers: checked as such inside a Pod.
    files.append(tmp_path / "kserve-containers.yaml")
    files[-1].write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kserve-containers"},
                                         "spec": {"containers": runtime["spec"]["containers"]}}))
    result = subprocess.run([validator, "--strict", "--kubernetes-version", KUBE_VERSION, *map(str, files)],
                            capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # kubernetes-validate passes a kind it has no schema for with a warning: none may be left.
    assert "WARN" not in output and "ERROR" not in output, output
    assert output.count("passed for resource") >= 30, output

    kinds = {(o["apiVersion"], o["kind"]) for o in custom}
    assert kinds == set(CRD_SCHEMAS), kinds
    for obj in custom:
        jsonschema.validate(obj, json.loads(CRD_SCHEMAS[obj["apiVersion"], obj["kind"]].read_text()))


def test_kserve_runtime_serves_rest_and_grpc():
    runtime = yaml.safe_load(KSERVE_RUNTIME.read_text())
    assert runtime["spec"]["protocolVersions"] == ["v1", "v2", "grpc-v1", "grpc-v2"]
    (container,) = runtime["spec"]["containers"]
    # KServe routes the first port; Knative names protocols http1 and h2c.
    assert container["ports"] == [{"name": "http1", "containerPort": 8080, "protocol": "TCP"},
                                  {"name": "h2c", "containerPort": 8001, "protocol": "TCP"}]
    assert {"name": "TENSORGATE_GRPC_PORT", "value": "8001"} in container["env"]
    assert "--port 8080" in container["args"][0]


def test_default_profile_objects(render):
    objects = render()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(["ConfigMap", "ConfigMap", "ConfigMap", "Deployment", "PodDisruptionBudget", "Pod", "Service", "ServiceAccount"])
    # No CRD API in the cluster: no ServiceMonitor; no autoscaling by default.
    assert not any(o["kind"] in ("ServiceMonitor", "HorizontalPodAutoscaler", "PersistentVolumeClaim") for o in objects)


def test_labels_are_the_recommended_ones_and_select_the_pods(render):
    objects = render()
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "tensorgate", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == "tg"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "tensorgate-0.1.0"
    deployment = find(objects, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "tensorgate", "app.kubernetes.io/instance": "tg"}
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert find(objects, "Service")["spec"]["selector"] == selector
    assert find(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector


def test_ports_are_named_and_the_service_targets_them(render):
    objects = render()
    container = server(objects)
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"},
                                  {"name": "grpc", "containerPort": 8001, "protocol": "TCP"}]
    http, grpc = find(objects, "Service")["spec"]["ports"]
    assert http == {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP", "appProtocol": "http"}
    assert grpc == {"name": "grpc", "port": 8001, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"}
    env = environment(objects)
    assert env["TENSORGATE_PORT"] == "8000" and env["TENSORGATE_HOST"] == "0.0.0.0"
    assert env["TENSORGATE_GRPC_PORT"] == "8001"
    assert not any(name.startswith(("TENSORGATE_TLS_", "TENSORGATE_GRPC_TLS_")) for name in env)


def test_grpc_disabled_exposes_no_grpc_port_and_turns_it_off_in_the_server(render):
    objects = render("--set", "grpc.enabled=false")
    assert [p["name"] for p in server(objects)["ports"]] == ["http"]
    assert [p["name"] for p in find(objects, "Service")["spec"]["ports"]] == ["http"]
    assert environment(objects)["TENSORGATE_GRPC_PORT"] == "0"


def test_grpc_service_port_is_configurable(render):
    objects = render("--set", "grpc.port=9000")
    grpc = find(objects, "Service")["spec"]["ports"][1]
    assert grpc["port"] == 9000 and grpc["targetPort"] == "grpc"
    assert environment(objects)["TENSORGATE_GRPC_PORT"] == "8001"  # the container's port does not move


def test_grpc_probes_ask_the_health_service_on_the_grpc_port(render):
    container = server(render(*GRPC_PROBES))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 8001, "service": ""}, probe
        assert "httpGet" not in container[probe], probe
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 300
    container = server(render(*GRPC_PROBES, "--set", "probes.grpc.livenessService=tensorflow.serving.ModelService"))
    assert container["readinessProbe"]["grpc"] == {"port": 8001, "service": ""}
    assert container["livenessProbe"]["grpc"] == {"port": 8001, "service": "tensorflow.serving.ModelService"}


def test_tls_mounts_the_secrets_read_only_and_points_the_server_at_them(render):
    objects = render(*TLS)
    spec, container = pod_spec(objects), server(objects)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    grpc_files = {i["key"] for i in volumes["tls-grpc"]["secret"]["items"]}
    http_files = {i["key"] for i in volumes["tls-http"]["secret"]["items"]}
    assert volumes["tls-grpc"]["secret"]["secretName"] == "tg-grpc-tls" and grpc_files == {"tls.crt", "tls.key", "ca.crt"}
    assert volumes["tls-http"]["secret"]["secretName"] == "tg-http-tls" and http_files == {"tls.crt", "tls.key"}
    assert mounts["tls-grpc"] == {"name": "tls-grpc", "mountPath": "/etc/tensorgate/tls/grpc", "readOnly": True}
    assert mounts["tls-http"] == {"name": "tls-http", "mountPath": "/etc/tensorgate/tls/http", "readOnly": True}
    env = environment(objects)
    assert env["TENSORGATE_GRPC_TLS_CERT"] == "/etc/tensorgate/tls/grpc/tls.crt"
    assert env["TENSORGATE_GRPC_TLS_KEY"] == "/etc/tensorgate/tls/grpc/tls.key"
    assert env["TENSORGATE_GRPC_TLS_CA"] == "/etc/tensorgate/tls/grpc/ca.crt"  # verifyClients: mutual TLS
    assert env["TENSORGATE_TLS_CERT"] == "/etc/tensorgate/tls/http/tls.crt"
    assert env["TENSORGATE_TLS_KEY"] == "/etc/tensorgate/tls/http/tls.key"
    assert "TENSORGATE_TLS_CA" not in env
    # What speaks HTTP to the pod switches to HTTPS: probes, the Service's appProtocol, scrapes, helm test.
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    http, grpc = find(objects, "Service")["spec"]["ports"]
    assert http["appProtocol"] == "https" and grpc["appProtocol"] == "tls"
    (endpoint,) = find(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    script = " ".join(find(objects, "Pod", "-test-health")["spec"]["containers"][0]["args"])
    assert "https://tg-tensorgate:8000" in script
    # gRPC TLS only while gRPC is on.
    objects = render(*TLS, "--set", "grpc.enabled=false")
    assert "tls-grpc" not in {v["name"] for v in pod_spec(objects)["volumes"]}
    assert not any(name.startswith("TENSORGATE_GRPC_TLS_") for name in environment(objects))


def test_helm_test_pod_presents_a_client_certificate_under_mutual_tls(render):
    objects = render(*MUTUAL_HTTP_TLS)
    assert environment(objects)["TENSORGATE_TLS_CA"] == "/etc/tensorgate/tls/http/ca.crt"
    pod = find(objects, "Pod", "-test-health")
    script = pod["spec"]["containers"][0]["args"][0]
    assert 'load_cert_chain("/etc/tensorgate/tls/http/tls.crt", "/etc/tensorgate/tls/http/tls.key")' in script
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "tls-http", "mountPath": "/etc/tensorgate/tls/http", "readOnly": True}]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "tg-http-tls"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_probes_use_the_health_endpoints(render, profile):
    container = server(render(*PROFILES[profile]))
    assert container["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    # Startup must allow for loading and warming up every model before liveness takes over.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_container_is_hardened(render, profile):
    objects = render(*PROFILES[profile])
    spec = pod_spec(objects)
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] >= 10000 and pod["fsGroup"] >= 10000
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    test_pod = find(objects, "Pod", "-test-health")
    containers = spec.get("initContainers", []) + spec["containers"] + test_pod["spec"]["containers"]
    for c in containers:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]
        assert "memory" in c["resources"]["limits"], c["name"]
    # With a read-only root, what the server writes goes to volumes: the repository and /tmp; anything
    # else it mounts (TLS Secrets) is read-only.
    writable = {m["mountPath"]: m["name"] for m in server(objects)["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/models": "models", "/tmp": "tmp"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["tmp"]


def test_image_source_seeds_an_empty_dir_from_the_image(render):
    spec = pod_spec(render())
    assert "emptyDir" in {v["name"]: v for v in spec["volumes"]}["models"]
    (prepare,) = spec["initContainers"]
    assert prepare["image"] == server(render())["image"] == "tensorgate:0.1.0"
    assert {"name": "SEED_FROM_IMAGE", "value": "true"} in prepare["env"]
    assert {"name": "models", "mountPath": "/repository"} in prepare["volumeMounts"]


def test_s3_source_fetches_before_start_and_syncs_beside_the_server(render):
    objects = render(*PROFILES["s3"])
    spec = pod_spec(objects)
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-models", "prepare-repository"]
    assert [c["name"] for c in spec["containers"]] == ["tensorgate", "sync-models"]
    fetch, sync = spec["initContainers"][0], spec["containers"][1]
    for c in (fetch, sync):
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["S3_URL"] == "s3://models/prod" and env["S3_ENDPOINT"] == "http://minio:9000"
        assert c["envFrom"] == [{"secretRef": {"name": "s3-credentials"}}]
    assert {e["name"]: e["value"] for e in sync["env"]}["SYNC_INTERVAL_SECONDS"] == "60"
    # Model configs travel in the repository ConfigMap, written by prepare-repository.
    repository = find(objects, "ConfigMap", "-repository")["data"]
    assert yaml.safe_load(repository["model.iris_classifier.yaml"]) == {"version_policy": {"latest": 2}, "labels": {"stable": 1, "canary": 2}}
    assert "s3-sync.sh" in repository and "prepare-repository.sh" in repository


def test_admin_token_comes_from_a_secret(render):
    objects = render(*PROFILES["s3"])
    secret = find(objects, "Secret", "-tokens")
    env = {e["name"]: e for e in server(objects)["env"]}
    ref = env["TENSORGATE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "admin-token"}
    assert "value" not in env["TENSORGATE_ADMIN_TOKEN"]
    # An existing Secret is referenced, never created.
    objects = render(*PROFILES["autoscaling"])
    assert not any(o["kind"] == "Secret" for o in objects)
    ref = {e["name"]: e for e in server(objects)["env"]}["TENSORGATE_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "tensorgate-admin", "key": "admin-token"}
    # No token at all: no variable (management stays closed beyond loopback).
    assert "env" not in server(render()) or not server(render())["env"]


def test_gpu_profile_requests_a_gpu_and_tolerates_gpu_nodes(render):
    objects = render(*PROFILES["gpu"])
    container, spec = server(objects), pod_spec(objects)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["image"] == "tensorgate:0.1.0-gpu"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert find(objects, "ConfigMap", "-settings")["data"]["TENSORGATE_DEVICE"] == "gpu"


def test_autoscaling_profile_shares_a_read_write_many_volume_and_scales_on_cpu_and_queue_time(render):
    objects = render(*PROFILES["autoscaling"])
    claim = find(objects, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pod_spec(objects)["volumes"][0] == {"name": "models", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
    deployment = find(objects, "Deployment")
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    hpa = find(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "tensorgate_queue_seconds"
    # The ServiceMonitor appears once the cluster has the Prometheus Operator's API.
    monitor = find(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}]
    assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    constraint = pod_spec(objects)["topologySpreadConstraints"][0]
    assert constraint["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_default_hpa_scales_on_cpu(render):
    hpa = find(render("--set", "autoscaling.enabled=true"), "HorizontalPodAutoscaler")
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource"]
    assert hpa["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}


def test_dashboard_config_map_is_labelled_for_grafana(render):
    dashboard = find(render(), "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["tensorgate.json"])["uid"] == "tensorgate-overview"


@pytest.mark.parametrize("variant", [(), TLS, MUTUAL_HTTP_TLS], ids=["plain", "tls", "mutual-http-tls"])
def test_helm_test_pod_calls_the_health_endpoints(render, variant):
    pod = find(render(*variant), "Pod", "-test-health")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (script,) = pod["spec"]["containers"][0]["args"]
    assert "://tg-tensorgate:8000" in script and "/v2/health/ready" in script and "/v2/health/live" in script
    assert '"TG_TENSORGATE_SERVICE_HOST"' in script  # the Service's address without cluster DNS
    compile(script, "test-health", "exec")  # the rendered script is Python


def test_notes_print_the_grpc_address(helm, tmp_path):
    text = notes(helm, tmp_path)
    assert "http://tg-tensorgate.serving.svc:8000" in text
    assert "tg-tensorgate.serving.svc:8001 (gRPC, plaintext" in text
    assert "grpcurl -plaintext 127.0.0.1:8001 grpc.health.v1.Health/Check" in text
    text = notes(helm, tmp_path / "tls", *TLS)
    assert "https://tg-tensorgate.serving.svc:8000" in text and "(gRPC over TLS, client certificates required" in text
    text = notes(helm, tmp_path / "off", "--set", "grpc.enabled=false")
    assert "gRPC" not in text and "8001" not in text


def test_settings_in_the_values_schema_are_the_servers(helm):
    """values.schema.json lists every server setting the chart does not manage itself, so a typo
    fails `helm install` and a new setting cannot be forgotten."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["settings"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(Settings.model_fields) - CHART_MANAGED_SETTINGS
    result = run_helm(helm, "template", "tg", str(CHART), "--set", "settings.poll_intervals=2")
    assert result.returncode != 0 and "poll_intervals" in result.stderr


def test_invalid_values_fail_with_a_reason(helm):
    cases = {
        ("--set", "models.source=nfs"): "source",
        ("--set", "models.source=s3"): "models.s3.url",
        ("--set", "models.source=pvc", "--set", "replicaCount=3", "--set", "models.pvc.accessModes={ReadWriteOnce}"): "ReadWriteMany",
        # Kubernetes' gRPC probe speaks plaintext only.
        (*GRPC_PROBES, "--set", "grpc.tls.existingSecret=tg-grpc-tls"): "probes.type=grpc cannot be combined with grpc.tls: Kubernetes' gRPC probe does not support TLS",
        (*GRPC_PROBES, "--set", "grpc.enabled=false"): "probes.type=grpc needs grpc.enabled=true",
        ("--set", "probes.type=exec"): "probes.type",
        # The kubelet's HTTPS probe has no client certificate to show.
        ("--set", "http.tls.existingSecret=tg-http-tls", "--set", "http.tls.verifyClients=true"): "probes.type=http cannot be combined with http.tls.verifyClients",
        ("--set", "grpc.tls.verifyClients=true"): "grpc.tls.verifyClients needs grpc.tls.existingSecret",
        ("--set", "grpc.port=8000"): "grpc.port and service.port",
        ("--set", "server.interface=triton"): "server.interface",
    }
    for args, reason in cases.items():
        result = run_helm(helm, "template", "tg", str(CHART), *args)
        assert result.returncode != 0 and reason in result.stderr, (args, result.stderr)


def test_settings_render_as_the_variables_the_server_reads(render):
    data = find(render("--set", "settings.batching=true", "--set-json", "settings.batching_allowed_batch_sizes=[8,16,32]",
                       "--set", "settings.batching_max_batch_size=32"), "ConfigMap", "-settings")["data"]
    assert data["TENSORGATE_BATCHING"] == "true"
    assert json.loads(data["TENSORGATE_BATCHING_ALLOWED_BATCH_SIZES"]) == [8, 16, 32]
    environ = {k: v for k, v in data.items() if k.startswith("TENSORGATE_")}
    with mock.patch.dict(os.environ, environ, clear=True):
        settings = Settings()
    assert settings.batching and settings.batching_allowed_batch_sizes == [8, 16, 32] and settings.port == 8000
    assert str(settings.model_repository) == "/models"


def test_every_variable_the_chart_sets_is_a_server_setting(render):
    """A TENSORGATE_* name the server does not read would be ignored silently (pydantic-settings skips
    unknown variables): every one the chart sets, in every profile and listener variant, names a setting."""
    for args in [*PROFILES.values(), *LISTENER_VARIANTS.values()]:
        objects = render(*args)
        names = set(environment(objects)) | {e["name"] for e in server(objects).get("env") or []}
        unknown = {n for n in names if n.startswith("TENSORGATE_")} - {f"TENSORGATE_{f.upper()}" for f in Settings.model_fields}
        assert not unknown, (args, unknown)


def test_shutdown_timings_agree_pre_stop_then_the_servers_grace_within_the_termination_period(render):
    """Kubernetes runs the preStop hook (the pod still serves while it leaves the Service's endpoints),
    then sends SIGTERM and kills the pod terminationGracePeriodSeconds after the hook began: the period
    must cover the hook, the server's shutdown_grace_s and the server's exit."""
    objects = render()
    hook = server(objects)["lifecycle"]["preStop"]["exec"]["command"]
    assert hook == ["sleep", "5"]
    grace_s = float(environment(objects)["TENSORGATE_SHUTDOWN_GRACE_S"])
    assert grace_s == Settings.model_fields["shutdown_grace_s"].default == 20
    assert pod_spec(objects)["terminationGracePeriodSeconds"] == 5 + 20 + 5

    objects = render("--set", "shutdown.preStopSeconds=10", "--set-json", "settings.shutdown_grace_s=60.5")
    assert server(objects)["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]
    assert environment(objects)["TENSORGATE_SHUTDOWN_GRACE_S"] == "60.5"
    assert pod_spec(objects)["terminationGracePeriodSeconds"] == 10 + 61 + 5

    objects = render("--set", "shutdown.preStopSeconds=0", "--set", "terminationGracePeriodSeconds=120")
    assert "lifecycle" not in server(objects) and pod_spec(objects)["terminationGracePeriodSeconds"] == 120


def test_a_termination_period_shorter_than_the_shutdown_fails_to_render(helm):
    cases = {
        ("--set", "terminationGracePeriodSeconds=20"): "terminationGracePeriodSeconds=20 is shorter than the shutdown needs",
        ("--set", "terminationGracePeriodSeconds=30", "--set", "settings.shutdown_grace_s=40"): "= 50",
        ("--set", "terminationGracePeriodSeconds=30", "--set", "shutdown.preStopSeconds=15"): "shutdown.preStopSeconds (15)",
        ("--set", "shutdown.preStopSeconds=-1"): "preStopSeconds",
    }
    for args, reason in cases.items():
        result = run_helm(helm, "template", "tg", str(CHART), *args)
        assert result.returncode != 0 and reason in result.stderr, (args, result.stderr)


def test_kubernetes_1_20_gets_the_apis_it_has(helm, render):
    """The oldest supported Kubernetes (1.20, which deploy/e2e/k8s.sh installs the chart into; kubernetes-validate
    has no schemas that old): autoscaling/v2beta2 and policy/v1beta1 where 1.23's and 1.21's APIs are missing,
    HTTP probes where gRPC probes (1.24) are. Current versions keep today's APIs; older ones are refused."""
    old = ("--kube-version", "1.20.2", *PROFILES["autoscaling"], *GRPC_PROBES, "--set", "podDisruptionBudget.enabled=true")
    objects = render(*old)
    assert find(objects, "HorizontalPodAutoscaler")["apiVersion"] == "autoscaling/v2beta2"
    assert find(objects, "PodDisruptionBudget")["apiVersion"] == "policy/v1beta1"
    container = server(objects)
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready" and "grpc" not in container["livenessProbe"]
    current = render(*PROFILES["autoscaling"], *GRPC_PROBES, "--set", "podDisruptionBudget.enabled=true")
    assert find(current, "HorizontalPodAutoscaler")["apiVersion"] == "autoscaling/v2"
    assert find(current, "PodDisruptionBudget")["apiVersion"] == "policy/v1"
    assert "grpc" in server(current)["readinessProbe"]
    too_old = run_helm(helm, "template", "tg", str(CHART), "--kube-version", "1.19.0")
    assert too_old.returncode != 0 and "kubeVersion" in too_old.stderr + too_old.stdout
