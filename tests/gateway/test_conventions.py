"""What clients and load tools expect of the front door: health, models, 404s, headers,
the usage chunk, metrics (both modes, through the `stack` fixture)."""

from __future__ import annotations

import json
import re

from kinference.config import parse_policy
from kinference.gateway.metrics import MAX_MODELS, ModelLabels
from kinference.gateway.remote import PolicyModels
from tests.api.helpers import wait_until
from tests.conftest import MODEL
from tests.gateway.conftest import BIG_MODEL, GatewayFactory, Stack, policy_text

HI = [{"role": "user", "content": "hello there"}]


def chat(stream: bool, **extra: object) -> bytes:
    request = {"model": MODEL, "messages": HI, "max_tokens": 4, "stream": stream, **extra}
    return json.dumps(request).encode()


async def test_health_and_only_inference_paths_reach_the_picker(stack: Stack) -> None:
    async with stack.http() as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        assert (await http.get("/healthz")).status_code == 200
        for path in ("/v1/nope", "/v1/chat/completions/x", "/", "/v1/models"):
            answer = await http.post(path, content=chat(False))
            assert answer.status_code in (404, 405), path
            assert "error" in answer.json()
        wrong = await http.get("/v1/chat/completions")
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert stack.picker.metric("kinference_picks_total", {"outcome": "ok"}) == 0


async def test_relayed_headers_are_not_duplicated(stack: Stack) -> None:
    async with stack.http() as http:
        for stream in (False, True):
            answer = await http.post("/v1/chat/completions", content=chat(stream))
            assert answer.status_code == 200
            names = [name.lower() for name, _ in answer.headers.multi_items()]
            assert names.count("date") == 1 and "server" not in names
            assert len(names) == len(set(names)), names
            assert answer.headers["x-request-id"]


async def test_usage_chunk_only_for_clients_that_ask(stack: Stack) -> None:
    async with stack.http() as http:
        plain = await http.post("/v1/chat/completions", content=chat(True))
        asked = await http.post(
            "/v1/chat/completions", content=chat(True, stream_options={"include_usage": True})
        )
    assert '"choices": []' not in plain.text.replace('"choices":[]', '"choices": []')
    assert plain.text.rstrip().endswith("data: [DONE]")
    assert re.search(r'"choices": ?\[\], ?"usage"', asked.text) or '"usage": {' in asked.text
    # the picker still got the usage of both (reports are off the response path)
    await wait_until(
        lambda: stack.picker.metric("kinference_tokens_total", {"kind": "completion"}) == 8,
        what="both streams' usage reported",
    )


async def test_models_come_from_the_policy_in_process(
    stack: Stack, start_gateway: GatewayFactory
) -> None:
    gateway = await start_gateway("", hosted=stack.picker)  # no --models
    url = f"http://127.0.0.1:{gateway.port}"
    async with stack.http() as http:
        listed = (await http.get(f"{url}/v1/models")).json()
        ids = {entry["id"] for entry in listed["data"]}
        assert {MODEL, BIG_MODEL, "provider-model", "provider-alias"} <= ids
        one = await http.get(f"{url}/v1/models/provider-alias")
        assert one.json()["id"] == "provider-alias"
        missing = await http.get(f"{url}/v1/models/nope")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found"


def test_remote_mode_reads_the_policy_file(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "policy.yaml"
    path.write_text(policy_text(["127.0.0.1:1"], "127.0.0.1:2", "127.0.0.1:3"))
    names = PolicyModels(path).names()
    assert names == parse_policy(path.read_text()).model_names
    assert "provider-alias" in names


async def test_metrics_by_route_model_status_with_bounded_labels(stack: Stack) -> None:
    async with stack.http() as http:
        await http.post("/v1/chat/completions", content=chat(True))
        await http.post("/v1/chat/completions", content=chat(False))
        for index in range(5):  # caller-chosen names never become labels
            body = json.dumps({"model": f"made-up-{index}", "messages": HI}).encode()
            await http.post("/v1/chat/completions", content=body)
        text = (await http.get("/metrics")).text
    labels = f'model="{MODEL}",route="chat_completions"'
    ok = f'kinference_gateway_requests_total{{{labels},status="200"}} 2.0'
    assert ok in text
    assert "made-up" not in text
    assert (
        f'kinference_gateway_ttft_seconds_count{{model="{MODEL}",route="chat_completions"}}' in text
    )
    assert f'kinference_gateway_tokens_total{{kind="completion",model="{MODEL}"}} 8.0' in text
    assert "kinference_gateway_itl_seconds_bucket" in text


def test_model_labels_are_bounded() -> None:
    labels = ModelLabels()
    assert labels.label("x", dispatched=False) == "other"
    assert {labels.label(f"m{i}", dispatched=True) for i in range(MAX_MODELS + 5)} >= {"other"}
    assert labels.label("m0", dispatched=False) == "m0"
