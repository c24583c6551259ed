"""The shared hashes a replica reads at bootstrap (per-minute statistics, other replicas'
load) holding what none of ours writes: an operator's or a foreign tool's fields, values
that are no numbers (or `nan`, `inf`), names that are not UTF-8, keys of another type. A
replica still bootstraps, takes the well-formed part, and adopts none of the rest; its own
statistics of other minutes are still written."""

from __future__ import annotations

import math
import time

from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.leader import ScrapeLeadership
from kinference.cluster.loads import SEQ_FIELD
from kinference.cluster.members import Membership
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import Reader
from kinference.cluster.shards import Shards, Wiring
from kinference.cluster.stats import StatsBuffer
from kinference.cluster.view import ClusterView
from kinference.routing import PrefixIndex, WorkerTable
from loadtest.redis_server import RedisServer
from tests.cluster.wiring import shards_of, view_of

ENDPOINT, OTHER = "10.0.0.1:8000", "10.0.0.2:8000"
KEYS = Keys()


def fresh_view() -> ClusterView:
    return view_of(WorkerTable(), PrefixIndex(1000))


async def bootstrapped(client: RedisClient) -> ClusterView:
    view = fresh_view()
    await Reader(client, KEYS, "late", view).bootstrap()
    return view


async def test_junk_statistics_fields_are_skipped_and_the_rest_seeded(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: one field that is not `instance|endpoint|model|field`, or whose value is not
    a number, failed every bootstrap for the SEED_MINUTES it stayed recent (the read loop
    restarting each second, the shared view never read); `inf` became the estimate."""
    minute = KEYS.stats(int(time.time() // 60))
    await client.hset(
        minute,
        mapping={
            f"a|{ENDPOINT}|m|ttft_ms_sum": 240, f"a|{ENDPOINT}|m|ttft_count": 2,  # 120 ms
            "junk": 1, "a|too|few": 1, b"a|\xff\xfe|m|ttft_count": 1,
            f"a|{ENDPOINT}|m|itl_b2": "not a number", f"a|{ENDPOINT}|m|itl_b²": 4,
            f"a|{OTHER}|m|ttft_ms_sum": "inf", f"a|{OTHER}|m|ttft_count": 1,
            f"a|{OTHER}|m|text_chars_sum": 9000, f"a|{OTHER}|m|text_tokens_sum": 3000,
            f"a|{OTHER}|m|text_count": "inf",
            f"a|{OTHER}|m|service_ms_sum": "nan", f"a|{OTHER}|m|service_count": 1,
        },
    )  # fmt: skip
    view = await bootstrapped(client)
    table, rates = view.table, view.router.learning.rates
    assert math.isclose(table.ttft_ms("m")[table.slot(ENDPOINT)], 120.0)
    assert math.isnan(table.ttft_ms("m")[table.slot(OTHER)])
    assert math.isnan(rates.learned("m", "service_ms", table.slot(OTHER)))
    assert view.router.learning.text.learned() == {}


async def test_a_statistics_key_of_another_type_is_no_statistics(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: WRONGTYPE failed every bootstrap while the key stayed recent (a string
    written by hand has no TTL: for ever)."""
    current = int(time.time() // 60)
    await client.set(KEYS.stats(current - 1), b"not a hash")
    await client.hset(KEYS.stats(current), mapping={f"a|{ENDPOINT}|m|ttft_ms_sum": 90,
                                                     f"a|{ENDPOINT}|m|ttft_count": 1})  # fmt: skip
    view = await bootstrapped(client)
    assert math.isclose(view.table.ttft_ms("m")[view.table.slot(ENDPOINT)], 90.0)


async def test_a_statistics_key_of_another_type_fails_no_write_of_other_minutes(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: WRONGTYPE failed every flush of this replica's statistics, every other
    minute's with it, for the hour it keeps minutes to write (and each failure read as
    Redis unavailable)."""
    current = int(time.time() // 60)
    await client.set(KEYS.stats(current - 1), b"not a hash")
    now = [60.0 * (current - 1) + 1]  # this replica counts a report in the junk's minute
    stats = StatsBuffer(client, KEYS, "me", wall=lambda: now[0])
    stats.fold([["t", ENDPOINT, "m", 50.0]])
    now[0] = 60.0 * (current + 1) + 1  # two minutes later: both are to be written
    stats.fold([["t", ENDPOINT, "m", 70.0]])
    await stats.flush()  # the junk minute is given up, not the write
    field = f"me|{ENDPOINT}|m|ttft_ms_sum".encode()
    assert float(await client.hget(KEYS.stats(current + 1), field)) == 70.0
    assert await client.get(KEYS.stats(current - 1)) == b"not a hash"
    stats.fold([["t", ENDPOINT, "m", 30.0]])
    await stats.flush()  # and later flushes are not failed by it either
    assert float(await client.hget(KEYS.stats(current + 1), field)) == 100.0


async def test_junk_in_a_replicas_load_hash_is_skipped(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: a count that is not an integer failed every bootstrap (and every re-read
    after a gap) while the hash lived; a load key of another type likewise."""
    for instance in ("a", "b", "c"):
        await client.set(KEYS.heartbeat(instance), b"1")
        await client.sadd(KEYS.instances(), instance)
    await client.hset(KEYS.load("a"), mapping={ENDPOINT: 2, OTHER: "many", SEQ_FIELD: 5,
                                               b"\xff": 1})  # fmt: skip
    await client.hset(KEYS.load("b"), mapping={ENDPOINT: 1, SEQ_FIELD: "x"})
    await client.set(KEYS.load("c"), b"not a hash")
    view = await bootstrapped(client)
    table = view.table
    assert table.inflight[table.slot(ENDPOINT)] == 2  # a's good count; b's has no snapshot
    assert table.inflight[table.slot(OTHER)] == 0
    assert view.seq == {"a": 5}


async def test_the_membership_check_reads_a_load_key_of_another_type_as_no_snapshot(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: WRONGTYPE failed every membership check while the key lived, and each
    failure read as Redis unavailable."""
    view = fresh_view()
    shards = Shards(Wiring(client, client, KEYS, view.router, Outbox(), dict,
                           StatsBuffer(client, KEYS, "me"), "me", 1000, 0.0))  # fmt: skip
    shards.set_pools({"default/chat": [ENDPOINT]})
    pool = shards.pools["default/chat"]
    for instance in ("junk", "quiet"):
        await client.set(KEYS.heartbeat(instance), b"1")
        await client.sadd(KEYS.instances(), instance)
    await client.set(pool.keys.load("junk"), b"not a hash")
    await client.hset(pool.keys.load("quiet"), mapping={ENDPOINT: 3, SEQ_FIELD: 12})
    await Membership(client, KEYS, "me", lambda: list(shards)).check()
    table = view.table
    assert table.inflight[table.slot(ENDPOINT)] == 3
    assert pool.view.seq == {"quiet": 12}


async def test_an_engines_key_of_another_type_fails_no_flush_and_no_bootstrap(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: every flush carrying a scrape leader's reading failed on the `engines` key
    after its stream entry had gone out, so the batch was sent again and again (each time
    a new entry, its events applied again by every reader) while the key lived; and every
    bootstrap failed reading it."""
    await client.set(KEYS.engines(), b"not a hash")
    outbox = Outbox()
    stats = StatsBuffer(client, KEYS, "leader")
    shards = shards_of(client, "leader", outbox, keys=KEYS, stats=stats, maxlen=1000)
    outbox.engine(ENDPOINT, {"at": time.time(), "ready": True, "read": True, "waiting": 2})
    outbox.first_token(ENDPOINT, "m", 80.0)
    await shards.flush()
    await shards.flush()  # nothing left to send
    assert await client.xlen(KEYS.events()) == 1
    await bootstrapped(client)  # the reading is lost, not the bootstrap


async def test_a_leader_key_of_another_type_is_led_by_each_replica(
    redis_server: RedisServer, client: RedisClient
) -> None:
    """Before: the claim's script failed on it at every claim, each failure read as Redis
    unavailable (Picks DEGRADED until the next heartbeat), for as long as the key lived.
    No replica can hold that lease: each scrapes the pool itself and shares what it reads,
    as the others' claims on other pools go on."""
    await client.hset(KEYS.leader("default/junk"), mapping={"who": "an operator"})
    first, second = (ScrapeLeadership(client, KEYS, name) for name in ("a", "b"))
    assert await first.claim(["default/chat", "default/junk"]) == {"default/chat", "default/junk"}
    assert await second.claim(["default/chat", "default/junk"]) == {"default/junk"}
    await first.resign()  # lets its own lease go, and the junk key be
    assert await second.claim(["default/chat", "default/junk"]) == {"default/chat", "default/junk"}
