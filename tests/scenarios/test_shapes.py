"""Every common request shape picks end to end; garbage gets BAD_REQUEST with a reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.helpers import wait_nothing_held
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    BAD_REQUEST,
    DEGRADED,
    OK,
    EnginesFactory,
    outcome_name,
    pick,
    routing_yaml,
    start_with,
    vllm_pool,
    wait_engines,
    where,
)

MODEL = "llama-8b-instruct"

SHAPES: dict[str, dict[str, Any]] = {
    "chat": {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Describe this"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    },
    "completion": {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16},
    "completion-token-ids": {"model": MODEL, "prompt": [1, 2, 3, 4]},
    "embeddings": {"model": MODEL, "input": ["first", "second"], "encoding_format": "float"},
    "responses": {
        "model": MODEL,
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "max_output_tokens": 50,
    },
    "anthropic-messages": {
        "model": MODEL,
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are a poet."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "A haiku"}]}],
        "stop_sequences": ["\n\n"],
    },
}

GARBAGE: dict[str, bytes] = {
    "empty": b"",
    "not-json": b"hello, picker",
    "truncated": b'{"model": "llama-8b-instruct", "messages": [{"role": "us',
    "array": b'[{"model": "llama-8b-instruct"}]',
    "binary": bytes(range(256)),
    "no-model": b'{"messages": [{"role": "user", "content": "hi"}]}',
    "model-not-string": b'{"model": 7, "messages": [{"role": "user", "content": "hi"}]}',
    "no-prompt": b'{"model": "llama-8b-instruct"}',
    "messages-not-array": b'{"model": "llama-8b-instruct", "messages": "hi"}',
    "stream-not-bool": (
        b'{"model": "llama-8b-instruct", "stream": "yes", "messages": '
        b'[{"role": "user", "content": "hi"}]}'
    ),
    "bad-hint": (
        b'{"model": "llama-8b-instruct", "kinference": {"hint": 5}, "messages": '
        b'[{"role": "user", "content": "hi"}]}'
    ),
}


@pytest.fixture
async def picker(start_engines: EnginesFactory, start_picker: PickerFactory) -> RunningPicker:
    engines = await start_engines(2)
    policy = "pools:\n" + vllm_pool("chat", engines.endpoints, [MODEL]) + routing_yaml()
    running = await start_with(start_picker, policy)
    await wait_engines(running, engines.endpoints)
    return running


async def test_every_shape_picks_and_pulls_unchanged(picker: RunningPicker) -> None:
    """Unchanged, but for Anthropic Messages: a vLLM pool speaks OpenAI, so it is translated
    to a chat request (docs/configuration.md, "API translation")."""
    for name, request in SHAPES.items():
        body = json.dumps(request).encode()
        result = await pick(picker, body)
        assert result.outcome == OK, f"{name}: {outcome_name(result)} {result.reason}"
        assert result.local.endpoint in picker.app.engines.scraper.endpoints, name
        assert result.requested_model == MODEL
        pulled = await picker.client.pull_all(result.response_id)
        if name == "anthropic-messages":
            chat = json.loads(pulled)
            assert "system" not in chat and chat["messages"][0]["role"] == "system"
        else:
            assert pulled == body, name
        await picker.client.final_token(result.response_id)
    await wait_nothing_held(picker)


async def test_prompt_stored_with_the_provider_is_degraded(picker: RunningPicker) -> None:
    body = json.dumps({"model": MODEL, "input": "continue", "previous_response_id": "resp_1"})
    result = await pick(picker, body.encode())
    assert result.outcome == DEGRADED, f"{outcome_name(result)} {result.reason}"
    assert result.response_id != 0
    assert "prefix" in result.reason
    await picker.client.pull_all(result.response_id)


@pytest.mark.parametrize("name", GARBAGE)
async def test_garbage_is_a_bad_request_with_a_reason(picker: RunningPicker, name: str) -> None:
    result = await pick(picker, GARBAGE[name])
    assert result.outcome == BAD_REQUEST, f"{name}: {where(result)}"
    assert result.reason
    assert result.response_id == 0
    assert result.WhichOneof("destination") is None
    await wait_nothing_held(picker)


@pytest.mark.parametrize(
    ("name", "word"),
    [
        ("no-model", "model"),
        ("model-not-string", "model"),
        ("stream-not-bool", "stream"),
        ("bad-hint", "hint"),
        ("messages-not-array", "messages"),
    ],
)
async def test_bad_request_reason_names_the_field(
    picker: RunningPicker, name: str, word: str
) -> None:
    result = await pick(picker, GARBAGE[name])
    assert word in result.reason, result.reason
