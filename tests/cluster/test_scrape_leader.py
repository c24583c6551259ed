"""One scrape leader per pool: engines are scraped once, readings shared with every replica."""

from __future__ import annotations

from tests.api.helpers import wait_until
from tests.conftest import MODEL, RunningPicker
from tests.scenarios.helpers import routing_yaml, vllm_pool, wait_engine


def leaders(replicas: list[RunningPicker]) -> list[RunningPicker]:
    return [r for r in replicas if r.app.sharing is not None and r.app.sharing.led]


async def test_one_replica_scrapes_and_every_replica_sees_the_readings(
    start_replicas, start_engines
) -> None:
    engines = await start_engines(2)
    policy = "pools:\n" + vllm_pool("chat", engines.endpoints, [MODEL]) + routing_yaml()
    replicas = await start_replicas(3, policy)
    await wait_until(lambda: len(leaders(replicas)) == 1, what="one scrape leader")
    (leader,) = leaders(replicas)
    followers = [r for r in replicas if r is not leader]
    assert all(not r.app.engines.scraper.endpoints for r in followers)
    engines.set(1, waiting=7, kv=0.5)
    for replica in replicas:
        await wait_engine(replica, engines.endpoints[1], waiting=7, kv=0.5)

    assert leader.app.cluster is not None
    await leader.app.cluster.crash()  # its lease expires; another replica takes over
    await wait_until(lambda: len(leaders(followers)) == 1, within_s=8.0, what="a new scrape leader")
    engines.set(0, waiting=3)
    await wait_engine(followers[0], engines.endpoints[0], waiting=3)
    await wait_engine(followers[1], engines.endpoints[0], waiting=3)
