"""Replicas sharing through Redis what the TTFT model and the prefix index learn: the
prefills in progress (a shared prefix being computed is a hit in progress on every
replica), the evictions learned from reported cached tokens, characters per token and
the busy cost of the model's running sequences."""

from __future__ import annotations

import asyncio
import json
import math
import time

from kinference.cluster.connection import RedisClient, connect
from kinference.cluster.keys import Keys
from kinference.cluster.stats import SEED_MINUTES, read_stats
from kinference.routing.rates import MAX_BUSY_MS
from kinference.routing.textsize import MIN_SAMPLES
from loadtest.redis_server import RedisServer
from tests.api.helpers import SETTLE_S, first_token_after, pick_ok, wait_until
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
    await first_token_after(a, first.response_id, 40)
    await first_token_after(b, second.response_id, 20)
    for replica in (a, b, c):
        await wait_until(lambda r=replica: pending_on(r, endpoint) == 0.0, what="prefill over")


async def test_an_eviction_learned_by_one_replica_is_learned_by_all(start_replicas) -> None:
    a, b = await start_replicas(2)
    first = await pick_ok(a, question(0))
    endpoint = first.local.endpoint
    await first_token_after(a, first.response_id, 40)
    await a.client.final_token(first.response_id, prompt_tokens=1100, cached_tokens=0)
    again = await pick_ok(a, question(1))  # the index says the document is there
    assert again.local.endpoint == endpoint
    assignment = a.app.inflight.get(again.response_id)
    assert assignment is not None and assignment.local is not None
    hashes = assignment.local.hashes
    slot_b = b.app.router.table.slot(endpoint)
    await wait_until(lambda: b.app.router.prefix.match(hashes).get(slot_b, 0) > 10)
    await first_token_after(a, again.response_id, 40)
    # The engine had evicted it: a reports cached 0 and learns the engine's capacity, b
    # too; the request prefilled the document again, so both still hold it there (h101).
    await a.client.final_token(again.response_id, prompt_tokens=1100, cached_tokens=0)
    slot_a = a.app.router.table.slot(endpoint)
    await wait_until(lambda: slot_a in a.app.router.prefix.capacity, what="capacity on a")
    await wait_until(lambda: slot_b in b.app.router.prefix.capacity, what="capacity on b")
    assert b.app.router.prefix.capacity[slot_b] == a.app.router.prefix.capacity[slot_a]
    assert b.app.router.prefix.match(hashes).get(slot_b, 0) > 10


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
        await first_token_after(a, picked.response_id, 40)
        await a.client.final_token(picked.response_id, prompt_tokens=tokens, cached_tokens=0)
    for replica in (a, b):
        text = replica.app.router.learning.text
        await wait_until(lambda t=text: abs(t.chars_per_token(MODEL) - 1.6) < 0.01,
                         what="characters per token")  # fmt: skip


TWO_WORKERS = f"""
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.1:8000", "10.0.0.2:8000"]
    models: ["{MODEL}"]
"""


def cold(n: int) -> bytes:
    """A prompt of ~1k tokens that no other shares (its own prefix, its own home)."""
    text = f"document {n}: " + f"line {n} of a text nobody else asks about. " * 90
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}]}).encode()


async def test_the_busy_cost_learned_by_one_replica_is_learned_by_all(
    start_replicas, redis_server: RedisServer
) -> None:
    """A's requests beside others teach A the model's busy cost; B, which served nothing,
    folds A's samples into the same fit, and C, started later, seeds it from the
    statistics hash."""
    a, b = await start_replicas(2, TWO_WORKERS)
    rates_a, rates_b = a.app.router.learning.rates, b.app.router.learning.rates
    table = a.app.router.table
    slots = [table.slot(endpoint) for endpoint in ("10.0.0.1:8000", "10.0.0.2:8000")]
    # 1. Alone on its worker, each request teaches that worker's prefill (no busy sample).
    n = 0
    while any(math.isnan(rates_a.learned(MODEL, "prefill_base_ms", s)) for s in slots):
        assert n < 40, "the cold prompts never reached both workers"
        picked = await pick_ok(a, cold(n))
        await first_token_after(a, picked.response_id, 40)
        await a.client.final_token(picked.response_id, prompt_tokens=1000, cached_tokens=0)
        n += 1
    assert math.isnan(rates_a.learned_busy(MODEL))  # none ran beside another yet
    # 2. Four at once on two workers: the later ones join a worker running another (and
    # come later than alone, though not so late as to have queued for a batch slot).
    held = [await pick_ok(a, cold(n + i)) for i in range(4)]
    for picked in held:
        await first_token_after(a, picked.response_id, 150)
        await a.client.final_token(picked.response_id, prompt_tokens=1000, cached_tokens=0)
    assert rates_a.learned_busy(MODEL) > 0.0
    await wait_until(lambda: rates_b.learned_busy(MODEL) == rates_a.learned_busy(MODEL),
                     what="B's busy cost")  # fmt: skip
    # 3. A replica started now seeds it from the per-minute statistics A wrote.
    client = connect(redis_server.url)
    try:
        deadline = time.monotonic() + SETTLE_S
        while not await busy_counted(client):  # A writes them once a second
            assert time.monotonic() < deadline, "no busy samples in the statistics"
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    (c,) = await start_replicas(1, TWO_WORKERS)
    seeded = c.app.router.learning.rates.learned_busy(MODEL)
    assert 0.0 < seeded <= MAX_BUSY_MS


async def busy_counted(client: RedisClient) -> bool:
    totals = await read_stats(client, Keys(), time.time(), SEED_MINUTES)
    return any(name.endswith("|busy_count") for name in totals)
