"""Precise prefix mode end to end: the real server, engines' publishers on free ports (vLLM's
encoding), Picks going where the events say the prompt is cached, and a worker whose stream
breaks falling back to the approximate index with a DEGRADED reason."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kinference.config import parse_policy
from kinference.kvcache.blocks import identities
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import chat_body, wait_until
from tests.conftest import MODEL, PickerFactory, RunningPicker
from tests.kvevents import vllm_format as vllm
from tests.tokenize.files import write_model

BS = 4
PROMPT = "the quick brown fox jumps over the lazy dog " * 6


@dataclass
class Engines:
    publishers: list[vllm.Publisher]
    endpoints: list[str]
    tokenizer: PromptTokenizer
    next_hash: int = 1

    def tokens(self, content: str) -> list[int]:
        messages = [{"role": "user", "content": content}]
        return self.tokenizer.token_ids(PromptText(messages=messages)).tolist()

    async def store(self, engine: int, tokens: list[int], **publish: object) -> int:
        blocks = len(tokens) // BS
        hashes = list(range(self.next_hash, self.next_hash + blocks))  # engine-chosen names
        self.next_hash += blocks
        event = vllm.stored(hashes, tokens[: blocks * BS], block_size=BS)
        return await self.publishers[engine].publish(vllm.encode([event]), **publish)  # type: ignore[arg-type]


def policy_text(
    engines: list[vllm.Publisher], tokenizer: Path, template: Path, replay: bool
) -> str:
    endpoints = ", ".join(f'"127.0.0.1:{p.port}"' for p in engines)
    replay_line = '      replay: "tcp://{host}:{port+1}"\n' if replay else ""
    return f"""
pools:
  - name: chat
    endpoints: [{endpoints}]
    models: ["{MODEL}"]
    prefix:
      mode: precise
      events: "tcp://{{host}}:{{port}}"
{replay_line}      tokenizer: {tokenizer}
      chat_template: {template}
      block_size: {BS}
      stall_after_s: 30
      resync_after_s: 30
