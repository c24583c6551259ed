"""Picks and pulls racing the body TTL's reaper, sixteen at a time: each ends in a valid
answer (OK with every byte, or NOT_FOUND) and nothing is left held."""

from __future__ import annotations

import asyncio
import random

import grpc

from kinference.v1 import picker_pb2 as pb
from tests.api.helpers import KiB, push, wait_nothing_held
from tests.api.test_crowd import CROWD, bodies, outcomes, together
from tests.conftest import PickerFactory, RunningPicker

TTL_S = 0.2


async def late_request(picker: RunningPicker, body: bytes, rng: random.Random) -> str:
    """Push, wait about the TTL, Pick, wait again, pull: the reaper may strike anywhere."""
    pushed = await push(picker, body)
    await asyncio.sleep(rng.uniform(0.5, 1.5) * TTL_S)  # a caller's delay, not a wait for state
    try:
        pick = await picker.client.pick(pushed.stream_id)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND, error
        return "pick NOT_FOUND"
    assert pick.outcome == pb.PickResponse.OK, pick
    await asyncio.sleep(rng.uniform(0.5, 1.5) * TTL_S)
    try:
        pulled = await picker.client.pull_all(pick.response_id)
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND, error
        return "pull NOT_FOUND"
    assert pulled == body and len(pulled) == pick.body_total_bytes
    # The request TTL may have released it meanwhile: Abort is then NOT_FOUND, tolerated.
    assert set(outcomes(await together([picker.client.abort(pick.response_id)]))) <= {
        "ok",
        "NOT_FOUND",
    }
    return "pulled"


async def test_picks_and_pulls_racing_the_reaper(start_picker: PickerFactory) -> None:
    picker = await start_picker(body_ttl_s=TTL_S, request_ttl_s=TTL_S)
    rng = random.Random(187)
    seen: dict[str, int] = {}
    for size in (2 * KiB, 300 * KiB):  # 300 KiB bodies are parsed off the loop
        ends = await together([late_request(picker, b, rng) for b in bodies(size)])
        assert outcomes(ends) == {"ok": CROWD}
        for end in ends:
            seen[end] = seen.get(end, 0) + 1
    await wait_nothing_held(picker)
    assert sum(seen.values()) == 2 * CROWD
