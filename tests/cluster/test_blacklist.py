"""The provider blacklist in a real redis-server: readable keys, TTLs extended never shortened,
adopted by other replicas, cleared by DEL, kept through a Redis outage; the CLI on top."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from redis.exceptions import RedisError

from kinference.cli import main
from kinference.cluster.blacklist import SharedBlacklist
from kinference.cluster.blacklist_keys import (
    Entry,
    clear_blacklist,
    epoch_time,
    iso_time,
    list_blacklist,
)
from kinference.cluster.connection import RedisClient, connect
from kinference.cluster.keys import Keys
from kinference.routing.health import (
    RATE_LIMITED,
    UNAUTHORIZED,
    UNRESOLVED,
    CooldownPolicy,
    ProviderHealth,
)
from loadtest.redis_server import RedisServer

P = "ai/openai"
Q = "ai/azure"
KEYS = Keys()
KEY = "{kinference}:blacklist:ai/openai"
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
DEADLINE_S = 10.0  # seconds a condition may take to come true before the test fails


@dataclass
class Replica:
    health: ProviderHealth
    blacklist: SharedBlacklist


@pytest.fixture(scope="module")
def shared_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def server(shared_server: RedisServer) -> RedisServer:
    shared_server.cli("FLUSHALL")
    return shared_server


@pytest.fixture
async def clients(server: RedisServer) -> AsyncIterator[list[RedisClient]]:
    opened: list[RedisClient] = []
    yield opened
    for client in opened:
        await client.aclose()


ReplicaFactory = Callable[..., Replica]


@pytest.fixture
def replica(server: RedisServer, clients: list[RedisClient]) -> ReplicaFactory:
    """A replica named `instance`: its own health, client and blacklist, on `server`."""

    def make(instance: str, policy: CooldownPolicy | None = None, url: str = "") -> Replica:
        client = connect(url or server.url)
        clients.append(client)
        health = ProviderHealth(policy or CooldownPolicy())
        return Replica(health, SharedBlacklist(client, KEYS, health, instance=instance))

    return make


def fields(server: RedisServer, key: str = KEY) -> dict[str, str]:
    with redis.Redis(port=server.port, decode_responses=True) as client:
        return dict(client.hgetall(key))


def pttl(server: RedisServer, key: str = KEY) -> int:
    return int(server.cli("PTTL", key))


async def eventually(attempt: Callable[[], Awaitable[bool]]) -> None:
    """Retry `attempt` until it returns True; Redis errors count as not yet."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            if await attempt():
                return
        except (RedisError, OSError):
            pass
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.02)  # between attempts, bounded by the deadline


async def test_a_cooldown_is_written_readable(server: RedisServer, replica: ReplicaFactory) -> None:
    a = replica("a")
    before = time.time()
    cooldown = a.health.report(P, UNAUTHORIZED, "upstream status 401")
    assert not cooldown.published
    assert await a.blacklist.sync_once([P, Q]) == [P]
    stored = fields(server)
    assert {k: stored[k] for k in ("reason", "detail", "count", "instance")} == {
        "reason": UNAUTHORIZED,
        "detail": "upstream status 401",
        "count": "1",
        "instance": "a",
    }
    assert ISO.fullmatch(stored["first_seen"]) and stored["first_seen"] == stored["last_seen"]
    assert before - 0.001 <= epoch_time(stored["first_seen"], 0.0) <= time.time()
    assert 295_000 < pttl(server) <= 300_000  # milliseconds: the cool-down left
    assert cooldown.published
    assert a.health.cooled(P) is cooldown  # its own key adopted: the same cool-down
    assert fields(server, KEYS.blacklist(Q)) == {}
    assert await a.blacklist.sync_once([P, Q]) == []  # nothing new to write


async def test_other_replicas_adopt_it(server: RedisServer, replica: ReplicaFactory) -> None:
    a, b, c = replica("a"), replica("b"), replica("c")
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


async def test_del_clears_it_on_every_replica(server: RedisServer, replica: ReplicaFactory) -> None:
    a, b = replica("a"), replica("b")
    a.health.report(P, UNRESOLVED, "no such host")
    a.health.report(Q, UNRESOLVED, "no such host")
    await a.blacklist.sync_once([P, Q])
    await b.blacklist.sync_once([P, Q])
    assert b.health.cooled(P) is not None
    assert server.cli("DEL", KEY) == "1"
    await a.blacklist.sync_once([P, Q])
    await b.blacklist.sync_once([P, Q])
    assert a.health.cooled(P) is None
    assert b.health.cooled(P) is None
    assert a.health.cooled(Q) is not None  # only the deleted one
    assert b.health.cooled(Q) is not None