"""


@pytest.fixture(params=[False])
async def engines(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Engines]:
    tokenizer, template = write_model(tmp_path / "model")
    publishers = [vllm.Publisher(replay=request.param), vllm.Publisher(replay=request.param)]
    yield Engines(
        publishers,
        [f"127.0.0.1:{p.port}" for p in publishers],
        PromptTokenizer.from_files(str(tokenizer), str(template), BS),
    )
    for publisher in publishers:
        await publisher.close()


async def start(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path, replay: bool = False
) -> RunningPicker:
    files = tmp_path / "model"
    text = policy_text(
        engines.publishers, files / "tokenizer.json", files / "tokenizer_config.json", replay
    )
    picker = await start_picker(parse_policy(text))
    for publisher in engines.publishers:
        await publisher.subscribed()
        if replay:  # its join asked for the buffer: later batches are live ones
            await asyncio.wait_for(publisher.replay_answered(), 10)
    return picker


def precise(picker: RunningPicker, endpoint: str) -> bool:
    labels = {"pool": "default/chat", "endpoint": endpoint, "state": "precise"}
    return picker.metric("kinference_prefix_precise_worker", labels) == 1.0


async def pick(picker: RunningPicker, content: str) -> pb.PickResponse:
    pushed = await picker.client.push([chat_body(content=content)])
    response = await picker.client.pick(pushed.stream_id)
    assert response.WhichOneof("destination") == "local", response
    return response


async def test_picks_follow_the_engines_events(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    tokens = engines.tokens(PROMPT)
    await engines.store(0, engines.tokens("hello world") * 3)  # engine 0: something else
    first = engines.next_hash
    await engines.store(1, tokens)  # engine 1: this very prompt
    for endpoint in engines.endpoints:
        await wait_until(lambda e=endpoint: precise(picker, e), what=f"{endpoint} precise")
    for _ in range(4):
        response = await pick(picker, PROMPT)
        assert response.outcome == pb.PickResponse.OK, response.reason
        assert response.local.endpoint == engines.endpoints[1]
        await picker.client.pull_all(response.response_id)
        predicted = len(tokens) // BS * BS
        await picker.client.final_token(
            response.response_id, model=MODEL, prompt_tokens=len(tokens),
            completion_tokens=1, cached_tokens=predicted,
        )  # fmt: skip
    exact = picker.metric("kinference_prefix_precise_error_tokens_bucket", {"le": "0.0"})
    assert exact == 4.0
    # The engine evicts the blocks: the match goes with them.
    hashes = list(range(first, first + len(tokens) // BS))
    await engines.publishers[1].publish(vllm.encode([vllm.BlockRemoved(hashes, "GPU")]))
    caches = picker.app.precise.pools["default/chat"]
    await wait_until(lambda: len(caches.index) == len(engines.tokens("hello world") * 3) // BS)
    blocks = identities(tokens, BS)
    assert caches.index.longest(blocks, caches.trust) == dict.fromkeys(caches.trust, 0)


async def test_the_tokenizer_is_warm_before_the_picker_serves(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    """Its load and first calls (a chat prompt's render, cuts and marks) are done when the
    picker reports SERVING, not paid by the first Picks."""
    picker = await start(start_picker, engines, tmp_path)
    preparer = picker.app.preparer
    assert preparer is not None
    (tokenizer,) = preparer._tokenizers.values()
    assert len(tokenizer.marks) > 0 and len(tokenizer.cache) > 0


async def test_a_sequence_gap_degrades_to_the_approximate_index(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    tokens = engines.tokens(PROMPT)
    await engines.store(0, tokens)
    await engines.store(1, engines.tokens("hello"))
    for endpoint in engines.endpoints:
        await wait_until(lambda e=endpoint: precise(picker, e))
    await engines.store(1, engines.tokens("lost"), drop=True)  # seq 1 never arrives
    await engines.store(1, engines.tokens("after"))
    gap = {"pool": "default/chat", "endpoint": engines.endpoints[1], "state": "gap"}
    await wait_until(lambda: picker.metric("kinference_prefix_precise_worker", gap) == 1.0)
    response = await pick(picker, PROMPT)
    assert response.outcome == pb.PickResponse.DEGRADED
    assert f"precise prefix cache off for {engines.endpoints[1]} (sequence gap)" in response.reason
    assert response.local.endpoint == engines.endpoints[0]  # still the precise match
    counted = {"pool": "default/chat", "outcome": "gap"}
    assert picker.metric("kinference_kv_events_messages_total", counted) == 1.0


async def test_a_restarted_engine_is_forgotten(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    tokens = engines.tokens(PROMPT)
    await engines.store(0, tokens)
    await engines.store(0, engines.tokens("more"))
    caches = picker.app.precise.pools["default/chat"]
    slot = picker.app.table.slot(engines.endpoints[0])
    await wait_until(lambda: caches.index.blocks(slot) > len(tokens) // BS)
    await engines.store(0, engines.tokens("hello world"), seq=0)  # a new engine process
    await wait_until(lambda: caches.index.blocks(slot) == len(engines.tokens("hello world")) // BS)
    assert precise(picker, engines.endpoints[0])


async def test_malformed_batches_are_counted_and_distrusted(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    await engines.store(0, engines.tokens(PROMPT))
    await engines.publishers[0].publish(b"\xc1 not msgpack")
    malformed = {"pool": "default/chat", "outcome": "malformed"}
    await wait_until(lambda: picker.metric("kinference_kv_events_messages_total", malformed) > 0)
    state = {"pool": "default/chat", "endpoint": engines.endpoints[0], "state": "malformed"}
    assert picker.metric("kinference_prefix_precise_worker", state) == 1.0


async def test_untokenizable_prompt_is_routed_approximately(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    pushed = await picker.client.push([chat_body(messages=[{"role": "user"}])])
    response = await picker.client.pick(pushed.stream_id)
    assert response.outcome == pb.PickResponse.DEGRADED
    assert "prompt not tokenized" in response.reason


@pytest.mark.parametrize("engines", [True], indirect=True)
async def test_missed_batches_are_replayed(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path, replay=True)
    tokens = engines.tokens(PROMPT)
    await engines.store(1, engines.tokens("hello"))
    await engines.store(1, tokens, drop=True)  # lost on the PUB socket, kept for replay
    await engines.store(1, engines.tokens("after"))
    replayed = {"pool": "default/chat", "outcome": "replayed"}
    await wait_until(lambda: picker.metric("kinference_kv_events_messages_total", replayed) == 1)
    assert precise(picker, engines.endpoints[1])
    await engines.store(0, engines.tokens("other"))
    await wait_until(lambda: precise(picker, engines.endpoints[0]))
    response = await pick(picker, PROMPT)
    assert response.outcome == pb.PickResponse.OK, response.reason
    assert response.local.endpoint == engines.endpoints[1]  # the replayed batch counted


@pytest.mark.parametrize("engines", [True], indirect=True)
async def test_what_engines_published_before_the_picker_subscribed_is_replayed(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    """A PUB socket drops what it sends before a subscriber joins (a replica restarted or
    scaled out while the engines hold warm caches): with a replay socket the replica asks
    for everything it buffers on subscribing, and knows the caches before any new batch."""
    await engines.store(0, engines.tokens("other"))  # no subscriber yet: only buffered
    await engines.store(1, engines.tokens(PROMPT))
    picker = await start(start_picker, engines, tmp_path, replay=True)
    for endpoint in engines.endpoints:
        await wait_until(lambda e=endpoint: precise(picker, e), what=f"{endpoint} precise")
    response = await pick(picker, PROMPT)
    assert response.outcome == pb.PickResponse.OK, response.reason
    assert response.local.endpoint == engines.endpoints[1]


async def test_huge_prompts_are_not_tokenized(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    from kinference.tokenize.bounds import MAX_BODY_BYTES

    picker = await start(start_picker, engines, tmp_path)
    body = chat_body(content="fox " * (MAX_BODY_BYTES // 4 + 10))
    pushed = await picker.client.push(
        [body[i : i + (1 << 20)] for i in range(0, len(body), 1 << 20)]
    )
    response = await picker.client.pick(pushed.stream_id)
    assert response.outcome == pb.PickResponse.DEGRADED
    assert "body over" in response.reason


async def test_a_publisher_silent_after_serving_is_stalled(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    await engines.store(0, engines.tokens("hello"))
    await engines.store(1, engines.tokens("world"))
    for endpoint in engines.endpoints:
        await wait_until(lambda e=endpoint: precise(picker, e))
    caches = picker.app.precise.pools["default/chat"]
    for trust in caches.trust.values():
        trust.stall_after_s = 0.2
    aborted = await pick(picker, PROMPT)
    await picker.client.abort(aborted.response_id)  # never dispatched: not a stall
    served = await pick(picker, PROMPT + "more")
    await picker.client.pull_all(served.response_id)
    await picker.client.first_token(served.response_id, ttft_ms=5)
    stalled = {"pool": "default/chat", "endpoint": served.local.endpoint, "state": "stalled"}
    await wait_until(lambda: picker.metric("kinference_prefix_precise_worker", stalled) == 1.0)
    other = engines.endpoints[1 - engines.endpoints.index(served.local.endpoint)]
    assert precise(picker, other)  # its only request, if any, was aborted


async def test_policy_reload_starts_and_stops_subscriptions(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    picker = await start(start_picker, engines, tmp_path)
    app = picker.app
    precise_policy = app.policy
    approximate = parse_policy(
        f'pools:\n  - name: chat\n    endpoints: ["{engines.endpoints[0]}"]\n'
        f'    models: ["{MODEL}"]\n'
    )
    app.apply_policy(approximate)
    assert app.precise.pools == {}
    assert app.precise_events is not None and app.precise_events.subscriber is not None
    assert app.precise_events.subscriber.feeds == {}
    pushed = await picker.client.push([chat_body(content=PROMPT)])
    response = await picker.client.pick(pushed.stream_id)
    assert response.outcome == pb.PickResponse.OK  # not tokenized, not degraded
    app.apply_policy(precise_policy)
    assert set(app.precise.pools) == {"default/chat"}
    assert len(app.precise_events.subscriber.feeds) == 2
    await engines.publishers[0].subscribed()  # the new subscription
    await engines.store(0, engines.tokens(PROMPT))
    await wait_until(lambda: precise(picker, engines.endpoints[0]))


async def test_a_long_prompt_is_tokenized_as_far_as_a_worker_holds_it(
    start_picker: PickerFactory, engines: Engines, tmp_path: Path
) -> None:
    """Engine 1 holds the first part of a long prompt: the Pick goes there predicting that
    part (tokenized no further than a block nobody holds), and once the rest is tokenized
    after the Pick, all its blocks are pending on engine 1."""
    picker = await start(start_picker, engines, tmp_path)
    assert picker.app.preparer is not None
    picker.app.preparer.foreground_s = 600.0  # the walk's stop is the reach's, not time's
    content = " ".join(f"the fox {i} jumps" for i in range(2000))  # ~35 KiB
    tokens = engines.tokens(content)
    held = len(tokens) // BS // 4 * BS  # the first quarter
    await engines.store(0, engines.tokens("hello world") * 3)
    await engines.store(1, tokens[:held])
    for endpoint in engines.endpoints:
        await wait_until(lambda e=endpoint: precise(picker, e), what=f"{endpoint} precise")
    response = await pick(picker, content)
    assert response.outcome == pb.PickResponse.OK, response.reason
    assert response.local.endpoint == engines.endpoints[1]
    await picker.client.pull_all(response.response_id)
    await picker.client.final_token(
        response.response_id, model=MODEL, prompt_tokens=len(tokens),
        completion_tokens=1, cached_tokens=held,
    )  # fmt: skip
    assert picker.metric("kinference_prefix_precise_error_tokens_bucket", {"le": "0.0"}) == 1.0
    caches = picker.app.precise.pools["default/chat"]
    slot = picker.app.table.slot(engines.endpoints[1])
    last = identities(tokens, BS)[(len(tokens) - 1) // BS - 1]
    await wait_until(lambda: last in caches.pending.get(slot, {}), what="the rest pending")
