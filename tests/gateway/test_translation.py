"""API shapes translated both ways, through the official SDKs, against simulated upstreams.

Anthropic Messages clients (the `anthropic` SDK) served by a simulated engine pool and by a
simulated OpenAI-chat provider; OpenAI chat clients (the `openai` SDK, `langchain-openai`)
served by a simulated Anthropic provider; whole and streamed; text, tool calls and images.
The simulated providers refuse the other API's members, so an untranslated body fails.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI

from kinference.config import parse_policy
from kinference.gateway.server import GatewayServer
from loadtest.sim_engine import SimEngine, SimEngineConfig
from loadtest.sim_provider import SimProvider
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.gateway.conftest import CLIENT_TIMEOUT_S, GatewayFactory

CLAUDE_KEY = "sk-ant-sim"
CLAUDE_KEY_ENV = "KINFERENCE_TEST_CLAUDE_KEY"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": WEATHER_TOOL["name"],
        "description": WEATHER_TOOL["description"],
        "parameters": WEATHER_TOOL["input_schema"],
    },
}


@dataclass
class Shapes:
    picker: RunningPicker
    gateway: GatewayServer
    engine: SimEngine
    chat_provider: SimProvider
    messages_provider: SimProvider

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.port}"

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            base_url=self.url, api_key="sk-client", max_retries=0, timeout=CLIENT_TIMEOUT_S
        )

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key="sk-client", max_retries=0, timeout=CLIENT_TIMEOUT_S
        )


@pytest.fixture(params=["remote", "in-process"])
async def shapes(
    request: pytest.FixtureRequest,
    start_picker: PickerFactory,
    start_gateway: GatewayFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Shapes]:
    engine = SimEngine(SimEngineConfig(models=(MODEL,), time_scale=0.05))
    chat_provider = SimProvider("openai")
    messages_provider = SimProvider("anthropic", api_key=CLAUDE_KEY)
    await engine.start()
    await chat_provider.start()
    await messages_provider.start()
    policy = parse_policy(f"""
pools:
  - {{namespace: default, name: chat, endpoints: ["127.0.0.1:{engine.port}"], models: ["{MODEL}"]}}
providers:
  - {{namespace: ai, name: gpt, api: openai}}
  - {{namespace: ai, name: claude, api: anthropic}}
models:
  - {{name: gpt-sim, targets: [{{provider: ai/gpt, model: gpt-4o}}]}}
  - {{name: claude-sim, targets: [{{provider: ai/claude, model: claude-sonnet-4-5}}]}}
