"""A chat's messages over 1 MiB are decoded and rendered in the parse worker process
(`tokenize/remote.py`, docs/benchmarks.md h145), not on the picker's tokenizer thread, whose
long C calls there held the event loop: the same token ids and the same problems as when
the tokenizer thread does it, a next turn decodes only what it adds (in the worker), and
the tokenizer thread takes over when the worker cannot. (On the code before it, there was
no such worker job: every large prompt was decoded and rendered in the picker.)"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kinference.bodies import Body, Piece
from kinference.errors import Unavailable
from kinference.requests import LargeValue
from kinference.requests.fields import STRICT_PARSE_BYTES
from kinference.requests.offload import Offload
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.remote import RemoteRender, RenderJob, Renders
from kinference.tokenize.template import ChatTemplate
from kinference.tokenize.tokenizer import PromptText, PromptTokenizer
from tests.tokenize.files import WORDS, precise_chat_policy, write_model

BS = 16
REF = "default/chat"


def _words(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(chars // 5 + 1))[:chars]


class HeldEverywhere:
    """Precise caches where some worker holds every block named (a walk goes to its bound)."""

    def reach(self, refs: object) -> object:
        return len

    def completed(self, *_: object) -> None:
        pass


def _request(messages: Any) -> tuple[Any, Body]:
    raw = json.dumps({"model": "m", "messages": messages}).encode()
    body = Body([raw[: 1 << 20], raw[1 << 20 :]], reserved=len(raw))
    return parse_request(body), body


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_model(tmp_path)


@pytest.fixture
async def offload() -> AsyncIterator[Offload]:
    made = Offload()
    yield made
    await made.aclose()


async def _settled(*preparers: PromptPreparer) -> None:
    """Until their prompts' rests are tokenized (a next turn then resumes at the same mark)."""
    for _ in range(3000):  # 30 s at most
        if not any(p._later_chars for p in preparers):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the prompts' rests were not tokenized within 30 s")


def _preparer(files: tuple[Path, Path], remote: RemoteRender | None) -> PromptPreparer:
    # A clock that stands still: the Pick's time bounds never cut a walk short.
    return PromptPreparer(
        precise_chat_policy(files, BS),
        caches=HeldEverywhere(),  # type: ignore[arg-type]
        clock=lambda: 0.0,
        remote=remote,
    )


async def test_large_chats_are_rendered_in_the_worker_with_the_same_blocks(
    files: tuple[Path, Path], offload: Offload
) -> None:
    here, there = _preparer(files, None), _preparer(files, RemoteRender(offload, 1))
    try:
        rng = random.Random(5)
        messages: list[Any] = [
            {"role": "system", "content": _words(rng, STRICT_PARSE_BYTES + 1) + " é 日本"}
        ]
        for turn in range(3):
            messages = [*messages, {"role": "user", "content": _words(rng, 300) + " ü"}]
            request, body = _request(messages)
            assert isinstance(request.fields.values["messages"], LargeValue)
            before = there.remote_decoded_bytes
            expected = await asyncio.wait_for(here.prepare(request, body), 30)
            got = await asyncio.wait_for(there.prepare(request, body), 30)
            assert expected is not None and got is not None and got.problem is None
            assert got.blocks[REF].blocks == expected.blocks[REF].blocks
            assert got.blocks[REF].tokens == expected.blocks[REF].tokens
            await _settled(here, there)
            decoded = there.remote_decoded_bytes - before
            # The worker decoded the history once; a next turn only what it adds.
            assert decoded >= STRICT_PARSE_BYTES if turn == 0 else 0 < decoded < 4096
            messages = [*messages, {"role": "assistant", "content": _words(rng, 400)}]
        assert there._history.decoded_bytes == 0  # nothing decoded in the picker
        assert here._history.decoded_bytes > STRICT_PARSE_BYTES
    finally:
        here.close()
        there.close()


