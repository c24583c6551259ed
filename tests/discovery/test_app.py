"""Discovery through the real picker: Picks follow pods and InferencePools as they change."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinference.config import load_policy
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body, push_and_pick, wait_until
from tests.conftest import MODEL, TEST_POLICY, PickerFactory, RunningPicker
from tests.discovery.kube_double import KubeDouble
from tests.discovery.objects import NS, PODS, POOLS, inference_pool, pod

DISC = "disc-model"
REF = f"{NS}/disc"
OK = pb.PickResponse.OK


async def start(
    start_picker: PickerFactory, kube: KubeDouble, **overrides: object
) -> RunningPicker:
    values: dict[str, object] = {
        "discovery": "kubernetes",
        "discovery_server": kube.url,
        "discovery_namespace": NS,
    }
    return await start_picker(**(values | overrides))


def endpoints(picker: RunningPicker, ref: str = REF) -> set[str] | None:
    pool = picker.app.policy.pool(ref)
    return None if pool is None else set(pool.endpoints)


async def picked(picker: RunningPicker, model: str = DISC, times: int = 4) -> set[str]:
    """The endpoints `times` Picks for `model` went to (each must be OK)."""
    chosen = set()
    for _ in range(times):
        pick = await push_and_pick(picker, chat_body(model))
        assert pick.outcome == OK, pick
        chosen.add(pick.local.endpoint)
        await picker.client.abort(pick.response_id)
    return chosen


@pytest.fixture
def cluster(kube: KubeDouble) -> KubeDouble:
    kube.put(POOLS, inference_pool("disc"))
    kube.put(PODS, pod("a", "10.1.0.1"))
    kube.put(PODS, pod("b", "10.1.0.2"))
    kube.put(PODS, pod("c", "10.1.0.3", ready=False))
    kube.put(PODS, pod("other", "10.1.0.9", {"app": "other"}))
    return kube


async def test_initial_list_builds_pools_beside_the_static_ones(
    start_picker: PickerFactory, cluster: KubeDouble
) -> None:
    picker = await start(start_picker, cluster)
    assert endpoints(picker) == {"10.1.0.1:8000", "10.1.0.2:8000"}  # before start() returned
    assert await picked(picker) <= {"10.1.0.1:8000", "10.1.0.2:8000"}
    assert await picked(picker, MODEL) <= {"10.0.0.5:8000", "10.0.0.6:8000", "10.0.1.5:8000"}
    assert picker.metric("kinference_discovery_pool_endpoints", {"pool": REF}) == 2
    labels = {"pool": REF, "resource_version": "1", "routed": "true"}
    assert picker.metric("kinference_discovery_pool_info", labels) == 1
    age = picker.metric("kinference_discovery_last_event_age_seconds", {"resource": "pods"})
    assert 0 <= age < 60


async def test_pods_turning_ready_unready_and_deleted_move_the_picks(
    start_picker: PickerFactory, cluster: KubeDouble
) -> None:
    picker = await start(start_picker, cluster)
    cluster.put(PODS, pod("a", "10.1.0.1", ready=False))
    await wait_until(lambda: endpoints(picker) == {"10.1.0.2:8000"}, what="a unready")
    assert await picked(picker) == {"10.1.0.2:8000"}

    cluster.put(PODS, pod("c", "10.1.0.3"))
    cluster.put(PODS, pod("b", "10.1.0.2", terminating=True))
    await wait_until(lambda: endpoints(picker) == {"10.1.0.3:8000"}, what="c ready, b leaving")
    assert await picked(picker) == {"10.1.0.3:8000"}

    cluster.delete(PODS, "c")
    await wait_until(lambda: endpoints(picker) == set(), what="c deleted")
    pick = await push_and_pick(picker, chat_body(DISC))
    assert pick.outcome == pb.PickResponse.NO_WORKERS, pick


async def test_inference_pool_modified_and_deleted(
    start_picker: PickerFactory, cluster: KubeDouble
) -> None:
    picker = await start(start_picker, cluster)
    cluster.put(POOLS, inference_pool("disc", ports=(9000,)))
    await wait_until(
        lambda: endpoints(picker) == {"10.1.0.1:9000", "10.1.0.2:9000"}, what="new port"
    )
    cluster.put(POOLS, inference_pool("disc", {"app": "other"}, ports=(9000,)))
    await wait_until(lambda: endpoints(picker) == {"10.1.0.9:9000"}, what="new selector")
    assert await picked(picker) == {"10.1.0.9:9000"}
    rv = str(cluster.revision)
    labels = {"pool": REF, "resource_version": rv, "routed": "true"}
    assert picker.metric("kinference_discovery_pool_info", labels) == 1

    cluster.delete(POOLS, "disc")
    await wait_until(lambda: endpoints(picker) is None, what="pool deleted")
    pick = await push_and_pick(picker, chat_body(DISC))
    assert pick.outcome == pb.PickResponse.NO_WORKERS, pick
    assert await picked(picker, MODEL)  # the static pools are untouched


async def test_api_server_restart_and_410_keep_the_pools(
    start_picker: PickerFactory, cluster: KubeDouble
) -> None:
    picker = await start(start_picker, cluster)
    await cluster.stop()
    assert await picked(picker) <= {"10.1.0.1:8000", "10.1.0.2:8000"}  # still routed
    cluster.put(PODS, pod("a", "10.1.0.1", ready=False))
    cluster.compact()
    await cluster.start()
    await wait_until(lambda: endpoints(picker) == {"10.1.0.2:8000"}, what="resync")
    assert picker.metric("kinference_discovery_relists_total", {"resource": "pods"}) >= 1
    assert picker.metric("kinference_discovery_watch_restarts_total", {"resource": "pods"}) >= 1
    cluster.put(PODS, pod("c", "10.1.0.3"))
    await wait_until(lambda: endpoints(picker) == {"10.1.0.2:8000", "10.1.0.3:8000"})


async def test_policy_file_names_models_and_reloads_beside_discovery(
    start_picker: PickerFactory, kube: KubeDouble, tmp_path: Path
) -> None:
    kube.put(POOLS, inference_pool("declared", models=None))
    kube.put(POOLS, inference_pool("unnamed", models=None))
    kube.put(PODS, pod("a", "10.1.0.1"))
    path = tmp_path / "policy.yaml"
    declared = """
  - {namespace: models, name: declared, endpoints: [], models: [file-model]}
