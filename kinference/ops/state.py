"""The cluster's shared state as an operator reads it: replicas, workers, scrape leaders,
blacklisted providers and tenant usage, read from Redis (key schema in docs/redis.md).

Read-only and a handful of pipelined round trips; what a replica would fold from the
events streams is read here from the keys that hold its latest value. Load hashes and
engine readings live in each pool's shard (found by a SCAN for the pools' streams) and, in
the single layout or from replicas of the old schema, under the global tag.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kinference.cluster.blacklist_keys import Entry, list_blacklist
from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import HEARTBEAT_TTL_MS, SINGLE_LAYOUT, Keys
from kinference.cluster.loads import load_counts

_SCAN_COUNT = 500  # keys per SCAN step
_WINDOW_S = 60  # seconds: tenant budgets are per sliding minute


@dataclass(frozen=True, slots=True)
class Replica:
    instance: str
    alive: bool  # its heartbeat key exists
    heartbeat_age_s: float | None  # seconds since its last beat (None when gone)
    inflight: int  # requests it picked and has not seen finish


@dataclass(frozen=True, slots=True)
class Worker:
    endpoint: str
    inflight: int  # cluster-wide: the live replicas' counts added up
    ready: bool | None = None  # None: no engine reading (a static endpoint)
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None  # fraction 0..1
    reading_age_s: float | None = None  # seconds since its scrape leader read it
    scraped_by: str = ""


@dataclass(frozen=True, slots=True)
class Leader:
    pool: str
    instance: str
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class TenantUsage:
    tenant: str
    this_minute: int  # tokens reported in the current epoch minute
    last_minute: int  # and in the one before
    leased: int  # budget tokens leased to replicas in the last 60 s


@dataclass(frozen=True, slots=True)
class ClusterState:
    read_at: float  # epoch seconds
    replicas: list[Replica] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    leaders: list[Leader] = field(default_factory=list)
    blacklist: list[Entry] = field(default_factory=list)
    tenants: list[TenantUsage] = field(default_factory=list)


async def read_state(redis: RedisClient, keys: Keys, now: float | None = None) -> ClusterState:
    """Everything `kinference state` shows. Raises RedisError or OSError."""
    now = time.time() if now is None else now
    shards = await _shards(redis, keys)
    pipe = redis.pipeline(transaction=False)
    pipe.smembers(keys.instances())
    pipe.smembers(keys.tenants())
    for shard in shards:
        pipe.hgetall(shard.engines())
    members, tenant_names, *engines = await pipe.execute()
    instances = sorted(_text(member) for member in members)
    tenants = sorted(_text(name) for name in tenant_names)
    replicas, loads = await _replicas(redis, keys, shards, instances)
    readings: dict[str, dict[str, Any]] = {}
    for shard_engines in engines:
        readings |= _readings(shard_engines)
    return ClusterState(
        read_at=now,
        replicas=replicas,
        workers=_workers(loads, readings, now),
        leaders=await _leaders(redis, keys),
        blacklist=await list_blacklist(redis, keys),
        tenants=await _tenants(redis, keys, tenants, now),
    )


async def _shards(redis: RedisClient, keys: Keys) -> list[Keys]:
    """The global shard and every pool's shard that has an events stream."""
    found = redis.scan_iter(match=keys.pool_pattern(), count=_SCAN_COUNT)
    pools = sorted({keys.pool_of_stream(_text(key)) async for key in found})
    return [keys.global_keys(), *(keys.for_pool(pool) for pool in pools)]


async def _replicas(
    redis: RedisClient, keys: Keys, shards: Sequence[Keys], instances: Sequence[str]
) -> tuple[list[Replica], list[dict[str, int]]]:
    """Each replica with its heartbeat age, and the load hashes of the live ones (one per
    shard it publishes to)."""
    if not instances:
        return [], []
    pipe = redis.pipeline(transaction=False)
    for instance in instances:
        pipe.pttl(keys.heartbeat(instance))
        for shard in shards:
            pipe.hgetall(shard.load(instance))
    replies = await pipe.execute()
    replicas, loads, step = [], [], 1 + len(shards)
    for index, instance in enumerate(instances):
        ttl_ms = int(replies[step * index])
        load = [_counts(raw) for raw in replies[step * index + 1 : step * (index + 1)]]
        alive = ttl_ms != -2  # -2: no such key; -1 (set by hand, no TTL) counts as alive
        age = max(HEARTBEAT_TTL_MS - ttl_ms, 0) / 1000 if ttl_ms >= 0 else None
        total = sum(sum(counts.values()) for counts in load)
        replicas.append(Replica(instance, alive, age, total if alive else 0))
        if alive:
            loads.extend(load)
    return replicas, loads


