"""A Pick pays only for what its answer needs (docs/benchmarks.md, h153): a next turn's
step from its history's mark cuts one short piece, so where no worker holds the prompt past
its history the Pick tokenizes ~`FIRST_PIECES_CHARS[0]` of its new text, not all of it (the
rest, after the answer, gives the tokens and blocks a whole tokenization gives); and a Pick
tokenized on the loop leaves its marks for later turns after its answer, on the tokenizer
thread. (On the code before, the step took the whole new text, and the marks were left
inside the Pick.)"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from kinference.bodies import Body
from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.requests.parse import parse_request
from kinference.tokenize import turns
from kinference.tokenize.bounds import INLINE_CHARS
from kinference.tokenize.pieces import FIRST_PIECES_CHARS, PIECE_CHARS
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import WORDS, precise_chat_policy, write_model
from tests.tokenize.test_turn_decode import HeldEverywhere

BS = 16


def _words(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(chars // 5 + 1))[:chars]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_model(tmp_path_factory.mktemp("model"))


def _ids(files: tuple[Path, Path], messages: list[Any]) -> list[int]:
    text = ChatTemplate.from_file(str(files[1])).render(messages)
    return list(Tokenizer.from_file(str(files[0])).encode(text, add_special_tokens=False).ids)


def _conversation(rng: random.Random, numbers: bool = False) -> tuple[list[Any], list[Any]]:
    """A first turn, and the next one: the reply and a new question after it; `numbers`: a
    reply as Dynamo's mock engine writes one (token ids as numbers, each after a space)."""
    first = [
        {"role": "system", "content": _words(rng, 6000)},
        {"role": "user", "content": _words(rng, 400)},
    ]
    said = "".join(f" {rng.randint(70, 1600)}" for _ in range(120)) if numbers else None
    reply = {"role": "assistant", "content": said or _words(rng, 600)}
    return first, [*first, reply, {"role": "user", "content": _words(rng, 500)}]


@pytest.mark.parametrize("numbers", [False, True])
def test_a_next_turns_pick_tokenizes_a_short_piece_past_its_history(
    files: tuple[Path, Path], numbers: bool
) -> None:
    """A reply of numbers after a space (Dynamo's mocker): main cut it nowhere, resuming
    at an earlier mark and encoding the whole reply and more."""
    rng = random.Random(7)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), BS)
    first, second = _conversation(rng, numbers)
    tokenizer.blocks(PromptText(messages=first))  # tokenized to its end: a mark there
    held = len(_ids(files, first)) // BS  # the engine stored the first prompt's full blocks

    def known(blocks: Sequence[BlockId]) -> int:
        return min(len(blocks), held)

    work = tokenizer.start(PromptText(messages=second))
    assert not isinstance(work, PromptBlocks)
    resumed = work.position
    assert resumed == len(ChatTemplate.from_file(str(files[1])).render(first))  # its end
    assert work.advance(known, INLINE_CHARS) is True  # stopped at a block nobody holds
    # One short piece of the ~1.1 KiB new text (on main: two pieces, all of it).
    assert 0 < work.encoded_chars <= FIRST_PIECES_CHARS[0] + PIECE_CHARS // 4
    assert (
        work.position - resumed
        < len(ChatTemplate.from_file(str(files[1])).render(second)) - resumed
    )
    exact = _ids(files, second)
    whole = identities(np.asarray(exact, dtype=np.uint32), BS)
    partial = work.result(ticket=3)
    assert not partial.exact and not partial.bounded and partial.ticket == 3
    assert len(partial.blocks) > held and list(partial.blocks) == whole[: len(partial.blocks)]
    work.advance()  # the rest, as the background tokenizes it
    done = work.result()
    assert done.exact and done.tokens == len(exact) and list(done.blocks) == whole
    assert work.ids().tolist() == exact


@pytest.fixture
def preparer(files: tuple[Path, Path]) -> Iterator[PromptPreparer]:
    made = PromptPreparer(
        precise_chat_policy(files, BS),
        caches=HeldEverywhere(),
        clock=lambda: 0.0,  # type: ignore[arg-type]
    )
    yield made
    made.close()


async def _pick(preparer: PromptPreparer, messages: list[Any]) -> PromptBlocks:
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    body = Body([raw], reserved=len(raw))
    query = await preparer.prepare(parse_request(body), body)
    assert query is not None and query.problem is None
    return query.blocks["default/chat"]


async def test_a_pick_on_the_loop_leaves_its_marks_after_its_answer(
    preparer: PromptPreparer, files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.wait_for(asyncio.gather(*map(asyncio.wrap_future, preparer.warm())), 30)
    for _ in range(3000):  # the warm-up's future is set before the thread is free
        if preparer._thread.idle:
            break
        await asyncio.sleep(0.01)
    loop_thread = threading.get_ident()
    put_on: list[int] = []
    put = turns.TurnMarks.put

    def recording(self: turns.TurnMarks, *args: Any, **kwargs: Any) -> None:
        put_on.append(threading.get_ident())
        put(self, *args, **kwargs)

    monkeypatch.setattr(turns.TurnMarks, "put", recording)
    rng = random.Random(11)
    messages = [{"role": "user", "content": _words(rng, 600)}]  # tokenized whole, inline
    first = await _pick(preparer, messages)
    assert first.exact  # done inside the Pick, on the loop's thread ...
    assert put_on == []  # ... with no mark left there
    for _ in range(200):  # the tokenizer thread leaves them once the Pick is routed
        await asyncio.sleep(0.01)
        if put_on:
            break
    assert put_on and loop_thread not in put_on
    tokenizer = preparer._tokenizers.get(next(iter(preparer._plan.profiles.values())))
    resumed = tokenizer.marks.resumed
    reply = {"role": "assistant", "content": _words(rng, 300)}
    second = [*messages, reply, {"role": "user", "content": _words(rng, 300)}]
    blocks = await _pick(preparer, second)
    assert tokenizer.marks.resumed == resumed + 1  # the next turn found the first's end
    whole = identities(np.asarray(_ids(files, second), dtype=np.uint32), BS)
    assert list(blocks.blocks) == whole[: len(blocks.blocks)]
