"""The blacklist's keys as an operator reads them (`kinference.cluster.blacklist_keys`): listed
and cleared, their times, keys of another type read past."""

from __future__ import annotations

import pytest

from kinference.cluster.blacklist_keys import (
    Entry,
    clear_blacklist,
    epoch_time,
    iso_time,
    list_blacklist,
)
from kinference.cluster.connection import connect
from kinference.routing.health import RATE_LIMITED, UNAUTHORIZED
from loadtest.redis_server import RedisServer
from tests.cluster.blacklists import KEYS, P, Q, ReplicaFactory


async def test_list_and_clear(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    a = blacklist_replica("a")
    a.health.report(P, UNAUTHORIZED, "401")
    a.health.report(Q, RATE_LIMITED, "429")
    await a.blacklist.sync_once([P, Q])
    client = connect(flushed_redis.url)
    try:
        entries = await list_blacklist(client, KEYS)
        assert [e.provider for e in entries] == [Q, P]  # sorted
        entry = entries[1]
        assert isinstance(entry, Entry)
        assert (entry.reason, entry.detail, entry.count, entry.instance) == (
            UNAUTHORIZED,
            "401",
            1,
            "a",
        )
        assert 295_000 < entry.ttl_ms <= 300_000
        assert await clear_blacklist(client, KEYS, P) == 1
        assert await clear_blacklist(client, KEYS, P) == 0
        await a.blacklist.sync_once([P, Q])
        assert a.health.cooled(P) is None
        a.health.report(P, UNAUTHORIZED)
        await a.blacklist.sync_once([P, Q])
        assert await clear_blacklist(client, KEYS, None) == 2
        assert await list_blacklist(client, KEYS) == []
    finally:
        await client.aclose()


def test_time_format_round_trips() -> None:
    assert iso_time(1_700_000_000.123) == "2023-11-14T22:13:20.123Z"
    assert epoch_time("2023-11-14T22:13:20.123Z", 0.0) == pytest.approx(1_700_000_000.123)
    assert epoch_time("1700000000.5", 0.0) == 1_700_000_000.5
    assert epoch_time("yesterday", 7.0) == 7.0


async def test_a_key_of_another_type_under_the_blacklist_s_names_is_skipped(
    flushed_redis: RedisServer, blacklist_replica: ReplicaFactory
) -> None:
    """A key under the blacklist's names that is not a hash (set by hand, or by another tool
    sharing the prefix) failed every poll with WRONGTYPE: the loop's failures made the node
    read Redis as unavailable (every Pick DEGRADED, budgets offline) while it stayed. It is
    skipped; the other providers' keys are still read and adopted."""
    writer, reader = blacklist_replica("w"), blacklist_replica("r")
    writer.health.report(P, UNAUTHORIZED, "401")
    await writer.blacklist.sync_once([])
    flushed_redis.cli("SET", "{kinference}:blacklist:ai/typo", "1")
    await reader.blacklist.sync_once([Q])  # a SCAN: it finds both keys
    cooldown = reader.health.cooled(P)
    assert cooldown is not None and cooldown.reason == UNAUTHORIZED
    await reader.blacklist.refresh("ai/typo")
    client = connect(flushed_redis.url)
    try:  # the CLI's list reads past it too
        assert [entry.provider for entry in await list_blacklist(client, KEYS)] == [P]
    finally:
        await client.aclose()
