"""A Redis that answers but refuses writes counts as unavailable (issue 15, items 2 and 4).

Full (maxmemory with noeviction: OOM), demoted to a replica (READONLY) or with the picker's
ACL user stripped of writes (NOPERM): reads still succeed, so a replica that took any
successful command as proof of a connection reported itself connected while its load,
heartbeat and budgets went nowhere. Now the Picks answer DEGRADED, the gauge reads 0 for
the whole refusal (no flapping), and the log says so once each way.

A refusal that spares the heartbeat (NOPERM on XADD alone, an events key of another type)
made the gauge flap every second, a log line each way each time, and most Picks answer OK
while none of this replica's events went out (h199): a loop's success clears only its own
failure, and the replica is connected again once no loop's last attempt failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

import pytest

from kinference.cluster.keys import Keys
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer, free_port
from tests.api.helpers import chat_body, wait_until
from tests.conftest import RunningPicker

PASSWORD = "picker-secret"
SAMPLES = 15  # readings of the gauge while Redis refuses, 0.1 s apart: every one must be 0


def _refusals(redis: RedisServer) -> dict[str, tuple[Callable[[], str], Callable[[], str]]]:
    dead_master = str(free_port())
    events = Keys().events()
    return {
        "oom": (
            lambda: redis.cli("CONFIG", "SET", "maxmemory", "1"),
            lambda: redis.cli("CONFIG", "SET", "maxmemory", "0"),
        ),
        "readonly": (
            lambda: redis.cli("REPLICAOF", "127.0.0.1", dead_master),
            lambda: redis.cli("REPLICAOF", "NO", "ONE"),
        ),
        "noperm": (
            lambda: redis.cli("ACL", "SETUSER", "picker", "-@write"),
            lambda: redis.cli("ACL", "SETUSER", "picker", "+@write"),
        ),
        "noperm-xadd": (  # the heartbeat still goes through
            lambda: redis.cli("ACL", "SETUSER", "picker", "-xadd"),
            lambda: redis.cli("ACL", "SETUSER", "picker", "+xadd"),
        ),
        "events-junk": (  # a tool sharing the prefix: every XADD and XREAD fails WRONGTYPE
            lambda: redis.cli(
                "EVAL", "redis.call('DEL', KEYS[1]) redis.call('SET', KEYS[1], 'x')", "1", events
            ),
            lambda: redis.cli("DEL", events),
        ),
    }


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))


@pytest.fixture
def node_log() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("kinference.cluster.node")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def connected(replica: RunningPicker) -> float:
    return replica.metric("kinference_redis_connected")


async def outcome(replica: RunningPicker) -> int:
    body = chat_body()
    pushed = await replica.client.push([body], declared_length=len(body))
    pick = await replica.client.pick(pushed.stream_id)
    if pick.response_id:
        await replica.client.abort(pick.response_id)
    return int(pick.outcome)


@pytest.mark.parametrize("refusal", ["oom", "readonly", "noperm", "noperm-xadd", "events-junk"])
async def test_a_redis_refusing_writes_is_unavailable(
    refusal: str, redis_server: RedisServer, start_replicas, node_log: _Lines
) -> None:
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    redis_server.cli("ACL", "SETUSER", "picker", "on", f">{PASSWORD}", "~*", "&*", "+@all")
    url = f"redis://picker:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    (replica,) = await start_replicas(1, redis_url=url, redis_stale_after_s=1.0)
    await wait_until(lambda: connected(replica) == 1, 10.0, "connected at first")
    assert await outcome(replica) == pb.PickResponse.OK
    refuse, restore = _refusals(redis_server)[refusal]
    node_log.lines.clear()
    stop = asyncio.Event()

    async def caller() -> None:  # concurrent traffic: every loop has work to send
        while not stop.is_set():
            await outcome(replica)

    callers = [asyncio.create_task(caller()) for _ in range(8)]
    try:
        refuse()
        await wait_until(lambda: connected(replica) == 0, 10.0, "the gauge at 0")
        for _ in range(SAMPLES):
            assert connected(replica) == 0, "the gauge flapped back to 1 while refused"
            assert await outcome(replica) == pb.PickResponse.DEGRADED
            await asyncio.sleep(0.1)
        restore()
        await wait_until(lambda: connected(replica) == 1, 10.0, "the gauge back at 1")
    finally:
        stop.set()
        await asyncio.gather(*callers)
    assert await outcome(replica) in (pb.PickResponse.OK, pb.PickResponse.DEGRADED)
    warnings = [text for level, text in node_log.lines if level == logging.WARNING]
    infos = [text for level, text in node_log.lines if level == logging.INFO]
    assert len(warnings) == 1 and "Redis unavailable" in warnings[0], warnings
    assert len(infos) == 1 and "Redis available again" in infos[0], infos


async def test_a_replica_that_never_reached_redis_reads_disconnected(start_replicas) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    (replica,) = await start_replicas(1, redis_url=url)
    for _ in range(SAMPLES):
        assert connected(replica) == 0
        assert await outcome(replica) == pb.PickResponse.DEGRADED
        await asyncio.sleep(0.1)
