"""What a replica loads from Redis: at start (engine readings, statistics, load) and when
a live replica is missing from its view."""

from __future__ import annotations

import math
import time

import pytest

from kinference.cluster import codec
from kinference.cluster.connection import connect
from kinference.cluster.keys import Keys
from kinference.cluster.loads import SEQ_FIELD
from kinference.cluster.members import Membership
from kinference.cluster.outbox import Outbox
from kinference.cluster.replication import Reader
from kinference.cluster.stats import StatsBuffer
from kinference.routing import PrefixIndex, WorkerTable
from kinference.routing.rates import PRIOR_SAMPLES, Rates
from kinference.routing.textsize import MIN_SAMPLES
from loadtest.redis_server import RedisServer
from tests.cluster.wiring import shards_of, view_of

ENDPOINT = "10.0.0.1:8000"


async def test_a_late_replica_loads_readings_statistics_and_prefixes(
    redis_server: RedisServer,
) -> None:
    client = connect(redis_server.url)
    keys = Keys()
    outbox = Outbox()
    stats = StatsBuffer(client, keys, "early")
    shards = shards_of(client, "early", outbox, lambda: {ENDPOINT: 1}, stats=stats, maxlen=1000)
    reading = {"at": time.time(), "ready": True, "read": True, "waiting": 4, "running": 2}
    size = {"kv_capacity_tokens": 8000}  # the engine's KV cache: 500 blocks of 64 bytes
    outbox.engine(ENDPOINT, reading | {"kv_usage": 0.5, "adapters": ["sql-lora"]} | size)
    outbox.picked(ENDPOINT, "m", (11, 22, 33))
    outbox.first_token(ENDPOINT, "m", 120.0)
    outbox.itl(ENDPOINT, "m", [0, 0, 4, *[0] * 12])
    outbox.served(ENDPOINT, "m", 2000.0, 115.0, 1800.0)
    outbox.served(ENDPOINT, "m", 2000.0, float("nan"), 2200.0)  # queued: no prefill sample
    outbox.text(ENDPOINT, "m", 3200.0, 2000.0)  # 1.6 characters a token
    outbox.text(ENDPOINT, "m", 3400.0, 2000.0)
    outbox.text(ENDPOINT, "m", 3300.0, 2000.0)  # enough samples to replace the prior
    outbox.busy(ENDPOINT, "m", 2.0, 30.0)  # 15 ms a sequence
    outbox.busy("10.0.0.2:8000", "m", 4.0, 40.0)  # the model's, on another engine: 10
    outbox.busy(ENDPOINT, "m", 0.0, 40.0)  # alone on its engine: no sample, not counted
    await shards.flush()
    await stats.flush()
    await client.set(keys.heartbeat("early"), b"1")  # alive, as its heartbeat would say
    await client.sadd(keys.instances(), "early")

    table, prefix = WorkerTable(), PrefixIndex(1000)
    view = view_of(table, prefix)
    reader = Reader(client, keys, "late", view)
    await reader.bootstrap()
    slot = table.slot(ENDPOINT)
    assert table.inflight[slot] == 1  # from the early replica's load hash
    assert (table.waiting[slot], table.kv_usage[slot]) == (4, 0.5)  # from the engines hash
    assert table.lora_mask("sql-lora") is not None
    assert prefix.capacity[slot] == 500  # its size, at the prior 4 characters a token
    assert math.isclose(table.ttft_ms("m")[slot], 120.0)  # from the statistics hash
    assert math.isclose(table.itl_ms("m")[slot], 12.5)  # bucket 2's representative gap
    assert prefix.match((11, 22, 33)) == {slot: 3}  # replayed from the stream's tail
    rates = view.router.learning.rates  # the TTFT model's rates, from the statistics hash
    assert math.isclose(rates.learned("m", "service_ms", slot), 2000.0)
    per_token = rates.learned("m", "prefill_ms_per_token", slot)
    base = rates.learned("m", "prefill_base_ms", slot)
    assert math.isclose(base + 2000 * per_token, 115.0)
    # Characters per token: the cluster's mean sample (1.65), replacing the prior.
    assert math.isclose(view.router.learning.text.chars_per_token("m"), 1.65)
    # The busy cost: the fit through the origin of both engines' samples, (60 + 160) / 20.
    assert math.isclose(rates.learned_busy("m"), 11.0)
    await client.aclose()


def test_a_snapshot_entry_keeps_its_publisher_alive_without_a_heartbeat() -> None:
    """After an empty Redis restart a replica's snapshot entry can arrive before its
    heartbeat key is back: its load must survive the membership check meanwhile."""
    now = [100.0]
    view = view_of(WorkerTable(), PrefixIndex(1000), clock=lambda: now[0])
    fields = codec.encode("a", 7, [], {ENDPOINT: 3})
    snapshot = codec.decode(b"1-0", {k.encode(): str(v).encode() for k, v in fields.items()})
    assert snapshot is not None
    view.apply(snapshot)
    assert view.table.inflight[view.table.slot(ENDPOINT)] == 3
    assert view.seen_within("a", 1.0)
    now[0] += 2.0
    assert not view.seen_within("a", 1.0)
    view.replace("a", {ENDPOINT: 2}, 8)  # a re-read hash: no newer sighting than before
    assert view.last_seen["a"] == 100.0


