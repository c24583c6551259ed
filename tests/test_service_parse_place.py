"""Where Pick parses a body over INLINE_PARSE_BYTES: on the loop when its upload's scan says
it is cheap (its memory reserved from the body budget until the Pick ends), else in the
parse worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from kinference.bodies import Body, ByteBudget
from kinference.errors import ResourceExhausted
from kinference.requests.offload import Offload
from kinference.routing import Outcome
from kinference.service import PickCall
from tests.test_service import (
    MODEL,
    Env,
    chat,
    env,  # noqa: F401  # the fixture
)

KiB = 1 << 10


class CountedOffload(Offload):
    """The real parse worker, counting the parses sent to it and the budget they found."""

    def __init__(self) -> None:
        super().__init__()
        self.parses = 0

    async def parse(self, budget: ByteBudget, body: Body, **kwargs: Any) -> Any:
        self.parses += 1
        return await super().parse(budget, body, **kwargs)


@pytest.fixture
async def offload(env: Env) -> AsyncIterator[CountedOffload]:  # noqa: F811
    counted = CountedOffload()
    env.prepared_by(offload=counted)
    yield counted
    await counted.aclose()


async def test_an_ordinary_big_chat_body_is_parsed_on_the_loop(
    env: Env,  # noqa: F811
    offload: CountedOffload,
) -> None:
    data = chat(content="a question, with some words. " * (256 * KiB // 29))
    used = env.store.budget.used
    result = await env.service.pick_off_loop(PickCall(env.push(data, chunk=64 * KiB)))
    assert result.outcome == Outcome.OK and result.requested_model == MODEL
    assert offload.parses == 0
    assert env.pull(result.response_id) == data
    assert env.store.budget.used == used  # the parse's reservation went with the Pick


async def test_a_dense_body_of_the_same_kind_goes_to_the_worker(
    env: Env,  # noqa: F811
    offload: CountedOffload,
) -> None:
    data = chat(content="hi", extra=[1] * (20 * KiB))  # 40 KiB of numbers
    result = await env.service.pick_off_loop(PickCall(env.push(data, chunk=64 * KiB)))
    assert result.outcome == Outcome.OK
    assert offload.parses == 1


async def test_a_loop_parse_the_budget_cannot_hold_goes_to_the_worker_which_refuses_it(
    env: Env,  # noqa: F811
    offload: CountedOffload,
) -> None:
    data = chat(content="words " * (64 * KiB // 6))
    used = env.store.budget.used
    stream_id = env.push(data, chunk=64 * KiB)
    env.store.budget.limit = env.store.budget.used + len(data) // 2
    with pytest.raises(ResourceExhausted):
        await env.service.pick_off_loop(PickCall(stream_id))
    assert offload.parses == 1
    assert env.store.budget.used == used  # the body released, nothing charged
