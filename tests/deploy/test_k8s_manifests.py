"""deploy/k8s: every overlay renders offline (scripts/render_k8s.py), every object it renders is
valid for Kubernetes 1.29 (kubernetes-validate's strict schemas: no unknown field), and the
manifests keep their promises: probes on every container, every Secret they name exists and
holds placeholders only, GPUs only in the GPU overlay, a disruption budget for the Scheduler,
workers that advertise their own pod's address, settings every service accepts at start, and
mutual TLS on every OpenTinker pod of the TLS overlay (and on none of the others)."""

from __future__ import annotations

import base64
import json
import math
import os
import re
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from opentinker.client.tls import ClientTls, tls_from_env
from opentinker_api.conventions import new_api_key
from opentinker_coordinator.settings import CoordinatorSettings
from opentinker_envhost.settings import EnvHostSettings
from opentinker_gateway.settings import GatewaySettings
from opentinker_rollout.settings import RolloutSettings
from opentinker_runtime.core.settings import ServiceSettings, check_api_key, load_settings
from opentinker_scheduler.settings import SchedulerSettings
from opentinker_trainer.settings import TrainerSettings
from tests._scripts import REPO_ROOT, load_script

pytestmark = pytest.mark.unit

render_k8s = load_script("render_k8s")

K8S_VERSION = "1.29.0"
"""The Kubernetes version the manifests are checked against (grpc probes are GA since 1.27)."""
OVERLAYS_DIR = REPO_ROOT / "deploy" / "k8s" / "overlays"
OVERLAYS = sorted(path.parent.name for path in OVERLAYS_DIR.glob("*/kustomization.yaml"))
GPU_OVERLAYS = {"gpu"}
SINGLE_NODE_OVERLAYS = {"cpu-dev"}
"""Overlays for one node, whose shared volumes may be ReadWriteOnce."""
TLS_OVERLAYS = {"tls"}
"""Overlays that run every OpenTinker pod over mutual TLS (Redis stays plaintext)."""
TLS_SECRET = "opentinker-tls"
TLS_FILES = {"OPENTINKER_TLS_CA_FILE": "ca.crt", "OPENTINKER_TLS_CERT_FILE": "tls.crt",
             "OPENTINKER_TLS_KEY_FILE": "tls.key"}
"""Each TLS file variable -> the key of the TLS Secret it must name a file of."""
SECRET_FILE_VARIABLES = ("OPENTINKER_REDIS_PASSWORD_FILE", *TLS_FILES)
"""Settings that name a file the service reads at start (and checks is readable)."""
HEALTH_PROBE = ["python", "-m", "opentinker.cli.health_probe"]
"""The in-container gRPC health check (exit 0 iff SERVING; TLS from the pod's environment)."""
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
SETTINGS: dict[str, type[ServiceSettings]] = {
    "opentinker_scheduler": SchedulerSettings, "opentinker_trainer": TrainerSettings,
    "opentinker_rollout": RolloutSettings, "opentinker_envhost": EnvHostSettings,
    "opentinker_coordinator": CoordinatorSettings, "opentinker_gateway": GatewaySettings,
}
"""`python -m <module>` -> the settings class that service loads at start."""
WORKERS = ("opentinker-trainer", "opentinker-rollout")
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
NAMESPACE = "research"
POD_IP = "10.12.0.7"
REAL_PASSWORD = secrets.token_hex(32)
REAL_KEY = new_api_key()
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]", "auto"}
SECRET_LOOKING = (
    re.compile(r"otk_[0-9a-f]{16}_"),               # an OpenTinker API key
    re.compile(r"-----BEGIN"),                      # PEM: a certificate or private key
    re.compile(r"[0-9a-fA-F]{16,}"),                # hex: openssl rand -hex, a token
    re.compile(r"[A-Za-z0-9+/_=]{24,}"),            # base64 or any long unbroken token
)


@pytest.fixture(scope="module")
def renders() -> dict[str, list[dict[str, Any]]]:
    return {name: render_k8s.render(OVERLAYS_DIR / name) for name in OVERLAYS}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


