"""A Pick's first steps run on the event loop when the tokenizer thread is idle, but not
the render of a conversation of many messages: rendering is a Python loop per message
(~1.3 µs a message with the tests' small template, several times that with a model's), so
a 160 KiB body of 4,000 short messages held the loop ~5-25 ms at every such Pick. Those are
rendered on the tokenizer thread; a conversation of a few messages still is on the loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinference.bodies import Body
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
from kinference.tokenize.template import ChatTemplate
from tests.api.helpers import wait_until
from tests.tokenize.files import precise_chat_policy, write_model


@pytest.fixture
def preparer(tmp_path: Path) -> Iterator[PromptPreparer]:
    made = PromptPreparer(precise_chat_policy(write_model(tmp_path), 16))
    yield made
    made.close()


async def _rendered_on(preparer: PromptPreparer, messages: int, where: list[str]) -> None:
    chat = [{"role": "user", "content": f"message {i}"} for i in range(messages)]
    raw = json.dumps({"model": "m", "messages": chat}).encode()
    body = Body([raw], reserved=len(raw))
    await preparer.warmed()
    await wait_until(lambda: preparer._thread.idle, what="the warm-up's work done")
    where.clear()
    query = await asyncio.wait_for(preparer.prepare(parse_request(body), body), 30)
    assert query is not None and query.problem is None


async def test_many_messages_are_rendered_off_the_loop(
    preparer: PromptPreparer, monkeypatch: pytest.MonkeyPatch
) -> None:
    where: list[str] = []
    render = ChatTemplate.render

    def recorded(self: ChatTemplate, *args: Any) -> str:
        where.append(threading.current_thread().name)
        return render(self, *args)

    monkeypatch.setattr(ChatTemplate, "render", recorded)
    await _rendered_on(preparer, 4000, where)
    assert where == ["kinference-tokenize"]
    await _rendered_on(preparer, 3, where)
    assert where == [threading.current_thread().name]  # a short chat: on the loop
