"""h171: a crowd of Picks through PromptPreparer.prepare at once (one conversation's turns,
other conversations on one system prompt, workers holding a random prefix). Every Pick's
blocks must lead the whole prompt's and every rest handed to `completed` must be the whole
prompt's usable blocks. Usage: PYTHONPATH=. python docs/h171/crowd.py SEEDS"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

import numpy as np
from fuzz import BS, FILES, HF, TEMPLATE, words

from kinference.bodies import Body
from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from tests.tokenize.files import precise_chat_policy


def message(rng: random.Random, role: str, most: int) -> dict[str, str]:
    return {"role": role, "content": words(rng, rng.randint(10, most))}


class Caches:
    """Every worker holds the same `held` leading blocks; rests are recorded."""

    def __init__(self, held: int) -> None:
        self.held, self.done = held, dict[int, tuple[BlockId, ...]]()

    def reach(self, refs: object) -> Any:
        return lambda blocks: min(len(blocks), self.held)

    def completed(self, ref: str, ticket: int, blocks: tuple[BlockId, ...]) -> None:
        self.done[ticket] = blocks


async def pick(preparer: PromptPreparer, messages: list[Any]) -> PromptBlocks:
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    body = Body([raw], reserved=len(raw))
    query = await preparer.prepare(parse_request(body), body)
    assert query is not None and query.problem is None, query
    return query.blocks["default/chat"]


def whole(messages: list[Any]) -> tuple[list[BlockId], int]:
    ids = HF.encode(TEMPLATE.render(messages), add_special_tokens=False).ids
    return identities(np.asarray(ids, dtype=np.uint32), BS), len(ids)


def prompts(rng: random.Random) -> list[list[Any]]:
    system = {"role": "system", "content": words(rng, rng.choice([300, 5000, 40000]))}
    turns, messages = [], [system, message(rng, "user", 500)]
    for _ in range(4):
        turns.append(list(messages))
        messages = [*messages, message(rng, "assistant", 3000), message(rng, "user", 3000)]
    return turns + [[system, message(rng, "user", 5000)] for _ in range(4)]


async def wave(
    rng: random.Random, preparer: PromptPreparer, caches: Caches, pool: list[list[Any]]
) -> tuple[int, int]:
    """One crowd: (problems, rests checked)."""
    chosen = [rng.choice(pool) for _ in range(rng.randint(5, 25))]
    results = await asyncio.gather(*(pick(preparer, m) for m in chosen))
    expected = [whole(m) for m in chosen]
    bad = sum(
        list(r.blocks) != blocks[: len(r.blocks)] or (r.exact and r.tokens != tokens)
        for r, (blocks, tokens) in zip(results, expected, strict=True)
    )
    for _ in range(500):  # the rests, after the answers
        if all(r.exact or not r.ticket or r.ticket in caches.done for r in results):
            break
        await asyncio.sleep(0.01)
    lazy = [(r, e) for r, e in zip(results, expected, strict=True) if r.ticket and not r.exact]
    for r, (blocks, tokens) in lazy:
        got = caches.done.get(r.ticket)
        bad += got is None or list(got) != blocks[: max(tokens - 1, 0) // BS]
    return bad, len(lazy)


async def run(seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    caches = Caches(rng.choice([0, 3, 50, 10**6]))
    preparer = PromptPreparer(precise_chat_policy(FILES, BS), caches=caches)  # type: ignore[arg-type]
    await asyncio.gather(*map(asyncio.wrap_future, preparer.warm()))
    pool = prompts(rng)
    bad = rests = 0
    for _ in range(3):
        found, checked = await wave(rng, preparer, caches, pool)
        bad, rests = bad + found, rests + checked
    preparer.close()
    return bad, rests


async def main(seeds: int) -> None:
    totals = [await run(seed) for seed in range(seeds)]
    print("bad", sum(b for b, _ in totals), "rests", sum(r for _, r in totals))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
