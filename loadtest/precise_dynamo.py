"""The routing bench's Dynamo workload replayed through a precise pool's tokenization.

`bench_precise_cpu --workloads dynamo` (and tests) use it: the bodies a `bench_routing
--regime dynamo` run sends, in send order (`loadtest.routing_bench`: shared system prompts,
multi-turn chats, questions about long documents), each earlier reply written as Dynamo's
mocker writes it (its token ids in decimal, each after a space: docs/benchmarks.md, h172),
replayed one Pick at a time through `PromptPreparer.prepare` on a `PreciseCaches` pool of 4
workers; each Pick's blocks are checked against the whole prompt's (tokenized at once).
After each Pick the chosen worker (longest match, else round-robin) stores the prompt's
blocks as an engine announces them (`kv_publisher.EngineBlocks`, not timed) and the
prompt's rest is tokenized in the background before the next Pick (3 req/s leaves ~300 ms
between them).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches
from kinference.kvcache.precise import PreciseCaches
from kinference.kvevents.wire import decode_batch
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from loadtest.kv_publisher import EngineBlocks
from loadtest.routing_bench.replay import request_body
from loadtest.routing_bench.workload import MODEL, BenchSpec, conversations

MODEL_DIR = Path("/tmp/dynamo-model")  # the mocker's model (../shared/tools/dynamo)
BLOCK, SLOTS, VOCAB = 16, 4, 2000  # the routing bench's mocker: block size, engines, vocab
DRAIN_S = 1.0  # the background rest waited for, at most, between two Picks


def bodies(seed: int, rate: float, requests: int) -> list[tuple[str, bytes]]:
    """(kind, body) in send order; kind: chat-first, chat-next, doc or shared."""
    timed = []
    for conversation in conversations(BenchSpec(), requests, rate, seed):
        at, replies = conversation.arrival_s, random.Random(seed * 7919 + conversation.index)
        written: list[str] = []
        for index, turn in enumerate(conversation.turns):
            if index:
                at += 1.0 + conversation.think_s[index - 1]
                tokens = conversation.turns[index - 1].completion_tokens
                written.append("".join(f" {replies.randrange(VOCAB)}" for _ in range(tokens)))
            kind = conversation.kind
            if kind == "chat":
                kind = "chat-first" if index == 0 else "chat-next"
            timed.append((at, conversation.index, index, kind, request_body(turn, written)))
    timed.sort()
    return [(kind, body) for *_, kind, body in timed]


def policy_yaml(model_dir: Path) -> str:
    endpoints = ", ".join(f"127.0.0.1:{9000 + i}" for i in range(SLOTS))
    return f"""
pools:
- namespace: default
  name: sim
  endpoints: [{endpoints}]
  models: [{MODEL}]
  engine: vllm
  prefix:
    mode: precise
    events: "tcp://{{host}}:{{port+1000}}"
    tokenizer: {model_dir / "tokenizer.json"}
    chat_template: {model_dir / "tokenizer_config.json"}
    block_size: {BLOCK}
"""


@dataclass(frozen=True, slots=True)
class Picked:
    """One Pick's tokenization: its kind, the blocks it gave, the whole prompt's tokens."""

    kind: str
    blocks: PromptBlocks
    tokens: list[int]


class Clocks:
    """CPU seconds by (kind, part): the loop thread's and the tokenizer thread's."""

    def __init__(self) -> None:
        self.seconds: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.thread = 0  # the tokenizer thread's CPU clock

    def now(self, part: str) -> float:
        # At Pick: both threads (the loop's share, and the thread's if it was handed
        # over); the rest: the tokenizer thread alone (the loop only polls meanwhile).
        thread = time.clock_gettime(self.thread)
        return thread if part == "rest" else thread + time.thread_time()

    async def timed(self, kind: str, part: str, work: Awaitable[Any]) -> Any:
        started = self.now(part)
        try:
            return await work
        finally:
            self.seconds[kind, part] += self.now(part) - started


async def replay(
    requests: list[tuple[str, bytes]], model_dir: Path, clocks: Clocks
) -> list[Picked]:
    """Each Pick's prompt through `prepare` (timed "at Pick"), the wait for its background
    rest (timed "rest"), its engine's events applied (not timed)."""
    policy = parse_policy(policy_yaml(model_dir))
    caches = PreciseCaches()
    ref = policy.pools[0].ref
    pool = caches.pools[ref] = PoolCaches(ref, BLOCK)
    preparer = PromptPreparer(policy, caches=caches)
    await preparer.warmed()
    assert preparer._thread._thread.ident is not None
    clocks.thread = time.pthread_getcpuclockid(preparer._thread._thread.ident)
    whole = PromptTokenizer.from_files(
        str(model_dir / "tokenizer.json"), str(model_dir / "tokenizer_config.json"), BLOCK
    )
    held: list[set[int]] = [set() for _ in range(SLOTS)]
    picked = []
    try:
        for number, (kind, raw) in enumerate(requests):
            body = Body([raw], reserved=len(raw))
            request = parse_request(body)
            query = await clocks.timed(kind, "at Pick", preparer.prepare(request, body))
            assert query is not None and query.problem is None, query
            blocks = query.blocks[ref]
            longest = pool.index.longest(blocks.blocks, range(SLOTS))
            slot = max(range(SLOTS), key=lambda s: (longest.get(s, 0), s == number % SLOTS))
            caches.routed(ref, slot, longest.get(slot, 0), blocks, key=number)
            text = PromptText(messages=json.loads(raw)["messages"])
            ids = whole.token_ids(text)
            named = identities(ids, BLOCK)[: len(blocks.blocks)]
            assert list(blocks.blocks) == named, f"Pick {number}: not the whole prompt's blocks"
            tokens = ids.tolist()
            picked.append(Picked(kind, blocks, tokens))
            engine = EngineBlocks(tokens, BLOCK)
            start = 0
            while start < len(engine.hashes) and engine.hashes[start] in held[slot]:
                start += 1
            held[slot].update(engine.hashes[start:])
            for payload in engine.payloads(start):
                pool.apply(slot, decode_batch(payload).events)
            await clocks.timed(kind, "rest", _drained(preparer))
    finally:
        preparer.close()
    return picked


async def _drained(preparer: PromptPreparer) -> None:
    """Until the tokenizer thread has nothing left (its rest done), `DRAIN_S` at most."""
    thread, deadline = preparer._thread, time.monotonic() + DRAIN_S
    await asyncio.sleep(0)
    while not thread.idle and time.monotonic() < deadline:  # noqa: ASYNC110 (no event)
        await asyncio.sleep(0.002)
    await asyncio.sleep(0)
