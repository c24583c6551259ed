"""The whole shared layer on a real Redis Cluster (three masters: the hash-tagged schema)
and behind a real Sentinel (`redis+sentinel://`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kinference.config import parse_policy
from loadtest.redis_server import RedisClusterServers, RedisSentinelServers
from tests.api.helpers import chat_body, pick_ok, wait_until
from tests.cluster import test_provider_blacklist as blacklist
from tests.cluster import test_tenant_budget as budget
from tests.cluster.test_replication import load, total
from tests.conftest import PickerFactory

# The blacklist test's pools, providers and models, and the budget test's tenant rule.
POLICY = (
    blacklist.POLICY
    + f"""
tenants:
  - {{tenant: team-a, tokens_per_minute: {budget.LIMIT}}}
"""
)


Deployment = RedisClusterServers | RedisSentinelServers


@pytest.fixture(params=["cluster", "sentinel"])
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    servers: Deployment = (
        RedisClusterServers() if request.param == "cluster" else RedisSentinelServers()
    )
    yield servers.start()
    servers.stop()


async def test_replicas_share_load_blacklist_and_budget(
    deployment: Deployment, start_picker: PickerFactory
) -> None:
    policy = parse_policy(POLICY)
    a, b = [await start_picker(policy, redis_url=deployment.url) for _ in range(2)]
    # The start waits for the first load only so long; on a busy host the cluster's first
    # reads can time out and be retried, so wait for both replicas to be current.
    await wait_until(
        lambda: all(r.app.cluster is not None and r.app.cluster.gap() is None for r in (a, b)),
        what="shared state loaded on both replicas",
    )

    for n in range(3):
        await pick_ok(a, chat_body(content=f"q{n}"))
    await wait_until(lambda: total(b) == 3 and load(b) == load(a), what="load on b")

    await blacklist.blacklist_on(a)
    await wait_until(lambda: blacklist.cooled(b), within_s=1.0, what="blacklist on b")
    nodes = deployment.nodes if isinstance(deployment, RedisClusterServers) else [deployment.master]
    owner = next(n for n in nodes if n.cli("EXISTS", blacklist.KEY) == "1")
    assert owner.cli("DEL", blacklist.KEY) == "1"
    await wait_until(lambda: not blacklist.cooled(a) and not blacklist.cooled(b), within_s=1.0)

    used, refused_in_a_row, turn = 0, 0, 0
    while refused_in_a_row < 2 and used <= 2 * budget.LIMIT:
        if await budget.admitted((a, b)[turn % 2]):
            used, refused_in_a_row = used + budget.REQUEST_TOKENS, 0
        else:
            refused_in_a_row += 1
        turn += 1
    assert budget.LIMIT - budget.REQUEST_TOKENS <= used <= budget.LIMIT + 2 * budget.REQUEST_TOKENS
