"""What a Pick waits for, begun at push (`kinference.early`): the Pick finds it done and
does not do it again; a body that expires before its Pick has its work cancelled and its
parse's reservation returned."""

from __future__ import annotations

import asyncio

from kinference.bodies import Body
from kinference.kvcache.precise import PreciseQuery
from kinference.requests import InferenceRequest
from kinference.routing import Outcome
from kinference.service import PickCall
from tests.test_service import (
    BODY_TTL,
    Env,
    chat,
    env,  # noqa: F401  # the fixture
)

KiB = 1 << 10


class CountingPreparer:
    """Stands in for the precise pools' tokenizer: counts the prompts it was given."""

    active = True

    def __init__(self) -> None:
        self.prepared: list[str] = []
        self.decided = 0  # Picks decided on a prompt tokenized at push
        self.gate = asyncio.Event()
        self.gate.set()

    async def prepare(self, request: InferenceRequest, body: Body) -> PreciseQuery | None:
        self.prepared.append(request.model)
        await self.gate.wait()
        return None

    def deciding(self) -> None:
        self.decided += 1


async def test_a_pick_finds_the_work_begun_at_push(env: Env) -> None:  # noqa: F811
    preparer = CountingPreparer()
    env.prepared_by(preparer)
    used = env.store.budget.used
    for data in (chat(), chat(content="a question, with words. " * (64 * KiB // 24))):
        stream_id = env.push(data, chunk=64 * KiB)
        await asyncio.sleep(0)  # the work begun at push runs
        assert len(preparer.prepared) == 1
        result = await env.service.pick_off_loop(PickCall(stream_id))
        assert result.outcome == Outcome.OK
        assert len(preparer.prepared) == 1  # not again
        assert preparer.decided == 1  # background work held back while it was decided
        preparer.decided = 0
        assert env.pull(result.response_id) == data
        assert env.store.budget.used == used  # the big body's parse reservation returned
        preparer.prepared.clear()


async def test_work_of_a_body_that_expires_unpicked_is_cancelled(env: Env) -> None:  # noqa: F811
    preparer = CountingPreparer()
    env.prepared_by(preparer)
    preparer.gate.clear()  # the tokenization never ends
    used = env.store.budget.used
    env.push(chat(content="a question, with words. " * (64 * KiB // 24)), chunk=64 * KiB)
    await asyncio.sleep(0)
    assert len(preparer.prepared) == 1 and env.store.budget.used > used
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    env.clock.now += BODY_TTL + 1
    env.service.reap()
    assert env.store.budget.used == used  # the body and its parse's reservation
    await asyncio.gather(*tasks, return_exceptions=True)
    assert all(task.cancelled() for task in tasks)


def test_without_a_running_loop_the_pick_does_the_work(env: Env) -> None:  # noqa: F811
    preparer = CountingPreparer()
    env.prepared_by(preparer)
    stream_id = env.push(chat())
    assert preparer.prepared == []

    async def pick() -> Outcome:
        return (await env.service.pick_off_loop(PickCall(stream_id))).outcome

    assert asyncio.run(pick()) == Outcome.OK
    assert len(preparer.prepared) == 1
