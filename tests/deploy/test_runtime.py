"""What the manifests hand to the programs works with the real programs: the ConfigMap's
policy passes `check-config`, every overlay's environment is valid `KINFERENCE_*`
settings, the Redis arguments start a real redis-server, and `kinference serve` with the
Deployment's environment answers the probes' health services and the metrics scrape."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kinference.cli import main
from kinference.cluster.connection import check_url
from kinference.settings import load_settings
from loadtest.redis_server import RedisServer, free_port
from tests.deploy.manifests import OVERLAYS, Manifest, container, env_list, find, plain_env

Overlay = Callable[[str], list[Manifest]]
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# Stand-ins for the external-redis Secret's values: a password with URL-reserved
# characters, percent-encoded as the operations guide asks.
SECRET_VALUES = {"address": "redis.example.internal:6380", "password": "p%40ss%2Fw0rd"}
_SERVE_TIMEOUT_S = 30.0


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide any KINFERENCE_* variables of the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("KINFERENCE_"):
            monkeypatch.delenv(name)


def container_env(deployment: Manifest) -> dict[str, str]:
    """The environment Kubernetes gives the container: Secret references resolved with
    SECRET_VALUES, and `$(VAR)` expanded from the variables defined before (as kubelet
    does: a reference to a later or unknown variable stays as written)."""
    env: dict[str, str] = {}
    for item in env_list(deployment):
        if "value" in item:
            env[item["name"]] = _VAR.sub(lambda m: env.get(m[1], m[0]), item["value"])
        else:
            env[item["name"]] = SECRET_VALUES[item["valueFrom"]["secretKeyRef"]["key"]]
    return env


def test_the_configmap_policy_passes_check_config(
    overlay: Overlay, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = overlay("redis")
    deployment = find(manifests, "Deployment", "kinference")
    config = Path(plain_env(deployment)["KINFERENCE_CONFIG"])
    mount = next(m for m in container(deployment)["volumeMounts"] if m["name"] == "policy")
    # The file is a key of the ConfigMap mounted as a directory (no subPath: updates
    # reach the pod only that way).
    assert config.parent == Path(mount["mountPath"]) and "subPath" not in mount
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "policy"
    )
    configmap = find(manifests, "ConfigMap", volume["configMap"]["name"])
    policy = tmp_path / config.name
    policy.write_text(configmap["data"][config.name])
    assert main(["check-config", str(policy)]) == 0
    assert capsys.readouterr().out.startswith(f"{policy}: ok (1 pool, 1 provider")


@pytest.mark.parametrize("name", OVERLAYS)
def test_environment_is_valid_settings(
    overlay: Overlay, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    env = container_env(find(overlay(name), "Deployment", "kinference"))
    for key, value in env.items():
        assert "$(" not in value, f"{key} refers to an undefined variable: {value}"
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.listen == "0.0.0.0:9002"
    assert settings.metrics_listen == "0.0.0.0:9090"
    assert str(settings.config) == "/etc/kinference/policy.yaml"
    assert settings.discovery == "kubernetes"
    assert settings.discovery_namespace == ""  # its own: the one RBAC grants
    expected_redis = {
        "standalone": "",
        "redis": "redis://kinference-redis:6379/0",
        "external-redis": "rediss://:p%40ss%2Fw0rd@redis.example.internal:6380/0",
        "production": "redis://kinference-redis:6379/0",
    }[name]
    assert settings.redis_url == expected_redis


def test_external_redis_password_reaches_the_client_decoded(overlay: Overlay) -> None:
    url = container_env(find(overlay("external-redis"), "Deployment", "kinference"))[
        "KINFERENCE_REDIS_URL"
    ]
    options = redis.connection.parse_url(check_url(url))
    assert options["password"] == "p@ss/w0rd"
    assert (options["host"], options["port"]) == ("redis.example.internal", 6380)
    assert options["connection_class"] is redis.connection.SSLConnection
    secret_refs = [
        e["valueFrom"]["secretKeyRef"]
        for e in env_list(find(overlay("external-redis"), "Deployment", "kinference"))
        if "valueFrom" in e
    ]
    assert {ref["name"] for ref in secret_refs} == {"kinference-redis"}
    assert {ref["key"] for ref in secret_refs} == set(SECRET_VALUES)


def test_redis_overlay_url_names_the_redis_service(overlay: Overlay) -> None:
    manifests = overlay("redis")
    url = plain_env(find(manifests, "Deployment", "kinference"))["KINFERENCE_REDIS_URL"]
    host, port = url.removeprefix("redis://").removesuffix("/0").split(":")
    service = find(manifests, "Service", host)["spec"]
    statefulset = find(manifests, "StatefulSet")
    assert service["clusterIP"] == "None"
    assert statefulset["spec"]["serviceName"] == host
    assert [p["port"] for p in service["ports"]] == [int(port)]
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert all(labels[key] == value for key, value in service["selector"].items())
    assert not any(m["kind"] == "StatefulSet" for m in overlay("standalone"))
    assert "KINFERENCE_REDIS_URL" not in plain_env(
        find(overlay("standalone"), "Deployment", "kinference")
    )


@pytest.fixture
def manifest_redis(overlay: Overlay) -> Iterator[RedisServer]:
    """A real redis-server started with the StatefulSet's arguments (on loopback)."""
    args = tuple(container(find(overlay("redis"), "StatefulSet"))["args"])
    server = RedisServer(extra_args=args).start()
    try:
        yield server
    finally:
        server.stop()


