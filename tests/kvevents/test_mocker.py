"""Against a real producer of the format: Dynamo's mock engine publishing vLLM-format KV events
(`--zmq-kv-events-ports`). Runs where Dynamo's venv and tiny model are installed
(`KINFERENCE_DYNAMO_VENV`, `KINFERENCE_DYNAMO_MODEL`, default /tmp/dynamo-venv and
/tmp/dynamo-model; recipe in ../shared/tools/dynamo/README.md), skipped elsewhere (CI)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest

from kinference.config import parse_policy
from loadtest.bench_precise_mocker import policy
from loadtest.mocker_engines import MockerSetup, mockers
from tests.api.helpers import wait_until
from tests.conftest import MODEL, PickerFactory

VENV = Path(os.environ.get("KINFERENCE_DYNAMO_VENV", "/tmp/dynamo-venv"))
MODEL_DIR = Path(os.environ.get("KINFERENCE_DYNAMO_MODEL", "/tmp/dynamo-model"))
pytestmark = pytest.mark.skipif(
    not (VENV / "bin" / "python").exists() or not (MODEL_DIR / "tokenizer.json").exists(),
    reason="Dynamo's mocker is not installed",
)
SYSTEM = "the quick brown fox jumps over the lazy dog " * 40


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
                slot = picker.app.table.slot(picked.local.endpoint)
                await wait_until(lambda s=slot: caches.index.blocks(s) > 0, within_s=20)
                await asyncio.sleep(0.2)  # the request's last events
    registry = picker.app.metrics.registry
    count = registry.get_sample_value("kinference_prefix_precise_error_tokens_count") or 0
    within = registry.get_sample_value(
        "kinference_prefix_precise_error_tokens_bucket", {"le": "16.0"}
    )
    assert count >= 3  # every turn after the first was predicted from the mocker's events
    assert within == count
