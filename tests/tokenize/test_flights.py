"""A Pick leaves the text it shares with a tokenization whose rest is under way to that rest
(`tokenize/flights.py`, docs/benchmarks.md h176): 16 conversations' first turns on one new
long system prompt no longer each tokenize the next few KiB of it on their own path. Their
Picks' blocks are the whole prompt's leading ones, their predictions floors; their rests
give exactly a whole tokenization's tokens and blocks, having tokenized the shared text
once between them; a text that diverges inside the shared part, or a first one whose rest
is dropped (or whose Pick was past its deadline), still ends exact. (On the code before, a
follower walked the shared text until its bound.)"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from kinference.bodies import Body
from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.requests.parse import parse_request
from kinference.tokenize.flights import AHEAD_CHARS, Flights
from kinference.tokenize.lazy import Tokenization
from kinference.tokenize.pieces import FIRST_PIECES_CHARS
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import precise_chat_policy, write_model
from tests.tokenize.test_foreground import REF, HeldEverywhere, Ticking
from tests.tokenize.test_pick_rest import _words

BS = 16


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _first_turn(system: str, rng: random.Random) -> list[Any]:
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": _words(rng, 300)},
    ]


def _whole(files: tuple[Path, Path], messages: list[Any]) -> tuple[list[int], list[BlockId]]:
    text = ChatTemplate.from_file(str(files[1])).render(messages)
    ids = Tokenizer.from_file(str(files[0])).encode(text, add_special_tokens=False).ids
    return list(ids), identities(np.asarray(ids, dtype=np.uint32), BS)


def _held(blocks: Sequence[BlockId]) -> int:
    return len(blocks)  # some worker holds every block (the first turn's engine stored it)


def _start(tokenizer: PromptTokenizer, messages: list[Any]) -> Tokenization:
    work = tokenizer.start(PromptText(messages=messages))
    assert isinstance(work, Tokenization)
    return work


def _flying(files: tuple[Path, Path], seed: int) -> tuple[Any, ...]:
    """A tokenizer, a new 24 KiB system prompt and a first turn on it whose Pick stopped
    (bounded) and whose rest is queued (in flight), with the test's random source."""
    rng = random.Random(seed)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), BS)
    system = _words(rng, 24_000)
    first = _first_turn(system, rng)
    leader = _start(tokenizer, first)
    leader.advance(_held, 300, defer=True)
    leader.fly()
    return rng, tokenizer, system, first, leader


def _exact(work: Tokenization, files: tuple[Path, Path], messages: list[Any]) -> None:
    ids, blocks = _whole(files, messages)
    done = work.result()
    assert done.exact and done.tokens == len(ids) and list(done.blocks) == blocks
    assert work.ids().tolist() == ids


def test_followers_leave_the_shared_system_prompt_to_the_first_ones_rest(
    files: tuple[Path, Path],
) -> None:
    rng, tokenizer, system, first, leader = _flying(files, 1)
    followers = [_first_turn(system, rng) for _ in range(3)]
    works = []
    for messages in followers:
        work = _start(tokenizer, messages)
        resumed = work.position  # the furthest mark left into its text
        assert work.advance(_held, None, defer=True) is False  # no bound but the flight's
        assert work.deferred and not work.reached
        # One short piece past the furthest mark (as a text's first step), no further.
        assert work.encoded_chars <= FIRST_PIECES_CHARS[0] + 64
        assert 0 < work.position - resumed <= FIRST_PIECES_CHARS[0] + 64
        partial = work.result(ticket=1)
        assert partial.bounded and not partial.exact
        assert list(partial.blocks) == _whole(files, messages)[1][: len(partial.blocks)]
        work.fly()
        works.append(work)
    assert tokenizer.flights.deferred == 3
    while not leader.done:  # the leader's rest, in slices, the followers' in between
        leader.advance(None, 2048)
        for work in works:
            work.advance(None, 2048)
    leader.fly(False)
    for work, messages in zip(works, followers, strict=True):
        work.advance()
        work.fly(False)
        _exact(work, files, messages)
    _exact(leader, files, first)
    # The shared system prompt tokenized once between them (the rests relay through each
    # other's marks), then each one's own message (and the piece before it, checked anew).
    encoded = sum(work.encoded_chars for work in (leader, *works))
    assert encoded < leader.chars + 3 * 1500
    assert len(tokenizer.flights) == 0


def test_a_follower_diverging_inside_the_shared_part_tokenizes_its_own_text(
    files: tuple[Path, Path],
) -> None:
    rng, tokenizer, system, first, leader = _flying(files, 2)
    # Diverging 12 KiB in: deferred at first (the text ahead is shared), then its rest goes
    # on from the furthest mark before the divergence on its own.
    late = [{"role": "system", "content": system[:12_000] + _words(rng, 12_000)}, first[1]]
    # Diverging within AHEAD_CHARS of its first piece: it walks its own text (not deferred).
    soon = [{"role": "system", "content": system[:1_000] + _words(rng, 23_000)}, first[1]]
    deferring, walking = _start(tokenizer, late), _start(tokenizer, soon)
    deferring.advance(_held, None, defer=True)
    assert deferring.deferred
    walking.advance(_held, 8 * 1024, defer=True)
    assert not walking.deferred and walking.position > AHEAD_CHARS
    deferring.fly()
    leader.advance()  # the leader's rest, to its end
    leader.fly(False)
    deferring.advance()
    deferring.fly(False)
    walking.advance()
    for work, messages in ((deferring, late), (walking, soon), (leader, first)):
        _exact(work, files, messages)
    # Its own text past the divergence (12 KiB, its message, a piece before), not 24 KiB.
    assert deferring.encoded_chars < 14_500