async def test_a_repeat_extends_never_shortens(
    server: RedisServer, replica: ReplicaFactory
) -> None:
    longer = CooldownPolicy(seconds={**CooldownPolicy().seconds, UNAUTHORIZED: 600.0})
    a, b, c = replica("a"), replica("b"), replica("c", longer)
    a.health.report(P, UNAUTHORIZED, "401")  # 300 s
    await a.blacklist.sync_once([P])
    b.health.report(P, RATE_LIMITED, "429")  # 10 s, before b has read a's key
    assert await b.blacklist.sync_once([P]) == [P]
    stored = fields(server)
    assert pttl(server) > 290_000  # not cut to 10 s
    assert (stored["reason"], stored["instance"], stored["count"]) == (UNAUTHORIZED, "a", "2")
    assert stored["last_seen"] >= stored["first_seen"]
    cooldown = b.health.cooled(P)
    assert cooldown is not None and cooldown.remaining(b.health.now()) > 290  # adopted a's
    c.health.report(P, UNAUTHORIZED, "401 again")  # 600 s: extends it
    await c.blacklist.sync_once([P])
    stored = fields(server)
    assert pttl(server) > 590_000
    assert (stored["reason"], stored["detail"], stored["instance"]) == (
        UNAUTHORIZED,
        "401 again",
        "c",
    )
    assert stored["count"] == "3"  # every replica's reports add up
    await a.blacklist.sync_once([P])
    cooldown = a.health.cooled(P)
    assert cooldown is not None and cooldown.remaining(a.health.now()) > 590
    assert cooldown.count == 3


async def test_unpublished_cooldowns_survive_a_poll(
    server: RedisServer, replica: ReplicaFactory
) -> None:
    a = replica("a")
    a.health.report(P, UNAUTHORIZED)
    await a.blacklist.refresh(P)  # no key yet: the write is still queued
    assert a.health.cooled(P) is not None
    await a.blacklist.sync_once([P])
    assert server.cli("DEL", KEY) == "1"
    a.health.report(P, UNAUTHORIZED, "again")  # a new failure after the clear
    await a.blacklist.refresh(P)
    assert a.health.cooled(P) is not None  # not cleared by the DEL it came after
    await a.blacklist.sync_once([P])
    assert fields(server)["detail"] == "again"


