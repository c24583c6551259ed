"""The provider blacklist's keys as an operator reads them: one hash per cooled provider.

`Keys.blacklist(provider)` holds reason, detail, count, first_seen, last_seen and instance,
and its TTL is the cool-down left (docs/redis.md). Reading them (`queue_reads` on a pipeline,
then `entries`: a key of another type is no entry) serves `SharedBlacklist`'s polls;
`list_blacklist` and `clear_blacklist` serve the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline

from kinference.cluster.connection import RedisClient, check_replies
from kinference.cluster.keys import Keys

SCAN_COUNT = 500  # keys per SCAN step and per DEL
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # parsing; written with milliseconds, one width


@dataclass(frozen=True, slots=True)
class Entry:
    """One blacklist key as an operator reads it."""

    provider: str
    reason: str
    detail: str
    count: int
    first_seen: str  # ISO-8601 UTC, as stored
    last_seen: str  # ISO-8601 UTC, as stored
    instance: str  # the replica whose report lasts longest
    ttl_ms: int  # milliseconds left; -1 = no expiry (set by hand)


async def list_blacklist(redis: RedisClient, keys: Keys) -> list[Entry]:
    """Every blacklisted provider, sorted by name."""
    providers = sorted(await scan_providers(redis, keys))
    return [entry for entry in await _read(redis, keys, providers) if entry is not None]


async def clear_blacklist(redis: RedisClient, keys: Keys, provider: str | None) -> int:
    """Delete one provider's key, or every blacklist key (None); returns how many went."""
    if provider is not None:
        return int(await redis.delete(keys.blacklist(provider)))
    found = [keys.blacklist(name) for name in sorted(await scan_providers(redis, keys))]
    deleted = 0
    for start in range(0, len(found), SCAN_COUNT):
        deleted += int(await redis.delete(*found[start : start + SCAN_COUNT]))
    return deleted


async def scan_providers(redis: RedisClient, keys: Keys) -> set[str]:
    found = redis.scan_iter(match=keys.blacklist_pattern(), count=SCAN_COUNT)
    return {keys.provider_of(as_text(key)) async for key in found}


async def _read(redis: RedisClient, keys: Keys, providers: Iterable[str]) -> list[Entry | None]:
    """Each provider's key (None when absent), in one pipelined round trip."""
    names = list(providers)
    if not names:
        return []
    pipe = redis.pipeline(transaction=False)
    queue_reads(pipe, keys, names)
    return entries(names, await pipe.execute(raise_on_error=False))


def queue_reads(pipe: Pipeline | ClusterPipeline, keys: Keys, providers: Iterable[str]) -> None:
    for provider in providers:
        pipe.hgetall(keys.blacklist(provider))
        pipe.pttl(keys.blacklist(provider))


def entries(providers: Sequence[str], replies: Sequence[Any]) -> list[Entry | None]:
    """The replies of `queue_reads`, two per provider, as entries. A key of another type
    (WRONGTYPE: set by hand, or by a tool sharing the prefix) is no entry, not a failed
    poll: every poll failing, the node would read Redis as unavailable while it stays."""
    replies = [None if isinstance(reply, Exception) else reply for reply in check_replies(replies)]
    return [
        _entry(provider, replies[2 * i], int(replies[2 * i + 1]))
        for i, provider in enumerate(providers)
    ]


def _entry(provider: str, fields: dict[Any, Any], ttl_ms: int) -> Entry | None:
    if not fields or ttl_ms == -2:  # absent, or expired between the two commands
        return None
    value = {as_text(name): as_text(text) for name, text in fields.items()}
    try:
        count = int(value.get("count", "1"))
    except ValueError:  # edited by hand
        count = 1
    return Entry(
        provider=provider,
        reason=value.get("reason", "manual"),
        detail=value.get("detail", ""),
        count=count,
        first_seen=value.get("first_seen", ""),
        last_seen=value.get("last_seen", ""),
        instance=value.get("instance", ""),
        ttl_ms=ttl_ms,
    )


def iso_time(epoch_s: float) -> str:
    """`2024-05-01T12:00:00.123Z`: readable, and ordered as text like the times it names."""
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def epoch_time(text: str, default: float) -> float:
    """Epoch seconds of an `iso_time` string (or of epoch seconds); `default` if neither."""
    try:
        return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return default


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