def test_redis_arguments_work_on_a_real_server(
    overlay: Overlay, manifest_redis: RedisServer
) -> None:
    client = redis.Redis(port=manifest_redis.port, decode_responses=True)
    try:
        config = client.config_get("save", "appendonly", "maxmemory", "maxmemory-policy")
    finally:
        client.close()
    assert config == {
        "save": "",
        "appendonly": "no",
        "maxmemory": str(384 * 1024 * 1024),
        "maxmemory-policy": "noeviction",
    }
    limit = container(find(overlay("redis"), "StatefulSet"))["resources"]["limits"]["memory"]
    assert int(config["maxmemory"]) < int(limit.removesuffix("Mi")) * 1024 * 1024


def health(target: str, service: str) -> int | None:
    """The status of one grpc.health.v1 service, as a kubelet gRPC probe asks for it."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=service)
        try:
            return int(stub.Check(request, timeout=1, wait_for_ready=True).status)
        except grpc.RpcError:
            return None


def test_serve_with_the_deployment_environment_answers_probes_and_scrapes(
    overlay: Overlay, tmp_path: Path
) -> None:
    manifests = overlay("standalone")
    deployment = find(manifests, "Deployment", "kinference")
    picker = container(deployment)
    # Loopback ports and a local policy; everything else as the Deployment sets it.
    policy = tmp_path / "policy.yaml"
    policy.write_text('pools: [{name: chat, endpoints: ["127.0.0.1:9"], models: [m]}]\n')
    grpc_port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("KINFERENCE_")}
    env.update(plain_env(deployment))
    env.update(
        KINFERENCE_LISTEN=f"127.0.0.1:{grpc_port}",
        KINFERENCE_METRICS_LISTEN=f"127.0.0.1:{metrics_port}",
        KINFERENCE_CONFIG=str(policy),
        # No API server here (tests/discovery runs discovery against a double).
        KINFERENCE_DISCOVERY="off",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "kinference", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        target = f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + _SERVE_TIMEOUT_S
        probes = [picker[p]["grpc"] for p in ("startupProbe", "readinessProbe", "livenessProbe")]
        for probe in probes:
            while (
                health(target, probe.get("service", "")) != health_pb2.HealthCheckResponse.SERVING
            ):
                assert process.poll() is None, process.communicate()[1].decode()
                assert time.monotonic() < deadline, f"{probe} never answered SERVING"
        path = find(overlay("production"), "ServiceMonitor")["spec"]["endpoints"][0]["path"]
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}{path}", timeout=5) as r:
            assert r.status == 200
            assert b"kinference_" in r.read()
        process.send_signal(signal.SIGTERM)
        grace = float(plain_env(deployment)["KINFERENCE_SHUTDOWN_GRACE_S"])
        _out, err = process.communicate(timeout=grace + 10)
        assert process.returncode == 0, err.decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.parametrize("name", OVERLAYS)
def test_gateway_environment_is_valid_gateway_settings(
    overlay: Overlay, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from kinference.gateway.settings import GatewaySettings

    env = container_env(find(overlay(name), "Deployment", "kinference-gateway"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = GatewaySettings()
    assert settings.listen == "0.0.0.0:8080"
    assert settings.picker == "kinference:9002"
    assert str(settings.backends_file) == "/etc/kinference-gateway/backends.yaml"
