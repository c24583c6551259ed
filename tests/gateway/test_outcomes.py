"""Pick outcomes and picker failures as HTTP statuses and OpenAI error JSON, for real."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from kinference.routing.budget import WINDOW_S
from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL
from tests.gateway.conftest import GATEWAY_MAX_BODY, GatewayFactory, MiB, Stack, free_port

HI = [{"role": "user", "content": "hello there"}]
STINGY_TOKENS_PER_MINUTE = 1  # the "stingy" tenant's budget in tests/gateway/conftest.py


async def status_of(call: Awaitable[Any]) -> tuple[int, str | None]:
    with pytest.raises(openai.APIStatusError) as raised:
        await call
    return raised.value.status_code, raised.value.code


async def test_unknown_model_is_404_no_worker_503_and_bad_body_400(stack: Stack) -> None:
    async with stack.sdk() as client:
        call = client.chat.completions.create(model="nobody-serves-this", messages=HI)
        assert await status_of(call) == (404, "model_not_found")
    async with stack.sdk() as client:  # the SDK does not retry the 404: one request
        with pytest.raises(openai.NotFoundError):
            await client.with_options(max_retries=3).chat.completions.create(
                model="nobody-serves-this", messages=HI
            )
    async with stack.http() as http:
        response = await http.post(
            "/v1/chat/completions",
            content=b'{"model": "x", "messages": [',
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "bad_request" and error["type"] == "invalid_request_error"
    assert error["message"]
    assert response.headers["x-request-id"]
    await wait_until(lambda: nothing_held(stack.picker), what="nothing held")


async def test_tenant_and_qos_headers_reach_the_picker(stack: Stack) -> None:
    async with stack.sdk(**{"x-kinference-tenant": "chat-only"}) as client:
        call = client.chat.completions.create(model="provider-model", messages=HI)
        assert await status_of(call) == (403, "policy_rejected")
    batch = {"x-kinference-tenant": "interactive-only", "x-kinference-qos": "BATCH"}
    async with stack.sdk(**batch) as client:
        call = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        assert await status_of(call) == (403, "policy_rejected")
    async with stack.sdk(**{"x-kinference-qos": "urgent"}) as client:
        call = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        assert await status_of(call) == (400, "invalid_qos")


async def test_tenant_over_budget_is_429(stack: Stack) -> None:
    async with stack.sdk(**{"x-kinference-tenant": "stingy"}) as client:
        await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        tenants = stack.picker.app.router.tenants
        await wait_until(lambda: tenants.used("stingy") > 0, what="the tokens reported")
        with pytest.raises(openai.RateLimitError) as raised:
            await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
    assert raised.value.code == "tenant_over_budget"
    # When the reported tokens leave the budget's minute, as the gate computed it at the
    # rejection; asked again now, it can only be as soon or sooner.
    retry_after = int(raised.value.response.headers["retry-after"])
    frees_in = tenants.budget.frees_in(tenants.budget_name("stingy"), STINGY_TOKENS_PER_MINUTE)
    assert frees_in is not None and math.ceil(frees_in) <= retry_after <= WINDOW_S + 1


async def test_body_over_the_limit_is_413(stack: Stack) -> None:
    async def body() -> AsyncIterator[bytes]:  # chunked: no declared length to refuse early
        yield b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "'
        for _ in range(GATEWAY_MAX_BODY // MiB + 1):
            yield b"x" * MiB
        yield b'"}]}'

    async with stack.http() as http:
        streamed = await http.post("/v1/chat/completions", content=body())
        declared = await http.post(
            "/v1/chat/completions", content=b"x" * (GATEWAY_MAX_BODY + 1)
        )  # refused on its Content-Length, before any push
    for response in (streamed, declared):
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "request_too_large"
    await wait_until(lambda: nothing_held(stack.picker), what="the partial push discarded")
    assert stack.picker.metric("kinference_picks_total", {"outcome": "ok"}) == 0


async def test_picker_unreachable_is_503(start_gateway: GatewayFactory) -> None:
    gateway = await start_gateway(f"127.0.0.1:{free_port()}", rpc_timeout_s=2.0)
    url = f"http://127.0.0.1:{gateway.port}"
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
        call = client.chat.completions.create(model=MODEL, messages=HI)
        assert await status_of(call) == (503, "picker_unavailable")
    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        assert (await http.get("/healthz")).status_code == 503
        assert (await http.get("/health")).status_code == 503
        models = await http.get("/v1/models")  # remote, no policy file, no --models: none
        assert models.status_code == 200 and models.json() == {"object": "list", "data": []}
        wrong_method = await http.delete("/v1/chat/completions")
        assert wrong_method.status_code == 405
        assert wrong_method.json()["error"]["type"] == "invalid_request_error"


async def test_api_keys_decide_the_tenant(
    stack: Stack, start_gateway: GatewayFactory, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  sk-team-chat: chat-only\n")
    gateway = await start_gateway(stack.picker.target, api_keys_file=keys)
    base = f"http://127.0.0.1:{gateway.port}/v1"
    async with openai.AsyncOpenAI(base_url=base, api_key="sk-nope", max_retries=0) as client:
        with pytest.raises(openai.AuthenticationError) as raised:
            await client.chat.completions.create(model=MODEL, messages=HI)
        assert raised.value.code == "invalid_api_key"
    spoof = {"x-kinference-tenant": "anyone"}  # ignored: the key names the tenant
    async with openai.AsyncOpenAI(
        base_url=base, api_key="sk-team-chat", max_retries=0, default_headers=spoof
    ) as client:
        call = client.chat.completions.create(model="provider-model", messages=HI)
        assert await status_of(call) == (403, "policy_rejected")
        whole = await client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2)
        assert whole.choices[0].message.content