def test_the_worker_renders_the_text_the_tokenizer_thread_would(
    files: tuple[Path, Path],
) -> None:
    rng = random.Random(7)
    messages = [
        {"role": "system", "content": _words(rng, 3000) + " \U0001f600 \\"},
        {"role": "user", "content": [{"type": "text", "text": "part\none"}]},
        {"role": "user", "content": "odd \ud800 half"},  # a lone surrogate, as JSON allows
    ]
    span = json.dumps(messages).encode()
    tools = [{"type": "function", "function": {"name": "f"}}]
    answer, texts = Renders().run(RenderJob((str(files[1]),), tools), span)
    assert answer.outcomes == (len(texts),)
    template = ChatTemplate.from_file(str(files[1]))
    assert texts.decode("utf-8", "surrogatepass") == template.render(messages, tools)
    # ... and the same token ids (a text without the lone surrogate, which no tokenizer takes)
    tokenizer = PromptTokenizer.from_files(str(files[0]), str(files[1]), BS)
    answer, texts = Renders().run(
        RenderJob((str(files[1]),), None), json.dumps(messages[:2]).encode()
    )
    rendered = PromptText(rendered=texts.decode())
    ids = tokenizer.token_ids(PromptText(messages=messages[:2]))
    assert tokenizer.token_ids(rendered).tolist() == ids.tolist()


async def test_a_broken_prompt_names_the_same_problem(
    files: tuple[Path, Path], offload: Offload
) -> None:
    here, there = _preparer(files, None), _preparer(files, RemoteRender(offload, 1))
    try:
        big = _words(random.Random(1), STRICT_PARSE_BYTES + 10)
        # messages the template cannot render (it adds content to a string)
        for value in (
            [{"role": "user", "content": big}, {"role": "assistant", "content": None}],
            [{"role": "user", "content": big}, {"role": "user", "name": "no content"}],
        ):
            request, body = _request(value)
            expected = await asyncio.wait_for(here.prepare(request, body), 30)
            got = await asyncio.wait_for(there.prepare(request, body), 30)
            assert expected is not None and got is not None
            assert got.problem == expected.problem and got.problem
        assert there._history.decoded_bytes == 0
    finally:
        here.close()
        there.close()


class Lost:
    """A parse worker that is gone."""

    calls = 0

    async def render(self, job: RenderJob, payload: Sequence[Piece]) -> tuple[Any, memoryview]:
        self.calls += 1
        raise Unavailable("the parse worker stopped")


async def test_the_tokenizer_thread_renders_when_the_worker_cannot(
    files: tuple[Path, Path],
) -> None:
    here, lost = _preparer(files, None), Lost()
    there = _preparer(files, RemoteRender(lost, 1))
    try:
        rng = random.Random(2)
        messages = [{"role": "user", "content": _words(rng, STRICT_PARSE_BYTES + 1)}]
        request, body = _request(messages)
        expected = await asyncio.wait_for(here.prepare(request, body), 30)
        got = await asyncio.wait_for(there.prepare(request, body), 30)
        assert expected is not None and got is not None and got.problem is None
        assert got.blocks[REF].blocks == expected.blocks[REF].blocks
        assert lost.calls == 1 and there._history.decoded_bytes > 0
    finally:
        here.close()
        there.close()


def test_small_or_unparsed_tools_or_templateless_prompts_stay_here(
    files: tuple[Path, Path],
) -> None:
    remote = RemoteRender(Lost(), 2 * STRICT_PARSE_BYTES)
    profile = (str(files[0]), str(files[1]), BS)
    rng = random.Random(3)
    messages = [{"role": "user", "content": _words(rng, STRICT_PARSE_BYTES + 1)}]
    request, _ = _request(messages)
    assert remote.job(request, [profile]) is None  # under its bound
    remote.min_bytes = 1
    job = remote.job(request, [profile, profile])
    assert job is not None and job[0].templates == (str(files[1]),)
    assert remote.job(request, [(str(files[0]), None, BS)]) is None
    remote.min_bytes = 0
    assert remote.job(request, [profile]) is None  # off
