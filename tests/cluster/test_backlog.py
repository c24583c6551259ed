"""A backlog of events (Redis refused writes or was away for a while) is bounded in memory,
sent in bounded entries without holding the loop, and counted once by every reader."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.exceptions import RedisError

from kinference.cluster import codec
from kinference.cluster import outbox as outbox_module
from kinference.cluster.connection import RedisClient, connect
from kinference.cluster.keys import Keys
from kinference.cluster.outbox import HASH_LIMIT, TAKE_EVENTS, Outbox
from kinference.cluster.replication import Reader
from kinference.cluster.shards import Shards
from kinference.cluster.view import ClusterView
from kinference.routing import PrefixIndex, WorkerTable
from loadtest.redis_server import RedisServer
from tests.cluster.wiring import shards_of, view_of

ENDPOINT = "10.0.0.1:8000"
POOL = "default/chat"
KEYS = Keys().for_pool(POOL)
BLOCKS = tuple(range(1, 65))  # one prompt's 64 block hashes


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    client = connect(redis_server.url)
    yield client
    await client.aclose()


class Replica:
    """What the cluster layer sees of a replica: its load and its outbox."""

    def __init__(self, limit: int = outbox_module.DEFAULT_LIMIT) -> None:
        self.outbox = Outbox(limit)
        self.own = {ENDPOINT: 0}

    def pick(self, hashes: tuple[int, ...] = BLOCKS) -> None:
        self.own[ENDPOINT] += 1
        self.outbox.picked(ENDPOINT, "m", hashes)

    def release(self) -> None:
        self.own[ENDPOINT] -= 1
        self.outbox.released(ENDPOINT)

    def shards(self, redis: RedisClient) -> Shards:
        """Its shards, ENDPOINT in POOL's: the flushes the production path makes."""
        shards = shards_of(redis, "a", self.outbox, lambda: dict(self.own))
        shards.set_pools({POOL: [ENDPOINT]})
        return shards


def reader(redis: RedisClient) -> Reader:
    found = Reader(redis, KEYS, "b", view_of(WorkerTable(), PrefixIndex(100_000)))
    found.bootstrap_needed = False  # from the stream's start
    return found


async def load_read(redis: RedisClient) -> dict[str, int]:
    """Replica a's load as a reader from the stream's start reads it."""
    following = reader(redis)
    await following.read()
    return following.view.load["a"]


async def entries(redis: RedisClient) -> list[codec.Entry]:
    found = [codec.decode(i, f) for i, f in await redis.xrange(KEYS.events())]
    return [entry for entry in found if entry is not None]


def test_an_outbox_of_long_prompts_is_bounded_by_their_blocks() -> None:
    """200,000 events of 64-block picks held 106 MB, of 1024-block ones ~1 GB."""
    replica, long_prompt = Replica(), tuple(range(1024))
    for _ in range(2 * HASH_LIMIT // len(long_prompt)):
        replica.pick(long_prompt)
    outbox = replica.outbox
    lost = outbox.dropped
    assert lost > 0
    assert len(outbox) <= HASH_LIMIT // len(long_prompt)
    events, _dirty, dropped = outbox.take()
    assert dropped == lost  # handed to the flush: it sends a snapshot
    assert len(events) * len(long_prompt) <= outbox_module.TAKE_HASHES


async def test_a_backlog_goes_out_in_bounded_entries_and_is_counted_once(
    redis: RedisClient,
) -> None:
    replica = Replica()
    shards = replica.shards(redis)
    await shards.flush()  # the first flush, a snapshot: the next ones would be deltas
    for n in range(2_600):  # ~2 1/2 flushes' worth
        replica.pick()
        if n % 3:
            replica.release()
    flushes = 0
    while len(replica.outbox) or shards.owe_snapshot():  # as the publish loop does
        await shards.flush()
        flushes += 1
    written = (await entries(redis))[1:]
    assert len(written) == flushes >= 4
    assert all(len(entry.events) <= TAKE_EVENTS for entry in written)
    # Each flush of a backlog is a snapshot, and so is the one after the last: the load it
    # sends counts the events still queued, which go out later as deltas.
    assert all(entry.load is not None for entry in written)
    assert written[-1].load == replica.own
    # A reader that applies them all in order holds the replica's load once.
    following = reader(redis)
    await following.read()
    assert following.view.load["a"] == replica.own
    replica.pick()  # and the deltas after it count again
    await shards.flush()
    await following.read()
    assert following.view.load["a"] == replica.own


async def test_events_lost_to_the_bound_are_replaced_by_a_snapshot(
    redis: RedisClient,
) -> None:
    """The oldest events past the outbox's bound are dropped (Redis away a long while): the
    next flush sends the whole load, which readers take in place of the deltas they lack."""
    replica = Replica(limit=10)
    shards = replica.shards(redis)
    await shards.flush()  # the first flush, a snapshot: the next ones would be deltas
    for _ in range(25):
        replica.pick()
    assert replica.outbox.dropped == 15
    await shards.flush()
    assert await load_read(redis) == {ENDPOINT: 25}


async def test_a_pick_between_the_take_and_the_send_is_counted_once(
    redis: RedisClient,
) -> None:
    """The load a flush sends is taken with its batch: a Pick in between was in the load
    sent (read when the send began, a loop step later) and again in the next flush."""
    replica = Replica()
    shards = replica.shards(redis)
    replica.pick()
    flush = asyncio.create_task(shards.flush())  # the first: a snapshot
    await asyncio.sleep(0)  # it took the batch; its sends have not begun
    replica.pick()
    await flush
    await shards.flush()  # the second pick, as a delta
    assert await load_read(redis) == {ENDPOINT: 2}


async def test_a_reader_lets_the_loop_run_while_it_applies_a_backlog(
    redis: RedisClient,
) -> None:
    events: list[list[Any]] = [[codec.FIRST_TOKEN, ENDPOINT, "m", 100.0]] * 1_000
    for seq in range(1, 4):
        await redis.xadd(KEYS.events(), codec.encode("a", seq, events, {ENDPOINT: 0}))
    answer = await redis.xread({KEYS.events(): "0-0"}, count=10)
    ticks = [0]

    async def ticker() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks[0]
    following = reader(redis)
    await following.consume(answer)
    ticking.cancel()
    assert isinstance(following.view, ClusterView)
    assert following.view.applied[codec.FIRST_TOKEN] == 3_000
    assert ticks[0] - before >= 2  # other tasks (Picks) ran while it applied 3,000 events


async def test_a_refused_flush_does_not_format_its_entry_into_the_error(
    redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py annotates a failed pipeline command with its arguments (`textwrap.shorten`
    over all of them): a full outbox's entry refused held the loop ~10 s per retry."""
    import redis.asyncio.client as redis_client

    formatted: list[int] = []
    truncate = redis_client.truncate_text

    def counting(text: str, *args: Any, **kwargs: Any) -> str:
        formatted.append(len(text))
        return str(truncate(text, *args, **kwargs))

    monkeypatch.setattr(redis_client, "truncate_text", counting)
    replica = Replica()
    shards = replica.shards(redis)
    for _ in range(900):
        replica.pick()
    await redis.config_set("maxmemory-policy", "noeviction")
    await redis.config_set("maxmemory", "1")
    with pytest.raises(RedisError, match="maxmemory"):
        await shards.flush()
    assert len(replica.outbox) == 900  # kept for the retry
    assert max(formatted, default=0) < 10_000, formatted
