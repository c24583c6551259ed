"""A prompt tokenized at push holds the tokenizer thread's background work back, with a real
thread, until its Pick is decided or its body is dropped (`PromptPreparer.prepare`'s
`hold_for`, `release`): the loop's steps until then are that Pick's."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinference.config import parse_policy
from kinference.routing import Outcome
from kinference.service import PickCall
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.worker import TokenizerThread
from tests.test_service import (
    BODY_TTL,
    MODEL,
    Env,
    chat,
    env,  # noqa: F401  # the fixture
)
from tests.tokenize.files import write_model


@pytest.fixture
def thread() -> Iterator[TokenizerThread]:
    made = TokenizerThread(max_pause_s=600.0)  # held back work waits for the release only
    yield made
    made.close()


@pytest.fixture
def preparer(tmp_path: Path, thread: TokenizerThread, env: Env) -> Iterator[PromptPreparer]:  # noqa: F811
    tokenizer, template = write_model(tmp_path)
    policy = parse_policy(f"""
pools:
  - name: chat
    endpoints: ["10.0.0.5:8000"]
    models: ["{MODEL}"]
    prefix: {{mode: precise, events: "tcp://{{host}}:5557", tokenizer: {tokenizer},
             chat_template: {template}, block_size: 16}}
""")
    made = PromptPreparer(policy, thread=thread)
    env.prepared_by(made)
    yield made
    made.close()


async def _held_back(thread: TokenizerThread, ran: threading.Event) -> bool:
    """Whether background work queued now is still waiting after two Picks' work ran on the
    thread (it waits only while Picks hold it back: with none, it runs between them)."""
    assert thread.later(ran.set)
    for _ in range(2):
        await asyncio.wrap_future(thread.submit(lambda: None))
    return not ran.is_set()


async def test_background_waits_from_push_until_the_pick_is_decided(
    env: Env,  # noqa: F811
    preparer: PromptPreparer,
    thread: TokenizerThread,
) -> None:
    stream_id = env.push(chat(content="a question, with words " * 20))
    for _ in range(3):
        await asyncio.sleep(0)  # the work begun at push runs (on the loop: the thread idles)
    ran = threading.Event()
    assert await _held_back(thread, ran)
    result = await env.service.pick_off_loop(PickCall(stream_id))
    assert result.outcome == Outcome.OK
    await asyncio.sleep(0)  # the step that decided it ended
    assert await asyncio.to_thread(ran.wait, 10)
    preparer.release(stream_id)  # again: nothing held any more, a no-op


async def test_background_waits_until_an_unpicked_body_expires(
    env: Env,  # noqa: F811
    preparer: PromptPreparer,
    thread: TokenizerThread,
) -> None:
    env.push(chat(content="another question " * 20))
    for _ in range(3):
        await asyncio.sleep(0)
    ran = threading.Event()
    assert await _held_back(thread, ran)
    env.clock.now += BODY_TTL + 1
    env.service.reap()  # the body expires before its Pick: its work is dropped
    await asyncio.sleep(0)
    assert await asyncio.to_thread(ran.wait, 10)


async def test_a_prompt_not_tokenized_holds_nothing(
    env: Env,  # noqa: F811
    preparer: PromptPreparer,
    thread: TokenizerThread,
) -> None:
    stream_id = env.push(chat(model="qwen", content="no precise pool serves this model"))
    for _ in range(3):
        await asyncio.sleep(0)
    ran = threading.Event()
    assert thread.later(ran.set)
    assert await asyncio.to_thread(ran.wait, 10)  # not held back
    preparer.release(stream_id)  # nothing held under it: a no-op
