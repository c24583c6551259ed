"""Per-minute statistics: a minute's last counts are written although the minute turned
before they were (Redis away at the turn, or simply between two writes)."""

from __future__ import annotations

import pytest
from redis.exceptions import RedisError

from kinference.cluster import codec
from kinference.cluster.connection import RedisClient
from kinference.cluster.keys import Keys
from kinference.cluster.stats import StatsBuffer
from loadtest.redis_server import RedisServer

KEYS = Keys("test:")
FIELD = b"a|10.0.0.1:8000|m|ttft_count"
REPORT = [codec.FIRST_TOKEN, "10.0.0.1:8000", "m", 120.0]


async def counted(redis: RedisClient, minute: int) -> int:
    return int(float(await redis.hget(KEYS.stats(minute), FIELD) or 0))


async def test_a_minute_s_last_reports_are_written_after_it_turned(
    redis_server: RedisServer, client: RedisClient
) -> None:
    now = [600_030.0]  # minute 10,000 and a half
    stats = StatsBuffer(client, KEYS, "a", wall=lambda: now[0])
    stats.fold([REPORT])
    await stats.flush()
    stats.fold([REPORT])  # not written before the minute turns
    now[0] += 60
    stats.fold([REPORT])
    await stats.flush()
    assert (await counted(client, 10_000), await counted(client, 10_001)) == (2, 1)
    stats.fold([REPORT])
    redis_server.kill()  # Redis away at the next turn
    with pytest.raises((RedisError, OSError)):
        await stats.flush()
    now[0] += 60
    stats.fold([REPORT])
    redis_server.start()
    await stats.flush()
    # Both written again: the counts are cumulative, so the empty Redis has them whole.
    assert (await counted(client, 10_001), await counted(client, 10_002)) == (2, 1)
    stats.fold([REPORT])
    await stats.flush()
    assert await counted(client, 10_002) == 2
