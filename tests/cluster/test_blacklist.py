"""SharedBlacklist (`kinference.cluster.blacklist`) in a real redis-server: cool-downs written
readable, TTLs extended never shortened, adopted by other replicas, cleared by DEL, kept
through a Redis outage. The keys' reads and the CLI's: test_blacklist_keys.py,
tests/test_cli_providers.py."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from redis.exceptions import RedisError

from kinference.cluster.blacklist_keys import epoch_time
from kinference.routing.health import (
    RATE_LIMITED,
    UNAUTHORIZED,
    UNRESOLVED,
    CooldownPolicy,
)
from loadtest.redis_server import RedisServer
from tests.cluster.blacklists import (
    DEADLINE_S,
    KEY,
    KEYS,
    P,
    Q,
    ReplicaFactory,
    blacklist_by_hand,
    eventually,
    fields,
    pttl,
)

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


async def test_a_cooldown_is_written_readable(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    a = blacklist_replica("a")
    before = time.time()
    cooldown = a.health.report(P, UNAUTHORIZED, "upstream status 401")
    assert not cooldown.published
    assert await a.blacklist.sync_once([P, Q]) == [P]
    stored = fields(flushed_redis)
    assert {k: stored[k] for k in ("reason", "detail", "count", "instance")} == {
        "reason": UNAUTHORIZED,
        "detail": "upstream status 401",
        "count": "1",
        "instance": "a",
    }
    assert ISO.fullmatch(stored["first_seen"]) and stored["first_seen"] == stored["last_seen"]
    assert before - 0.001 <= epoch_time(stored["first_seen"], 0.0) <= time.time()
    assert 295_000 < pttl(flushed_redis) <= 300_000  # milliseconds: the cool-down left
    assert cooldown.published
    assert a.health.cooled(P) is cooldown  # its own key adopted: the same cool-down
    assert fields(flushed_redis, KEYS.blacklist(Q)) == {}
    assert await a.blacklist.sync_once([P, Q]) == []  # nothing new to write


async def test_other_replicas_adopt_it(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    a, b, c = blacklist_replica("a"), blacklist_replica("b"), blacklist_replica("c")
    a.health.report(P, UNAUTHORIZED, "401")
    await a.blacklist.sync_once([P])
    await b.blacklist.refresh(P)  # the stream event's path
    await c.blacklist.sync_once([P])  # the poll's path
    for other in (b, c):
        cooldown = other.health.cooled(P)
        assert cooldown is not None
        assert (cooldown.reason, cooldown.detail, cooldown.count) == (UNAUTHORIZED, "401", 1)
        assert 295 < cooldown.remaining(other.health.now()) <= 300
        assert cooldown.published
    assert b.health.cooled(Q) is None


async def test_del_clears_it_on_every_replica(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    a, b = blacklist_replica("a"), blacklist_replica("b")
    a.health.report(P, UNRESOLVED, "no such host")
    a.health.report(Q, UNRESOLVED, "no such host")
    await a.blacklist.sync_once([P, Q])
    await b.blacklist.sync_once([P, Q])
    assert b.health.cooled(P) is not None
    assert flushed_redis.cli("DEL", KEY) == "1"
    await a.blacklist.sync_once([P, Q])
    await b.blacklist.sync_once([P, Q])
    assert a.health.cooled(P) is None
    assert b.health.cooled(P) is None
    assert a.health.cooled(Q) is not None  # only the deleted one
    assert b.health.cooled(Q) is not None


async def test_a_repeat_extends_never_shortens(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    longer = CooldownPolicy(seconds={**CooldownPolicy().seconds, UNAUTHORIZED: 600.0})
    a, b, c = blacklist_replica("a"), blacklist_replica("b"), blacklist_replica("c", longer)
    a.health.report(P, UNAUTHORIZED, "401")  # 300 s
    await a.blacklist.sync_once([P])
    b.health.report(P, RATE_LIMITED, "429")  # 10 s, before b has read a's key
    assert await b.blacklist.sync_once([P]) == [P]
    stored = fields(flushed_redis)
    assert pttl(flushed_redis) > 290_000  # not cut to 10 s
    assert (stored["reason"], stored["instance"], stored["count"]) == (UNAUTHORIZED, "a", "2")
    assert stored["last_seen"] >= stored["first_seen"]
    cooldown = b.health.cooled(P)
    assert cooldown is not None and cooldown.remaining(b.health.now()) > 290  # adopted a's
    c.health.report(P, UNAUTHORIZED, "401 again")  # 600 s: extends it
    await c.blacklist.sync_once([P])
    stored = fields(flushed_redis)
    assert pttl(flushed_redis) > 590_000
    assert (stored["reason"], stored["detail"], stored["instance"]) == (
        UNAUTHORIZED,
        "401 again",
        "c",
    )
    assert stored["count"] == "3"  # every blacklist_replica's reports add up
    await a.blacklist.sync_once([P])
    cooldown = a.health.cooled(P)
    assert cooldown is not None and cooldown.remaining(a.health.now()) > 590
    assert cooldown.count == 3


async def test_unpublished_cooldowns_survive_a_poll(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    a = blacklist_replica("a")
    a.health.report(P, UNAUTHORIZED)
    await a.blacklist.refresh(P)  # no key yet: the write is still queued
    assert a.health.cooled(P) is not None
    await a.blacklist.sync_once([P])
    assert flushed_redis.cli("DEL", KEY) == "1"
    a.health.report(P, UNAUTHORIZED, "again")  # a new failure after the clear
    await a.blacklist.refresh(P)
    assert a.health.cooled(P) is not None  # not cleared by the DEL it came after
    await a.blacklist.sync_once([P])
    assert fields(flushed_redis)["detail"] == "again"


async def test_a_report_during_the_write_stays_unpublished(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = blacklist_replica("a")
    write = a.blacklist._script

    async def report_meanwhile(**kwargs: Any) -> Any:
        a.health.report(P, UNAUTHORIZED, "while writing")  # lands while the write is under way
        return await write(**kwargs)

    monkeypatch.setattr(a.blacklist, "_script", report_meanwhile)
    a.health.report(P, UNAUTHORIZED)
    await a.blacklist.sync_once([])
    cooldown = a.health.cooled(P)
    assert cooldown is not None and not cooldown.published  # the second report is queued
    flushed_redis.cli("DEL", KEY)
    await a.blacklist.refresh(P)
    assert a.health.cooled(P) is cooldown


async def test_keys_of_other_providers_are_found(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    manual = KEYS.blacklist("ops/legacy")
    flushed_redis.cli("HSET", manual, "reason", "manual", "detail", "key rotation")  # no TTL
    a = blacklist_replica("a")
    await a.blacklist.sync_once([P])  # the first sync SCANs
    cooldown = a.health.cooled("ops/legacy")
    assert cooldown is not None
    assert (cooldown.reason, cooldown.detail) == ("manual", "key rotation")
    assert cooldown.remaining(a.health.now()) > 3000  # no TTL: until deleted
    a.health.report("ops/legacy", UNRESOLVED)
    await a.blacklist.sync_once([P])
    assert pttl(flushed_redis, manual) == -1  # a hand-set key without a TTL keeps lasting
    flushed_redis.cli("DEL", manual)
    await a.blacklist.sync_once([P])
    assert a.health.cooled("ops/legacy") is None


async def test_redis_down_keeps_local_cooldowns_and_publishes_them_after(
    blacklist_replica: ReplicaFactory,
) -> None:
    own = RedisServer().start()
    try:
        a = blacklist_replica("a", url=own.url)
        a.health.report(P, UNAUTHORIZED, "401")
        await a.blacklist.sync_once([P, Q])
        own.kill()
        a.health.report(Q, RATE_LIMITED, "429")
        with pytest.raises((RedisError, OSError)):
            await a.blacklist.sync_once([P, Q])
        assert a.health.cooled(P) is not None  # still honoured locally
        assert a.health.cooled(Q) is not None
        own.start()  # the same port, empty: every key was lost

        async def both_written() -> bool:
            await a.blacklist.sync_once([P, Q])
            return fields(own).get("reason") == UNAUTHORIZED and bool(
                fields(own, KEYS.blacklist(Q))
            )

        await eventually(both_written)
        assert a.health.cooled(P) is not None  # never cleared by the keys Redis lost
        assert 0 < pttl(own) <= 300_000
        assert fields(own)["count"] == "1"  # written again, not counted again
        own.cli("DEL", KEY)  # published again: a DEL clears it as before
        await a.blacklist.sync_once([P, Q])
        assert a.health.cooled(P) is None
    finally:
        own.stop()


async def test_wait_returns_when_a_cooldown_is_queued(blacklist_replica: ReplicaFactory) -> None:
    a = blacklist_replica("a")
    waiting = asyncio.create_task(a.blacklist.wait(60.0))
    await asyncio.sleep(0)  # let it start waiting
    a.health.report(P, UNAUTHORIZED)
    await asyncio.wait_for(waiting, DEADLINE_S)
    started = time.monotonic()
    await a.blacklist.wait(0.01)  # nothing queued since: sleeps the whole timeout
    assert time.monotonic() - started >= 0.005


async def test_with_no_provider_a_poll_sends_nothing(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    """An idle gateway of self-hosted engines names no provider: its polls (four a second)
    cost no Redis command but the periodic SCAN for keys set elsewhere."""
    idle = blacklist_replica("r1")
    flushed_redis.cli("CONFIG", "RESETSTAT")
    for _ in range(8):
        await idle.blacklist.sync_once([])
    calls = flushed_redis.cli("INFO", "commandstats")
    assert "cmdstat_eval" not in calls and "cmdstat_hgetall" not in calls
    assert "'cmdstat_scan': {'calls': 2," in calls  # one SCAN in SCAN_EVERY syncs
    blacklist_by_hand(flushed_redis, P)  # a key set elsewhere is found, then read
    for _ in range(4):
        await idle.blacklist.sync_once([])
    assert idle.health.cooled(P) is not None


async def test_a_cooldown_announced_after_a_redis_restart_is_adopted_at_once(
    blacklist_replica: ReplicaFactory,
) -> None:
    """A blacklist_replica that last polled before Redis restarted (an idle gateway of self-hosted
    engines polls nothing, h161) learns of the restart at its next poll. When that poll is
    the read of a provider another blacklist_replica just announced, the key it finds is real: it is
    adopted then, not a SCAN later; only a missing key proves nothing after a restart."""
    own = RedisServer().start()
    try:
        a, b = blacklist_replica("a", url=own.url), blacklist_replica("b", url=own.url)
        await a.blacklist.sync_once([Q])  # a poll: `a` knows this Redis process
        own.restart()  # empty, a new process
        b.health.report(P, UNAUTHORIZED, "401")
        assert await b.blacklist.sync_once([]) == [P]  # written; `b` announces it
        await a.blacklist.refresh(P)  # `a` reads the announced key
        cooldown = a.health.cooled(P)
        assert cooldown is not None and cooldown.reason == UNAUTHORIZED
    finally:
        own.stop()


async def test_a_key_of_another_type_under_a_cooled_provider_s_name_fails_no_sync(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    """The write side of the junk key: a provider this blacklist_replica cools whose key is not a
    hash made the write script fail WRONGTYPE, so every sync raised (the node read Redis
    as unavailable) and the cool-downs queued after it were never written, for as long as
    the cool-down lasted. The write is skipped: the cool-down holds here, the others go."""
    flushed_redis.cli("SET", KEY, "1")  # P's key, of another type
    writer, reader = blacklist_replica("w"), blacklist_replica("r")
    writer.health.report(P, UNAUTHORIZED, "401")
    writer.health.report(Q, RATE_LIMITED, "429")
    assert await writer.blacklist.sync_once([]) == [Q]
    await reader.blacklist.sync_once([])
    assert reader.health.cooled(Q) is not None and reader.health.cooled(P) is None
    assert writer.health.cooled(P) is not None  # kept here, though Redis holds none
    await writer.blacklist.sync_once([P])  # nothing left queued; the poll reads past it
    assert writer.health.cooled(P) is not None
    assert flushed_redis.cli("TYPE", KEY).strip() == "string"
