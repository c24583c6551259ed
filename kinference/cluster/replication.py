"""The events stream: publishing this instance's batches and applying everyone else's.

Consistency rule: a publisher writes its load hash (with the flush's sequence number) before
the stream entry of the same flush. So a reader that takes a stream position first and the
load hashes second holds snapshots at least as new as every entry up to that position, and
applies only the load deltas of later entries (`ClusterView.apply` compares sequence
numbers). A jump in an instance's sequence (entries trimmed away before this reader got to
them) makes the reader re-read that instance's hash. A snapshot flush (the first, after a
failed write, after the outbox dropped events) carries the instance's whole load in its
entry, which readers take in place of what they had. Load is never guessed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kinference.cluster import codec
from kinference.cluster.connection import RedisClient, check_replies, wrong_type
from kinference.cluster.keys import ENGINES_TTL_S, HEARTBEAT_TTL_MS, POOLS_LAYOUT, Keys
from kinference.cluster.loads import SEQ_FIELD, load_reply
from kinference.cluster.outbox import Outbox
from kinference.cluster.stats import StatsBuffer, seed_estimates
from kinference.cluster.view import ClusterView

log = logging.getLogger(__name__)

READ_COUNT = 1_000  # stream entries per XREAD
# Milliseconds an XREAD waits for new entries, at most: an idle replica reads twice a second
# (10 times at 100 ms: most of its idle Redis traffic). A quarter of the stale threshold
# below that, so that an idle reader's last read is never near stale (`read_block_ms`).
READ_BLOCK_MS = 500
TAIL_ENTRIES = 2_000  # recent entries a new replica replays to warm its prefix index
# A reader lets its loop run (Picks) after applying this much of one read, counted in events
# and block hashes / 64: a backlog (the first flushes after another replica's outage, up to a
# thousand entries a read) was applied at once, 1.7-4 s held on every reader's loop.
YIELD_WORK = 1_000


# Replace a load hash by a snapshot (DEL, HSET in chunks, PEXPIRE) in one atomic step. A
# script, not MULTI: redis-py runs each command queued in a Cluster transaction on a thread
# of its own, and a script also keeps the snapshot on its key's slot.
_SNAPSHOT = """
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 200 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 199, #ARGV)))
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


def read_block_ms(stale_after_s: float) -> int:
    """How long a read waits: `READ_BLOCK_MS`, or a quarter of `stale_after_s` if shorter."""
    return max(min(READ_BLOCK_MS, int(stale_after_s * 1000 / 4)), 1)