def test_a_first_ones_rest_dropped_leaves_its_followers_exact(files: tuple[Path, Path]) -> None:
    """The leader's rest dropped (too much queued, the thread closed) while followers wait
    on it: nothing waits for a flight, their rests tokenize what no mark covers."""
    rng, tokenizer, system, _, leader = _flying(files, 3)
    waiting = _first_turn(system, rng)
    follower = _start(tokenizer, waiting)
    follower.advance(_held, None, defer=True)
    assert follower.deferred
    follower.fly()
    leader.advance(None, 4096)  # a slice, then dropped
    leader.fly(False)
    follower.advance()
    follower.fly(False)
    _exact(follower, files, waiting)
    later = _first_turn(system, rng)  # no flight now: it walks (and finds the marks)
    work = _start(tokenizer, later)
    work.advance(_held, 8 * 1024, defer=True)
    assert not work.deferred


def test_flights_are_bounded_per_lineage_and_forget_the_landed() -> None:
    class Text:
        def __init__(self, text: str, lineage: bytes = b"a", position: int = 0) -> None:
            self.text, self.lineage, self.position, self.done = text, lineage, position, False

    flights = Flights(max_per_lineage=2)
    shared = "x" * 10_000
    a, b, c = Text(shared + "a"), Text(shared + "b"), Text(shared + "c")
    for one in (a, b, c):
        flights.add(one)
    assert len(flights) == 2  # the oldest forgotten
    asking = Text(shared + "d", position=9_000 - AHEAD_CHARS)
    assert flights.ahead(asking)
    assert not flights.ahead(Text(asking.text, position=10_001 - AHEAD_CHARS))  # diverged
    assert not flights.ahead(Text(asking.text, b"other", asking.position))
    b.done = True
    assert flights.ahead(asking)  # c still flies
    flights.remove(c)
    assert not flights.ahead(asking)  # b is done
    flights.remove(b)
    assert len(flights) == 0


@pytest.fixture
def caches() -> HeldEverywhere:
    return HeldEverywhere()


@pytest.fixture
def preparer(files: tuple[Path, Path], caches: HeldEverywhere) -> Iterator[PromptPreparer]:
    made = PromptPreparer(precise_chat_policy(files, BS), caches=caches, clock=Ticking())  # type: ignore[arg-type]
    yield made
    made.close()


async def _pick(preparer: PromptPreparer, messages: list[Any]) -> PromptBlocks | None:
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    body = Body([raw], reserved=len(raw))
    query = await preparer.prepare(parse_request(body), body)
    assert query is not None
    return query.blocks.get(REF)


@pytest.mark.parametrize("leader_late", [False, True])
async def test_picks_on_one_new_system_prompt_end_exact(
    preparer: PromptPreparer, caches: HeldEverywhere, files: tuple[Path, Path], leader_late: bool
) -> None:
    """`leader_late`: the first Pick is past its deadline (routed approximately): its
    tokenization goes on, and the others' rests still end exact."""
    await asyncio.wait_for(asyncio.gather(*map(asyncio.wrap_future, preparer.warm())), 30)
    rng = random.Random(4)
    system = _words(rng, 40_000)
    turns = [_first_turn(system, rng) for _ in range(6)]
    if leader_late:
        preparer.timeout_s = 0.0
    first = await _pick(preparer, turns[0])
    preparer.timeout_s = 2.0
    assert leader_late == (first is None)
    picked = [await _pick(preparer, messages) for messages in turns[1:]]
    for blocks, messages in zip(picked, turns[1:], strict=True):
        assert blocks is not None and not blocks.exact and blocks.bounded
        whole = _whole(files, messages)[1]
        assert list(blocks.blocks) == whole[: len(blocks.blocks)]
    tickets = {blocks.ticket: messages for blocks, messages in zip(picked, turns[1:], strict=True)}
    async with asyncio.timeout(60):
        while not set(tickets) <= set(caches.completed_blocks):
            caches.done.clear()
            await caches.done.wait()
    for ticket, messages in tickets.items():  # the usable blocks: all but the last token's
        ids, whole = _whole(files, messages)
        assert list(caches.completed_blocks[ticket]) == whole[: (len(ids) - 1) // BS]
    tokenizer = preparer._tokenizer(next(iter(preparer._plan.profiles.values())))
    assert tokenizer.flights.deferred >= 1
    for _ in range(500):  # every rest ended: none left in flight
        if not len(tokenizer.flights):
            break
        await asyncio.sleep(0.01)
    assert len(tokenizer.flights) == 0