# --- reading a render ------------------------------------------------------------------------


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [doc for doc in of_kind(docs, kind) if doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] in WORKLOAD_KINDS]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def only_container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: one container per pod (patches use containers/0)"
    return containers[0]


def service_module(container: dict[str, Any]) -> str | None:
    """`opentinker_trainer` for `python -m opentinker_trainer`, else None."""
    command = container.get("command", [])
    return command[2] if command[:2] == ["python", "-m"] and len(command) > 2 else None


def opentinker_services(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any], type[ServiceSettings]]]:
    for workload in workloads(docs):
        container = only_container(workload)
        module = service_module(container)
        if module in SETTINGS:
            yield workload, container, SETTINGS[module]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def pod_name(workload: dict[str, Any], ordinal: int = 0) -> str:
    name = workload["metadata"]["name"]
    return f"{name}-{ordinal}" if workload["kind"] == "StatefulSet" else f"{name}-5d8f7c9b4-x2k7q"


def secret_values(secret: dict[str, Any]) -> dict[str, str]:
    return dict(secret.get("stringData", {}))


def stand_in(key: str) -> str:
    """What an operator puts in place of a placeholder: a real key or password (for a PEM file,
    any readable text: settings check that the file reads, not what it holds)."""
    return REAL_KEY if key == "api-key" else REAL_PASSWORD


def service_link_variables(docs: list[dict[str, Any]]) -> dict[str, str]:
    """What the kubelet adds to a pod that leaves enableServiceLinks on (docker-link style)."""
    variables = {}
    for service in of_kind(docs, "Service"):
        if service["spec"].get("clusterIP") == "None":
            continue
        prefix = service["metadata"]["name"].upper().replace("-", "_")
        port = service["spec"]["ports"][0]["port"]
        variables |= {f"{prefix}_SERVICE_HOST": "10.96.0.10", f"{prefix}_SERVICE_PORT": str(port),
                      f"{prefix}_PORT": f"tcp://10.96.0.10:{port}"}
    return variables