class Publisher:
    """One shard's writes of a flush: the load hash first, then one stream entry (the
    batch, cut by shard, comes from `Shards.flush`)."""

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        instance: str,
        outbox: Outbox,
        *,
        stats: StatsBuffer,
        maxlen: int,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self.instance = instance
        self.outbox = outbox
        self._stats = stats
        self._maxlen = maxlen
        # Binary hashes only in pool shards: the global stream is read by earlier releases.
        self._binary = bool(keys.pool) and keys.layout == POOLS_LAYOUT
        self.seq = 0
        self.snapshot_needed = True  # first flush, and after any failure: the whole load
        self.flushes = 0

    def owe_snapshot(self) -> None:
        """Republish this instance's whole load at the next flush (Redis lost it, or may
        have: a failed write, a restarted server)."""
        self.snapshot_needed = True
        self.outbox.wakeup.set()

    async def deliver(
        self, events: list[list[Any]], dirty: set[str], own: Mapping[str, int]
    ) -> None:
        """Send this shard's part of one batch taken from the outbox, with this instance's
        load `own` as of the take (raises on a Redis error; the part goes back into the
        outbox for the retry, and the next flush is a snapshot). When a flush must be a
        snapshot is `Shards.flush`'s rule: it calls `owe_snapshot` first."""
        try:
            await self._send(events, dirty, own)
        except BaseException:
            self.outbox.requeue(events, dirty)
            self.owe_snapshot()
            raise
        self._stats.fold(events)
        self.flushes += 1

    async def _send(self, events: list[list[Any]], dirty: set[str], own: Mapping[str, int]) -> None:
        snapshot = self.snapshot_needed
        seq = self.seq + 1
        load_key = self._keys.load(self.instance)
        pipe = self._redis.pipeline(transaction=False)
        written: dict[str, int] = {}  # a delta flush's fields of the load hash
        if snapshot:  # atomically: a reader never finds the hash gone or half written
            snapshot_fields = [x for pair in {**own, SEQ_FIELD: seq}.items() for x in pair]
            pipe.eval(_SNAPSHOT, 1, load_key, HEARTBEAT_TTL_MS, *snapshot_fields)
        else:
            # One command, so that no reader finds the new seq with the old counts (Redis may
            # run another client's HGETALL between two commands of a pipeline split in TCP
            # segments). Its reply counts the fields added: a live load hash always holds the
            # seq, so all of them means Redis lost the hash (an empty restart) and these
            # deltas just recreated part of it; a snapshot follows at once.
            written = {SEQ_FIELD: seq, **{e: own.get(e, 0) for e in dirty}}
            pipe.hset(load_key, mapping=written)
        readings = {e[1]: json.dumps(e[2]) for e in events if e[0] == codec.ENGINE}
        if readings:  # the latest readings, for replicas that start later
            pipe.hset(self._keys.engines(), mapping=readings)
            pipe.expire(self._keys.engines(), ENGINES_TTL_S)
        # A snapshot also travels in the entry: readers replace our load with it, which
        # also undoes a batch that Redis applied although our call timed out.
        fields: Any = codec.encode(
            self.instance, seq, events, dict(own) if snapshot else None, binary=self._binary
        )
        pipe.xadd(self._keys.events(), fields, maxlen=self._maxlen, approximate=True)
        # Errors returned, not raised: redis-py would format the whole entry into the error's
        # text first (textwrap over it: 0.13 s of this loop for a 256 KiB entry refused).
        replies = await pipe.execute(raise_on_error=False)
        for index, reply in enumerate(replies):
            # The readings' hash of another type (WRONGTYPE) fails only them: failing the
            # flush, its entry (gone out already) would go out again at every retry.
            if isinstance(reply, Exception) and not (
                readings and index == len(replies) - 3 and wrong_type(reply)
            ):
                raise reply
        self.seq = seq
        self.snapshot_needed = False
        if not snapshot and replies[0] == len(written):
            self.owe_snapshot()


