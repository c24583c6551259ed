"""Scenario "resets": callers resetting their streams at every stage of the flow.

Each resetting caller has its own connection and goes away at one stage: mid-PushBody
(the upload stream reset after its first chunk of four), after the push before Pick,
mid-PullBody (the download stream reset after its first chunk), after the pull before
any report. Mid-stream, half of them cancel the call (RST_STREAM, `call.cancel()`) and
half close their whole connection; between calls, they close their connection.
Well-behaved callers run alongside and must not see one failure; after the TTLs (body
2 s, request 3 s) the replica must hold nothing. Single-reset conformance tests:
tests/api/test_push.py, test_pull.py, test_lifecycle.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from loadtest.faults.harness import Fleet, Replica, kinference_env
from loadtest.faults.load import SteadyLoad, Tally, push, warm_up
from loadtest.faults.report import Row, settle_memory
from loadtest.flows import CLIENT_OPTIONS, Body, chat_body

STAGES = ("mid-push", "before-pick", "mid-pull", "before-reports")
BODY_TTL_S = 2.0
REQUEST_TTL_S = 3.0
CONCURRENT = 8  # resetting callers at a time


async def _mid_push(client: PickerClient, body: Body, cancel: bool) -> None:
    sent = asyncio.Event()

    async def chunks() -> AsyncIterator[pb.BodyChunk]:
        yield pb.BodyChunk(chunk=body.chunks[0])
        sent.set()
        await asyncio.Event().wait()  # the rest of the body never comes: the stream resets

    call = client.stub.PushBody(
        chunks(), metadata=[("kinference-declared-length", str(body.length))]
    )
    await sent.wait()
    await asyncio.sleep(0.01)  # let the first chunk leave before the reset
    await _reset(client, call, cancel)


async def _mid_pull(client: PickerClient, body: Body, cancel: bool) -> None:
    pick = await client.pick(await push(client, body))
    call = client.stub.PullBody(pb.PullBodyRequest(response_id=pick.response_id))
    await call.read()  # the first chunk; the rest is never read
    await _reset(client, call, cancel)


async def _reset(client: PickerClient, call: grpc.aio.Call, cancel: bool) -> None:
    if cancel:
        call.cancel()
    await client.close()  # closing the channel resets every stream still open on it


async def reset_one(target: str, stage: str, body: Body, cancel: bool, tally: Tally) -> None:
    """One caller going away at `stage`; any error before that stage is a failure."""
    client = PickerClient(target, options=CLIENT_OPTIONS)
    tally.requests += 1
    try:
        if stage == "mid-push":
            await _mid_push(client, body, cancel)
        elif stage == "mid-pull":
            await _mid_pull(client, body, cancel)
        else:
            pick = (
                await client.pick(await push(client, body)) if stage == "before-reports" else None
            )
            if pick is not None:
                await client.pull_all(pick.response_id)
            elif stage == "before-pick":
                await push(client, body)
        tally.outcomes[stage] += 1
    except grpc.aio.AioRpcError as error:
        tally.fail(f"{stage}: {error.code().name} {error.details()}")
    finally:
        await client.close()


async def _resetters(replica: Replica, count: int, tally: Tally) -> None:
    body = chat_body(256 << 10, chunk_bytes=64 << 10)  # four chunks in each direction
    gate = asyncio.Semaphore(CONCURRENT)

    async def one(n: int) -> None:
        async with gate:
            await reset_one(
                replica.server.address, STAGES[n % 4], body, cancel=n % 8 < 4, tally=tally
            )

    await asyncio.gather(*(one(n) for n in range(count)))


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("resets")
    env = kinference_env(body_ttl_s=BODY_TTL_S, request_ttl_s=REQUEST_TTL_S)
    fleet = Fleet(workdir, env)
    body = chat_body(4096)
    try:
        replica = await fleet.start("r")
        await warm_up(replica.client, body, 30 if quick else 200)
        baseline = replica.rss_mib()
        load = SteadyLoad([replica.client], body, workers=4)
        resets = Tally()
        await _resetters(replica, 80 if quick else 2000, resets)
        row.tally = await load.stop()
        row.tally.requests += resets.requests
        row.tally.failed += resets.failed
        row.tally.examples += resets.examples
        row.notes.append(f"resets by stage {dict(resets.outcomes)}")
        await settle_memory(row, [replica], [baseline], BODY_TTL_S + REQUEST_TTL_S + 10)
        return row
    finally:
        await fleet.close()
