"""The provider blacklist across three replicas: propagation and operator clears."""

from __future__ import annotations

import statistics
import time

from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, push_and_pick, wait_until
from tests.conftest import MODEL, RunningPicker

POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["10.0.0.1:8000"], models: ["{MODEL}"]}}
providers:
  - {{namespace: ai, name: openai, api: openai}}
  - {{namespace: ai, name: backup, api: openai}}
models:
  - name: gpt
    targets:
      - {{provider: ai/openai, model: gpt-4o-mini}}
      - {{provider: ai/backup, model: gpt-4o-mini}}
"""
KEY = "{kinference}:blacklist:ai/openai"


def cooled(replica: RunningPicker, provider: str = "ai/openai") -> bool:
    return replica.app.router.health.cooled(provider) is not None


async def blacklist_on(replica: RunningPicker) -> None:
    pick = await push_and_pick(replica, chat_body(model="gpt"))
    assert pick.provider.backend_ref.name == "openai", pick
    await replica.client.abort(
        pick.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "401 from upstream"
    )


async def test_a_blacklisting_reaches_every_replica_fast_and_a_del_clears_it(
    start_replicas, redis_server: RedisServer
) -> None:
    a, b, c = await start_replicas(3, POLICY)
    delays = []
    for _ in range(20):
        started = time.monotonic()
        await blacklist_on(a)
        await wait_until(lambda: cooled(b) and cooled(c), within_s=2.0)
        delays.append(time.monotonic() - started)
        pick = await push_and_pick(b, chat_body(model="gpt"))
        assert pick.provider.backend_ref.name == "backup"  # b honours a's blacklisting
        await b.client.abort(pick.response_id)
        started = time.monotonic()
        assert redis_server.cli("DEL", KEY) == "1"
        await wait_until(lambda: not any(cooled(r) for r in (a, b, c)), within_s=1.0)
    delays.sort()
    p99 = delays[int(0.99 * (len(delays) - 1))]
    assert p99 < 0.1, f"propagation p99 {p99 * 1000:.0f} ms (median {statistics.median(delays)})"


async def test_the_key_is_readable_by_operators(start_replicas, redis_server: RedisServer) -> None:
    a, b = await start_replicas(2, POLICY)
    await blacklist_on(a)
    await wait_until(lambda: redis_server.cli("EXISTS", KEY) == "1")
    fields = redis_server.cli("HGETALL", KEY)
    for word in ("backend_unauthorized", "401 from upstream", "instance", "first_seen"):
        assert word in fields
    ttl_ms = int(redis_server.cli("PTTL", KEY))
    assert 290_000 < ttl_ms <= 300_000  # BACKEND_UNAUTHORIZED cools down for 300 s
    await wait_until(lambda: cooled(b))
    assert (
        b.metric(
            "kinference_provider_blacklisted",
            {"provider": "ai/openai", "reason": "backend_unauthorized"},
        )
        == 1
    )
