"""h207's probe: worker-table slots under discovery churn, two replicas sharing Redis.

Copy into tests/cluster/ to run (it uses that directory's fixtures):

    cp docs/h207/probe_churn.py tests/cluster/test_h207_churn.py
    SEED=1 ROUNDS=40 .venv/bin/python -m pytest tests/cluster/test_h207_churn.py -q -s \
      -p no:randomly -n 0

Each round replaces one pod of four in both replicas' policies (as discovery does), picks
on both, and ends requests at random: a final report with or without a first token, an
Abort, a final report refused (bad ITL layout), an upstream error, or left in flight for a
few rounds. Some picks are marked as the pool's probe, as the TTFT scorer marks them past
the most seen running. At the end every request is ended, both replicas reload once more,
and the probe checks that nothing counts on a gone worker: the tables hold the live pods
only, no load, no pending prefill, no probe, no remote prefill in either replica.
"""

from __future__ import annotations

import os
import random
from typing import Any

import grpc

from kinference.config import parse_policy
from kinference.routing import LocalChoice
from tests.api.helpers import chat_body, pick_ok, wait_until
from tests.conftest import MODEL, RunningPicker

SEED, ROUNDS = int(os.environ.get("SEED", "1")), int(os.environ.get("ROUNDS", "40"))


def pod(n: int) -> str:
    return f"10.1.{n // 250}.{n % 250 + 1}:8000"


def policy(live: list[str]) -> str:
    return f"pools: [{{namespace: default, name: chat, endpoints: {live!r}, models: [{MODEL}]}}]"


def as_probe(replica: RunningPicker, response_id: int) -> None:
    """Mark a pick as its pool's probe (what `doubt.is_probe` decides past the most seen),
    as `Learning.picked` would have: the same choice (its id keys its pending prefill)."""
    assignment = replica.app.inflight.get(response_id)
    assert assignment is not None and isinstance(assignment.destination, LocalChoice)
    local = assignment.destination
    if local.probe:  # the scorer made it one already (a batch floor learned)
        return
    object.__setattr__(local, "probe", True)  # (frozen)
    replica.app.table.start_probe(local.slot, id(local))


async def end(replica: RunningPicker, rid: int, how: str) -> None:
    client = replica.client
    try:
        if how == "final":
            await client.final_token(rid, model=MODEL, prompt_tokens=100, completion_tokens=5)
        elif how == "first+final":
            await client.first_token(rid, 20, 200)
            await client.final_token(rid, model=MODEL, prompt_tokens=100, completion_tokens=5)
        elif how == "abort":
            await client.abort(rid)
        elif how == "refused":
            await client.final_token(rid, model=MODEL, itl_bucket_counts=[1, 2, 3])
        elif how == "error":
            await client.first_token(rid, 20, 503)
            await client.abort(rid)
    except grpc.aio.AioRpcError:
        pass


def leftovers(replica: RunningPicker, live: set[str]) -> dict[str, Any]:
    table = replica.app.table
    n = len(table)
    return {
        "slots": n,
        "named": sum(1 for e in table.endpoints if e),
        "gone_named": sorted(e for e in table.endpoints if e and e not in live),
        "inflight": float(table.inflight[:n].sum()),
        "pending_prefill": float(table.pending_prefill[:n].sum()),
        "probing": float(table.probing[:n].sum()),
        "probes": len(table._probes),
        "remote": len(replica.app.router.learning._remote),
        "budget": replica.app.store.budget.used,
    }


async def churn(replicas: list[RunningPicker], rng: random.Random) -> list[str]:
    """ROUNDS rounds of picks and ends, a pod replaced in both policies at each; then every
    request still held ended. Returns the live pods."""
    live = [pod(n) for n in range(4)]
    held: list[tuple[RunningPicker, int, int]] = []  # (replica, response id, rounds left)
    ways = ["final", "first+final", "abort", "refused", "error"]
    for round_ in range(ROUNDS):
        for replica in replicas:
            for n in range(rng.randint(1, 4)):
                pick = await pick_ok(replica, chat_body(content=f"r{round_} {n} " * 40))
                if rng.random() < 0.3:
                    as_probe(replica, pick.response_id)
                held.append((replica, pick.response_id, rng.randint(0, 3)))
        for replica, rid, left in held:
            if left <= 0:
                await end(replica, rid, rng.choice(ways))
        held = [(replica, rid, left - 1) for replica, rid, left in held if left > 0]
        live = [*live[1:], pod(4 + round_)]
        for replica in replicas:
            replica.app.apply_policy(parse_policy(policy(live)))
    for replica, rid, _ in held:
        await end(replica, rid, rng.choice(ways))
    return live


async def test_slots_under_churn(start_replicas) -> None:
    a, b = await start_replicas(2, policy([pod(n) for n in range(4)]))
    replicas = [a, b]
    live = await churn(replicas, random.Random(SEED))

    def settled() -> bool:
        return all(leftovers(r, set(live))["inflight"] == 0 for r in replicas)

    await wait_until(settled, 15, "every load released in both views")
    for replica in replicas:
        replica.app.apply_policy(parse_policy(policy(live)))
    for name, replica in zip("ab", replicas, strict=True):
        print(name, leftovers(replica, set(live)))
    for replica in replicas:
        found = leftovers(replica, set(live))
        assert found["gone_named"] == [], found  # (`slots`: the most ever allocated)
        assert found["probing"] == 0 and found["probes"] == 0, found
        assert found["pending_prefill"] == 0 and found["remote"] == 0, found
        assert found["budget"] == 0, found
