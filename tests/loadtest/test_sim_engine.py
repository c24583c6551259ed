"""The simulated engine over real HTTP: OpenAI shapes and errors, auth, render, fleets."""

from __future__ import annotations

import json

import httpx

from kinference.workers import engine_metrics, read_snapshot
from kinference.workers.parse import parse_samples
from loadtest.sim_engine import SimEngineConfig, SimEngines, engine_seed
from tests.loadtest.conftest import MODEL, EngineFactory, chat, events


async def test_chat_whole_and_streamed_with_usage(sim: EngineFactory) -> None:
    engine = await sim()
    async with httpx.AsyncClient(base_url=engine.url) as client:
        whole = (await client.post("/v1/chat/completions", json=chat("hi", max_tokens=5))).json()
        assert whole["object"] == "chat.completion"
        assert whole["model"] == MODEL
        (choice,) = whole["choices"]
        assert choice["message"]["role"] == "assistant"
        assert len(choice["message"]["content"]) == 5 * 4  # 4 characters a token
        assert choice["finish_reason"] == "length"
        usage = whole["usage"]
        assert usage["completion_tokens"] == 5
        assert usage["total_tokens"] == usage["prompt_tokens"] + 5
        assert usage["prompt_tokens_details"] == {"cached_tokens": 0}

        body = chat("hi", max_tokens=7, stream=True, stream_options={"include_usage": True})
        response = await client.post("/v1/chat/completions", json=body)
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = events(response.text)
        assert payloads[-1] == "[DONE]"
        chunks = [json.loads(p) for p in payloads[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert len(text) == 7 * 4
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        assert chunks[-1]["choices"] == []  # include_usage: a usage-only last chunk
        assert chunks[-1]["usage"]["completion_tokens"] == 7


async def test_completions_whole_and_streamed(sim: EngineFactory) -> None:
    engine = await sim(default_max_tokens=6)
    async with httpx.AsyncClient(base_url=engine.url) as client:
        whole = (await client.post("/v1/completions", json={"model": MODEL, "prompt": "x"})).json()
        assert whole["object"] == "text_completion"
        assert len(whole["choices"][0]["text"]) == 6 * 4
        assert whole["choices"][0]["finish_reason"] == "stop"  # no max_tokens: it stopped
        assert whole["usage"]["prompt_tokens"] == 1

        body = {"model": MODEL, "prompt": ["abcdefgh"], "max_tokens": 3, "stream": True}
        payloads = events((await client.post("/v1/completions", json=body)).text)
        assert payloads[-1] == "[DONE]"
        chunks = [json.loads(p) for p in payloads[:-1]]
        assert "".join(c["choices"][0]["text"] for c in chunks) != ""
        assert sum(len(c["choices"][0]["text"]) for c in chunks) == 3 * 4
        # Without include_usage the usage rides on the finishing chunk.
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert chunks[-1]["usage"]["prompt_tokens"] == 2

        ids = {"model": MODEL, "prompt": [11, 22, 33], "max_tokens": 1}
        answer = (await client.post("/v1/completions", json=ids)).json()
        assert answer["usage"]["prompt_tokens"] == 3  # one token per id


async def test_bad_requests_get_openai_errors(sim: EngineFactory) -> None:
    engine = await sim()
    async with httpx.AsyncClient(base_url=engine.url) as client:
        bad_json = await client.post("/v1/chat/completions", content=b"{not json")
        assert bad_json.status_code == 400
        assert bad_json.json()["error"]["type"] == "invalid_request_error"
        unknown = await client.post("/v1/chat/completions", json={**chat("x"), "model": "gpt-x"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
        for body in (
            {"model": MODEL, "messages": []},
            chat("x", max_tokens=0),
            chat("x", max_tokens="5"),
            chat("x", n=2),
            chat("x", max_tokens=10**9),
        ):
            answer = await client.post("/v1/chat/completions", json=body)
            assert answer.status_code == 400, body
            assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
        no_prompt = await client.post("/v1/completions", json={"model": MODEL})
        assert no_prompt.status_code == 400
        assert no_prompt.json()["error"]["param"] == "prompt"


async def test_provider_mode_wants_the_bearer_key(sim: EngineFactory) -> None:
    engine = await sim(api_key="sk-sim-test")
    async with httpx.AsyncClient(base_url=engine.url) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sk-sim-test"}):
            denied = await client.post("/v1/chat/completions", json=chat("x"), headers=headers)
            assert denied.status_code == 401
            assert denied.json()["error"]["code"] == "invalid_api_key"
            assert "sk-sim" not in denied.text
        assert (await client.get("/v1/models")).status_code == 401
        good = {"Authorization": "Bearer sk-sim-test"}
        ok = await client.post("/v1/chat/completions", json=chat("x", max_tokens=2), headers=good)
        assert ok.status_code == 200
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200


async def test_render_models_and_health(sim: EngineFactory) -> None:
    engine = await sim(models=(MODEL, "qwen-7b"))
    async with httpx.AsyncClient(base_url=engine.url) as client:
        short = await client.post(
            "/v1/completions/render", json={"model": MODEL, "prompt": "a" * 40}
        )
        longer = {"model": MODEL, "prompt": "a" * 40 + "b" * 20}
        (rendered,) = short.json()
        (rendered_longer,) = (await client.post("/v1/completions/render", json=longer)).json()
        assert rendered["request_id"].startswith("cmpl-")
        assert len(rendered["token_ids"]) == 10
        assert rendered_longer["token_ids"][:10] == rendered["token_ids"]  # same prefix
        chat_render = await client.post("/v1/chat/completions/render", json=chat("hello"))
        answer = chat_render.json()
        assert answer["model"] == MODEL and answer["request_id"].startswith("chatcmpl-")
        whole = (await client.post("/v1/chat/completions", json=chat("hello"))).json()
        assert len(answer["token_ids"]) == whole["usage"]["prompt_tokens"]

        models = await client.get("/v1/models")
        assert [m["id"] for m in models.json()["data"]] == [MODEL, "qwen-7b"]
        assert "model_path" not in models.text and "tokenizer_path" not in models.text
        assert (await client.get("/health")).status_code == 200
        qwen = {"model": "qwen-7b", "prompt": "x", "max_tokens": 1}
        assert (await client.post("/v1/completions", json=qwen)).status_code == 200


async def test_a_fleet_has_distinct_seeds_and_urls() -> None:
    config = SimEngineConfig(models=(MODEL,), seed=3, time_scale=0.0)
    async with SimEngines(3, config) as fleet:
        assert len(fleet) == 3
        assert len(set(fleet.urls)) == 3
        assert [engine.config.seed for engine in fleet] == [engine_seed(3, i) for i in range(3)]
        assert len({engine.config.seed for engine in fleet}) == 3
        async with httpx.AsyncClient() as client:
            for url in fleet.urls:
                assert (await client.get(f"{url}/health")).status_code == 200
        assert fleet[1].stats()["requests"] == 0


async def test_the_metrics_page_publishes_the_cache_size_as_vllm_does(sim: EngineFactory) -> None:
    """`vllm:cache_config_info` of the configured cache, read as a vLLM page is: blocks of
    `block_chars` characters hold `block_chars / 4` tokens."""
    engine = await sim(capacity_blocks=1536, block_chars=32)
    async with httpx.AsyncClient(base_url=engine.url) as client:
        page = (await client.get("/metrics")).text
    (info,) = parse_samples(page, ["vllm:cache_config_info"])["vllm:cache_config_info"]
    assert (info.labels["num_gpu_blocks"], info.labels["block_size"], info.value) == (
        "1536",
        "8",
        1.0,
    )
    snapshot = read_snapshot(page, engine_metrics("vllm"), scraped_at=0.0)
    assert snapshot.kv_capacity_tokens == 1536 * 8
