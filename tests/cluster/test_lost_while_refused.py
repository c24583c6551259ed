"""What a long refusal loses is counted (h199).

While Redis refuses writes the outbox keeps at most its bound of events and the tenant
budgets at most BUFFER_LIMIT unsent (tenant, second) charges; past them the oldest go: the
statistics those events carried are never written, and those tokens are never charged
across replicas. Nothing said so (the gauge of queued events stays at its bound); now two
counters do.
"""

from __future__ import annotations

from kinference.cluster.lease_state import BUFFER_LIMIT
from kinference.cluster.outbox import DEFAULT_LIMIT
from kinference.v1 import picker_pb2 as pb
from loadtest.redis_server import RedisServer
from tests.api.helpers import chat_body, push, wait_until
from tests.cluster.conftest import CLUSTER_POLICY

POLICY = CLUSTER_POLICY + "tenants:\n  - {tenant: team-a, tokens_per_minute: 100000000}\n"
EXTRA = 5


async def test_events_and_charges_dropped_while_refused_are_counted(
    redis_server: RedisServer, start_replicas
) -> None:
    redis_server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    (replica,) = await start_replicas(1, POLICY)
    app = replica.app
    await wait_until(lambda: app.cluster.connected, 10.0, "connected")
    redis_server.cli("CONFIG", "SET", "maxmemory", "1")
    pushed = await push(replica, chat_body())
    pick = await replica.client.pick(pushed.stream_id, tenant="team-a")  # something to send
    await wait_until(lambda: not app.cluster.connected, 10.0, "refused")
    assert pick.outcome in (pb.PickResponse.OK, pb.PickResponse.DEGRADED)
    assert replica.metric("kinference_cluster_outbox_dropped_total") == 0
    for _ in range(DEFAULT_LIMIT + EXTRA):  # a long refusal's reports, at once
        app.outbox.released("10.0.0.1:8000")
    budget = app.router.tenants.budget
    for second in range(BUFFER_LIMIT + EXTRA):  # as many seconds' overruns
        budget._unsent.owe("team-a", second, 1)
    assert replica.metric("kinference_cluster_outbox_dropped_total") >= EXTRA
    assert replica.metric("kinference_tenant_budget_dropped_total") >= EXTRA
