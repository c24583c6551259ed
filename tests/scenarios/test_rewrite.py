"""Model choice and body rewrite end to end: hints, `when`, provider paths, pulled bodies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from kinference.v1 import picker_pb2 as pb
from tests.conftest import PickerFactory, RunningPicker
from tests.scenarios.helpers import (
    Engines,
    EnginesFactory,
    chat,
    pick_ok,
    routing_yaml,
    start_with,
    vllm_pool,
    wait_engines,
    where,
)

SMALL = "llama-8b-instruct"
LARGE = "llama-70b-instruct"
AZURE_VERSION = "2024-10-21"
LONG_PROMPT_TOKENS = 2000


@dataclass
class Setup:
    picker: RunningPicker
    chat_pool: list[str]
    big_pool: list[str]


def _policy(chat_engines: Engines, big_engines: Engines) -> str:
    return (
        "pools:\n"
        + vllm_pool("chat", chat_engines.endpoints, [SMALL])
        + vllm_pool("big", big_engines.endpoints, [LARGE])
        + f"""providers:
  - {{namespace: ai, name: openai, api: openai}}
  - {{namespace: ai, name: azure, api: azure-openai, api_version: "{AZURE_VERSION}"}}
models:
  - name: llama
    aliases: [llama3]
    targets:
      - {{pool: default/big, model: {LARGE}, when: {{hint: large}}}}
      - {{pool: default/big, model: {LARGE}, when: {{min_prompt_tokens: {LONG_PROMPT_TOKENS}}}}}
      - {{pool: default/chat, model: {SMALL}, max_tokens_field: max_completion_tokens}}
  - name: gpt-4o
    targets:
      - {{provider: ai/azure, model: gpt4o-prod}}
  - name: tooling
    targets:
      - {{provider: ai/azure, model: gpt4o-tools, when: {{tools: true}}}}
      - {{provider: ai/openai, model: gpt-4o}}
  - name: legacy
    targets:
      - {{pool: default/chat, model: {SMALL}, max_tokens_field: max_tokens}}
  - name: custom
    targets:
      - provider: ai/openai
        model: gpt-4o-mini
        path: "/v2/chat/completions?tier=gold&x=1"
        max_tokens_field: max_completion_tokens
"""
        + routing_yaml()
    )


@pytest.fixture
async def setup(start_engines: EnginesFactory, start_picker: PickerFactory) -> Setup:
    chat_engines, big_engines = await start_engines(2), await start_engines(1)
    picker = await start_with(start_picker, _policy(chat_engines, big_engines))
    await wait_engines(picker, chat_engines.endpoints + big_engines.endpoints)
    return Setup(picker, chat_engines.endpoints, big_engines.endpoints)


async def _pulled(picker: RunningPicker, body: bytes) -> tuple[pb.PickResponse, bytes]:
    result = await pick_ok(picker, body)
    pulled = await picker.client.pull_all(result.response_id)
    assert result.body_total_bytes == len(pulled)
    await picker.client.final_token(result.response_id)
    return result, pulled


async def _rewritten(picker: RunningPicker, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Where the request goes and the body pulled for it (parsed)."""
    result, pulled = await _pulled(picker, json.dumps(request).encode())
    assert result.requested_model == request["model"]
    return where(result), json.loads(pulled)


def _messages(text: str = "hello") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_stream_chat_to_the_small_model_is_rewritten(setup: Setup) -> None:
    request = {
        "model": "llama",
        "messages": _messages(),
        "stream": True,
        "max_tokens": 256,
        "temperature": 0.2,
    }
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.chat_pool
    assert body == {
        "model": SMALL,
        "messages": _messages(),
        "stream": True,
        "max_completion_tokens": 256,
        "temperature": 0.2,
        "stream_options": {"include_usage": True},
    }


async def test_stream_options_keep_their_other_keys(setup: Setup) -> None:
    options = {"include_usage": False, "continuous_usage_stats": True}
    request = {
        "model": "llama3",
        "messages": _messages(),
        "stream": True,
        "stream_options": options,
    }
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.chat_pool
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["model"] == SMALL


async def test_non_stream_gets_no_stream_options(setup: Setup) -> None:
    request = {"model": "llama", "messages": _messages(), "stream": False, "max_tokens": 9}
    _, body = await _rewritten(setup.picker, request)
    assert "stream_options" not in body
    assert body["max_completion_tokens"] == 9 and "max_tokens" not in body


async def test_hint_routes_to_the_hinted_target_and_is_not_forwarded(setup: Setup) -> None:
    request = {
        "model": "llama",
        "kinference": {"hint": "large"},
        "messages": _messages(),
        "max_tokens": 64,
    }
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.big_pool
    # The big target names no max_tokens_field: the client's spelling stays.
    assert body == {"model": LARGE, "messages": _messages(), "max_tokens": 64}


async def test_unknown_hint_skips_the_hinted_target(setup: Setup) -> None:
    request = {"model": "llama", "kinference": {"hint": "tiny"}, "messages": _messages()}
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.chat_pool
    assert body == {"model": SMALL, "messages": _messages()}


