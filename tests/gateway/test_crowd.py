"""The gateway end to end under a crowd of clients, some hanging up mid-upload or
mid-stream, and with clients asking `expect: 100-continue`; the upstream side checked too."""

from __future__ import annotations

import json

from tests.api.helpers import nothing_held, wait_until
from tests.conftest import MODEL
from tests.gateway.conftest import Stack

HI = [{"role": "user", "content": "hello there"}]


async def test_expect_continue_gets_the_engine_s_answer(stack: Stack) -> None:
    """curl sends `expect: 100-continue` with large bodies; an engine told so answers
    `100 Continue` first: the client gets the engine's final answer, every time."""
    request = {"model": MODEL, "messages": HI, "max_tokens": 4}
    async with stack.http() as http:
        for _ in range(3):
            response = await http.post(
                "/v1/chat/completions", json=request, headers={"expect": "100-continue"}
            )
            assert response.status_code == 200, response.text
            assert json.loads(response.content)["usage"]["completion_tokens"] == 4
    await wait_until(lambda: nothing_held(stack.picker), what="nothing held")
