"""A tenant's token budget holds across replicas: never budget times replicas."""

from __future__ import annotations

import time

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body, push
from tests.conftest import MODEL, RunningPicker

LIMIT = 1_000  # tokens per minute
REQUEST_TOKENS = 100
POLICY = f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["10.0.0.1:8000"], models: ["{MODEL}"]}}
tenants:
  - {{tenant: team-a, tokens_per_minute: {LIMIT}}}
"""


async def admitted(replica: RunningPicker, within_s: float = 0.5) -> bool:
    """Pick (retrying while a lease may still be on its way) and report 100 tokens."""
    deadline = time.monotonic() + within_s
    while True:
        pushed = await push(replica, chat_body())
        pick = await replica.client.pick(pushed.stream_id, tenant="team-a")
        if pick.outcome == pb.PickResponse.OK:
            await replica.client.final_token(
                pick.response_id, prompt_tokens=60, completion_tokens=40
            )
            return True
        assert pick.outcome == pb.PickResponse.POLICY_REJECTED, pick
        assert "budget" in pick.reason
        if time.monotonic() >= deadline:
            return False


async def test_the_cluster_admits_the_budget_once_not_once_per_replica(start_replicas) -> None:
    replicas = await start_replicas(3, POLICY)
    used = 0
    refused_in_a_row = 0
    turn = 0
    while refused_in_a_row < len(replicas) and used <= LIMIT * len(replicas):
        if await admitted(replicas[turn % len(replicas)]):
            used, refused_in_a_row = used + REQUEST_TOKENS, 0
        else:
            refused_in_a_row += 1
        turn += 1
    # At most one request over per replica; and the budget is not left unused either.
    assert LIMIT - REQUEST_TOKENS <= used <= LIMIT + len(replicas) * REQUEST_TOKENS, used
