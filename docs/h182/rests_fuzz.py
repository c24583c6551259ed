"""Background rests of lazily tokenized prompts: does every rest that ends, fails, is
dropped or is abandoned let go of exactly what it took of `MAX_LATER_CHARS`, once?

    python -m docs.h182.rests_fuzz SECONDS SEED

Each round: a `PromptPreparer` on the tiny model (`loadtest.tiny_model`) in precise mode,
with a random background bound (`MAX_LATER_CHARS` 64 KiB-32 MiB), queue bound
(`worker.MAX_LATER` 2-256) and foreground time (0 or the default); a crowd of 4-40
concurrent Picks of chat prompts of 100 B-600 KiB, some holding lone surrogates
(`\\ud800`, `\\udfff`, at the start, the middle or the end; `\\ud800\\udc00`, which JSON
joins into one valid character), some cancelled by their caller after 0-5 loop steps;
the Picks' workers hold every block (the walk stops at its bounds: the most rests) or
none; a tokenizer bug injected in 2 % of background slices. After the thread is idle:
the background's count must be 0; every rest handed over must be the whole prompt's
blocks as one encode gives them (no surrogate: `ok`); no ERROR logged but the injected
bugs'; the thread still serves a Pick.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from kinference.bodies import Body
from kinference.kvcache.blocks import BlockId, identities
from kinference.requests.parse import parse_request
from kinference.tokenize import lazy, prepare, worker
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.template import ChatTemplate
from loadtest.tiny_model import WORDS, write_model
from tests.tokenize.files import precise_chat_policy

BS = 16
REF = "default/chat"
SIZES = [100, 3_000, 40_000, 200_000, 600_000]
BAD = ["\ud800", "\udfff", "\ud800\udc00"]


class Caches:
    """Precise caches stand-in: some worker holds every block, or none; records rests."""

    def __init__(self, held: bool) -> None:
        self.held = held
        self.rests: dict[int, tuple[BlockId, ...]] = {}

    def reach(self, refs: Any) -> Any:
        return len if self.held else (lambda blocks: 0)

    def completed(self, ref: str, ticket: int, blocks: tuple[BlockId, ...]) -> None:
        assert ticket not in self.rests, "a rest handed over twice"
        self.rests[ticket] = blocks


class Bugs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def words(rng: random.Random, chars: int) -> str:
    text = " ".join(
        rng.choice(WORDS) + rng.choice(["", ",", ".\n", "\n\n   "]) for _ in range(chars // 4)
    )
    return text[:chars]


def content(rng: random.Random) -> tuple[str, bool]:
    """A message's text, and whether it has a lone surrogate after JSON's round trip."""
    text = words(rng, rng.choice(SIZES))
    if rng.random() < 0.35:
        bad = rng.choice(BAD)
        at = rng.choice([0, len(text) // 2, len(text)])
        return text[:at] + bad + text[at:], bad != "\ud800\udc00"
    return text, False


class Round:
    def __init__(self, rng: random.Random, files: tuple[Path, Path]) -> None:
        self.rng, self.files = rng, files
        self.caches = Caches(held=rng.random() < 0.7)
        policy = precise_chat_policy(files, BS)
        foreground = rng.choice([0.0, prepare.FOREGROUND_S])
        self.preparer = PromptPreparer(policy, caches=self.caches, foreground_s=foreground)  # type: ignore[arg-type]
        self.prompts: dict[int, list[dict[str, str]]] = {}  # ticket -> its messages
        self.cancelled = self.problems = self.answered = 0

    async def pick(self) -> None:
        rng = self.rng
        messages, bad = [], False
        for role in rng.choice(
            [["user"], ["system", "user"], ["system", "user", "assistant", "user"]]
        ):
            text, lone = content(rng)
            messages.append({"role": role, "content": text})
            bad |= lone
        raw = json.dumps({"model": "m", "messages": messages}).encode()
        body = Body([raw], reserved=len(raw))
        request = parse_request(body)
        task = asyncio.ensure_future(self.preparer.prepare(request, body))
        if rng.random() < 0.2:
            for _ in range(rng.randrange(0, 6)):
                await asyncio.sleep(0)
            task.cancel()
        try:
            query = await task
        except asyncio.CancelledError:
            self.cancelled += 1
            return
        assert query is not None
        if query.problem is not None:
            self.problems += 1
            return
        self.answered += 1
        blocks = query.blocks[REF]
        if blocks.ticket and not bad:
            self.prompts[blocks.ticket] = json.loads(raw)["messages"]

    def full(self, messages: list[dict[str, str]]) -> tuple[BlockId, ...]:
        text = ChatTemplate.from_file(str(self.files[1])).render(messages)
        ids = Tokenizer.from_file(str(self.files[0])).encode(text, add_special_tokens=False).ids
        usable = max(len(ids) - 1, 0) // BS
        return tuple(identities(np.asarray(ids, dtype=np.uint32), BS))[:usable]


async def one_round(rng: random.Random, files: tuple[Path, Path]) -> dict[str, int]:
    prepare.MAX_LATER_CHARS = rng.choice([64 * 1024, 1 << 20, 32 << 20])
    worker.MAX_LATER = rng.choice([2, 16, 256])
    advance, bugs = lazy.Tokenization.advance, [0]

    def buggy(self: Any, *args: Any, **kwargs: Any) -> Any:
        background = len(args) >= 2 and args[0] is None and args[1] == prepare.LATER_SLICE_CHARS
        if background and rng.random() < 0.02:
            bugs[0] += 1
            raise RuntimeError("injected tokenizer bug")
        return advance(self, *args, **kwargs)

    lazy.Tokenization.advance = buggy  # type: ignore[method-assign]
    found = Bugs()
    logging.getLogger("kinference").addHandler(found)
    run = Round(rng, files)
    try:
        await asyncio.gather(*(run.pick() for _ in range(rng.randrange(4, 40))))
        thread = run.preparer._thread
        end = time.monotonic() + 300
        while not thread.idle and time.monotonic() < end:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the last rests' call_soon_threadsafe land
        assert thread.idle, "the thread never went idle"
        held = run.preparer._later_chars
        assert held == 0, f"the background still counts {held} characters"
        checked = 0
        for ticket, messages in run.prompts.items():
            if ticket in run.caches.rests:
                assert run.caches.rests[ticket] == run.full(messages), f"rest {ticket} wrong"
                checked += 1
        errors = [r for r in found.records if "injected" not in str(r.exc_info)]
        assert not errors, [r.getMessage() for r in errors]
        alive = Round(random.Random(0), files)
        alive.preparer = run.preparer
        await alive.pick()  # the thread still serves
    finally:
        lazy.Tokenization.advance = advance  # type: ignore[method-assign]
        logging.getLogger("kinference").removeHandler(found)
        run.preparer.close()
    return {
        "picks": run.answered + run.problems + run.cancelled, "problems": run.problems,
        "cancelled": run.cancelled, "rests": len(run.caches.rests), "checked": checked,
        "bugs": bugs[0], "untaken": len(run.prompts) - checked,
    }  # fmt: skip


def main() -> None:
    seconds, seed = float(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    files = write_model(Path(tempfile.mkdtemp(prefix="h182-model-")))
    totals: dict[str, int] = {}
    end, rounds = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for key, value in asyncio.run(one_round(rng, files)).items():
            totals[key] = totals.get(key, 0) + value
        rounds += 1
    print(f"seed {seed}: {rounds} rounds, {totals}: ok")


if __name__ == "__main__":
    main()
