"""A Redis that stalls (`DEBUG SLEEP`, `CLIENT PAUSE … WRITE`) while Picks are in flight.

No Pick waits on Redis: every background loop's command times out after
`KINFERENCE_REDIS_TIMEOUT_S` and is retried, while Picks answer from the local view. Each
test fires 16 Picks at once (some of a budgeted tenant) while the server is stalled and
requires all of them answered before the stall ends; then the replica is current again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, push, wait_until
from tests.cluster.conftest import CLUSTER_POLICY
from tests.conftest import RunningPicker

IN_FLIGHT = 16
POLICY = CLUSTER_POLICY + "tenants:\n  - {tenant: team-a, tokens_per_minute: 100000000}\n"
DISPATCHED = (pb.PickResponse.OK, pb.PickResponse.DEGRADED)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:  # DEBUG is off by default since Redis 7
    server = RedisServer(extra_args=("--enable-debug-command", "yes")).start()
    yield server
    server.stop()


async def pick(replica: RunningPicker, n: int) -> pb.PickResponse:
    pushed = await push(replica, chat_body(content=f"stalled {n}"))
    answer = await replica.client.pick(pushed.stream_id, tenant="team-a" if n % 2 else "")
    if answer.response_id:
        await replica.client.final_token(answer.response_id)
    return answer


def current(replica: RunningPicker) -> bool:
    cluster = replica.app.cluster
    return cluster is not None and cluster.connected and cluster.gap() is None


async def picks_while(stall: asyncio.Future[str], replica: RunningPicker) -> list[int]:
    """IN_FLIGHT Picks at once; all of them must be answered while Redis is stalled."""
    answers = await asyncio.gather(*(pick(replica, n) for n in range(IN_FLIGHT)))
    assert not stall.done(), "a Pick waited for Redis to come back"
    return [answer.outcome for answer in answers]


@pytest.mark.parametrize(
    "stall", [("DEBUG", "SLEEP", "2"), ("CLIENT", "PAUSE", "3000", "WRITE")], ids=["sleep", "pause"]
)
async def test_no_pick_waits_on_a_stalled_redis(
    stall: tuple[str, ...], redis_server: RedisServer, start_replicas
) -> None:
    a, b = await start_replicas(2, POLICY)
    await wait_until(lambda: current(a) and current(b), 10.0, "both replicas current")
    await asyncio.gather(*(pick(replica, n) for replica in (a, b) for n in range(4)))  # warm
    asleep = asyncio.ensure_future(asyncio.to_thread(redis_server.cli, *stall))
    if stall[0] == "CLIENT":  # answered at once: the stall ends when a write goes through
        await asleep
        asleep = asyncio.ensure_future(asyncio.to_thread(redis_server.cli, "SET", "probe", "1"))
    await asyncio.sleep(0.05)  # the command reached the server (a Pick needs none of it)
    outcomes = await picks_while(asleep, a) + await picks_while(asleep, b)
    assert set(outcomes) <= set(DISPATCHED), outcomes
    await asleep
    await wait_until(lambda: current(a) and current(b), 10.0, "both current again")
    after = await asyncio.gather(*(pick(replica, n) for replica in (a, b) for n in range(4)))
    assert {answer.outcome for answer in after} == {pb.PickResponse.OK}