models:
  - {name: alias, targets: [{pool: models/declared, model: file-model}]}
"""
    path.write_text(TEST_POLICY + declared)
    picker = await start(start_picker, kube, policy=load_policy(path), config=path)
    assert await picked(picker, "alias") == {"10.1.0.1:8000"}
    assert endpoints(picker, f"{NS}/unnamed") is None  # no models known: not routed
    skipped = {"pool": f"{NS}/unnamed", "resource_version": "2", "routed": "false"}
    assert picker.metric("kinference_discovery_pool_info", skipped) == 1

    path.write_text(TEST_POLICY.replace("qwen-7b", "qwen-14b") + declared)
    assert picker.app.watcher is not None
    assert await picker.app.watcher.check()
    assert await picked(picker, "qwen-14b") == {"10.0.1.5:8000"}
    assert await picked(picker, "alias") == {"10.1.0.1:8000"}  # discovery still merged in


async def test_kubeconfig_with_a_token_and_its_context_namespace(
    start_picker: PickerFactory, tmp_path: Path
) -> None:
    kube = KubeDouble(token="s3cret")
    await kube.start()
    try:
        kube.put(POOLS, inference_pool("disc"))
        kube.put(PODS, pod("a", "10.1.0.1"))
        config = tmp_path / "kubeconfig"
        config.write_text(
            f"""
apiVersion: v1
kind: Config
clusters: [{{name: double, cluster: {{server: "{kube.url}"}}}}]
users: [{{name: picker, user: {{token: s3cret}}}}]
contexts: [{{name: test, context: {{cluster: double, user: picker, namespace: {NS}}}}}]
current-context: test
"""
        )
        picker = await start_picker(discovery="kubernetes", discovery_kubeconfig=config)
        assert endpoints(picker) == {"10.1.0.1:8000"}
    finally:
        await kube.stop()
