"""The gateway end to end with the official OpenAI SDK: engines, providers, reports, aborts."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL
from tests.gateway.conftest import BIG_MODEL, DEAD_MODEL, MiB, Stack

HI = [{"role": "user", "content": "hello there"}]


def reports(stack: Stack, kind: str) -> float:
    return stack.picker.metric("kinference_reports_total", {"kind": kind, "known": "true"})


def picker_tokens(stack: Stack, kind: str) -> float:
    return stack.picker.metric("kinference_tokens_total", {"kind": kind})


async def test_chat_and_completions_stream_and_whole_to_local_engines(stack: Stack) -> None:
    async with stack.sdk() as client:
        whole = await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8)
        assert whole.choices[0].message.content
        assert whole.usage is not None and whole.usage.completion_tokens == 8

        chunks = await client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=8, stream=True
        )
        text = ""
        async for chunk in chunks:
            # The usage chunk the picker asked for on the gateway's behalf (choices: [])
            # is metered but not relayed: the client did not ask for it.
            assert chunk.usage is None
            text += chunk.choices[0].delta.content or ""
        assert text
        asked = await client.chat.completions.create(
            model=MODEL,
            messages=HI,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
        usages = [chunk.usage async for chunk in asked if chunk.usage is not None]
        assert len(usages) == 1 and usages[0].completion_tokens == 8

        completion = await client.completions.create(model=MODEL, prompt="Once", max_tokens=8)
        assert completion.choices[0].text
        streamed = await client.completions.create(
            model=MODEL, prompt="Once", max_tokens=8, stream=True
        )
        assert "".join([part.choices[0].text async for part in streamed if part.choices])

    await wait_until(lambda: reports(stack, "final_token") == 5, what="5 final reports")
    assert reports(stack, "first_token") == 5
    assert picker_tokens(stack, "completion") == 40  # usage read from every response
    assert picker_tokens(stack, "prompt") > 0
    assert sum(engine.stats()["finished"] for engine in stack.chat) == 5
    await wait_until(lambda: nothing_held(stack.picker), what="nothing held by the picker")
    # TTFT and ITL reports fed the picker's per-worker estimates.
    table = stack.picker.app.table
    assert any(table.ttft_ms(MODEL)[table.slot(f"127.0.0.1:{e.port}")] > 0 for e in stack.chat)
    assert any(table.itl_ms(MODEL)[table.slot(f"127.0.0.1:{e.port}")] > 0 for e in stack.chat)


async def test_provider_gets_the_backends_credential(stack: Stack) -> None:
    async with stack.sdk() as client:
        whole = await client.chat.completions.create(
            model="provider-model", messages=HI, max_tokens=4
        )
        assert whole.model == MODEL  # the picker rewrote the model for the provider
        chunks = await client.chat.completions.create(
            model="provider-model", messages=HI, max_tokens=4, stream=True
        )
        assert [chunk async for chunk in chunks]
    assert stack.provider.stats()["finished"] == 2  # the engine wants the Bearer key
    await wait_until(lambda: reports(stack, "final_token") == 2, what="2 final reports")
    assert stack.picker.app.router.health.cooled("ai/sim") is None


async def test_unknown_backend_aborts_unresolved_and_cools_the_provider(stack: Stack) -> None:
    async with stack.sdk() as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(model="ghost-model", messages=HI)
        assert raised.value.status_code == 502
        assert raised.value.code == "backend_unresolved"
        health = stack.picker.app.router.health
        await wait_until(lambda: health.cooled("ai/ghost") is not None, what="ghost cooled")
        cooled = health.cooled("ai/ghost")
        assert cooled is not None and cooled.reason == "backend_unresolved"
        # The picker now skips it: nothing else serves that model.
        with pytest.raises(openai.APIStatusError) as again:
            await client.chat.completions.create(model="ghost-model", messages=HI)
        assert again.value.status_code == 503 and again.value.code == "no_workers"
        # Retry-After: the seconds left of the provider's cooldown, from the picker.
        left = cooled.remaining(health.now())
        retry_after = int(again.value.response.headers["retry-after"])
        assert 1 <= retry_after <= int(left) + 1
    await wait_until(lambda: nothing_held(stack.picker), what="the aborted request released")


async def test_upstream_401_aborts_unauthorized(stack: Stack) -> None:
    async with stack.sdk() as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(model="locked-model", messages=HI)
    assert raised.value.status_code == 502
    assert raised.value.code == "backend_unauthorized"
    health = stack.picker.app.router.health
    await wait_until(lambda: health.cooled("ai/locked") is not None, what="locked cooled")
    cooled = health.cooled("ai/locked")
    assert cooled is not None and cooled.reason == "backend_unauthorized"
    await wait_until(lambda: nothing_held(stack.picker), what="the aborted request released")


async def test_client_disconnect_mid_stream_releases_everything(stack: Stack) -> None:
    body = {"model": MODEL, "messages": HI, "max_tokens": 5000, "stream": True}  # ~12 s
    async with (
        stack.http() as http,
        http.stream("POST", "/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            if b"content" in chunk:
                break  # one token seen: hang up mid-stream
    # The gateway closed the upstream connection (the engine stopped generating long
    # before 5000 tokens) and aborted, so the picker holds nothing for it.
    await wait_until(
        lambda: sum(engine.stats()["running"] for engine in stack.chat) == 0,
        within_s=5.0,
        what="the engine to see the upstream connection closed",
    )
    await wait_until(lambda: nothing_held(stack.picker), what="the picker to release it")
    assert reports(stack, "first_token") == 1
    assert reports(stack, "final_token") == 0
    assert sum(engine.stats()["finished"] for engine in stack.chat) == 0


async def test_large_body_streams_through(stack: Stack) -> None:
    content = "word " * (5 * MiB // 5)  # 5 MiB of prompt
    async with stack.sdk() as client:
        whole = await client.chat.completions.create(
            model=BIG_MODEL, messages=[{"role": "user", "content": content}], max_tokens=1
        )
    assert whole.usage is not None and whole.usage.prompt_tokens > MiB
    assert stack.big.stats()["prompt_tokens"] == whole.usage.prompt_tokens
    await wait_until(lambda: reports(stack, "final_token") == 1, what="the final report")
    assert picker_tokens(stack, "prompt") == whole.usage.prompt_tokens


async def test_models_and_health(stack: Stack) -> None:
    async with stack.sdk() as client:
        listed = await client.models.list()
        assert [model.id async for model in listed] == [MODEL, "provider-model"]
    async with stack.http() as http:
        health = await http.get("/healthz")
        assert health.status_code == 200, health.text
        assert json.loads(health.content) == {"status": "ok"}


async def test_upstream_error_is_relayed_and_the_request_released(stack: Stack) -> None:
    async with stack.sdk() as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=10**7)
    assert raised.value.status_code == 400  # the engine's own answer, relayed as it was
    assert raised.value.code != "bad_request"  # not a gateway or picker error
    await wait_until(lambda: nothing_held(stack.picker), what="the request released")
    assert reports(stack, "first_token") == 1  # carrying upstream_status 400
    assert reports(stack, "final_token") == 0  # an Abort ended it


async def test_client_disconnect_mid_upload_discards_the_push(stack: Stack) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", stack.gateway.port)
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
            b"content-type: application/json\r\ncontent-length: 6000000\r\n\r\n"
            + b'{"model": "'
            + MODEL.encode()
            + b'", "messages": [{"role": "user", "content": "'
            + b"x" * MiB
        )
        await writer.drain()
        store = stack.picker.app.store
        await wait_until(lambda: store.budget.used > 0, what="the push to be streaming")
    finally:
        writer.close()
        await writer.wait_closed()
    await wait_until(lambda: nothing_held(stack.picker), what="the partial push discarded")
    async with stack.sdk() as client:  # and the gateway serves on
        whole = await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert whole.choices[0].message.content


async def test_unreachable_engine_is_502_and_aborted(stack: Stack) -> None:
    async with stack.sdk() as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(model=DEAD_MODEL, messages=HI)
    assert (raised.value.status_code, raised.value.code) == (502, "upstream_error")
    await wait_until(lambda: nothing_held(stack.picker), what="the request released")
    assert reports(stack, "first_token") == 0
