"""A Pick's foreground tokenization is bounded in time (`bounds.FOREGROUND_S`, on an
injected clock: no wall-clock timing here): on a huge cold prompt it stops within its bound
with the exact leading blocks, says its prediction is a floor (`PromptBlocks.bounded`), and
the rest is tokenized in the background, after which the same prompt gets every exact
block; a Pick past its time still finishes a short rest (a next turn's new text)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from kinference.bodies import Body
from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.requests.parse import parse_request
from kinference.tokenize import bounds
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.api.helpers import wait_until
from tests.tokenize.files import WORDS, precise_chat_policy, write_model

BS = 16
REF = "default/chat"


class Ticking:
    """A clock that moves `step` seconds at every reading."""

    def __init__(self, step: float = 0.001) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class HeldEverywhere:
    """Precise caches where some worker holds every block of any prompt (so only the
    Pick's bounds stop its walk), recording the rests handed over (`completed`)."""

    def __init__(self) -> None:
        self.completed_blocks: dict[int, tuple[BlockId, ...]] = {}
        self.done = asyncio.Event()

    def reach(self, refs: Sequence[str]) -> object:
        return len  # every block named so far is held

    def completed(self, ref: str, ticket: int, blocks: tuple[BlockId, ...]) -> None:
        assert ref == REF
        self.completed_blocks[ticket] = blocks
        self.done.set()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


@pytest.fixture
def caches() -> HeldEverywhere:
    return HeldEverywhere()


@pytest.fixture
def preparer(files: tuple[Path, Path], caches: HeldEverywhere) -> Iterator[PromptPreparer]:
    policy = precise_chat_policy(files, BS)
    made = PromptPreparer(policy, caches=caches, clock=Ticking())  # type: ignore[arg-type]
    yield made
    made.close()


def _words(rng: random.Random, chars: int) -> str:
    text = " ".join(rng.choice(WORDS) + rng.choice(["", ",", ".\n"]) for _ in range(chars // 4))
    return text[:chars]


def _full(files: tuple[Path, Path], messages: list[dict[str, str]]) -> tuple[BlockId, ...]:
    """The blocks of the whole prompt tokenized at once, as the engine sees it."""
    text = ChatTemplate.from_file(str(files[1])).render(messages)
    ids = Tokenizer.from_file(str(files[0])).encode(text, add_special_tokens=False).ids
    return tuple(identities(np.asarray(ids, dtype=np.uint32), BS))


async def _pick(preparer: PromptPreparer, messages: list[dict[str, str]]) -> PromptBlocks:
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    body = Body([raw], reserved=len(raw))
    query = await preparer.prepare(parse_request(body), body)
    assert query is not None and query.problem is None
    return query.blocks[REF]


def test_a_walk_stops_at_its_time_with_the_exact_leading_blocks(
    files: tuple[Path, Path],
) -> None:
    rng = random.Random(3)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), BS)
    messages = [{"role": "user", "content": _words(rng, 64 * 1024)}]
    work = tokenizer.start(PromptText(messages=messages))
    assert not isinstance(work, PromptBlocks)
    clock = Ticking()
    until = clock.now + 0.0015  # the first step, one reading before it is passed: two steps
    assert work.advance(len, None, until, clock=clock, step_pieces=2) is False
    partial = work.result(ticket=5)
    assert not partial.exact and partial.bounded and partial.ticket == 5
    assert 0 < work.encoded_chars <= 3 * 1024  # 1 piece, then 2 (the first ones are short)
    full = _full(files, messages)
    assert partial.blocks == full[: len(partial.blocks)]
    work.advance()  # the rest, as the background does it
    assert work.result().exact and work.result().blocks == full
    # Stopped where no worker holds the prompt: the prediction is whole, not a floor.
    again = tokenizer.start(PromptText(messages=[{"role": "user", "content": "x " * 3000}]))
    assert not isinstance(again, PromptBlocks)
    assert again.advance(lambda blocks: 0) is True
    assert not again.result().bounded


async def test_a_huge_cold_prompt_stops_in_time_and_finishes_in_the_background(
    files: tuple[Path, Path], caches: HeldEverywhere, preparer: PromptPreparer
) -> None:
    rng = random.Random(5)
    system = {"role": "system", "content": _words(rng, 256 * 1024)}
    messages = [system, {"role": "user", "content": _words(rng, 300)}]
    tokenizer = preparer._tokenizers.get(next(iter(preparer._plan.profiles.values())))
    before = tokenizer.cache.encoded_chars
    first = await _pick(preparer, messages)
    walked = tokenizer.cache.encoded_chars - before
    # Every block named was held, so only the bound stopped it: far short of the
    # characters' bound (FOREGROUND_CHARS, 128 KiB), after a few steps on the ticking clock.
    assert 0 < walked <= 8 * 1024 < bounds.FOREGROUND_CHARS
    assert not first.exact and first.bounded and first.ticket
    full = _full(files, messages)
    assert first.blocks == full[: len(first.blocks)]
    await asyncio.wait_for(caches.done.wait(), 60)  # the background went on to the end
    usable = full[: (len(full) * BS - 1) // BS]
    assert caches.completed_blocks[first.ticket][: len(usable)] == usable
    second = await _pick(preparer, messages)  # the same prompt: every block, exactly
    assert second.exact and not second.bounded and second.blocks == full


async def test_a_late_pick_still_finishes_a_short_rest(
    files: tuple[Path, Path], preparer: PromptPreparer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(8)
    history = [
        {"role": "system", "content": _words(rng, 8 * 1024)},
        {"role": "user", "content": _words(rng, 300)},
    ]
    preparer.foreground_s = 600.0
    assert (await _pick(preparer, history)).exact
    history += [
        {"role": "assistant", "content": _words(rng, 400)},
        {"role": "user", "content": _words(rng, 300)},
    ]
    monkeypatch.setattr(bounds, "INLINE_BODY_BYTES", 0)  # on the thread, not the loop
    preparer.foreground_s = 0.0  # past its time when it starts
    turn = await _pick(preparer, history)
    assert turn.exact and turn.blocks == _full(files, history)


async def test_a_rest_that_cannot_be_tokenized_lets_go_of_its_share_of_the_background(
    files: tuple[Path, Path],
    caches: HeldEverywhere,
    preparer: PromptPreparer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A lone surrogate ("\ud800" in the JSON) past the part a Pick tokenizes: its rest fails
    # on the thread. The Pick is answered; no traceback is logged for a client's text, and
    # the rest's text no longer counts against the background's bound, so later prompts'
    # rests still run (before: every failed rest's characters were held for good).
    rng = random.Random(11)
    bad = [{"role": "user", "content": _words(rng, 256 * 1024) + "\ud800"}]
    good = [{"role": "user", "content": _words(rng, 256 * 1024)}]
    monkeypatch.setattr(bounds, "MAX_LATER_CHARS", 300 * 1024)  # room for one rest
    first = await _pick(preparer, bad)
    assert first.bounded and first.ticket
    await wait_until(lambda: preparer._thread.idle, 60, "the failing rest's end")
    second = await _pick(preparer, good)
    assert second.bounded and second.ticket
    await asyncio.wait_for(caches.done.wait(), 60)
    assert second.ticket in caches.completed_blocks
    assert first.ticket not in caches.completed_blocks
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