class Reader:
    """Applies other instances' entries, in stream order, to the local view."""

    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        instance: str,
        view: ClusterView,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        seed_stats: bool = True,
    ) -> None:
        self._redis = redis  # a client whose timeout allows READ_BLOCK_MS
        self._seed_stats = seed_stats  # statistics are global: one shard's reader seeds them
        self._keys = keys
        self.instance = instance
        self.view = view
        self._clock = clock
        self._wall = wall
        self.last_id = "0-0"
        self.bootstrapped = False
        self.bootstrap_needed = True
        self.last_read_at: float | None = None  # monotonic seconds of the last good read
        self.lag_s = 0.0  # age of the newest entry applied, when it was applied
        self.resyncs = 0

    async def ensure_bootstrapped(self) -> None:
        """Bootstrap when needed (raises on a Redis error, and then bootstraps again)."""
        if self.bootstrap_needed:
            try:
                await self.bootstrap()
            except Exception:
                self.bootstrap_needed = True
                raise

    async def read(self) -> None:
        """One XREAD of this shard's stream alone, applied (tests and tools: a replica reads
        all its shards at once, `Shards.read`, which also pauses between reads)."""
        answer = await self._redis.xread(
            {self._keys.events(): self.last_id}, count=READ_COUNT, block=READ_BLOCK_MS
        )
        await self.consume(answer)

    async def consume(self, answer: Any) -> None:
        """Apply an XREAD reply of this shard's stream (from `read` or a shared read),
        letting the loop run after every YIELD_WORK of it."""
        work = 0
        for _stream, entries in answer or ():
            for entry_id, fields in entries:
                work += await self._take(entry_id, fields)
                if work >= YIELD_WORK:
                    work = 0
                    await asyncio.sleep(0)
        self.last_read_at = self._clock()

    async def _take(self, entry_id: bytes, fields: dict[bytes, bytes]) -> int:
        """Apply one entry; returns its work (events, and block hashes / 64)."""
        entry = codec.decode(entry_id, fields)
        self.last_id = entry_id.decode()
        if entry is None or entry.instance == self.instance:
            return 0
        if entry.load is None and self.view.needs_resync(entry):
            await self.resync(entry.instance, entry.seq)
        self.view.apply(entry)
        self.lag_s = max(self._wall() - codec.entry_ms(entry.id) / 1000, 0.0)
        return len(entry.events) + _hash_bytes(entry.events) // 512

    async def resync(self, instance: str, seq: int) -> None:
        """Replace an instance's load by its hash (entries of it were missed)."""
        self.resyncs += 1
        # Its entry proves it alive: a heartbeat lapsed in an outage must not lose its load.
        pipe = self._redis.pipeline(transaction=False)
        pipe.hgetall(self._keys.load(instance))
        counts, snapshot_seq = load_reply(
            check_replies(await pipe.execute(raise_on_error=False))[0]
        )
        if snapshot_seq is not None:
            self.view.replace(instance, counts, max(snapshot_seq, seq))
        else:  # its hash expired: its deltas cannot be trusted
            self.view.drop(instance)
            self.view.seq[instance] = seq
        log.info("re-read the load of replica %s after a gap", instance)

    async def bootstrap(self) -> None:
        """Build the view from the shared state: live instances' load, engine readings,
        recent statistics, and the stream's tail for the prefix index."""
        redis, keys = self._redis, self._keys
        newest = await redis.xrevrange(keys.events(), count=1)
        position = newest[0][0].decode() if newest else "0-0"
        members = {m.decode() for m in await redis.smembers(keys.instances())} - {self.instance}
        live = await self._live_loads(sorted(members))
        for gone in self.view.instances() - set(live):
            self.view.drop(gone)
        for instance, (counts, seq) in live.items():
            self.view.replace(instance, counts, seq)
        await self._warm(position)
        self.last_id = position
        self.bootstrap_needed = False
        self.bootstrapped = True
        log.info("shared state bootstrapped: %d other replicas", len(live))

    async def _live_loads(self, members: list[str]) -> dict[str, tuple[dict[str, int], int]]:
        pipe = self._redis.pipeline(transaction=False)
        for member in members:
            pipe.exists(self._keys.heartbeat(member))
            pipe.hgetall(self._keys.load(member))
        answers = check_replies(await pipe.execute(raise_on_error=False))
        live = {}
        for index, member in enumerate(members):
            counts, seq = load_reply(answers[2 * index + 1])
            if answers[2 * index] and seq is not None:
                live[member] = (counts, seq)
        return live

    async def _warm(self, position: str) -> None:
        redis, keys = self._redis, self._keys
        pipe = redis.pipeline(transaction=False)
        pipe.hgetall(keys.engines())  # of another type: no readings (`check_replies`)
        engines = check_replies(await pipe.execute(raise_on_error=False))[0]
        for endpoint, raw in ({} if isinstance(engines, Exception) else engines).items():
            try:
                self.view.engine_reading(endpoint.decode(), json.loads(raw))
            except (ValueError, KeyError, TypeError):
                continue
        if self._seed_stats:
            await seed_estimates(redis, keys, self.view.router, self._wall())
        if position == "0-0":
            return
        tail = await redis.xrevrange(keys.events(), max=position, count=TAIL_ENTRIES)
        for entry_id, fields in reversed(tail):
            entry = codec.decode(entry_id, fields)
            if entry is not None:
                self.view.replay_prefixes(entry)


def _hash_bytes(events: list[Any]) -> int:
    """Bytes of the picks' block hashes in a decoded entry (any event may be malformed)."""
    return sum(
        len(event[3])
        for event in events
        if isinstance(event, list) and len(event) == 4 and isinstance(event[3], bytes)
    )
