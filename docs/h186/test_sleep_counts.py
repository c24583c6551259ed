"""Reports counted around a DEBUG SLEEP 2 (h186): one replica, a tenant, requests every 5 ms.

Not part of the suite (it prints, asserts nothing). To run it:
    cp docs/h186/test_sleep_counts.py tests/cluster/ && \
        .venv/bin/python -m pytest tests/cluster/test_sleep_counts.py -q -s -p no:randomly
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from loadtest.redis_server import RedisServer
from tests.api.helpers import wait_until
from tests.cluster.test_refusal_catch_up import (
    COMPLETION_TOKENS,
    POLICY,
    PROMPT_TOKENS,
    reported,
    request,
)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(extra_args=("--enable-debug-command", "yes")).start()
    yield server
    server.stop()


@pytest.mark.parametrize("run", range(3))
async def test_counts_around_a_sleep(run: int, redis_server: RedisServer, start_replicas) -> None:
    (a,) = await start_replicas(1, POLICY)
    await wait_until(lambda: a.app.cluster.connected, 10)
    sent, stop = [0], asyncio.Event()

    async def traffic() -> None:
        while not stop.is_set():
            await request(a, sent[0])
            sent[0] += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(traffic())
    await asyncio.sleep(0.3)
    await asyncio.to_thread(redis_server.cli, "DEBUG", "SLEEP", "2")
    await asyncio.sleep(0.3)
    stop.set()
    await task
    await wait_until(lambda: a.app.cluster.connected and a.app.cluster.gap() is None, 10)
    await asyncio.sleep(1.5)  # the statistics' next write, the usage's next round
    firsts, usage = reported(redis_server, a)
    tokens = sent[0] * (PROMPT_TOKENS + COMPLETION_TOKENS)
    print(f"\nrun {run}: {sent[0]} requests; first tokens counted {firsts}; "
          f"usage {usage} tokens for {tokens} reported")  # fmt: skip