async def test_the_membership_check_reads_back_a_live_replica_missing_from_the_view(
    redis_server: RedisServer,
) -> None:
    """A replica dropped while its heartbeat lapsed, quiet since (long requests held), is
    read back from its load hash once its heartbeat returns."""
    client = connect(redis_server.url)
    keys = Keys()
    table = WorkerTable()
    shards = shards_of(client, "me", Outbox(), keys=keys, table=table, maxlen=1000)
    shards.set_pools({"default/chat": [ENDPOINT]})
    pool = shards.pools["default/chat"]
    await client.hset(pool.keys.load("quiet"), mapping={ENDPOINT: 3, SEQ_FIELD: 12})
    await client.set(keys.heartbeat("quiet"), b"1")
    await client.sadd(keys.instances(), "quiet")
    membership = Membership(client, keys, "me", lambda: list(shards))
    await membership.check()
    assert table.inflight[table.slot(ENDPOINT)] == 3
    assert pool.view.seq["quiet"] == 12
    assert "quiet" not in shards.top.view.seq  # no load hash in the global shard
    await client.hset(pool.keys.load("quiet"), mapping={ENDPOINT: 5, SEQ_FIELD: 13})
    await membership.check()  # known now: the reader's entries keep it current, not the hash
    assert table.inflight[table.slot(ENDPOINT)] == 3
    await client.aclose()


def test_another_replicas_served_samples_teach_this_replicas_rates() -> None:
    view = view_of(WorkerTable(), PrefixIndex(1000))
    events = [
        [codec.SERVED, ENDPOINT, "m", 1000.0, 60.0, 900.0],
        [codec.SERVED, ENDPOINT, "m", 1000.0, None, None],  # queued, no final: not measured
    ]
    fields = codec.encode("a", 1, events, None)
    entry = codec.decode(b"1-0", {k.encode(): str(v).encode() for k, v in fields.items()})
    assert entry is not None
    view.apply(entry)
    slot = view.table.slot(ENDPOINT)
    rates = view.router.learning.rates
    kept = (1.0 - rates.alpha) * PRIOR_SAMPLES * rates.alpha  # the prior's weight, faded
    expected = (kept * rates.prior_service_ms + rates.alpha * 900.0) / (kept + rates.alpha)
    assert rates.learned("m", "service_ms", slot) == pytest.approx(expected)
    base, per_token = (
        rates.learned("m", q, slot) for q in ("prefill_base_ms", "prefill_ms_per_token")
    )
    assert math.isclose(base + 1000 * per_token, 60.0)
    assert view.applied[codec.SERVED] == 2


def test_another_replicas_text_samples_teach_this_replicas_characters_per_token() -> None:
    view = view_of(WorkerTable(), PrefixIndex(1000))
    events = [[codec.TEXT_SIZE, ENDPOINT, "m", 3200.0, 2000.0] for _ in range(MIN_SAMPLES)]
    events.append([codec.TEXT_SIZE, ENDPOINT, "m", "not a number", 1.0])  # skipped
    fields = codec.encode("a", 1, events, None)
    entry = codec.decode(b"1-0", {k.encode(): str(v).encode() for k, v in fields.items()})
    assert entry is not None
    view.apply(entry)
    assert view.router.learning.text.chars_per_token("m") == 1.6
    assert view.applied[codec.TEXT_SIZE] == MIN_SAMPLES + 1


def test_another_replicas_busy_samples_teach_this_replicas_busy_cost() -> None:
    view = view_of(WorkerTable(), PrefixIndex(1000))
    events = [
        [codec.BUSY, ENDPOINT, "m", 2.0, 30.0],
        [codec.BUSY, "10.0.0.2:8000", "m", 4.0, 40.0],  # the model's, whichever engine
        [codec.BUSY, ENDPOINT, "m", "not a number", 1.0],  # skipped
        [codec.BUSY, ENDPOINT, "m", 2.0],  # too short: skipped
        [codec.BUSY, ENDPOINT, "m", 1e308, 1e308],  # no engine runs that many: no sample
    ]
    fields = codec.encode("a", 1, events, None)
    entry = codec.decode(b"1-0", {k.encode(): str(v).encode() for k, v in fields.items()})
    assert entry is not None
    view.apply(entry)
    rates = view.router.learning.rates
    expected = Rates()
    expected.observe_busy("m", 2.0, 30.0)
    expected.observe_busy("m", 4.0, 40.0)
    assert rates.learned_busy("m") == expected.learned_busy("m")
    assert view.applied[codec.BUSY] == 5
