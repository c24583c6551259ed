"""Against a real producer of the format: Dynamo's mock engine publishing vLLM-format KV events
(`--zmq-kv-events-ports`). Runs where Dynamo's venv and tiny model are installed
(`KINFERENCE_DYNAMO_VENV`, `KINFERENCE_DYNAMO_MODEL`, default /tmp/dynamo-venv and
/tmp/dynamo-model; recipe in ../shared/tools/dynamo/README.md), skipped elsewhere (CI)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from kinference.config import parse_policy
from kinference.kvcache.pool import PoolCaches
from loadtest.bench_precise_mocker import policy
from loadtest.mocker_engines import Mocker, MockerSetup, mockers
from tests.api.helpers import until, wait_until
from tests.conftest import MODEL, PickerFactory

VENV = Path(os.environ.get("KINFERENCE_DYNAMO_VENV", "/tmp/dynamo-venv"))
MODEL_DIR = Path(os.environ.get("KINFERENCE_DYNAMO_MODEL", "/tmp/dynamo-model"))
pytestmark = pytest.mark.skipif(
    not (VENV / "bin" / "python").exists() or not (MODEL_DIR / "tokenizer.json").exists(),
    reason="Dynamo's mocker is not installed",
)
SYSTEM = "the quick brown fox jumps over the lazy dog " * 40
WARM_UPS = 4  # requests sent straight to an engine until the picker applies its events
EVENTS_S = 5.0  # an engine's events are applied this soon after its reply, or were lost


async def events_flow(
    http: httpx.AsyncClient, engine: Mocker, caches: PoolCaches, slot: int
) -> None:
    """Until the picker applies `engine`'s KV events and trusts its stream. A PUB socket
    drops what it sends before a subscriber's subscription reaches it, and the picker
    subscribes when it starts: the first request's events were lost when that took longer
    than the request (~80 ms here), and the engine published nothing more. So warm-up
    requests (a prompt of their own) go straight to the engine until one's events arrive;
    if the first were lost, the stream begins with a gap, trusted again after the pool's
    `resync_after_s` of events without one."""
    for attempt in range(WARM_UPS):
        content = f"warm-up {attempt} of {engine.endpoint} " * 8
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 1}
        reply = await http.post(f"http://{engine.endpoint}/v1/chat/completions", json=body)
        reply.raise_for_status()
        if await until(lambda: caches.index.blocks(slot) > 0, EVENTS_S):
            break
    else:
        pytest.fail(f"no KV events from {engine.endpoint} after {WARM_UPS} requests")
    trust = caches.trust[slot]
    await wait_until(lambda: trust.trusted(caches.clock()), within_s=20, what="a trusted stream")


@pytest.mark.timeout(240)
async def test_precise_predictions_match_what_the_mocker_reports(
    start_picker: PickerFactory,
) -> None:
    setup = MockerSetup(VENV, MODEL_DIR, MODEL, count=2, gpu_blocks=512)
    with mockers(setup) as engines:
        endpoints = [e.endpoint for e in engines]
        picker = await start_picker(parse_policy(policy("precise", endpoints, MODEL_DIR)))
        caches = picker.app.precise.pools["default/mock"]
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            for engine in engines:
                await events_flow(http, engine, caches, picker.app.table.slot(engine.endpoint))
            for turn in range(4):
                messages = [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": f"question {turn}"}]  # fmt: skip
                body = {"model": MODEL, "messages": messages, "max_tokens": 4}
                pushed = await picker.client.push([json.dumps(body).encode()])
                picked = await picker.client.pick(pushed.stream_id)
                pulled = await picker.client.pull_all(picked.response_id)
                response = await http.post(
                    f"http://{picked.local.endpoint}/v1/chat/completions",
                    content=pulled, headers={"content-type": "application/json"},
                )  # fmt: skip
                usage = response.json()["usage"]
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                await picker.client.first_token(picked.response_id, ttft_ms=10)
                await picker.client.final_token(
                    picked.response_id, model=MODEL, prompt_tokens=usage["prompt_tokens"],
                    completion_tokens=usage["completion_tokens"], cached_tokens=cached,
                )  # fmt: skip
                # Before the next turn is picked: every block this one stored (pending
                # there since its Pick) named by the engine's events.
                slot = picker.app.table.slot(picked.local.endpoint)
                await wait_until(lambda s=slot: not caches.pending.get(s), within_s=20)
    registry = picker.app.metrics.registry
    count = registry.get_sample_value("kinference_prefix_precise_error_tokens_count") or 0
    within = registry.get_sample_value(
        "kinference_prefix_precise_error_tokens_bucket", {"le": "16.0"}
    )
    assert count >= 3  # every turn after the first was predicted from the mocker's events
    assert within == count
