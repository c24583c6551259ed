"""Live pickers (standalone and on a real Redis) with traffic, scraped for each test."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kinference.config import parse_policy
from kinference.gateway.metrics import GatewayMetrics
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.kvevents.link import MAX_FRAME_BYTES
from loadtest.redis_server import RedisServer
from tests.api.helpers import wait_until
from tests.cluster.conftest import (  # noqa: F401 (fixtures, shared)
    redis_server,
    start_engines,
    start_replicas,
)
from tests.conftest import PickerFactory
from tests.discovery.conftest import kube  # noqa: F401 (a fixture, shared)
from tests.discovery.kube_double import KubeDouble
from tests.discovery.objects import NS, PODS, POOLS, inference_pool, pod
from tests.kvevents import vllm_format as vllm
from tests.ops.helpers import OPS_POLICY, Exposition, exercise, scrape
from tests.tokenize.files import write_model


@pytest.fixture
async def exposition(
    redis_server: RedisServer,  # noqa: F811 (set up first: it stops after the pickers)
    kube: KubeDouble,  # noqa: F811
    start_picker: PickerFactory,
    tmp_path: Path,
) -> Exposition:
    """Every series a picker exports: a standalone one watching its policy file and
    discovering a pool from a Kubernetes API double, and two replicas sharing a real Redis
    (the second applies the first's events)."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(OPS_POLICY)
    policy = parse_policy(OPS_POLICY)
    found = Exposition()
    kube.put(POOLS, inference_pool("disc"))
    kube.put(PODS, pod("a", "10.1.0.1"))
    discovery = {"discovery": "kubernetes", "discovery_server": kube.url,
                 "discovery_namespace": NS}  # fmt: skip
    alone = await start_picker(
        policy, metrics_listen="127.0.0.1:0", config=policy_file, **discovery
    )
    await exercise(alone)
    found.add(await scrape(alone))
    shared = {"metrics_listen": "127.0.0.1:0", "redis_url": redis_server.url}
    first = await start_picker(policy, **shared)
    second = await start_picker(policy, **shared)
    await exercise(first)
    applied = "kinference_cluster_events_applied_total"
    await wait_until(lambda: second.metric(applied, {"kind": "release"}) > 0, within_s=10.0)
    for replica in (first, second):
        found.add(await scrape(replica))
    found.add(gateway_page())
    found.add(await precise_exposition(start_picker, tmp_path))
    return found


def gateway_page() -> str:
    """The gateway's own series (kinference.gateway.metrics) after one relayed stream."""
    metrics = GatewayMetrics(CollectorRegistry())
    clock = TokenClock()
    for _ in range(3):
        clock.token()
    usage = Usage(model="m", prompt_tokens=5, completion_tokens=3, from_response=True)
    metrics.relayed("chat_completions", "m", 200, 0.01, usage=usage, clock=clock)
    return generate_latest(metrics.registry).decode()


async def precise_exposition(start_picker: PickerFactory, tmp_path: Path) -> str:
    """A picker with a pool in precise mode, fed one batch by a fake engine."""
    tokenizer, template = write_model(tmp_path / "model")
    publisher = vllm.Publisher()
    try:
        policy = parse_policy(f"""
pools:
  - name: precise
    endpoints: ["127.0.0.1:{publisher.port}"]
    models: [m]
    prefix: {{mode: precise, events: "tcp://{{host}}:{{port}}", tokenizer: {tokenizer},
             chat_template: {template}, block_size: 4}}
""")
        picker = await start_picker(policy, metrics_listen="127.0.0.1:0")
        await publisher.subscribed()
        await publisher.publish(vllm.encode([vllm.stored([1], [1, 2, 3, 4])]))
        applied = {"pool": "default/precise", "outcome": "applied"}
        await wait_until(lambda: picker.metric("kinference_kv_events_messages_total", applied) > 0)
        # A frame over the cap: ZMQ ends the connection, and the socket is reopened.
        await publisher.pub.send_multipart([b"", vllm.seq_bytes(1), bytes(MAX_FRAME_BYTES + 1)])
        reopened = {"pool": "default/precise"}
        await wait_until(lambda: picker.metric("kinference_kv_events_reopened_total", reopened) > 0)
        return await scrape(picker)
    finally:
        await publisher.close()
