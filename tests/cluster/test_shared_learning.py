"""Replicas sharing through Redis what the TTFT model and the prefix index learn: the
prefills in progress (a shared prefix being computed is a hit in progress on every
replica) and the evictions learned from reported cached tokens."""

from __future__ import annotations

import json

from kinference.routing.textsize import MIN_SAMPLES
from tests.api.helpers import pick_ok, wait_until
from tests.conftest import MODEL, RunningPicker

DOCUMENT = "A long shared document about the tides and the moon. " * 80  # ~4 KiB


def question(n: int) -> bytes:
    messages = [
        {"role": "system", "content": DOCUMENT},
        {"role": "user", "content": f"question {n} about the document"},
    ]
    return json.dumps({"model": MODEL, "messages": messages}).encode()


def pending_on(replica: RunningPicker, endpoint: str) -> float:
    table = replica.app.router.table
    return float(table.pending_prefill[table.slot(endpoint)])


async def test_a_prefill_in_progress_on_one_replica_is_a_hit_in_progress_on_all(
    start_replicas,
) -> None:
    a, b, c = await start_replicas(3)
    first = await pick_ok(a, question(0))
    endpoint = first.local.endpoint
    assignment = a.app.inflight.get(first.response_id)
    assert assignment is not None and assignment.local is not None
    hashes, tokens = assignment.local.hashes, assignment.local.uncached_tokens
    assert hashes and tokens > 0
    for other in (b, c):
        await wait_until(lambda o=other: pending_on(o, endpoint) == tokens, what="prefill")
        slot = other.app.router.table.slot(endpoint)
        assert other.app.router.table.shared_pending(slot, hashes) > 0.8 * tokens
    # B asks about the same document meanwhile: the worker computing it, not a queue.
    second = await pick_ok(b, question(1))
    assert second.local.endpoint == endpoint
    await a.client.first_token(first.response_id, ttft_ms=40)
    await b.client.first_token(second.response_id, ttft_ms=20)
    for replica in (a, b, c):
        await wait_until(lambda r=replica: pending_on(r, endpoint) == 0.0, what="prefill over")


async def test_an_eviction_learned_by_one_replica_is_learned_by_all(start_replicas) -> None:
    a, b = await start_replicas(2)
    first = await pick_ok(a, question(0))
    endpoint = first.local.endpoint
    await a.client.first_token(first.response_id, ttft_ms=40)
    await a.client.final_token(first.response_id, prompt_tokens=1100, cached_tokens=0)
    again = await pick_ok(a, question(1))  # the index says the document is there
    assert again.local.endpoint == endpoint
    assignment = a.app.inflight.get(again.response_id)
    assert assignment is not None and assignment.local is not None
    hashes = assignment.local.hashes
    slot_b = b.app.router.table.slot(endpoint)
    await wait_until(lambda: b.app.router.prefix.match(hashes).get(slot_b, 0) > 10)
    await a.client.first_token(again.response_id, ttft_ms=40)
    # The engine had evicted it: a reports cached 0, and b's index forgets it too.
    await a.client.final_token(again.response_id, prompt_tokens=1100, cached_tokens=0)
    await wait_until(
        lambda: b.app.router.prefix.match(hashes).get(slot_b, 0) <= 1, what="eviction on b"
    )


async def test_characters_per_token_learned_by_one_replica_are_learned_by_all(
    start_replicas,
) -> None:
    a, b = await start_replicas(2)
    for n in range(MIN_SAMPLES):
        picked = await pick_ok(a, question(n))
        assignment = a.app.inflight.get(picked.response_id)
        assert assignment is not None and assignment.local is not None
        local = assignment.local
        assert local.text_chars > len(DOCUMENT)
        tokens = round(local.text_chars / 1.6) + local.fixed_tokens  # a small vocabulary
        await a.client.first_token(picked.response_id, ttft_ms=40)
        await a.client.final_token(picked.response_id, prompt_tokens=tokens, cached_tokens=0)
    for replica in (a, b):
        text = replica.app.router.learning.text
        await wait_until(lambda t=text: abs(t.chars_per_token(MODEL) - 1.6) < 0.01,
                         what="characters per token")  # fmt: skip
