"""A Redis that answers reads but refuses writes, then takes them again: the replica keeps
picking and says why (DEGRADED), and once writes go through everything it queued arrives
once: its load on the other replicas, its token reports in the statistics, its tenant's
usage (nothing lost, nothing counted twice)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer, free_port
from tests.api.helpers import chat_body, push, wait_until
from tests.cluster.conftest import CLUSTER_POLICY
from tests.cluster.test_replication import load, total
from tests.conftest import RunningPicker

PASSWORD = "picker-secret"
POLICY = CLUSTER_POLICY + "tenants:\n  - {tenant: team-a, tokens_per_minute: 100000000}\n"
REQUESTS, HELD = 12, 3
PROMPT_TOKENS, COMPLETION_TOKENS = 30, 7
DEADLINE_S = 10.0


def refusals(server: RedisServer) -> dict[str, tuple[Callable[[], str], Callable[[], str], str]]:
    """(refuse, restore, what the DEGRADED reason names) per kind of refusal."""
    dead_master = str(free_port())

    def acl(rules: str) -> Callable[[], str]:
        return lambda: server.cli("ACL", "SETUSER", "picker", *rules.split())

    return {
        "oom": (lambda: server.cli("CONFIG", "SET", "maxmemory", "1"),
                lambda: server.cli("CONFIG", "SET", "maxmemory", "0"), "maxmemory"),
        "readonly": (lambda: server.cli("REPLICAOF", "127.0.0.1", dead_master),
                     lambda: server.cli("REPLICAOF", "NO", "ONE"), "ReadOnlyError"),
        "noperm-xadd": (acl("-xadd"), acl("+xadd"), "NoPermissionError"),
        "noperm-scripts": (acl("-evalsha -eval -script"), acl("+evalsha +eval +script"),
                           "NoPermissionError"),
    }  # fmt: skip


async def request(replica: RunningPicker, n: int, *, release: bool = True) -> pb.PickResponse:
    pushed = await push(replica, chat_body(content=f"refused {n}"))
    pick = await replica.client.pick(pushed.stream_id, tenant="team-a")
    assert pick.outcome in (pb.PickResponse.OK, pb.PickResponse.DEGRADED), pick
    if release:
        await replica.client.first_token(pick.response_id, 100)
        await replica.client.final_token(
            pick.response_id, prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS
        )
    return pick


def reported(server: RedisServer, replica: RunningPicker) -> tuple[int, int]:
    """(first tokens in the statistics for `replica`, tokens in team-a's usage)."""
    cluster = replica.app.cluster
    assert cluster is not None
    with redis.Redis(port=server.port) as client:
        firsts = sum(
            int(float(value))
            for key in client.scan_iter("{kinference}:stats:*")
            for field, value in client.hgetall(key).items()
            if field.decode().startswith(cluster.instance) and field.endswith(b"|ttft_count")
        )
        usage = client.hgetall("{kinference}:tenant:team-a:usage")
    return firsts, sum(int(tokens) for tokens in usage.values())


@pytest.mark.parametrize("refusal", ["oom", "readonly", "noperm-xadd", "noperm-scripts"])
async def test_a_refusal_is_caught_up_once(
    refusal: str, redis_server: RedisServer, start_replicas
) -> None:
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    redis_server.cli("ACL", "SETUSER", "picker", "on", f">{PASSWORD}", "~*", "&*", "+@all")
    url = f"redis://picker:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    a, b = await start_replicas(2, POLICY, redis_url=url)
    await wait_until(lambda: a.app.cluster.connected and b.app.cluster.connected, DEADLINE_S)
    refuse, restore, named = refusals(redis_server)[refusal]
    refuse()
    await request(a, -1)  # something to write: the refusal shows
    await wait_until(lambda: a.app.cluster.gap() is not None, DEADLINE_S, "a degraded")
    picks = [await request(a, n) for n in range(REQUESTS)]
    held = [await request(a, n, release=False) for n in range(HELD)]
    assert named in (held[-1].reason or ""), held[-1].reason
    assert {pick.outcome for pick in picks + held} == {pb.PickResponse.DEGRADED}
    restore()
    await wait_until(lambda: a.app.cluster.gap() is None, DEADLINE_S, "a current again")
    await wait_until(lambda: total(b) == HELD and load(b) == load(a), DEADLINE_S, "b caught up")
    for pick in held:
        await a.client.final_token(
            pick.response_id, prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS
        )
    await wait_until(lambda: total(b) == 0, DEADLINE_S, "b saw the releases")
    expected = (REQUESTS + 1, (REQUESTS + 1 + HELD) * (PROMPT_TOKENS + COMPLETION_TOKENS))
    await wait_until(lambda: reported(redis_server, a) == expected, DEADLINE_S, "counted once")
