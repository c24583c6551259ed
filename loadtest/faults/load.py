"""Well-behaved callers: the whole flow in a loop, with every result counted.

A request counts as failed when any call of its flow fails, or its Pick answers anything
but OK or DEGRADED, unless the failure is a status the spec prescribes for the fault under
way (say UNAVAILABLE from a replica that was just killed): those are counted apart, as
spec errors.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

import grpc

from kinference.client import PickerClient
from kinference.v1 import picker_pb2 as pb
from loadtest.flows import ACCEPTED_OUTCOMES, ITL_BUCKETS_LAYOUT_1, MODEL, Body

_MAX_EXAMPLES = 5  # failure descriptions kept for the report
# What grpc-core (not the server) reports to a client whose connection died mid-call: a
# client-streaming call cut off while it writes ends INTERNAL with this detail instead of
# UNAVAILABLE (grpc/grpc#36066). It is the same lost transport, so it counts as UNAVAILABLE.
_CORE_TRANSPORT_LOST = "Internal error from Core"


class SpecError(Exception):
    """A request ended with a status the spec prescribes for the fault under way."""


@dataclass
class Tally:
    """What happened to the requests of one scenario."""

    requests: int = 0
    completed: int = 0
    failed: int = 0
    spec_errors: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    pick_s: list[float] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    def fail(self, description: str) -> None:
        self.failed += 1
        if len(self.examples) < _MAX_EXAMPLES:
            self.examples.append(description)

    def error(self, error: grpc.aio.AioRpcError, spec_codes: Collection[grpc.StatusCode]) -> bool:
        """Count a failed call; returns whether its status is one the spec prescribes."""
        code = _transport_code(error)
        if code in spec_codes:
            self.spec_errors[code.name] += 1
            return True
        self.fail(f"{error.code().name}: {error.details()}")
        return False

    def pick_quantile(self, q: float) -> float:
        """Pick latency quantile in seconds over the requests that reached Pick (0 if none)."""
        if not self.pick_s:
            return 0.0
        ordered = sorted(self.pick_s)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _transport_code(error: grpc.aio.AioRpcError) -> grpc.StatusCode:
    """The call's status, with grpc-core's lost-transport INTERNAL read as UNAVAILABLE."""
    code = error.code()
    if code is grpc.StatusCode.INTERNAL and error.details() == _CORE_TRANSPORT_LOST:
        return grpc.StatusCode.UNAVAILABLE
    return code


async def push(client: PickerClient, body: Body) -> int:
    reply = await client.push(body.chunks, declared_length=body.length)
    return int(reply.stream_id)


async def report(client: PickerClient, response_id: int) -> bool:
    first = await client.first_token(response_id, ttft_ms=5)
    final = await client.final_token(
        response_id,
        model=MODEL,
        prompt_tokens=100,
        completion_tokens=10,
        itl_bucket_counts=ITL_BUCKETS_LAYOUT_1,
    )
    return first.acknowledged and final.acknowledged


async def flow(
    client: PickerClient,
    body: Body,
    tally: Tally,
    spec_codes: Collection[grpc.StatusCode] = (),
) -> bool:
    """Push, Pick, pull and report one request; returns whether it completed (raises
    `SpecError` when it ended with one of `spec_codes`)."""
    tally.requests += 1
    try:
        stream_id = await push(client, body)
        start = time.perf_counter()
        pick = await client.pick(stream_id)
        tally.pick_s.append(time.perf_counter() - start)
        tally.outcomes[pb.PickResponse.Outcome.Name(pick.outcome)] += 1
        if pick.outcome not in ACCEPTED_OUTCOMES:
            tally.fail(f"Pick answered {pb.PickResponse.Outcome.Name(pick.outcome)}")
            return False
        pulled = len(await client.pull_all(pick.response_id))
        if pulled != pick.body_total_bytes:
            tally.fail(f"pulled {pulled} bytes of {pick.body_total_bytes}")
            return False
        if not await report(client, pick.response_id):
            tally.fail("a token report was not acknowledged")
            return False
    except grpc.aio.AioRpcError as error:
        if tally.error(error, spec_codes):
            raise SpecError(error.code().name) from error
        return False
    tally.completed += 1
    return True


class _Lazy(Collection[grpc.StatusCode]):
    """Spec codes read when an error arrives, not when its request started (a replica may
    be killed in between)."""

    def __init__(self, codes: Callable[[], Collection[grpc.StatusCode]]) -> None:
        self._codes = codes

    def __contains__(self, code: object) -> bool:
        return code in self._codes()

    def __iter__(self) -> Iterator[grpc.StatusCode]:
        return iter(self._codes())

    def __len__(self) -> int:
        return len(self._codes())


class SteadyLoad:
    """`workers` looping callers per client until stopped, each at most `rate` flows/s.

    `spec_codes(client)` names the statuses that count as spec errors for that client (it
    may change during the run, say once its replica is killed); a worker stops after a spec
    error, as a gateway stops sending to an instance that went away.
    """

    def __init__(
        self,
        clients: list[PickerClient],
        body: Body,
        *,
        workers: int = 2,
        spec_codes: Callable[[PickerClient], Collection[grpc.StatusCode]] = lambda c: (),
    ) -> None:
        self.tally = Tally()
        self._body = body
        self._spec_codes = spec_codes
        self._stop = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._run(client)) for client in clients for _ in range(workers)
        ]

    async def _run(self, client: PickerClient) -> None:
        codes = _Lazy(lambda: self._spec_codes(client))
        while not self._stop.is_set():
            try:
                await flow(client, self._body, self.tally, codes)
            except SpecError:
                return
            await asyncio.sleep(0)  # let the other callers and the scenario's waits run

    async def picks_beyond(self, count: int) -> bool:
        """Whether more than `count` requests completed (for `wait_for`)."""
        return self.tally.completed > count

    async def stop(self) -> Tally:
        """Let every caller finish the request it is in, then return the tally."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        return self.tally


async def warm_up(client: PickerClient, body: Body, flows: int) -> None:
    """Run `flows` requests first, so the RSS baseline includes what serving allocates once."""
    tally = Tally()
    for _ in range(flows):
        await flow(client, body, tally)
    if tally.failed:
        raise RuntimeError(f"warm-up failed: {tally.examples}")


async def hold(client: PickerClient, body: Body) -> pb.PickResponse:
    """A request picked and pulled but not yet reported: load until its final report (an
    unpulled body would be reclaimed after the body TTL, and its load with it)."""
    pick = await client.pick(await push(client, body))
    await client.pull_all(pick.response_id)
    return pick
