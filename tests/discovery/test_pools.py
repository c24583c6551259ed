"""InferencePool and pod objects read into endpoints, and the merge with the policy file."""

from __future__ import annotations

import pytest

from kinference.config import Policy, parse_policy
from kinference.discovery.pools import (
    DiscoveredPool,
    endpoints,
    pod_ip_if_ready,
    read_pool,
)
from kinference.discovery.source import PolicySource, discovered_pool
from tests.discovery.objects import NS, inference_pool, pod

FILE = """
pools:
  - {namespace: default, name: chat, endpoints: ["10.0.0.5:8000"], models: [static-model]}
  - {namespace: models, name: declared, endpoints: [], models: [file-model], engine: vllm}
models:
  - name: file-alias
    targets: [{pool: models/declared, model: file-model}]
"""


def found(obj: dict, pods: list[dict]) -> DiscoveredPool:
    spec = read_pool(obj, NS)
    assert spec is not None
    return DiscoveredPool(spec, endpoints(spec, pods))


def test_pool_spec_is_read_from_the_v1_fields() -> None:
    spec = read_pool(inference_pool("p", {"b": "2", "a": "1"}, ports=(8000,), engine="sglang"), NS)
    assert spec is not None
    assert spec.ref == "models/p"
    assert spec.label_selector == "a=1,b=2"
    assert spec.ports == (8000,)
    assert spec.models == ("disc-model",)
    assert spec.annotations["kinference.io/engine"] == "sglang"


@pytest.mark.parametrize(
    "change",
    [
        lambda o: o["spec"].pop("selector"),
        lambda o: o["spec"]["selector"].update(matchLabels={}),
        lambda o: o["spec"].update(targetPorts=[]),
        lambda o: o["spec"].update(targetPorts=[{"number": 70000}]),
        lambda o: o["spec"].update(targetPorts="8000"),
    ],
)
def test_pool_without_selector_or_port_is_refused(change: object) -> None:
    obj = inference_pool("p")
    change(obj)  # type: ignore[operator]
    assert read_pool(obj, NS) is None


def test_pod_is_an_endpoint_only_when_ready_with_an_ip_and_not_terminating() -> None:
    assert pod_ip_if_ready(pod("a", "10.1.0.1")) == "10.1.0.1"
    assert pod_ip_if_ready(pod("a", "10.1.0.1", ready=False)) is None
    assert pod_ip_if_ready(pod("a", "10.1.0.1", terminating=True)) is None
    assert pod_ip_if_ready(pod("a", "")) is None
    pending = pod("a", "10.1.0.1")
    pending["status"] = {"phase": "Pending"}
    assert pod_ip_if_ready(pending) is None


def test_endpoints_match_the_selector_and_every_port() -> None:
    spec = read_pool(inference_pool("p", {"app": "x"}, ports=(8000, 8001)), NS)
    assert spec is not None
    pods = [
        pod("a", "10.1.0.2", {"app": "x", "extra": "y"}),
        pod("b", "fd00::1", {"app": "x"}),
        pod("c", "10.1.0.3", {"app": "other"}),
    ]
    assert endpoints(spec, pods) == (
        "10.1.0.2:8000",
        "10.1.0.2:8001",
        "[fd00::1]:8000",
        "[fd00::1]:8001",
    )


def test_annotations_make_a_pool_of_their_own() -> None:
    obj = inference_pool("p", models="a, b", engine="vllm")
    obj["metadata"]["annotations"]["kinference.io/metrics-path"] = "/prom"
    pool = discovered_pool(found(obj, [pod("x", "10.1.0.1")]), None)
    assert (pool.ref, pool.models, pool.engine) == ("models/p", ("a", "b"), "vllm")
    assert (pool.endpoints, pool.metrics_path) == (("10.1.0.1:8000",), "/prom")


def test_the_policy_file_entry_wins_over_annotations_and_keeps_only_its_endpoints() -> None:
    policy = parse_policy(FILE)
    declared = policy.pool("models/declared")
    pool = discovered_pool(found(inference_pool("declared"), [pod("x", "10.1.0.1")]), declared)
    assert (pool.models, pool.engine, pool.endpoints) == (
        ("file-model",),
        "vllm",
        ("10.1.0.1:8000",),
    )


def test_unusable_pools_say_why() -> None:
    with pytest.raises(ValueError, match=r"kinference.io/models"):
        discovered_pool(found(inference_pool("p", models=None), []), None)
    with pytest.raises(ValueError, match="engine"):
        discovered_pool(found(inference_pool("p", engine="tgi"), []), None)


def test_source_merges_applies_on_change_only_and_keeps_static_pools() -> None:
    applied: list[Policy] = []
    source = PolicySource(parse_policy(FILE), applied.append)
    pods = [pod("x", "10.1.0.1")]
    discovered = {
        "models/declared": found(inference_pool("declared", models=None), pods),
        "models/annotated": found(inference_pool("annotated"), pods),
        "models/unknown": found(inference_pool("unknown", models=None), pods),
    }
    source.set_discovered(discovered)
    policy = applied[-1]
    assert policy.pool("default/chat").endpoints == ("10.0.0.5:8000",)  # type: ignore[union-attr]
    assert policy.pool("models/declared").endpoints == ("10.1.0.1:8000",)  # type: ignore[union-attr]
    assert policy.pool("models/annotated").models == ("disc-model",)  # type: ignore[union-attr]
    assert policy.pool("models/unknown") is None
    assert set(source.skipped) == {"models/unknown"}
    assert policy.resolve_model("file-alias") is not None

    source.set_discovered(dict(discovered))  # same pools: nothing to apply
    assert len(applied) == 1
    source.set_discovered({})  # all gone: the declared pool is static (and empty) again
    assert applied[-1].pool("models/declared").endpoints == ()  # type: ignore[union-attr]
    assert applied[-1].pool("models/annotated") is None

    source.set_file_policy(parse_policy(FILE.replace("static-model", "renamed")))
    assert applied[-1].pool("default/chat").models == ("renamed",)  # type: ignore[union-attr]
