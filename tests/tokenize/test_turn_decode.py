"""A Pick's chat messages over 1 MiB (`LargeValue`) are decoded once per conversation, not
once per turn (`history`, docs/benchmarks.md h96): the next turn's Pick decodes only the
messages it adds. (On the code before it, every turn decoded its whole history again.)"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from kinference.bodies import Body
from kinference.requests import LargeValue
from kinference.requests.fields import STRICT_PARSE_BYTES
from kinference.requests.parse import parse_request
from kinference.tokenize.prepare import PromptPreparer
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


@pytest.fixture
def preparer(tmp_path: Path) -> Iterator[PromptPreparer]:
    files = write_model(tmp_path)
    policy = precise_chat_policy(files, BS)
    # A clock that stands still: the Pick's time bounds never cut a walk short, so the blocks
    # compared below do not depend on how busy the machine is (CI saw a turn walk none).
    made = PromptPreparer(policy, caches=HeldEverywhere(), clock=lambda: 0.0)  # type: ignore[arg-type]
    yield made
    made.close()


async def test_a_conversations_next_turn_does_not_decode_its_history_again(
    preparer: PromptPreparer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(3)
    messages: list[Any] = [{"role": "system", "content": _words(rng, STRICT_PARSE_BYTES + 1)}]
    decoded: list[int] = []
    decode = msgspec.json.decode

    def counting(raw: Any, *args: Any, **kwargs: Any) -> Any:
        decoded.append(len(raw))
        return decode(raw, *args, **kwargs)

    monkeypatch.setattr(msgspec.json, "decode", counting)
    queries = []
    for turn in range(3):
        messages = [*messages, {"role": "user", "content": _words(rng, 300)}]
        raw = json.dumps({"model": "m", "messages": messages}).encode()
        body = Body([raw[: 1 << 20], raw[1 << 20 :]], reserved=len(raw))
        request = parse_request(body)
        assert isinstance(request.fields.values["messages"], LargeValue)
        decoded.clear()
        query = await asyncio.wait_for(preparer.prepare(request, body), 30)
        assert query is not None and query.problem is None
        queries.append(query.blocks[REF])
        assert sum(decoded) >= STRICT_PARSE_BYTES if turn == 0 else sum(decoded) < 4096
        messages = [*messages, {"role": "assistant", "content": _words(rng, 400)}]
    # The later turns' blocks begin alike (the system prompt's and the first exchange's).
    shared = min(len(queries[1].blocks), len(queries[2].blocks)) - 1
    assert shared > 0 and queries[1].blocks[:shared] == queries[2].blocks[:shared]
