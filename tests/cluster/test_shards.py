"""State sharded per pool: each pool's keys under its own hash tag, spread over a Redis
Cluster's masters, and a replica reading only the streams of the pools it routes to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from kinference.cluster.keys import SINGLE_LAYOUT, Keys, pool_tag
from kinference.config import parse_policy
from loadtest.redis_server import RedisClusterServers, RedisServer
from tests.api.helpers import chat_body, pick_ok, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker

CODE_MODEL = "code-model"
CHAT, CODE = "default/chat", "default/code"  # slots 5094 and 11155: two masters of three
CHAT_POOL = f"""  - namespace: default
    name: chat
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]
    models: ["{MODEL}"]
"""
CODE_POOL = f"""  - namespace: default
    name: code
    endpoints: ["10.0.1.1:8000", "10.0.1.2:8000"]
    models: ["{CODE_MODEL}"]
"""
BOTH = "pools:\n" + CHAT_POOL + CODE_POOL
CHAT_ONLY = "pools:\n" + CHAT_POOL


async def routing_both_and_chat_only(
    start_picker: PickerFactory, url: str
) -> tuple[RunningPicker, RunningPicker]:
    """A replica routing both pools and one routing the chat pool only, on `url`."""
    return (
        await start_picker(parse_policy(BOTH), redis_url=url),
        await start_picker(parse_policy(CHAT_ONLY), redis_url=url),
    )


def test_each_pool_has_its_own_hash_tag_and_global_keys_stay_global() -> None:
    keys = Keys()
    chat, code = keys.for_pool(CHAT), keys.for_pool(CODE)
    assert chat.events() == "{kinference:default/chat}:events"
    assert chat.load("r1") == "{kinference:default/chat}:load:r1"
    assert keys.leader(CHAT) == "{kinference:default/chat}:leader:default/chat"
    assert key_slot(chat.events().encode()) == key_slot(chat.load("r1").encode())
    assert key_slot(chat.events().encode()) != key_slot(code.events().encode())
    # Membership, blacklist and tenants are global, whichever shard's keys build them.
    assert chat.heartbeat("r1") == keys.heartbeat("r1") == "{kinference}:instance:r1"
    assert chat.blacklist("ai/openai") == "{kinference}:blacklist:ai/openai"
    assert chat.usage("team-a") == "{kinference}:tenant:team-a:usage"
    # The single layout is the schema before pools had tags.
    single = Keys(layout=SINGLE_LAYOUT)
    assert single.for_pool(CHAT).events() == "{kinference}:events"
    assert single.leader(CHAT) == "{kinference}:leader:default/chat"


def test_a_pool_tag_cannot_be_broken_by_braces_and_keeps_a_custom_tag() -> None:
    assert pool_tag("kinference:", "ns/a}b{c") == "{kinference:ns/a)b(c}:"
    assert pool_tag("app:{blue}:", "ns/p") == "app:{blue:ns/p}:"
    assert Keys("prod:").for_pool("ns/p").events() == "{prod:ns/p}:events"
    assert Keys().pool_of_stream(Keys().for_pool("ns/p").events()) == "ns/p"


@pytest.fixture
def redis_cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers().start()
    yield servers
    servers.stop()


def spy_reads(replica: RunningPicker) -> set[str]:
    """The stream keys the replica's reader reads from now on (on Cluster: XRANGEs in a
    pipeline)."""
    assert replica.app.cluster is not None
    client: Any = replica.app.cluster.reader_redis
    pipeline, seen = client.pipeline, set()

    def spied(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        xrange = pipe.xrange

        def recorded(stream: str, *more: Any, **options: Any) -> Any:
            seen.add(stream)
            return xrange(stream, *more, **options)

        pipe.xrange = recorded
        return pipe

    client.pipeline = spied
    return seen


async def test_two_pools_live_on_different_masters_and_replicas_read_only_their_pools(
    redis_cluster: RedisClusterServers, start_picker: PickerFactory
) -> None:
    router, chat = await routing_both_and_chat_only(start_picker, redis_cluster.url)
    read_by_chat = spy_reads(chat)
    for n in range(3):
        await pick_ok(router, chat_body(content=f"chat {n}"))
        await pick_ok(router, chat_body(content=f"code {n}", model=CODE_MODEL))

    def chat_load() -> int:
        return sum(chat.app.inflight.load(e) for e in ("10.0.0.1:8000", "10.0.0.2:8000"))

    await wait_until(lambda: chat_load() == 3, what="the chat pool's load on the chat replica")
    keys = Keys()
    streams = {pool: keys.for_pool(pool).events() for pool in (CHAT, CODE)}
    slots = {pool: str(key_slot(key.encode())) for pool, key in streams.items()}
    owners = {  # the master holding each pool's keys (COUNTKEYSINSLOT: 0 on other nodes)
        pool: [n.port for n in redis_cluster.nodes if n.cli("CLUSTER", "COUNTKEYSINSLOT", s) != "0"]
        for pool, s in slots.items()
    }
    assert len(owners[CHAT]) == len(owners[CODE]) == 1 and owners[CHAT] != owners[CODE]
    assert read_by_chat == {streams[CHAT], keys.events()}  # never the code pool's stream
    assert chat.app.cluster is not None and set(chat.app.cluster.shards.pools) == {CHAT}
    assert chat.app.inflight.load("10.0.1.1:8000") == chat.app.inflight.load("10.0.1.2:8000") == 0


async def test_a_reloaded_policy_opens_and_closes_shards_and_load_follows(
    redis_server: RedisServer, start_picker: PickerFactory
) -> None:
    router, follower = await routing_both_and_chat_only(start_picker, redis_server.url)
    for n in range(2):
        await pick_ok(router, chat_body(content=f"code {n}", model=CODE_MODEL))
    cluster = follower.app.cluster
    assert cluster is not None and set(cluster.shards.pools) == {CHAT}

    def code_load() -> int:
        return sum(follower.app.inflight.load(e) for e in ("10.0.1.1:8000", "10.0.1.2:8000"))

    follower.app.apply_policy(
        parse_policy(BOTH)
    )  # the code pool's shard opens and bootstraps its load
    await wait_until(lambda: code_load() == 2, what="the code pool's load after the reload")
    follower.app.apply_policy(parse_policy(CHAT_ONLY))  # closed again: its view's load is taken out
    await wait_until(lambda: code_load() == 0, what="the code pool's load gone")
    assert set(cluster.shards.pools) == {CHAT}
