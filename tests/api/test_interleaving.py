"""Many requests in flight over one connection, in random interleavings."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator

import grpc
import pytest

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import (
    ALL_ENDPOINTS,
    ENDPOINT_BIG,
    POOL_BIG,
    Code,
    KiB,
    assert_code,
    chat_body,
    chunked,
    held_push,
    pull_status,
    sized_chat_body,
    status_of,
    wait_nothing_held,
)
from tests.conftest import MODEL, RunningPicker

REQUESTS = 200
SCENARIOS = [
    "full",  # pull, first token, final token
    "full_chunked",  # the same, pushed without a declared length
    "pool",  # a named pool
    "abort_before_pull",
    "abort_after_pull",
    "cancel_pull_then_abort",
    "double_pick",
    "bad_request",
    "no_workers",
    "reset_push",
]


class Request:
    """One request's script: a random body, chunking and pace, driven to its end."""

    def __init__(self, picker: RunningPicker, index: int, rng: random.Random) -> None:
        self.picker = picker
        self.client = picker.client
        self.index = index
        self.rng = rng
        self.scenario = SCENARIOS[index % len(SCENARIOS)]
        tag = f"request {index} "
        size = rng.choice([300, 2 * KiB, 40 * KiB, 300 * KiB])  # 300 KiB is scanned on arrival
        if self.scenario == "bad_request":
            self.body = chat_body(MODEL, tag)[:-2]  # truncated JSON
        elif self.scenario == "no_workers":
            self.body = chat_body("unknown-" + tag)
        else:
            self.body = sized_chat_body(max(size, len(chat_body(MODEL, tag)) + 1), tag=tag)
        self.stream_id = 0
        chunk_bytes = rng.choice([100, 4 * KiB, 64 * KiB, 1024 * KiB])
        self.chunks = chunked(self.body, max(chunk_bytes, len(self.body) // 200))

    async def pause(self) -> None:
        """Let other requests run for a random while (pacing only; no state is awaited)."""
        if self.rng.random() < 0.5:
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(self.rng.random() * 0.005)

    async def paced_chunks(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if self.rng.random() < 0.2:
                await self.pause()
            yield chunk

    async def run(self) -> str:
        await self.pause()
        if self.scenario == "reset_push":
            upload = held_push(self.picker, self.chunks[: max(1, len(self.chunks) // 2)])
            await self.pause()
            await upload.reset()
            return self.scenario

        declared = None if self.scenario == "full_chunked" else len(self.body)
        pushed = await self.client.push(self.paced_chunks(), declared_length=declared)
        assert pushed.stream_id != 0
        self.stream_id = pushed.stream_id
        assert pushed.total_bytes == len(self.body)
        await self.pause()
        pool = POOL_BIG if self.scenario == "pool" else None
        pick = await self.client.pick(pushed.stream_id, pool=pool, tenant=f"t{self.index % 3}")
        await self.pause()
        if self.scenario == "bad_request":
            assert pick.outcome == pb.PickResponse.BAD_REQUEST, pick
            assert pick.reason and pick.response_id == 0
            return self.scenario
        if self.scenario == "no_workers":
            assert pick.outcome == pb.PickResponse.NO_WORKERS, pick
            assert pick.reason and pick.response_id == 0
            return self.scenario

        assert pick.outcome == pb.PickResponse.OK, pick
        assert pick.response_id != 0
        assert pick.requested_model == MODEL
        assert pick.body_total_bytes == len(self.body)
        if self.scenario == "pool":
            assert pick.local.endpoint == ENDPOINT_BIG
        else:
            assert pick.local.endpoint in ALL_ENDPOINTS
        await self.finish(pick)
        return self.scenario

    async def finish(self, pick: pb.PickResponse) -> None:
        rid = pick.response_id
        client = self.client
        if self.scenario == "double_pick":
            error = await status_of(client.pick(self.stream_id))
            assert_code(error, Code.FAILED_PRECONDITION)
        if self.scenario == "abort_before_pull":
            assert (await client.abort(rid)).released
            await self.pause()
            assert_code(await status_of(client.abort(rid)), Code.NOT_FOUND)
            assert_code(await pull_status(self.picker, rid), Code.NOT_FOUND)
            return
        if self.scenario == "cancel_pull_then_abort":
            call = client.stub.PullBody(pb.PullBodyRequest(response_id=rid))
            first = await call.read()
            assert first is not grpc.aio.EOF
            assert self.body.startswith(first.chunk)
            call.cancel()
            await self.pause()
            assert (await client.abort(rid)).released
            return
        pulled = b""
        async for chunk in client.pull(rid):
            pulled += chunk
            if self.rng.random() < 0.3:
                await self.pause()
        assert pulled == self.body, f"request {self.index} got another body back"
        await self.pause()
        if self.scenario == "abort_after_pull":
            assert (await client.abort(rid)).released
            return
        assert (await client.first_token(rid, 10)).acknowledged
        await self.pause()
        final = await client.final_token(
            rid, model=MODEL, prompt_tokens=3, completion_tokens=4, itl_bucket_counts=[1] * 15
        )
        assert final.acknowledged


@pytest.mark.parametrize("seed", [1, 2])
async def test_200_interleaved_requests_on_one_connection(picker: RunningPicker, seed: int) -> None:
    rng = random.Random(seed)
    requests = [Request(picker, i, random.Random(rng.random())) for i in range(REQUESTS)]
    rng.shuffle(requests)
    done = await asyncio.gather(*(r.run() for r in requests))
    assert Counter(done) == Counter(r.scenario for r in requests)
    await wait_nothing_held(picker)
    picks = {
        outcome: picker.metric("kinference_picks_total", {"outcome": outcome})
        for outcome in ("ok", "bad_request", "no_workers")
    }
    expected_ok = sum(
        r.scenario not in {"bad_request", "no_workers", "reset_push"} for r in requests
    )
    assert picks == {
        "ok": expected_ok,
        "bad_request": REQUESTS // len(SCENARIOS),
        "no_workers": REQUESTS // len(SCENARIOS),
    }
