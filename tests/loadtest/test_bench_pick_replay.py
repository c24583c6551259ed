"""The Pick replay times the real Pick on the routing benchmark's bodies over 8 workers."""

from __future__ import annotations

import json

from loadtest.bench_pick_replay import ENDPOINTS, bodies, render, replay


def test_the_bodies_are_the_routing_workload_in_sending_order() -> None:
    sent = bodies(60, seed=1)
    assert len(sent) >= 50
    prompts = [json.loads(body)["messages"] for body in sent]
    # Documents of ~48 KB and chats whose later turns re-send their history.
    assert max(len(body) for body in sent) > 40_000
    assert any(len(messages) > 2 for messages in prompts)


async def test_a_round_picks_every_body_over_the_eight_endpoints() -> None:
    sent = bodies(60, seed=1)
    spent, after = await replay(sent, warm=10)
    assert len(spent) == len(after) == len(sent) - 10
    assert all(value > 0 for value in spent)
    assert "mean per round lowest" in render([(spent, after)], len(sent))
    assert len(ENDPOINTS) == 8