""")
    backends = tmp_path / "backends.yaml"
    backends.write_text(
        "backends:\n"
        f"  ai/gpt: {{base_url: '{chat_provider.url}'}}\n"
        f"  ai/claude: {{base_url: '{messages_provider.url}', api_key_env: {CLAUDE_KEY_ENV},\n"
        "    auth: x-api-key, headers: {anthropic-version: '2023-06-01'}}\n"
    )
    monkeypatch.setenv(CLAUDE_KEY_ENV, CLAUDE_KEY)
    picker = await start_picker(policy)
    in_process = request.param == "in-process"  # the extensions without gRPC metadata
    gateway = await start_gateway(
        "" if in_process else picker.target,
        hosted=picker if in_process else None,
        backends_file=backends,
    )
    try:
        yield Shapes(picker, gateway, engine, chat_provider, messages_provider)
    finally:  # side by side: each uvicorn server takes ~0.2 s to drain
        await asyncio.gather(
            gateway.stop(), messages_provider.stop(), chat_provider.stop(), engine.stop()
        )


HI = [{"role": "user", "content": "Say hello"}]


async def test_anthropic_client_on_an_engine_pool(shapes: Shapes) -> None:
    async with shapes.anthropic() as client:
        message = await client.messages.create(model=MODEL, max_tokens=8, messages=HI)
        assert message.type == "message" and message.role == "assistant"
        assert message.content[0].type == "text" and message.content[0].text
        assert message.stop_reason in ("end_turn", "max_tokens")
        assert message.usage.output_tokens > 0 and message.usage.input_tokens > 0
        async with client.messages.stream(model=MODEL, max_tokens=8, messages=HI) as stream:
            texts = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
    assert "".join(texts) == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens >= len(texts) > 0  # the engine may batch tokens


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_client_on_an_openai_provider_with_tools(
    shapes: Shapes, stream: bool
) -> None:
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    async with shapes.anthropic() as client:
        if stream:
            async with client.messages.stream(
                model="gpt-sim", max_tokens=64, messages=ask, tools=[WEATHER_TOOL]
            ) as events:
                message = await events.get_final_message()
        else:
            message = await client.messages.create(
                model="gpt-sim", max_tokens=64, messages=ask, tools=[WEATHER_TOOL]
            )
    assert message.stop_reason == "tool_use"
    call = message.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Paris"}
    sent = shapes.chat_provider.requests[-1]
    assert sent["model"] == "gpt-4o"
    assert sent["tools"][0]["function"]["parameters"] == WEATHER_TOOL["input_schema"]
    # The tool's result goes back as a chat `tool` message; the answer is text.
    follow_up = [
        *ask,
        {"role": "assistant", "content": [call.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        },
    ]
    async with shapes.anthropic() as client:
        answer = await client.messages.create(
            model="gpt-sim",
            max_tokens=64,
            system="Be brief.",
            messages=follow_up,
            tools=[WEATHER_TOOL],
        )
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].type == "text"
    sent = shapes.chat_provider.requests[-1]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["messages"][2]["tool_calls"][0]["id"] == call.id
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": call.id, "content": "sunny"}


async def test_anthropic_image_reaches_a_chat_provider_as_a_data_url(shapes: Shapes) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    ask = [{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}]
    async with shapes.anthropic() as client:
        message = await client.messages.create(model="gpt-sim", max_tokens=32, messages=ask)
    assert message.content[0].text.endswith("1 images seen.")  # type: ignore[union-attr]
    part = shapes.chat_provider.requests[-1]["messages"][0]["content"][0]
    assert part == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_client_on_an_anthropic_provider(shapes: Shapes, stream: bool) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    async with shapes.openai() as client:
        if stream:
            chunks = [
                chunk
                async for chunk in await client.chat.completions.create(
                    model="claude-sim", messages=messages, tools=[OPENAI_TOOL], stream=True
                )
            ]
            assert all(chunk.choices for chunk in chunks)  # no usage chunk: none was asked
            calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
            arguments = "".join(call[0].function.arguments or "" for call in calls)
            name = calls[0][0].function.name
            finish = chunks[-1].choices[0].finish_reason
        else:
            completion = await client.chat.completions.create(
                model="claude-sim", messages=messages, tools=[OPENAI_TOOL]
            )
            tool_call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
            arguments, name = tool_call.function.arguments, tool_call.function.name
            finish = completion.choices[0].finish_reason
            assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert (name, json.loads(arguments), finish) == ("get_weather", {"city": "Paris"}, "tool_calls")
    sent = shapes.messages_provider.requests[-1]
    assert sent["system"] == "Be brief." and sent["max_tokens"] > 0
    assert sent["model"] == "claude-sonnet-4-5"
    assert sent["tools"][0]["input_schema"] == WEATHER_TOOL["input_schema"]


async def test_openai_stream_usage_when_asked_and_images(shapes: Shapes) -> None:
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    ask = [{"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}]
    async with shapes.openai() as client:
        stream = await client.chat.completions.create(
            model="claude-sim", messages=ask, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.endswith("1 images seen.")
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0
    block = shapes.messages_provider.requests[-1]["messages"][0]["content"][0]
    assert block == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }


async def test_langchain_openai_on_an_anthropic_provider(shapes: Shapes) -> None:
    model = ChatOpenAI(
        model="claude-sim",
        base_url=f"{shapes.url}/v1",
        api_key="sk-client",
        max_retries=0,  # type: ignore[arg-type]
    )
    reply = await model.ainvoke([HumanMessage("Say hello")])
    assert isinstance(reply, AIMessage) and "anthropic provider" in str(reply.content)
    pieces = [chunk.content async for chunk in model.astream([HumanMessage("Say hello")])]
    assert "".join(str(p) for p in pieces) == reply.content
    bound = model.bind_tools([OPENAI_TOOL])
    called = await bound.ainvoke([HumanMessage("Weather in Paris?")])
    assert called.tool_calls[0]["name"] == "get_weather"  # type: ignore[attr-defined]
    assert called.tool_calls[0]["args"] == {"city": "Paris"}  # type: ignore[attr-defined]


async def test_anthropic_client_on_an_anthropic_provider_is_not_translated(
    shapes: Shapes,
) -> None:
    async with shapes.anthropic() as client:
        message = await client.messages.create(model="claude-sim", max_tokens=16, messages=HI)
    assert message.id == "msg_sim01"  # the provider's own response, as it sent it
    assert shapes.messages_provider.requests[-1]["messages"] == HI


async def test_errors_in_each_clients_shape(shapes: Shapes) -> None:
    async with shapes.anthropic() as client:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await client.messages.create(model="no-such-model", max_tokens=8, messages=HI)
    assert missing.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "no pool or provider serves model 'no-such-model'",
        },
    }
    async with shapes.openai() as client:
        with pytest.raises(openai.NotFoundError) as not_found:
            await client.chat.completions.create(model="no-such-model", messages=HI)
    assert not_found.value.code == "model_not_found"
    # The Anthropic provider's own 400 comes back OpenAI-shaped to the OpenAI client.
    async with shapes.openai() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="claude-sim",
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
                        ],
                    }
                ],
            )
    assert refused.value.status_code == 400
