"""The provider blacklist's test helpers: replicas (own health, client and blacklist) on one
real redis-server, and reads of its keys as redis-cli sees them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis
from redis.exceptions import RedisError

from kinference.cluster.blacklist import SharedBlacklist
from kinference.cluster.keys import Keys
from kinference.routing.health import UNAUTHORIZED, ProviderHealth
from loadtest.redis_server import RedisServer

P = "ai/openai"
Q = "ai/azure"
KEYS = Keys()
KEY = "{kinference}:blacklist:ai/openai"
DEADLINE_S = 10.0  # seconds a condition may take to come true before the test fails


@dataclass
class Replica:
    health: ProviderHealth
    blacklist: SharedBlacklist


ReplicaFactory = Callable[..., Replica]  # (instance, policy=None, url="") -> Replica


def fields(server: RedisServer, key: str = KEY) -> dict[str, str]:
    with redis.Redis(port=server.port, decode_responses=True) as client:
        return dict(client.hgetall(key))


def pttl(server: RedisServer, key: str = KEY) -> int:
    return int(server.cli("PTTL", key))


def blacklist_by_hand(server: RedisServer, provider: str, *, ttl_ms: int = 60_000) -> None:
    key = KEYS.blacklist(provider)
    server.cli("HSET", key, "reason", UNAUTHORIZED, "detail", "401 from upstream", "count", "4")
    server.cli("HSET", key, "first_seen", "2025-05-01T12:00:00.000Z", "instance", "pod-1")
    server.cli("HSET", key, "last_seen", "2025-05-01T12:03:00.000Z")
    server.cli("PEXPIRE", key, str(ttl_ms))


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