async def test_long_prompt_goes_to_the_big_model(setup: Setup) -> None:
    long_text = "Please review this contract clause by clause. " * (LONG_PROMPT_TOKENS // 8)
    assert len(long_text) // 4 > LONG_PROMPT_TOKENS
    dest, body = await _rewritten(
        setup.picker, {"model": "llama", "messages": _messages(long_text)}
    )
    assert dest in setup.big_pool
    assert body["model"] == LARGE
    short = "Please review this clause."
    dest, body = await _rewritten(setup.picker, {"model": "llama", "messages": _messages(short)})
    assert dest in setup.chat_pool
    assert body["model"] == SMALL


@pytest.mark.parametrize(
    ("request_body", "path"),
    [
        (
            {"model": "gpt-4o", "messages": _messages()},
            f"/openai/deployments/gpt4o-prod/chat/completions?api-version={AZURE_VERSION}",
        ),
        (
            {"model": "gpt-4o", "prompt": "Once upon a time"},
            f"/openai/deployments/gpt4o-prod/completions?api-version={AZURE_VERSION}",
        ),
        (
            {"model": "gpt-4o", "input": ["a", "b"], "encoding_format": "float"},
            f"/openai/deployments/gpt4o-prod/embeddings?api-version={AZURE_VERSION}",
        ),
        (
            {"model": "gpt-4o", "input": "hi", "instructions": "be brief"},
            "/openai/v1/responses",
        ),
    ],
    ids=["chat", "completion", "embeddings", "responses"],
)
async def test_azure_paths_per_request_shape(
    setup: Setup, request_body: dict[str, Any], path: str
) -> None:
    result, pulled = await _pulled(setup.picker, json.dumps(request_body).encode())
    assert result.WhichOneof("destination") == "provider"
    assert result.provider.backend_ref == pb.BackendRef(namespace="ai", name="azure")
    assert result.provider.path == path
    assert result.requested_model == "gpt-4o"
    assert json.loads(pulled)["model"] == "gpt4o-prod"


async def test_target_path_with_query_and_max_tokens_rename(setup: Setup) -> None:
    request = {"model": "custom", "messages": _messages(), "max_tokens": 5, "stream": True}
    result, pulled = await _pulled(setup.picker, json.dumps(request).encode())
    assert where(result) == "provider:ai/openai/v2/chat/completions?tier=gold&x=1"
    assert json.loads(pulled) == {
        "model": "gpt-4o-mini",
        "messages": _messages(),
        "max_completion_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize(
    "raw",
    [
        # Unusual spacing, key order and escapes: any re-serialisation would show.
        b'{ "messages" : [ {"content":"caf\\u00e9 \\ud83d\\ude00","role":"user"} ],\n'
        b'  "model":"llama-8b-instruct" ,"temperature":1.0e0 }',
        # Already has everything a stream needs.
        b'{"model":"llama-8b-instruct","stream":true,"stream_options":{"include_usage":true},'
        b'"messages":[{"role":"user","content":"x"}],"max_tokens":1}',
        # A completion with the pool's own model.
        b'{"prompt":"Once upon a time","model":"llama-8b-instruct","max_tokens":3}',
    ],
    ids=["spacing", "stream-ready", "completion"],
)
async def test_untouched_bodies_come_back_byte_identical(setup: Setup, raw: bytes) -> None:
    result, pulled = await _pulled(setup.picker, raw)
    assert where(result) in setup.chat_pool
    assert result.requested_model == SMALL
    assert pulled == raw


async def test_large_scanned_bodies_are_rewritten_and_passed_through(setup: Setup) -> None:
    """Bodies above the scan threshold (256 KiB) take the scanned path."""
    text = "".join(f"Paragraph {i}: the quick brown fox jumps over it. " for i in range(12_000))
    assert len(text) > 512 * 1024
    untouched = chat(SMALL, text, system="You are helpful.")
    result, pulled = await _pulled(setup.picker, untouched)
    assert pulled == untouched
    assert where(result) in setup.chat_pool

    request = {
        "model": "llama",
        "messages": [{"role": "system", "content": "Be brief."}, *_messages(text)],
        "stream": True,
        "max_tokens": 100,
        "kinference": {"hint": "large"},
    }
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.big_pool
    assert body == {
        "model": LARGE,
        "messages": request["messages"],
        "stream": True,
        "max_tokens": 100,
        "stream_options": {"include_usage": True},
    }


async def test_tools_condition_picks_the_target(setup: Setup) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    with_tools = {"model": "tooling", "messages": _messages(), "tools": tools}
    result, pulled = await _pulled(setup.picker, json.dumps(with_tools).encode())
    assert result.provider.backend_ref.name == "azure"
    assert result.provider.path.startswith("/openai/deployments/gpt4o-tools/chat/completions?")
    assert json.loads(pulled)["model"] == "gpt4o-tools"
    without = {"model": "tooling", "messages": _messages()}
    result, pulled = await _pulled(setup.picker, json.dumps(without).encode())
    assert where(result) == "provider:ai/openai/v1/chat/completions"
    assert json.loads(pulled)["model"] == "gpt-4o"


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"max_completion_tokens": 70}, {"max_tokens": 70}),
        ({"max_tokens": 70}, {"max_tokens": 70}),
        ({"max_completion_tokens": 70, "max_tokens": 20}, {"max_tokens": 20}),
    ],
    ids=["renamed", "kept", "both-set"],
)
async def test_max_tokens_field_of_the_target(
    setup: Setup, limits: dict[str, int], expected: dict[str, int]
) -> None:
    request = {"model": "legacy", "messages": _messages(), **limits}
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.chat_pool
    assert body == {"model": SMALL, "messages": _messages(), **expected}


async def test_hint_is_removed_even_when_no_target_uses_it(setup: Setup) -> None:
    request = {"kinference": {"hint": "large"}, "model": SMALL, "messages": _messages()}
    dest, body = await _rewritten(setup.picker, request)
    assert dest in setup.chat_pool
    assert body == {"model": SMALL, "messages": _messages()}
