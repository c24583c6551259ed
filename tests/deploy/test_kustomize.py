"""Every overlay and component builds with `kubectl kustomize` into valid Kubernetes
objects, and the objects wire together: probes, ports, replicas, disruption budget,
security context, RBAC, topology spread."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from tests.deploy.manifests import (
    BASE,
    COMPONENTS,
    KUSTOMIZE,
    NAMESPACE,
    OVERLAYS,
    Manifest,
    Schemas,
    build,
    container,
    find,
    kinds,
    matches,
    plain_env,
)

Overlay = Callable[[str], list[Manifest]]
PICKER = {"app.kubernetes.io/name": "kinference", "app.kubernetes.io/component": "picker"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "Namespace"}
EXPECTED_REPLICAS = {"standalone": 1, "redis": 3, "external-redis": 3}


@pytest.mark.parametrize("name", OVERLAYS)
def test_overlay_builds_valid_objects_in_one_namespace(
    overlay: Overlay, schemas: Schemas, name: str
) -> None:
    manifests = overlay(name)
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= set(kinds(manifests))
    for manifest in manifests:
        schemas.validate(manifest)
        assert manifest["kind"] not in CLUSTER_SCOPED
        assert manifest["metadata"]["namespace"] == NAMESPACE
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "kinference"
        assert labels["app.kubernetes.io/managed-by"] == "kustomize"
        assert "app.kubernetes.io/name" in labels


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_applies_to_the_base(tmp_path: Path, schemas: Schemas, component: str) -> None:
    # kustomize refuses absolute paths: the test overlay goes in a copy of the tree.
    tree = shutil.copytree(KUSTOMIZE, tmp_path / "kustomize")
    test_overlay = tree / "overlays" / f"test-{component}"
    test_overlay.mkdir()
    (test_overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "namespace: kinference\n"
        "resources: [../../base]\n"
        f"components: [../../components/{component}]\n"
    )
    base = build(BASE)
    manifests = build(test_overlay)
    assert len(manifests) > len(base)
    for manifest in manifests:
        schemas.validate(manifest)


def test_validation_is_strict(overlay: Overlay, schemas: Schemas) -> None:
    """The schema check catches a misspelt field, a wrong type, an unknown kind, and the
    same mistakes in a CRD kind."""
    deployment = find(overlay("redis"), "Deployment", "kinference")
    schemas.validate(deployment)
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(jsonschema.ValidationError, match="readinesProbe"):
        schemas.validate(misspelt)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "three"
    with pytest.raises(jsonschema.ValidationError, match="three"):
        schemas.validate(wrong_type)
    with pytest.raises(KeyError, match="Deplyoment"):
        schemas.validate({**deployment, "kind": "Deplyoment"})
    monitor = copy.deepcopy(find(overlay("production"), "ServiceMonitor"))
    schemas.validate(monitor)
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError, match="15 seconds"):
        schemas.validate(monitor)
    monitor["spec"]["endpoint"] = monitor["spec"].pop("endpoints")
    with pytest.raises(jsonschema.ValidationError, match="endpoint"):
        schemas.validate(monitor)


@pytest.mark.parametrize("name", OVERLAYS)
def test_replicas_and_disruption_budget(overlay: Overlay, name: str) -> None:
    manifests = overlay(name)
    spec = find(manifests, "Deployment", "kinference")["spec"]
    if name in EXPECTED_REPLICAS:
        replicas = spec["replicas"]
        assert replicas == EXPECTED_REPLICAS[name]
    else:  # the autoscaler owns the count; an apply must not reset it
        assert "replicas" not in spec
        replicas = find(manifests, "HorizontalPodAutoscaler", "kinference")["spec"]["minReplicas"]
    pdb = find(manifests, "PodDisruptionBudget", "kinference")["spec"]
    assert pdb["selector"]["matchLabels"] == PICKER
    # With every replica healthy, a drain may evict at least one and keeps at least one
    # serving whenever there is more than one.
    allowed = pdb.get("maxUnavailable", replicas - pdb.get("minAvailable", replicas))
    assert allowed >= 1
    assert replicas == 1 or replicas - allowed >= 1
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_probes_are_native_grpc_on_the_picker_port(overlay: Overlay) -> None:
    picker = container(find(overlay("redis"), "Deployment", "kinference"))
    ports = {p["name"]: p["containerPort"] for p in picker["ports"]}
    assert ports == {"grpc": 9002, "metrics": 9090}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert picker[probe]["grpc"]["port"] == ports["grpc"], probe
    # Service "" is the one that turns NOT_SERVING when a drain starts.
    assert picker["readinessProbe"]["grpc"]["service"] == ""
    assert plain_env(find(overlay("redis"), "Deployment", "kinference"))[
        "KINFERENCE_LISTEN"
    ].endswith(":9002")


def test_service_speaks_h2c_and_selects_the_pickers(overlay: Overlay) -> None:
    manifests = overlay("redis")
    service = find(manifests, "Service", "kinference")["spec"]
    ports = {p["name"]: p for p in service["ports"]}
    assert service["type"] == "ClusterIP"
    assert ports["grpc"]["port"] == 9002 and ports["grpc"]["targetPort"] == "grpc"
    assert ports["grpc"]["appProtocol"] == "kubernetes.io/h2c"
    assert ports["metrics"]["port"] == 9090 and ports["metrics"]["targetPort"] == "metrics"
    template = find(manifests, "Deployment", "kinference")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"] == PICKER and matches(service["selector"], template)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("Deployment", "kinference"), ("StatefulSet", None), ("Deployment", "kinference-gateway")],
)
def test_pods_run_non_root_read_only_without_capabilities(
    overlay: Overlay, kind: str, name: str | None
) -> None:
    workload = find(overlay("redis"), kind, name)
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container(workload)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    limits = container(workload)["resources"]["limits"]
    assert {"cpu", "memory"} >= set(limits) >= {"memory"}
    assert {"cpu", "memory"} <= set(container(workload)["resources"]["requests"])


def test_grace_period_outlasts_pre_stop_and_drain(overlay: Overlay) -> None:
    deployment = find(overlay("redis"), "Deployment", "kinference")
    pod = deployment["spec"]["template"]["spec"]
    picker = container(deployment)
    pre_stop = picker["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    drain_s = float(plain_env(deployment)["KINFERENCE_SHUTDOWN_GRACE_S"])
    assert pod["terminationGracePeriodSeconds"] > float(pre_stop[1]) + drain_s
    # A draining picker fails liveness too; it must not be restarted mid-drain.
    liveness = picker["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > drain_s


def test_body_budget_fits_the_memory_limit(overlay: Overlay) -> None:
    deployment = find(overlay("redis"), "Deployment", "kinference")
    limit = container(deployment)["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    limit_bytes = int(limit.removesuffix("Gi")) * 1024**3
    buffered = int(plain_env(deployment)["KINFERENCE_MAX_BUFFERED_BYTES"])
    assert buffered <= limit_bytes // 2  # the rest: interpreter, numpy, gRPC buffers


def test_spread_across_zones_and_nodes(overlay: Overlay) -> None:
    deployment = find(overlay("redis"), "Deployment", "kinference")
    template = deployment["spec"]["template"]
    constraints = template["spec"]["topologySpreadConstraints"]
    keys = {c["topologyKey"] for c in constraints}
    assert keys == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in constraints:
        assert matches(constraint["labelSelector"]["matchLabels"], template["metadata"]["labels"])
        assert constraint["maxSkew"] == 1


def test_rbac_reads_inference_pools_and_pods_in_its_namespace(overlay: Overlay) -> None:
    manifests = overlay("redis")
    role = find(manifests, "Role")
    granted = {
        (group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted == {("inference.networking.k8s.io", "inferencepools"), ("", "pods")}
    for rule in role["rules"]:
        assert sorted(rule["verbs"]) == ["get", "list", "watch"]
    binding = find(manifests, "RoleBinding")
    account = find(manifests, "ServiceAccount")["metadata"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    pod = find(manifests, "Deployment", "kinference")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["name"]


def test_autoscaler_scales_the_deployment_on_cpu(overlay: Overlay) -> None:
    manifests = overlay("production")
    hpa = find(manifests, "HorizontalPodAutoscaler", "kinference")["spec"]
    deployment = find(manifests, "Deployment", "kinference")
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert [m["resource"]["name"] for m in hpa["metrics"]] == ["cpu"]
    assert "cpu" in container(deployment)["resources"]["requests"]  # utilisation needs it
    assert hpa["minReplicas"] <= hpa["maxReplicas"]


def test_service_monitor_scrapes_the_metrics_port(overlay: Overlay) -> None:
    manifests = overlay("production")
    monitor = find(manifests, "ServiceMonitor")["spec"]
    service = find(manifests, "Service", "kinference")
    assert matches(monitor["selector"]["matchLabels"], service["metadata"]["labels"])
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["endpoints"]] == ["metrics"]
    assert "metrics" in port_names
    assert monitor["endpoints"][0]["path"] == "/metrics"


def test_network_policies(overlay: Overlay) -> None:
    manifests = overlay("production")
    picker_pods = find(manifests, "Deployment", "kinference")["spec"]["template"]["metadata"][
        "labels"
    ]
    redis_pods = find(manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    picker = find(manifests, "NetworkPolicy", "kinference")["spec"]
    assert matches(picker["podSelector"]["matchLabels"], picker_pods)
    assert not matches(picker["podSelector"]["matchLabels"], redis_pods)
    assert picker["policyTypes"] == ["Ingress"]
    callers, monitoring = picker["ingress"]
    assert callers["from"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"kinference.io/caller": "true"}}}
    ]
    assert callers["ports"] == [{"port": 9002, "protocol": "TCP"}]
    assert monitoring["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert monitoring["ports"] == [{"port": 9090, "protocol": "TCP"}]
    redis = find(manifests, "NetworkPolicy", "kinference-redis")["spec"]
    assert matches(redis["podSelector"]["matchLabels"], redis_pods)
    assert not matches(redis["podSelector"]["matchLabels"], picker_pods)
    (only,) = redis["ingress"]
    assert [peer["podSelector"]["matchLabels"] for peer in only["from"]] == [PICKER]
    assert only["ports"] == [{"port": 6379, "protocol": "TCP"}]


GATEWAY = {"app.kubernetes.io/name": "kinference", "app.kubernetes.io/component": "gateway"}
EXPECTED_GATEWAYS = {"standalone": 1, "redis": 2, "external-redis": 2}


@pytest.mark.parametrize("name", OVERLAYS)
def test_every_overlay_has_the_gateway_in_front_of_the_pickers(overlay: Overlay, name: str) -> None:
    manifests = overlay(name)
    deployment = find(manifests, "Deployment", "kinference-gateway")
    gateway = container(deployment)
    assert gateway["args"] == ["gateway"]
    env = plain_env(deployment)
    picker_service = find(manifests, "Service", "kinference")
    host, _, port = env["KINFERENCE_GATEWAY_PICKER"].partition(":")
    assert host == picker_service["metadata"]["name"]
    assert int(port) in {p["port"] for p in picker_service["spec"]["ports"] if p["name"] == "grpc"}
    assert env["KINFERENCE_GATEWAY_LISTEN"].endswith(":8080")
    # Ready only while the picker answers; alive as long as it accepts connections.
    for probe in ("readinessProbe", "startupProbe"):
        assert gateway[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert gateway["livenessProbe"]["tcpSocket"] == {"port": "http"}
    pod = deployment["spec"]["template"]
    service = find(manifests, "Service", "kinference-gateway")["spec"]
    assert service["selector"] == GATEWAY and matches(
        service["selector"], pod["metadata"]["labels"]
    )
    assert service["ports"] == [
        {
            "name": "http",
            "port": 8080,
            "targetPort": "http",
            "protocol": "TCP",
            "appProtocol": "http",
        }
    ]
    pdb = find(manifests, "PodDisruptionBudget", "kinference-gateway")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == GATEWAY
    # The picker Service must not select the gateways, nor the gateway Service the pickers.
    picker_pods = find(manifests, "Deployment", "kinference")["spec"]["template"]["metadata"]
    assert not matches(picker_service["spec"]["selector"], pod["metadata"]["labels"])
    assert not matches(service["selector"], picker_pods["labels"])
    backends = pod["spec"]["volumes"][0]["configMap"]["name"]
    assert find(manifests, "ConfigMap", backends)
    mount = gateway["volumeMounts"][0]["mountPath"]
    assert env["KINFERENCE_GATEWAY_BACKENDS_FILE"] == f"{mount}/backends.yaml"
    grace = int(env["KINFERENCE_GATEWAY_SHUTDOWN_GRACE_S"])
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > grace + 5
    if name in EXPECTED_GATEWAYS:
        assert deployment["spec"]["replicas"] == EXPECTED_GATEWAYS[name]
    else:  # production: the gateway HPA owns the count
        assert "replicas" not in deployment["spec"]
        hpa = find(manifests, "HorizontalPodAutoscaler", "kinference-gateway")["spec"]
        assert hpa["scaleTargetRef"]["name"] == "kinference-gateway"
        assert hpa["minReplicas"] >= 2


def test_network_policy_lets_the_gateways_reach_the_pickers(overlay: Overlay) -> None:
    manifests = overlay("production")
    gateway_pods = find(manifests, "Deployment", "kinference-gateway")["spec"]["template"]
    picker = find(manifests, "NetworkPolicy", "kinference")["spec"]
    callers = picker["ingress"][0]["from"][0]["podSelector"]
    assert matches(callers["matchLabels"], gateway_pods["metadata"]["labels"])
    front = find(manifests, "NetworkPolicy", "kinference-gateway")["spec"]
    assert front["podSelector"]["matchLabels"] == GATEWAY
    assert front["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]
