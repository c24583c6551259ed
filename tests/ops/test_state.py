"""`kinference state`: the cluster view read from a real Redis that real replicas share."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from kinference.cli import main
from kinference.cluster.connection import connect
from kinference.cluster.keys import Keys
from kinference.ops.state import ClusterState, read_state
from kinference.ops.table import render_text
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer, free_port
from tests.api.helpers import chat_body
from tests.conftest import MODEL
from tests.scenarios.helpers import routing_yaml, vllm_pool

_WAIT_S = 15.0  # generous: a loaded 2-core machine delays replicas' background loops


def policy(endpoints: list[str]) -> str:
    return (
        "pools:\n"
        + vllm_pool("chat", endpoints, [MODEL])
        + routing_yaml()
        + "providers:\n  - {namespace: ai, name: openai, api: openai}\n"
        + "models:\n  - {name: cloud, targets: [{provider: ai/openai, model: gpt-4o-mini}]}\n"
        + "tenants:\n  - {tenant: team-a, tokens_per_minute: 1000000}\n"
    )


async def wait_state(url: str, ready: Callable[[ClusterState], bool]) -> ClusterState:
    """Read the state until `ready` holds (polling, bounded)."""
    redis = connect(url)
    try:
        deadline = time.monotonic() + _WAIT_S
        while True:
            state = await read_state(redis, Keys())
            if ready(state) or time.monotonic() > deadline:
                return state
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()


def settled(state: ClusterState) -> bool:
    return (
        sum(1 for r in state.replicas if r.alive) == 2
        and sum(w.inflight for w in state.workers) == 2
        and any(w.waiting == 3 for w in state.workers)
        and [e.provider for e in state.blacklist] == ["ai/openai"]
        and any(t.tenant == "team-a" and t.this_minute + t.last_minute >= 50 for t in state.tenants)
        and [lead.pool for lead in state.leaders] == ["default/chat"]
    )


async def traffic(client: Any) -> None:
    """Two requests left in flight, one finished (50 tokens for team-a), a provider
    blacklisted by an Abort."""
    for _ in range(2):
        await pick_ok(client, chat_body(), tenant="team-a")
    done = await pick_ok(client, chat_body(), tenant="team-a")
    await client.final_token(done.response_id, model=MODEL, prompt_tokens=40,
                             completion_tokens=10)  # fmt: skip
    cloud = await pick_ok(client, chat_body("cloud"))
    await client.abort(cloud.response_id, pb.AbortRequest.BACKEND_UNAUTHORIZED, "401")


async def pick_ok(client: Any, body: bytes, tenant: str = "") -> Any:
    """A Pick answered OK, retried as a caller would while the replica just started: before
    its first lease round a tenant's next request waits for a lease (POLICY_REJECTED with a
    Retry-After), and until its view of Redis is current a Pick is DEGRADED."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        pick = await client.pick((await client.push([body])).stream_id, tenant=tenant)
        if pick.outcome == pb.PickResponse.OK or time.monotonic() > deadline:
            assert pick.outcome == pb.PickResponse.OK, pick
            return pick
        if pick.response_id:
            await client.abort(pick.response_id)
        await asyncio.sleep(0.05)


async def test_state_shows_replicas_workers_blacklist_and_tenants(
    redis_server: RedisServer,
    start_replicas: Any,
    start_engines: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engines = await start_engines(2)
    replicas = await start_replicas(2, policy(engines.endpoints))
    engines.set(0, waiting=3, running=2, kv=0.5)
    await traffic(replicas[0].client)
    state = await wait_state(redis_server.url, settled)
    assert settled(state), state

    own = {r.instance: r.inflight for r in state.replicas}
    assert sorted(own.values()) == [0, 2]
    assert all(r.heartbeat_age_s is not None and r.heartbeat_age_s < 3 for r in state.replicas)
    busy = next(w for w in state.workers if w.waiting == 3)
    assert busy.endpoint == engines.endpoints[0] and busy.kv_usage == 0.5 and busy.ready
    assert busy.scraped_by == state.leaders[0].instance

    assert await asyncio.to_thread(main, ["state", "--redis-url", redis_server.url]) == 0
    text = capsys.readouterr().out
    assert "REPLICAS (2 live)" in text and "ai/openai" in text and "team-a" in text
    assert engines.endpoints[0] in text and "50%" in text

    assert await asyncio.to_thread(main, ["state", "--redis-url", redis_server.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {w["endpoint"] for w in shown["workers"]} >= set(engines.endpoints)
    assert shown["blacklist"][0]["reason"] == "backend_unauthorized"


def test_unreachable_redis_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    assert main(["state", "--redis-url", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kinference: error: Redis:") and err.count("\n") == 1


def test_without_a_redis_url_it_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KINFERENCE_REDIS_URL", raising=False)
    assert main(["state"]) == 2
    assert "KINFERENCE_REDIS_URL is empty" in capsys.readouterr().err


async def test_an_empty_redis_says_so_in_every_section(redis_server: RedisServer) -> None:
    state = await wait_state(redis_server.url, lambda state: True)
    text = render_text(state)
    assert "REPLICAS (0 live)\n  no replica has announced itself" in text
    assert "no provider is blacklisted" in text and "no tenant usage recorded" in text


async def test_a_load_hash_with_junk_fields_is_read_like_the_replicas_read_it(
    redis_server: RedisServer,
) -> None:
    """Before: a load-hash field whose name is not UTF-8 failed every `kinference state`
    (UnicodeDecodeError); the cluster layer's readers skip it (`cluster.loads`), and so
    does the state now: one parse of a load hash for both."""
    keys, redis = Keys(), connect(redis_server.url)
    try:
        await redis.sadd(keys.instances(), "r1")
        await redis.set(keys.heartbeat("r1"), 1, px=60_000)
        await redis.hset(
            keys.load("r1"),
            mapping={"10.0.0.1:8000": 3, b"\xff\xfe": 2, "10.0.0.2:8000": "many", "~seq": 7},
        )
        state = await read_state(redis, keys)
    finally:
        await redis.aclose()
    assert [(r.instance, r.alive, r.inflight) for r in state.replicas] == [("r1", True, 3)]