async def test_a_report_during_the_write_stays_unpublished(
    server: RedisServer, replica: ReplicaFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = replica("a")
    write = a.blacklist._script

    async def report_meanwhile(**kwargs: Any) -> Any:
        a.health.report(P, UNAUTHORIZED, "while writing")  # lands while the write is under way
        return await write(**kwargs)

    monkeypatch.setattr(a.blacklist, "_script", report_meanwhile)
    a.health.report(P, UNAUTHORIZED)
    await a.blacklist.sync_once([])
    cooldown = a.health.cooled(P)
    assert cooldown is not None and not cooldown.published  # the second report is queued
    server.cli("DEL", KEY)
    await a.blacklist.refresh(P)
    assert a.health.cooled(P) is cooldown


async def test_keys_of_other_providers_are_found(
    server: RedisServer, replica: ReplicaFactory
) -> None:
    manual = KEYS.blacklist("ops/legacy")
    server.cli("HSET", manual, "reason", "manual", "detail", "key rotation")  # no TTL
    a = replica("a")
    await a.blacklist.sync_once([P])  # the first sync SCANs
    cooldown = a.health.cooled("ops/legacy")
    assert cooldown is not None
    assert (cooldown.reason, cooldown.detail) == ("manual", "key rotation")
    assert cooldown.remaining(a.health.now()) > 3000  # no TTL: until deleted
    a.health.report("ops/legacy", UNRESOLVED)
    await a.blacklist.sync_once([P])
    assert pttl(server, manual) == -1  # a hand-set key without a TTL keeps lasting
    server.cli("DEL", manual)
    await a.blacklist.sync_once([P])
    assert a.health.cooled("ops/legacy") is None


async def test_redis_down_keeps_local_cooldowns_and_publishes_them_after(
    replica: ReplicaFactory,
) -> None:
    own = RedisServer().start()
    try:
        a = replica("a", url=own.url)
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


async def test_wait_returns_when_a_cooldown_is_queued(replica: ReplicaFactory) -> None:
    a = replica("a")
    waiting = asyncio.create_task(a.blacklist.wait(60.0))
    await asyncio.sleep(0)  # let it start waiting
    a.health.report(P, UNAUTHORIZED)
    await asyncio.wait_for(waiting, DEADLINE_S)
    started = time.monotonic()
    await a.blacklist.wait(0.01)  # nothing queued since: sleeps the whole timeout
    assert time.monotonic() - started >= 0.005


async def test_list_and_clear(server: RedisServer, replica: ReplicaFactory) -> None:
    a = replica("a")
    a.health.report(P, UNAUTHORIZED, "401")
    a.health.report(Q, RATE_LIMITED, "429")
    await a.blacklist.sync_once([P, Q])
    client = connect(server.url)
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


# --- kinference providers list | clear


@pytest.fixture
def cli_env(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> RedisServer:
    for name in list(os.environ):
        if name.upper().startswith("KINFERENCE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KINFERENCE_REDIS_URL", server.url)
    return server


def blacklist_by_hand(server: RedisServer, provider: str, *, ttl_ms: int = 60_000) -> None:
    key = KEYS.blacklist(provider)
    server.cli("HSET", key, "reason", UNAUTHORIZED, "detail", "401 from upstream", "count", "4")
    server.cli("HSET", key, "first_seen", "2025-05-01T12:00:00.000Z", "instance", "pod-1")
    server.cli("HSET", key, "last_seen", "2025-05-01T12:03:00.000Z")
    server.cli("PEXPIRE", key, str(ttl_ms))


def test_cli_list(cli_env: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["providers", "list"]) == 0
    assert capsys.readouterr().out == "no provider is blacklisted\n"
    blacklist_by_hand(cli_env, P)
    blacklist_by_hand(cli_env, Q, ttl_ms=3_600_000)
    assert main(["providers", "list"]) == 0
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["PROVIDER", "REASON", "COUNT", "TTL"]
    assert first.split()[:3] == [Q, UNAUTHORIZED, "4"]
    assert first.split()[3] in ("59m59s", "1h00m")
    assert second.split()[3].endswith("s") and float(second.split()[3][:-1]) > 50
    assert second.split()[4:7] == ["2025-05-01T12:00:00.000Z", "2025-05-01T12:03:00.000Z", "pod-1"]
    assert second.endswith("401 from upstream")
    assert main(["providers", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["provider"] for item in listed] == [Q, P]
    assert listed[1]["count"] == 4 and 50_000 < listed[1]["ttl_ms"] <= 60_000


def test_cli_clear(cli_env: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    blacklist_by_hand(cli_env, P)
    blacklist_by_hand(cli_env, Q)
    assert main(["providers", "clear", P]) == 0
    assert capsys.readouterr().out.startswith(f"cleared {P};")
    assert cli_env.cli("EXISTS", KEY) == "0"
    assert main(["providers", "clear", P]) == 0
    assert capsys.readouterr().out == f"{P} was not blacklisted\n"
    blacklist_by_hand(cli_env, P)
    assert main(["providers", "clear", "--all"]) == 0
    assert capsys.readouterr().out.startswith("cleared 2 providers;")
    assert cli_env.cli("DBSIZE") == "0"


def test_cli_prefix_flag(cli_env: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    cli_env.cli("HSET", "{prod}:blacklist:ai/openai", "reason", "manual")
    assert main(["providers", "--prefix", "prod:", "list", "--json"]) == 0
    assert [item["provider"] for item in json.loads(capsys.readouterr().out)] == [P]
    assert main(["providers", "list", "--json"]) == 0  # the default prefix sees none
    assert json.loads(capsys.readouterr().out) == []


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("kinference: error: ") and err.count("\n") == 1, err
    return err


def test_cli_errors(
    cli_env: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["providers", "clear", "openai"]) == 2
    assert "NAMESPACE/NAME" in one_line_error(capsys)
    with pytest.raises(SystemExit) as caught:  # a provider or --all, not both, not neither
        main(["providers", "clear", P, "--all"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit):
        main(["providers", "clear"])
    capsys.readouterr()
    stopped = RedisServer()  # a free port nobody listens on
    assert main(["providers", "--redis-url", stopped.url, "list"]) == 1
    assert "Redis" in one_line_error(capsys)
    stopped.stop()
    monkeypatch.setenv("KINFERENCE_REDIS_URL", "")
    assert main(["providers", "list"]) == 2
    assert "KINFERENCE_REDIS_URL" in one_line_error(capsys)


async def test_with_no_provider_a_poll_sends_nothing(
    server: RedisServer, replica: ReplicaFactory
) -> None:
    """An idle gateway of self-hosted engines names no provider: its polls (four a second)
    cost no Redis command but the periodic SCAN for keys set elsewhere."""
    idle = replica("r1")
    server.cli("CONFIG", "RESETSTAT")
    for _ in range(8):
        await idle.blacklist.sync_once([])
    calls = server.cli("INFO", "commandstats")
    assert "cmdstat_eval" not in calls and "cmdstat_hgetall" not in calls
    assert "'cmdstat_scan': {'calls': 2," in calls  # one SCAN in SCAN_EVERY syncs
    blacklist_by_hand(server, P)  # a key set elsewhere is found, then read
    for _ in range(4):
        await idle.blacklist.sync_once([])
    assert idle.health.cooled(P) is not None


async def test_a_cooldown_announced_after_a_redis_restart_is_adopted_at_once(
    replica: ReplicaFactory,
) -> None:
    """A replica that last polled before Redis restarted (an idle gateway of self-hosted
    engines polls nothing, h161) learns of the restart at its next poll. When that poll is
    the read of a provider another replica just announced, the key it finds is real: it is
    adopted then, not a SCAN later; only a missing key proves nothing after a restart."""
    own = RedisServer().start()
    try:
        a, b = replica("a", url=own.url), replica("b", url=own.url)
        await a.blacklist.sync_once([Q])  # a poll: `a` knows this Redis process
        own.restart()  # empty, a new process
        b.health.report(P, UNAUTHORIZED, "401")
        assert await b.blacklist.sync_once([]) == [P]  # written; `b` announces it
        await a.blacklist.refresh(P)  # `a` reads the announced key
        cooldown = a.health.cooled(P)
        assert cooldown is not None and cooldown.reason == UNAUTHORIZED
    finally:
        own.stop()


async def test_a_key_of_another_type_under_the_blacklist_s_names_is_skipped(
    server: RedisServer, replica: ReplicaFactory
) -> None:
    """A key under the blacklist's names that is not a hash (set by hand, or by another tool
    sharing the prefix) failed every poll with WRONGTYPE: the loop's failures made the node
    read Redis as unavailable (every Pick DEGRADED, budgets offline) while it stayed. It is
    skipped; the other providers' keys are still read and adopted."""
    writer, reader = replica("w"), replica("r")
    writer.health.report(P, UNAUTHORIZED, "401")
    await writer.blacklist.sync_once([])
    server.cli("SET", "{kinference}:blacklist:ai/typo", "1")
    await reader.blacklist.sync_once([Q])  # a SCAN: it finds both keys
    cooldown = reader.health.cooled(P)
    assert cooldown is not None and cooldown.reason == UNAUTHORIZED
    await reader.blacklist.refresh("ai/typo")
    client = connect(server.url)
    try:  # the CLI's list reads past it too
        assert [entry.provider for entry in await list_blacklist(client, KEYS)] == [P]
    finally:
        await client.aclose()


async def test_a_key_of_another_type_under_a_cooled_provider_s_name_fails_no_sync(
    server: RedisServer, replica: ReplicaFactory
) -> None:
    """The write side of the junk key: a provider this replica cools whose key is not a
    hash made the write script fail WRONGTYPE, so every sync raised (the node read Redis
    as unavailable) and the cool-downs queued after it were never written, for as long as
    the cool-down lasted. The write is skipped: the cool-down holds here, the others go."""
    server.cli("SET", KEY, "1")  # P's key, of another type
    writer, reader = replica("w"), replica("r")
    writer.health.report(P, UNAUTHORIZED, "401")
    writer.health.report(Q, RATE_LIMITED, "429")
    assert await writer.blacklist.sync_once([]) == [Q]
    await reader.blacklist.sync_once([])
    assert reader.health.cooled(Q) is not None and reader.health.cooled(P) is None
    assert writer.health.cooled(P) is not None  # kept here, though Redis holds none
    await writer.blacklist.sync_once([P])  # nothing left queued; the poll reads past it
    assert writer.health.cooled(P) is not None
    assert server.cli("TYPE", KEY).strip() == "string"
