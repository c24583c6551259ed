"""The simulated engine's costs seen over HTTP: prefix cache, LRU, queue, batch, seeds."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from kinference.workers import EngineScraper
from kinference.workers.parse import parse_samples
from loadtest.engine_model import Timing
from tests.loadtest.conftest import MODEL, EngineFactory, chat, eventually, prose


async def test_a_repeated_prefix_is_served_from_the_cache(sim: EngineFactory) -> None:
    engine = await sim()
    document = prose(20, "doc")
    async with httpx.AsyncClient(base_url=engine.url) as client:

        async def cached(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            answer = (await client.post("/v1/chat/completions", json=body)).json()
            return answer["usage"]["prompt_tokens_details"]["cached_tokens"], answer

        first, _ = await cached(chat(document + "question one", max_tokens=4))
        second, _ = await cached(chat(document + "question two", max_tokens=4))
        assert first == 0
        assert second >= len(document) // 4 - 16  # all but the last, partial, block
        # The next turn of a chat re-sends the reply: prompt and reply are both cached.
        history = [{"role": "user", "content": prose(4, "q1")}]
        _, answer = await cached({"model": MODEL, "messages": history, "max_tokens": 40})
        reply = answer["choices"][0]["message"]["content"]
        history += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "and then?"},
        ]
        turn2, answer = await cached({"model": MODEL, "messages": history, "max_tokens": 4})
        assert turn2 >= answer["usage"]["prompt_tokens"] - 16 - 8
    stats = engine.stats()
    assert stats["requests"] == stats["finished"] == 4
    assert stats["cached_tokens"] == first + second + turn2
    assert stats["completion_tokens"] == 4 + 4 + 40 + 4


async def test_the_lru_capacity_evicts_old_prefixes(sim: EngineFactory) -> None:
    engine = await sim(capacity_blocks=12)
    async with httpx.AsyncClient(base_url=engine.url) as client:

        async def cached(prompt: str) -> int:
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
            answer = (await client.post("/v1/completions", json=body)).json()
            return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])

        a, b, c = prose(5, "a"), prose(5, "b"), prose(5, "c")
        assert await cached(a) == 0
        assert await cached(a) == 5 * 16  # 5 blocks of 16 tokens
        await cached(b)
        await cached(c)  # 15 blocks through a 12-block cache: a's went first
        assert await cached(a) == 0
        assert await cached(c) > 0


async def test_over_max_num_seqs_requests_wait_and_the_scraper_sees_it(
    sim: EngineFactory,
) -> None:
    engine = await sim(max_num_seqs=2, time_scale=1.0)  # 2000 tokens: ~25 s each, if left
    endpoint = engine.url.removeprefix("http://")
    body = chat(prose(8, "q"), max_tokens=2000, stream=True)
    async with httpx.AsyncClient(base_url=engine.url, timeout=30) as client:
        streams = [client.stream("POST", "/v1/chat/completions", json=body) for _ in range(5)]
        async with contextlib.AsyncExitStack() as stack:
            responses = [await stack.enter_async_context(s) for s in streams]
            assert all(r.status_code == 200 for r in responses)

            async def queued() -> bool:
                return engine.stats()["waiting"] == 3

            await eventually(queued, "three requests queued")
            page = (await client.get("/metrics")).text
            samples = parse_samples(
                page, ["vllm:num_requests_running", "vllm:num_requests_waiting"]
            )
            assert [s.value for s in samples["vllm:num_requests_running"]] == [2.0]
            assert [s.value for s in samples["vllm:num_requests_waiting"]] == [3.0]
            assert samples["vllm:num_requests_waiting"][0].labels["model_name"] == MODEL

            registry = CollectorRegistry()
            scraper = EngineScraper(
                client,
                interval_s=0.05,
                timeout_s=2.0,
                stale_after_s=60.0,
                failures_before_unready=3,
                registry=registry,
            )
            scraper.set_targets({endpoint: ("vllm", None)})
            await scraper.start()
            try:

                async def scraped() -> bool:
                    return scraper.snapshot(endpoint) is not None

                await eventually(scraped, "a scrape")
                snapshot = scraper.snapshot(endpoint)
                assert snapshot is not None
                assert (snapshot.running, snapshot.waiting) == (2, 3)
                assert snapshot.kv_usage is not None and 0 < snapshot.kv_usage <= 1
            finally:
                await scraper.aclose()
        # The clients went away mid-stream: their slots and queue places are freed.

        async def drained() -> bool:
            stats = engine.stats()
            return stats["running"] == 0 and stats["waiting"] == 0

        await eventually(drained, "the batch and queue to drain")
        page = (await client.get("/metrics")).text
    usage = parse_samples(page, ["vllm:kv_cache_usage_perc", "vllm:request_success"])
    assert [s.value for s in usage["vllm:kv_cache_usage_perc"]] == [0.0]
    assert usage["vllm:request_success"] == []  # nobody got all their tokens


async def test_inter_token_gaps_grow_with_the_batch(sim: EngineFactory) -> None:
    """Gaps are the cost model's (not measured), so this holds on a busy machine too."""
    engine = await sim(time_scale=0.5, timing=Timing(jitter=0.0))
    body = {"model": MODEL, "prompt": "p", "max_tokens": 48}  # ~0.3 s each: they overlap

    async def mean_gap(client: httpx.AsyncClient) -> float:
        page = (await client.get("/metrics")).text
        names = ["vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count"]
        found = parse_samples(page, names)
        total, count = (found[name][0].value for name in names)
        return total / count

    async with httpx.AsyncClient(base_url=engine.url, timeout=30) as client:
        await client.post("/v1/completions", json=body)
        alone = await mean_gap(client)
        assert alone == pytest.approx(Timing().decode_gap_s * 0.5)
        before = engine.stats()["completion_tokens"]
        await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(8)))
        assert engine.stats()["completion_tokens"] - before == 8 * 48
        overall = await mean_gap(client)
    # Each extra running sequence adds 0.4 ms to the 12 ms gap (model seconds).
    assert overall > alone * 1.04


async def test_the_same_seed_gives_the_same_answers(sim: EngineFactory) -> None:
    shared = prose(6, "s")
    bodies = [chat(shared + f"turn {i}", max_tokens=9 + i) for i in range(4)]

    async def answers(seed: int) -> list[tuple[str, dict[str, Any]]]:
        engine = await sim(seed=seed)
        async with httpx.AsyncClient(base_url=engine.url) as client:
            replies = [(await client.post("/v1/chat/completions", json=b)).json() for b in bodies]
        return [(r["choices"][0]["message"]["content"], r["usage"]) for r in replies]

    first, again, other = await answers(7), await answers(7), await answers(8)
    assert first == again
    assert [text for text, _ in first] != [text for text, _ in other]
    assert [usage for _, usage in first] == [usage for _, usage in other]
