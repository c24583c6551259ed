"""The paper model of docs/scaling.md: what R replicas serving Q requests/s over P pools cost
Redis and each replica, with the pools sharded over M masters.

Per replica and pool shard, events arrive at lam = E * Q / (R * P) per second. The publisher
wakes at the first event, gathers for the batch window B, then sends one pipeline, so it
flushes F = 1 / (1/lam + B + rtt) times a second, 3 commands each (HSET ~seq, HSET of the
dirty endpoints, XADD), and each stream entry carries lam / F events. Every reader of a
shard receives the entries of the R - 1 others at A = (R - 1) * F a second and XREADs
X = 1 / (1/A + pause + rtt) times a second (at least 1 / READ_BLOCK while idle). Bytes come
from kinference's own codec applied to a batch of the prompt mix. Global keys (membership,
blacklist, statistics, the global stream) live on one master; a liveness check is one
pipeline (the instance set and the `alive` sorted set, R ids each), twice a second by every
replica: R^2 bytes, not R^2 commands.

Costs are calibrated on measured points (`Calibration`): Redis CPU per command and per byte
on a node, one replica's CPU per request it follows, and the propagation delay beyond the
batch window and read pause.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kinference.cluster import codec
from kinference.cluster.node import HEARTBEAT_S, LIVENESS_S
from kinference.cluster.setup import BLACKLIST_POLL_S
from kinference.cluster.shards import IDLE_POLL_MAX_S
from loadtest.scale_worker import MODEL, PROMPT_MIX

EVENTS_PER_REQUEST = 4  # pick, first token, ITL counts, release
BATCH_S = 0.015  # KINFERENCE_REDIS_BATCH_MS default
PAUSE_S = 0.015  # readers pause as long after a read that found entries
RTT_S = 0.0005  # loopback round trip; a data centre adds ~0.2 ms more
STATS_PER_S = 2.0  # HSET + EXPIRE of this minute's statistics, once a second
HSET_BYTES = 80  # the load hash's HSET ~seq and dirty endpoints, per flush, with framing


@dataclass(frozen=True)
class Scenario:
    replicas: int
    rate: float  # requests per second over the whole fleet
    pools: int
    masters: int = 3
    pools_per_replica: int = 0  # 0: every replica routes every pool
    providers: int = 2  # providers named by the policy (blacklist polls)

    @property
    def routed(self) -> int:
        return self.pools_per_replica or self.pools


def event_bytes(seed: int = 1, *, binary: bool = True) -> tuple[float, int]:
    """(mean bytes of one event in the mix as kinference's codec writes it in a pool shard,
    bytes of an entry around its events); `binary=False`: JSON with base64 hashes."""
    rng = random.Random(seed)
    endpoint = "10.0.0.1:8000"
    events: list[list[object]] = []
    for _ in range(400):
        blocks = rng.choices([b for _, b in PROMPT_MIX], [s for s, _ in PROMPT_MIX])[0]
        hashes = codec.hash_bytes([rng.getrandbits(63) for _ in range(blocks)])
        events += [
            [codec.PICKED, endpoint, MODEL, hashes],
            [codec.FIRST_TOKEN, endpoint, MODEL, 200.0],
            [codec.ITL, endpoint, MODEL, [0, 0, 0, 0, 40] + [0] * 10],
            [codec.RELEASED, endpoint],
        ]
    batch = codec.encode("a1b2c3d4e5f6", 12345, events, binary=binary)
    empty = codec.encode("a1b2c3d4e5f6", 12345, [], binary=binary)
    size = sum(len(v) for v in batch.values() if isinstance(v, str | bytes))
    base = sum(len(v) for v in empty.values() if isinstance(v, str | bytes))
    overhead = sum(len(str(k)) + len(str(v)) + 8 for k, v in empty.items()) + 30  # id, RESP
    return (size - base) / len(events), overhead


@dataclass(frozen=True)
class Load:
    """What one master serves per second."""

    trips: float = 0.0  # round trips (a pipeline is one): Redis's read events
    commands: float = 0.0
    bytes: float = 0.0  # in + out

    def __add__(self, other: Load) -> Load:
        return Load(
            self.trips + other.trips, self.commands + other.commands, self.bytes + other.bytes
        )

    def __mul__(self, k: float) -> Load:
        return Load(self.trips * k, self.commands * k, self.bytes * k)


@dataclass(frozen=True)
class Traffic:
    """Rates of one scenario: per pool shard, on the global keys, and per replica."""

    shard: Load  # one pool shard's flushes and the XREADs of its readers
    reads: Load  # one replica's read cycles to one master (trips only; commands in `shard`)
    global_keys: Load  # membership, blacklist, statistics, the global stream (one master)
    entry_events: float  # events per stream entry
    cycles_per_s: float  # read cycles per second per replica
    applied_requests: float  # requests per second one replica follows (others', its pools)


def traffic(s: Scenario, event_b: float, entry_b: int) -> Traffic:
    readers = s.replicas * s.routed / s.pools  # replicas reading one shard
    shard_rate = s.rate / s.pools  # requests per second in one pool
    lam = EVENTS_PER_REQUEST * shard_rate / max(readers, 1)  # one writer's events, one shard
    flushes = 1 / (1 / lam + BATCH_S + RTT_S) if lam > 0 else 0.0
    per_entry = lam / flushes if flushes else 0.0
    entry = entry_b + per_entry * event_b
    arrivals = (readers - 1) * flushes * s.routed  # entries per second one replica reads
    cycles = 1 / (1 / arrivals + PAUSE_S + RTT_S) if arrivals else 0.0
    cycles = max(cycles, 1 / IDLE_POLL_MAX_S)  # idle shards are still polled
    xread_bytes = 40
    shard = Load(
        trips=readers * (flushes + 1 / HEARTBEAT_S),  # a flush is one pipeline; + PEXPIRE
        commands=readers * (3 * flushes + cycles + 1 / HEARTBEAT_S),
        bytes=readers * flushes * (entry + HSET_BYTES)  # in
        + readers * ((readers - 1) * flushes * entry + cycles * xread_bytes),  # out
    )
    r = s.replicas
    # SMEMBERS and the `alive` set's script in one pipeline: R members' ids, twice each.
    liveness = Load(1 / LIVENESS_S, 2 / LIVENESS_S, 2 * r * 20 / LIVENESS_S)
    blacklist = Load(1 / BLACKLIST_POLL_S, (2 * s.providers + 1) / BLACKLIST_POLL_S, 400 * 4)
    beat_and_stats = Load(1 / HEARTBEAT_S + STATS_PER_S / 2, 3 / HEARTBEAT_S + STATS_PER_S, 600)
    global_stream = Load(0.0, cycles, cycles * xread_bytes)  # in the read cycle's pipeline
    per_replica = liveness + blacklist + beat_and_stats + global_stream
    applied = shard_rate * s.routed * (readers - 1) / max(readers, 1)
    return Traffic(shard, Load(cycles), per_replica * r, per_entry, cycles, applied)


@dataclass(frozen=True)
class Calibration:
    """Costs fitted on measured points."""

    redis_s_per_trip: float  # Redis CPU seconds per round trip (read event, syscalls)
    redis_s_per_command: float
    redis_s_per_byte: float  # ... per byte in or out
    apply_base: float  # a replica's CPU share with no traffic (its background loops)
    apply_s_per_request: float  # a replica's CPU seconds per request of others it follows
    delay_extra_ms: float  # propagation p99 beyond batch window + read pause

    def cpu(self, load: Load) -> float:
        return (
            self.redis_s_per_trip * load.trips
            + self.redis_s_per_command * load.commands
            + self.redis_s_per_byte * load.bytes
        )


@dataclass(frozen=True)
class Prediction:
    node_cpu: list[float]  # share of one core per master (Redis is single-threaded)
    node_ops: list[float]
    node_bytes: list[float]
    apply_cpu: float  # share of one core per replica
    propagation_p99_ms: float


def place(pools: int, masters: int) -> list[int]:
    """Pools per master with hash tags spread evenly (CRC16 over 16 384 slots), the global
    keys on master 0."""
    return [pools // masters + (1 if m < pools % masters else 0) for m in range(masters)]


def node_loads(s: Scenario) -> list[Load]:
    """What each master serves: its pools' shards, the replicas' read cycles that reach it,
    and on master 0 the global keys."""
    event_b, entry_b = event_bytes()
    t = traffic(s, event_b, entry_b)
    loads = []
    for m, count in enumerate(place(s.pools, s.masters)):
        load = t.shard * count + (t.global_keys if m == 0 else Load())
        reaching = float(s.replicas) if (count or m == 0) else 0.0
        if s.pools_per_replica and m != 0:  # a replica's pools cover some masters only
            reaching = min(float(s.replicas), s.replicas * count * s.routed / s.pools)
        loads.append(load + t.reads * reaching)
    return loads


def predict(s: Scenario, c: Calibration) -> Prediction:
    event_b, entry_b = event_bytes()
    t = traffic(s, event_b, entry_b)
    loads = node_loads(s)
    apply_cpu = c.apply_base + c.apply_s_per_request * t.applied_requests
    read_cost_ms = 1000 * c.apply_s_per_request * t.applied_requests / max(t.cycles_per_s, 1)
    p99 = 1000 * (BATCH_S + PAUSE_S) + c.delay_extra_ms + read_cost_ms
    return Prediction(
        [c.cpu(load) for load in loads],
        [load.commands for load in loads],
        [load.bytes for load in loads],
        apply_cpu,
        p99,
    )