def expand(value: str, environ: dict[str, str]) -> str:
    """The kubelet's $(VAR) expansion: defined variables are replaced, others left as written."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: environ.get(m.group(1), m.group(0)), value)


def container_environ(docs: list[dict[str, Any]], workload: dict[str, Any], container: dict[str, Any],
                      ordinal: int = 0) -> dict[str, str]:
    """The environment the kubelet gives `container` in pod `ordinal`, placeholders replaced."""
    environ = {} if pod_spec(workload).get("enableServiceLinks") is False else service_link_variables(docs)
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            environ |= named(docs, "ConfigMap", source["configMapRef"]["name"])["data"]
        else:
            environ |= {key: stand_in(key) for key in secret_values(named(docs, "Secret", source["secretRef"]["name"]))}
    for variable in container.get("env", []):
        environ[variable["name"]] = (expand(variable["value"], environ) if "value" in variable
                                     else value_from(docs, workload, container, variable["valueFrom"], ordinal))
    return environ


def value_from(docs: list[dict[str, Any]], workload: dict[str, Any], container: dict[str, Any],
               source: dict[str, Any], ordinal: int) -> str:
    if "fieldRef" in source:
        fields = {"metadata.name": pod_name(workload, ordinal), "metadata.namespace": NAMESPACE,
                  "status.podIP": POD_IP}
        return fields[source["fieldRef"]["fieldPath"]]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        assert ref["key"] in secret_values(named(docs, "Secret", ref["name"]))
        return stand_in(ref["key"])
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        return named(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
    resource = source["resourceFieldRef"]["resource"]  # e.g. limits.cpu, rounded up like the kubelet
    section, name = resource.split(".")
    return str(math.ceil(cpu_cores(container["resources"][section][name])))


def cpu_cores(quantity: str | int) -> float:
    text = str(quantity)
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


def mounted_secret_file(workload: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str] | None:
    """(secret name, key) when `path` is a file of a Secret mounted in `container`."""
    volumes = {volume["name"]: volume for volume in pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        directory, _, key = path.rpartition("/")
        volume = volumes.get(mount["name"], {})
        if "secret" in volume and directory == mount["mountPath"].rstrip("/"):
            return volume["secret"]["secretName"], key
    return None


def is_opentinker(container: dict[str, Any]) -> bool:
    """An OpenTinker process (a service, the gateway, the dashboard), not Redis."""
    return (service_module(container) or "").startswith("opentinker")


def with_local_secret_files(docs: list[dict[str, Any]], workload: dict[str, Any], container: dict[str, Any],
                            environ: dict[str, str], directory: Path) -> dict[str, str]:
    """`environ` with each file setting that names a file of a mounted Secret pointed at a local
    stand-in for it, so that settings which check their files are readable load here."""
    local = dict(environ)
    for name in SECRET_FILE_VARIABLES:
        if not environ.get(name):
            continue
        secret = mounted_secret_file(workload, container, environ[name])
        assert secret, f"{workload['metadata']['name']}: {name}={environ[name]} is no file of a mounted Secret"
        assert secret[1] in secret_values(named(docs, "Secret", secret[0])), f"{name}: {secret}"
        path = directory / f"{secret[0]}-{secret[1]}"
        path.write_text(stand_in(secret[1]) + "\n")
        local[name] = str(path)
    return local


# --- the render as a whole -------------------------------------------------------------------


def test_every_overlay_renders_to_objects_valid_for_kubernetes(renders) -> None:
    assert {"cpu-dev", "gpu", "external-redis"} | TLS_OVERLAYS <= set(renders), f"overlays found: {OVERLAYS}"
    validated: set[str] = set()
    for overlay, docs in renders.items():
        assert docs, f"{overlay} renders nothing"
        for doc in docs:
            text = json.dumps(doc, sort_keys=True)
            if text in validated:  # overlays share most objects: check each distinct one once
                continue
            try:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = ".".join(str(part) for part in error.path)
                pytest.fail(f"{overlay}: {doc['kind']}/{doc['metadata']['name']}: {path}: {error.message}")
            validated.add(text)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl here: the renderer is the only one")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_renderer_builds_what_kubectl_kustomize_builds(renders, overlay) -> None:
    result = subprocess.run(["kubectl", "kustomize", str(OVERLAYS_DIR / overlay)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    theirs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert [render_k8s.describe(doc) for doc in renders[overlay]] == [render_k8s.describe(doc) for doc in theirs]
    assert renders[overlay] == theirs


def test_every_overlay_runs_every_service_of_docker_compose(renders, compose) -> None:
    for overlay, docs in renders.items():
        names = {workload["metadata"]["name"] for workload in workloads(docs)}
        expected = {f"opentinker-{name}" for name in compose["services"]}
        if overlay == "external-redis":
            expected.discard("opentinker-redis")
        assert names == expected, overlay


# --- probes, security, resources -------------------------------------------------------------


def test_every_container_has_readiness_and_liveness_probes_on_its_health_endpoint(renders) -> None:
    for overlay, docs in renders.items():
        for workload in workloads(docs):
            container = only_container(workload)
            where = f"{overlay}: {workload['metadata']['name']}"
            assert "readinessProbe" in container and "livenessProbe" in container, where
            module = service_module(container)
            if module not in SETTINGS:
                continue
            environ = container_environ(docs, workload, container)
            prefix = SETTINGS[module].ENV_PREFIX
            port = int(environ[f"{prefix}PORT"])
            probes = [container[name] for name in PROBES]
            if module == "opentinker_gateway":  # HTTP: GET /healthz (plain HTTP with TLS on too)
                assert all(probe["httpGet"] == {"path": "/healthz", "port": "http"} for probe in probes), where
                assert port_named(container, "http") == port, where
                continue
            # grpc.health.v1 on the service's own gRPC port
            assert port_named(container, "grpc") == port, where
            if overlay in TLS_OVERLAYS:  # the kubelet's grpc: probe speaks plaintext only: ask from inside
                for probe in probes:
                    assert "grpc" not in probe, f"{where}: a grpc: probe cannot reach a TLS-only port"
                    assert probe["exec"]["command"] == [*HEALTH_PROBE, f"127.0.0.1:{port}"], where
                    # Python starts and imports grpc, then waits up to 2 s for the answer
                    assert probe.get("timeoutSeconds", 1) >= 3, where
            else:
                assert all(probe["grpc"] == {"port": port} for probe in probes), where


def port_named(container: dict[str, Any], name: str) -> int:
    return next(port["containerPort"] for port in container["ports"] if port["name"] == name)


def test_every_container_runs_as_non_root_read_only_without_capabilities_and_sized(renders) -> None:
    for overlay, docs in renders.items():
        for workload in workloads(docs):
            spec, container = pod_spec(workload), only_container(workload)
            where = f"{overlay}: {workload['metadata']['name']}"
            assert spec["securityContext"]["runAsNonRoot"] is True, where
            assert spec["securityContext"]["runAsUser"] > 0, where
            assert spec["automountServiceAccountToken"] is False, where
            assert spec["enableServiceLinks"] is False, where
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            for section in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][section]), where


def test_the_scheduler_is_one_pod_with_a_disruption_budget(renders) -> None:
    for overlay, docs in renders.items():
        scheduler = named(docs, "Deployment", "opentinker-scheduler")
        assert scheduler["spec"]["replicas"] == 1, overlay
        assert scheduler["spec"]["strategy"] == {"type": "Recreate"}, "two Schedulers never run at once"
        labels = scheduler["spec"]["template"]["metadata"]["labels"]
        budgets = [pdb for pdb in of_kind(docs, "PodDisruptionBudget")
                   if selects(pdb["spec"]["selector"]["matchLabels"], labels)]
        assert len(budgets) == 1, f"{overlay}: the Scheduler's pods need one PodDisruptionBudget"
        spec = budgets[0]["spec"]
        assert spec.get("minAvailable") == 1 or spec.get("maxUnavailable") == 0, overlay


def test_gpus_are_requested_by_the_gpu_overlays_trainer_and_rollout_only(renders) -> None:
    for overlay, docs in renders.items():
        for workload in workloads(docs):
            resources = only_container(workload)["resources"]
            gpus = {section: resources[section].get("nvidia.com/gpu") for section in ("requests", "limits")}
            if overlay in GPU_OVERLAYS and workload["metadata"]["name"] in WORKERS:
                assert gpus == {"requests": 1, "limits": 1}, f"{overlay}: {workload['metadata']['name']}"
                spec = pod_spec(workload)
                assert spec["nodeSelector"], "GPU pods go to GPU nodes"
                assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"]), "and tolerate their taint"
            else:
                assert gpus == {"requests": None, "limits": None}, f"{overlay}: {workload['metadata']['name']}"


# --- Secrets ---------------------------------------------------------------------------------


def test_every_secret_config_map_and_claim_a_workload_names_is_in_the_render(renders) -> None:
    for overlay, docs in renders.items():
        for workload in workloads(docs):
            where = f"{overlay}: {workload['metadata']['name']}"
            container = only_container(workload)
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secret_values(named(docs, "Secret", ref["name"])), where
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    named(docs, "Secret", source["secretRef"]["name"])
                if "configMapRef" in source:
                    named(docs, "ConfigMap", source["configMapRef"]["name"])
            templates = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
            mounts = {mount["name"]: mount for mount in container.get("volumeMounts", [])}
            mounted = set(mounts)
            for volume in pod_spec(workload).get("volumes", []):
                assert volume["name"] in mounted, f"{where}: volume {volume['name']} is never mounted"
                if "secret" in volume:
                    named(docs, "Secret", volume["secret"]["secretName"])
                    assert mounts[volume["name"]].get("readOnly") is True, f"{where}: {volume['name']} is writable"
                if "persistentVolumeClaim" in volume:
                    named(docs, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
            volume_names = {volume["name"] for volume in pod_spec(workload).get("volumes", [])} | templates
            assert mounted <= volume_names, where


def looks_secret(value: str) -> bool:
    return any(pattern.search(value) for pattern in SECRET_LOOKING)


def test_the_secret_check_would_catch_real_keys_passwords_and_certificates() -> None:
    for real in (new_api_key(), secrets.token_hex(32), base64.b64encode(secrets.token_bytes(32)).decode(),
                 "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----"):
        assert looks_secret(real), real


def test_secrets_hold_marked_placeholders_only(renders) -> None:
    for overlay, docs in renders.items():
        assert of_kind(docs, "Secret"), overlay
        for secret in of_kind(docs, "Secret"):
            where = f"{overlay}: Secret/{secret['metadata']['name']}"
            assert "data" not in secret, f"{where}: base64 data could hide a real value; use stringData"
            for key, value in secret_values(secret).items():
                assert value.startswith("REPLACE_ME"), f"{where}: {key} is not a REPLACE_ME placeholder"
                assert not looks_secret(value), f"{where}: {key} looks like a real secret"
        config = named(docs, "ConfigMap", "opentinker-config")["data"]
        assert "@" not in config["OPENTINKER_REDIS_URL"], "the Redis password comes from its Secret, not the URL"


def test_the_admin_key_placeholder_is_refused_by_the_services(renders) -> None:
    placeholder = named(renders["gpu"], "Secret", "opentinker-admin-key")["stringData"]["api-key"]
    assert check_api_key(placeholder), "a service started with the placeholder would run with it"
    assert check_api_key(REAL_KEY) is None


def test_the_redis_container_refuses_the_placeholder_and_keeps_the_password_out_of_argv(renders, tmp_path) -> None:
    redis = only_container(named(renders["gpu"], "StatefulSet", "opentinker-redis"))
    script = redis["command"][2]
    placeholder = named(renders["gpu"], "Secret", "opentinker-redis")["stringData"]["password"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    entrypoint = bin_dir / "docker-entrypoint.sh"  # stands in for the image's: prints its argv
    entrypoint.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    entrypoint.chmod(0o755)
    password_file, config_file = tmp_path / "password", tmp_path / "redis-auth.conf"
    local = (script.replace("/etc/opentinker/redis/password", str(password_file))
             .replace("/tmp/redis-auth.conf", str(config_file)))
    assert local != script and str(config_file) in local

    def run(password: str) -> subprocess.CompletedProcess[str]:
        password_file.write_text(password + "\n")
        environ = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        return subprocess.run(["sh", "-c", local], capture_output=True, text=True, env=environ, timeout=10)

    refused = run(placeholder)
    assert refused.returncode == 1 and "replace the placeholder" in refused.stderr
    assert not config_file.exists()
    started = run(REAL_PASSWORD)
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["redis-server", str(config_file), "--appendonly", "yes",
                                      "--appendfsync", "always"]
    assert config_file.read_text() == f"requirepass {REAL_PASSWORD}\n"
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600


# --- settings and addresses ------------------------------------------------------------------


def test_every_service_starts_with_the_settings_it_is_given(renders, tmp_path) -> None:
    for overlay, docs in renders.items():
        for workload, container, settings_class in opentinker_services(docs):
            where = f"{overlay}: {workload['metadata']['name']}"
            environ = container_environ(docs, workload, container)
            assert environ["OPENTINKER_REDIS_PASSWORD_FILE"], where
            # every file setting names a file of a mounted Secret; here, a readable stand-in
            environ = with_local_secret_files(docs, workload, container, environ, tmp_path)
            settings = load_settings(settings_class, environ)  # raises on a typo or a bad value
            assert settings.host == "0.0.0.0" and settings.api_key == REAL_KEY, where
            assert settings.tls == ("mutual" if overlay in TLS_OVERLAYS else "off"), where


def test_every_service_sets_at_least_what_docker_compose_sets(renders, compose) -> None:
    docs = renders["gpu"]
    for workload, container, _ in opentinker_services(docs):
        service = workload["metadata"]["name"].removeprefix("opentinker-")
        expected = set(compose["services"][service]["environment"])
        assert expected <= set(container_environ(docs, workload, container)), service


def test_the_dashboard_reads_its_key_from_a_mounted_secret_and_listens_on_loopback(renders) -> None:
    for overlay, docs in renders.items():
        dashboard = named(docs, "Deployment", "opentinker-dashboard")
        container = only_container(dashboard)
        environ = container_environ(docs, dashboard, container)
        assert "OPENTINKER_API_KEY" not in environ
        secret = mounted_secret_file(dashboard, container, environ["OPENTINKER_API_KEY_FILE"])
        assert secret == ("opentinker-admin-key", "api-key"), overlay
        command = container["command"]
        assert command[command.index("--host") + 1] == "127.0.0.1", "it lends the admin key to keyless browsers"
        assert service_port(docs, command[command.index("--scheduler") + 1]) == "grpc"


@pytest.mark.parametrize("ordinal", [0, 3])
def test_workers_advertise_their_own_pods_stable_address(renders, ordinal, tmp_path) -> None:
    for overlay, docs in renders.items():
        for name in WORKERS:
            workload = named(docs, "StatefulSet", name)
            container = only_container(workload)
            module = service_module(container)
            settings_class = SETTINGS[module]
            environ = container_environ(docs, workload, container, ordinal)
            environ = with_local_secret_files(docs, workload, container, environ, tmp_path)
            address = load_settings(settings_class, environ).reachable_address  # what it registers
            host, _, port = address.rpartition(":")
            service = named(docs, "Service", workload["spec"]["serviceName"])
            assert host not in LOOPBACK_HOSTS, f"{overlay}: {name} advertises {address}"
            assert address == f"{name}-{ordinal}.{service['metadata']['name']}.{NAMESPACE}.svc:{port}"
            assert int(port) == port_named(container, "grpc")
            assert service["spec"]["clusterIP"] == "None", "pod DNS names need a headless Service"
            assert service["spec"]["publishNotReadyAddresses"] is True, "a worker registers before it is ready"
            assert selects(service["spec"]["selector"], workload["spec"]["template"]["metadata"]["labels"])


def service_port(docs: list[dict[str, Any]], address: str) -> str:
    """The name of the Service port `address` (service:port or sts-N.headless:port) reaches."""
    host, _, port = address.rpartition(":")
    parts = host.split(".")
    if len(parts) >= 2:  # a StatefulSet pod: <statefulset>-<n>.<headless service>[.<namespace>.svc]
        statefulset = named(docs, "StatefulSet", parts[0].rsplit("-", 1)[0])
        assert statefulset["spec"]["serviceName"] == parts[1], address
        service = named(docs, "Service", parts[1])
    else:
        service = named(docs, "Service", host)
    return next(p["name"] for p in service["spec"]["ports"] if p["port"] == int(port))


def test_every_peer_address_names_a_service_port_of_the_render(renders) -> None:
    for overlay, docs in renders.items():
        for workload, container, _ in opentinker_services(docs):
            environ = container_environ(docs, workload, container)
            for name, value in environ.items():
                if name.endswith("_ADDRESS") and name.startswith("OPENTINKER_"):
                    expected = "http" if name.startswith("OPENTINKER_GATEWAY_") and "ADVERTISE" in name else "grpc"
                    assert service_port(docs, value) == expected, f"{overlay}: {name}={value}"


def test_services_select_pods_and_target_their_named_ports(renders) -> None:
    for overlay, docs in renders.items():
        for service in of_kind(docs, "Service"):
            pods = [w for w in workloads(docs)
                    if selects(service["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])]
            assert len(pods) == 1, f"{overlay}: Service/{service['metadata']['name']} selects {len(pods)} workloads"
            names = {port["name"] for port in only_container(pods[0])["ports"]}
            assert {port["targetPort"] for port in service["spec"]["ports"]} <= names, service["metadata"]["name"]


# --- volumes and Redis -----------------------------------------------------------------------


def test_volumes_that_several_pods_mount_are_read_write_many_beyond_one_node(renders) -> None:
    for overlay, docs in renders.items():
        for claim in of_kind(docs, "PersistentVolumeClaim"):
            users = [w for w in workloads(docs) for volume in pod_spec(w).get("volumes", [])
                     if volume.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"]]
            assert users, f"{overlay}: nothing mounts {claim['metadata']['name']}"
            if len(users) > 1 and overlay not in SINGLE_NODE_OVERLAYS:
                assert claim["spec"]["accessModes"] == ["ReadWriteMany"], f"{overlay}: {claim['metadata']['name']}"


def test_redis_keeps_every_write_and_admits_only_the_services(renders) -> None:
    for overlay, docs in renders.items():
        if overlay == "external-redis":
            continue
        redis = named(docs, "StatefulSet", "opentinker-redis")
        assert "--appendonly yes --appendfsync always" in only_container(redis)["command"][2]
        assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
        policy = named(docs, "NetworkPolicy", "opentinker-redis")
        assert selects(policy["spec"]["podSelector"]["matchLabels"], redis["spec"]["template"]["metadata"]["labels"])
        allowed = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
        for workload in workloads(docs):
            labels = workload["spec"]["template"]["metadata"]["labels"]
            uses_redis = "OPENTINKER_REDIS_URL" in container_environ(docs, workload, only_container(workload))
            assert selects(allowed, labels) == uses_redis, f"{overlay}: {workload['metadata']['name']}"


def test_the_external_redis_overlay_runs_no_redis_and_points_the_services_elsewhere(renders) -> None:
    docs = renders["external-redis"]
    assert not [doc for doc in docs if "redis" in doc["metadata"]["name"] and doc["kind"] != "Secret"]
    url = named(docs, "ConfigMap", "opentinker-config")["data"]["OPENTINKER_REDIS_URL"]
    assert "opentinker-redis" not in url and "@" not in url
    named(docs, "Secret", "opentinker-redis")  # its password still comes from the Secret


# --- TLS -------------------------------------------------------------------------------------


def test_the_tls_overlay_runs_every_opentinker_container_on_mutual_tls_from_the_mounted_secret(renders) -> None:
    for overlay in TLS_OVERLAYS:
        docs = renders[overlay]
        assert set(secret_values(named(docs, "Secret", TLS_SECRET))) == set(TLS_FILES.values()), overlay
        containers = [(w, only_container(w)) for w in workloads(docs) if is_opentinker(only_container(w))]
        assert {w["metadata"]["name"] for w, _ in containers} == {
            w["metadata"]["name"] for w in workloads(docs)} - {"opentinker-redis"}, overlay
        for workload, container in containers:
            where = f"{overlay}: {workload['metadata']['name']}"
            environ = container_environ(docs, workload, container)
            assert environ["OPENTINKER_TLS"] == "mutual", where
            for variable, key in TLS_FILES.items():
                assert mounted_secret_file(workload, container, environ[variable]) == (TLS_SECRET, key), \
                    f"{where}: {variable}={environ[variable]}"
            # what the dashboard's client and the in-container health probe dial with: the CA and
            # the pod's own certificate (mutual), read from the same variables
            assert tls_from_env(environ) == ClientTls(
                ca_file=environ["OPENTINKER_TLS_CA_FILE"], cert_file=environ["OPENTINKER_TLS_CERT_FILE"],
                key_file=environ["OPENTINKER_TLS_KEY_FILE"]), where


def test_redis_and_every_other_overlay_stay_plaintext(renders) -> None:
    for overlay, docs in renders.items():
        for workload in workloads(docs):
            container = only_container(workload)
            where = f"{overlay}: {workload['metadata']['name']}"
            if overlay in TLS_OVERLAYS and is_opentinker(container):
                continue
            environ = container_environ(docs, workload, container)
            assert not [name for name in environ if name.startswith("OPENTINKER_TLS")], where
            assert tls_from_env(environ) is None, where
            assert not [volume for volume in pod_spec(workload).get("volumes", [])
                        if volume.get("secret", {}).get("secretName") == TLS_SECRET], where
            if service_module(container) in set(SETTINGS) - {"opentinker_gateway"}:  # the gRPC services
                assert all("grpc" in container[name] for name in PROBES), where
        if overlay not in TLS_OVERLAYS:
            assert not [secret for secret in of_kind(docs, "Secret") if secret["metadata"]["name"] == TLS_SECRET]
            assert not [key for key in named(docs, "ConfigMap", "opentinker-config")["data"]
                        if key.startswith("OPENTINKER_TLS")], overlay