def _counts(fields: Mapping[bytes, bytes]) -> dict[str, int]:
    """A load hash as endpoint -> requests (read as the replicas read it: `cluster.loads`),
    without zeros."""
    counts, _ = load_counts(fields)
    return {endpoint: count for endpoint, count in counts.items() if count > 0}


def _readings(engines: Mapping[Any, Any]) -> dict[str, dict[str, Any]]:
    readings = {}
    for endpoint, raw in engines.items():
        try:
            reading = json.loads(raw)
        except ValueError:
            continue
        if isinstance(reading, dict):
            readings[_text(endpoint)] = reading
    return readings


def _workers(
    loads: Sequence[Mapping[str, int]], readings: Mapping[str, Mapping[str, Any]], now: float
) -> list[Worker]:
    inflight: dict[str, int] = {}
    for load in loads:
        for endpoint, count in load.items():
            inflight[endpoint] = inflight.get(endpoint, 0) + count
    workers = []
    for endpoint in sorted(set(inflight) | set(readings)):
        reading = readings.get(endpoint)
        count = inflight.get(endpoint, 0)
        workers.append(Worker(endpoint, count) if reading is None else _worker(endpoint, count,
                       reading, now))  # fmt: skip
    return workers


def _worker(endpoint: str, inflight: int, reading: Mapping[str, Any], now: float) -> Worker:
    read = bool(reading.get("read", False))
    at = _number(reading.get("at"))
    return Worker(
        endpoint,
        inflight,
        ready=bool(reading.get("ready", True)),
        waiting=_number(reading.get("waiting")) if read else None,
        running=_number(reading.get("running")) if read else None,
        kv_usage=_number(reading.get("kv_usage")) if read else None,
        reading_age_s=None if at is None else max(now - at, 0.0),
        scraped_by=str(reading.get("by", "")),
    )


async def _leaders(redis: RedisClient, keys: Keys) -> list[Leader]:
    """Scrape leases in the pools' shards (and, from replicas of the old schema, under the
    global tag)."""
    patterns = {keys.leader("*"), Keys(keys.prefix, SINGLE_LAYOUT).leader("*")}
    found = {_text(k) for p in patterns async for k in redis.scan_iter(match=p, count=_SCAN_COUNT)}
    names = sorted(found)
    if not names:
        return []
    pipe = redis.pipeline(transaction=False)
    for name in names:
        pipe.get(name)
        pipe.pttl(name)
    replies = await pipe.execute()
    return [
        Leader(name.rsplit("leader:", 1)[1], _text(replies[2 * i]), int(replies[2 * i + 1]))
        for i, name in enumerate(names)
        if replies[2 * i] is not None  # expired between the SCAN and the GET
    ]


async def _tenants(
    redis: RedisClient, keys: Keys, tenants: Sequence[str], now: float
) -> list[TenantUsage]:
    if not tenants:
        return []
    pipe = redis.pipeline(transaction=False)
    for tenant in tenants:
        pipe.hgetall(keys.usage(tenant))
        pipe.hgetall(keys.leases(tenant))
    replies = await pipe.execute()
    minute, oldest = int(now // 60), now - _WINDOW_S
    usage = []
    for index, tenant in enumerate(tenants):
        used = _by_int(replies[2 * index])
        leases = _by_int(replies[2 * index + 1])
        leased = sum(tokens for second, tokens in leases.items() if second > oldest)
        usage.append(
            TenantUsage(tenant, used.get(minute, 0), used.get(minute - 1, 0), max(leased, 0))
        )
    return usage


def _by_int(fields: Mapping[Any, Any]) -> dict[int, int]:
    """A hash of epoch second or minute -> tokens, skipping fields edited into nonsense."""
    parsed = {}
    for name, value in fields.items():
        try:
            parsed[int(name)] = int(value)
        except ValueError:
            continue
    return parsed


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
