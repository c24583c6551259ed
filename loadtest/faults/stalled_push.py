"""Scenario "stalled-push": a flood of PushBody streams that send one chunk and go quiet.

Hundreds of uploads (200 with --quick, 600 otherwise) spread over ten connections each
send one 16 KiB chunk and then nothing, holding their stream open. The replica's
inter-chunk idle limit (KINFERENCE_BODY_IDLE_TIMEOUT_S, 2 s here) must end every one with
DEADLINE_EXCEEDED (the spec's status for it) and return their bytes to the budget, while
well-behaved callers on another connection keep completing requests without a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from kinference.client import DECLARED_LENGTH, PickerClient
from kinference.v1 import picker_pb2 as pb
from loadtest.faults.harness import Fleet, Replica, kinference_env, wait_for
from loadtest.faults.load import SteadyLoad, Tally, warm_up
from loadtest.faults.report import Row, settle_memory
from loadtest.flows import CLIENT_OPTIONS, chat_body

IDLE_TIMEOUT_S = 2.0
CONNECTIONS = 10
CHUNK = b"x" * (16 << 10)
DEADLINE = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED})
END_S = 30.0  # seconds allowed for every stalled stream to be ended by the replica


async def stall_one(client: PickerClient, tally: Tally, started: asyncio.Event) -> None:
    """One upload that sends a chunk and holds its stream open until the replica ends it.

    The stream is half-closed only after the call ended: writing while the server fails
    the call can surface INTERNAL on grpc.aio instead of the server's status.
    """
    ended = asyncio.Event()

    async def chunks() -> AsyncIterator[pb.BodyChunk]:
        yield pb.BodyChunk(chunk=CHUNK)
        started.set()
        await ended.wait()

    tally.requests += 1
    call = client.stub.PushBody(chunks(), metadata=[(DECLARED_LENGTH, str(1 << 20))])
    try:
        await call
        tally.fail("a stalled upload completed")
    except grpc.aio.AioRpcError as error:
        tally.error(error, DEADLINE)
    finally:
        ended.set()


async def flood(replica: Replica, count: int, tally: Tally) -> tuple[float, float]:
    """Open `count` stalled uploads; returns the peak buffered bytes seen and the seconds
    from the last one opened to the last one ended."""
    clients = [
        PickerClient(replica.server.address, options=CLIENT_OPTIONS) for _ in range(CONNECTIONS)
    ]
    try:
        started = [asyncio.Event() for _ in range(count)]
        tasks = [
            asyncio.create_task(stall_one(clients[n % CONNECTIONS], tally, started[n]))
            for n in range(count)
        ]
        await asyncio.gather(*(event.wait() for event in started))
        loop = asyncio.get_running_loop()
        opened = loop.time()
        peak = (await replica.scrape()).value("kinference_buffered_bytes")
        await asyncio.wait_for(asyncio.gather(*tasks), END_S)
        return peak, loop.time() - opened
    finally:
        for client in clients:
            await client.close()


async def run(quick: bool, workdir: Path) -> Row:
    row = Row("stalled-push")
    fleet = Fleet(workdir, kinference_env(body_idle_timeout_s=IDLE_TIMEOUT_S))
    body = chat_body(4096)
    try:
        replica = await fleet.start("r")
        await warm_up(replica.client, body, 30 if quick else 200)
        baseline = replica.rss_mib()
        load = SteadyLoad([replica.client], body, workers=4)
        stalled = Tally()
        count = 200 if quick else 600
        peak, ended_s = await flood(replica, count, stalled)
        done = load.tally.completed
        await wait_for(lambda: load.picks_beyond(done + 20), END_S, "picks after the flood")
        row.tally = await load.stop()
        row.tally.requests += stalled.requests
        row.tally.failed += stalled.failed
        row.tally.examples += stalled.examples
        row.tally.spec_errors += stalled.spec_errors
        row.notes.append(
            f"{count} stalled uploads held {peak / 1024:.0f} KiB at the peak; all ended "
            f"{ended_s:.1f} s after the last one opened (idle limit {IDLE_TIMEOUT_S:g} s); "
            f"{row.tally.completed} requests completed meanwhile"
        )
        if stalled.spec_errors["DEADLINE_EXCEEDED"] != count:
            row.problems.append(f"{stalled.spec_errors} for {count} stalled uploads")
        await settle_memory(row, [replica], [baseline], 10.0)
        return row
    finally:
        await fleet.close()
