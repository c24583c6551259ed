"""Hostile calls run beside polite ones, with the event loop watched (issue 15, item 1).

The shape every "never holds the loop" test shares: the startup heap frozen as
`kinference serve` freezes it, a few hostile callers sent at once while polite callers keep
picking a small chat body, a probe on the loop (the server shares it), then the checks that
the loop itself did no hostile body's work (`BodyWork`: no dense body parsed there) and no long step
(`LOOP_STEP_LIMIT_S`), and that the parse worker, another process, did the work.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kinference import preparation
from kinference.bodies import Body
from kinference.heap import freeze_startup_heap
from kinference.requests import scan
from kinference.requests.loop_cost import LOOP_PARSE_S, SECONDS_PER_VALUE
from kinference.requests.offload import INLINE_PARSE_BYTES
from tests.api.helpers import chat_body
from tests.conftest import RunningPicker

T = TypeVar("T")

MiB = 1 << 20
# The worst CPU one callback of the loop (a task's step; gRPC's completion drain apart) may
# spend: a bound for gross regressions only (a scan of a dense 1 MiB chunk on the loop took
# 1.3 s). Not a finer one: this machine's thread CPU times include what the hypervisor
# steals (a 1 ms parse of a small body read 98 ms once, user time, with the thread
# preempted), so 5-40 ms of real work reads 50-100 ms when the host is busy. What proves
# that the work left the loop is `BodyWork`: what, not how long.
LOOP_STEP_LIMIT_S = 0.5
# The most values a body the loop parses may hold (its parse budget at the values' rate):
# a dense hostile body holds hundreds of thousands.
LOOP_PARSE_VALUES = round(LOOP_PARSE_S / SECONDS_PER_VALUE)
HOSTILE_CALLERS = 3
POLITE_CALLERS = 4
# grpc.aio's drain of C-core completions (a functools.partial of it is the reader callback):
# it runs every queued completion in one go, so it grows with the backlog.
_TRANSPORT = "PollerCompletionQueue._handle_events"
# (The package `kinference.requests` exports a function named `rewrite`: the module by name.)
_REWRITE = importlib.import_module("kinference.requests.rewrite")


class BodyWork:
    """While it runs, the most JSON values (',' '[' '{' counted in the bytes, whatever the
    scan said) of a body over INLINE_PARSE_BYTES the loop's thread parsed
    (`preparation.parsed_body`), the largest body it translated (`rewrite.translation`), and the
    largest piece it scanned without a deadline (`JsonScanner.feed_until` with none): a
    hostile body's must all be the parse worker's, so the values stay within what the
    loop's parse budget admits (`LOOP_PARSE_VALUES`) and the bytes at most
    INLINE_PARSE_BYTES. Calls in other threads are not counted."""

    def __init__(self) -> None:
        self.largest = {"parse values": 0, "translate": 0, "unbounded scan": 0}
        self._thread = threading.get_ident()
        self._unwrapped = [
            (preparation, "parsed_body", preparation.parsed_body),
            (_REWRITE, "translation", _REWRITE.translation),
            (scan.JsonScanner, "feed_until", scan.JsonScanner.feed_until),
        ]
        preparation.parsed_body = self._sized(
            "parse values", preparation.parsed_body, _values_over_inline
        )
        _REWRITE.translation = self._sized("translate", _REWRITE.translation, lambda a: a[0].size)
        feed_until = scan.JsonScanner.feed_until
        scan.JsonScanner.feed_until = self._sized(  # type: ignore[method-assign]
            "unbounded scan", feed_until, lambda a: len(a[1]) if a[2] == math.inf else 0
        )

    def _sized(
        self, kind: str, function: Callable[..., Any], size: Callable[[tuple[Any, ...]], int]
    ) -> Callable[..., Any]:
        @functools.wraps(function)
        def sized(*args: Any) -> Any:
            if threading.get_ident() == self._thread:
                self.largest[kind] = max(self.largest[kind], size(args))
            return function(*args)

        return sized

    def stop(self) -> dict[str, int]:
        for owner, name, function in self._unwrapped:
            setattr(owner, name, function)
        return self.largest


def _values_over_inline(args: tuple[Any, ...]) -> int:
    """The JSON values of a body over INLINE_PARSE_BYTES, at most: its ',' '[' '{' (0 for
    a smaller one, which the loop parses whatever it holds)."""
    body: Body = args[0]
    if body.size <= INLINE_PARSE_BYTES:
        return 0
    pieces = [bytes(piece) for piece in body.pieces]
    return sum(piece.count(b",") + piece.count(b"[") + piece.count(b"{") for piece in pieces)


class LagProbe:
    """Watches the event loop (the server shares it): how late a 2 ms sleeper wakes (wall
    clock: machine load shows in it too), and the most CPU one callback of the loop spent
    (`thread_time` around each `asyncio.Handle._run`, wrapped while the probe runs), apart
    for gRPC's completion drain (`worst_transport_cpu_s`, printed): work done on the loop,
    which another process taking the core, another thread holding the GIL or a backlog of
    other callbacks does not add to."""

    def __init__(self) -> None:
        self.worst_s = 0.0
        self.worst_cpu_s = 0.0
        self.worst_transport_cpu_s = 0.0
        self._unwrapped = asyncio.events.Handle._run
        unwrapped = self._unwrapped

        def timed(handle: asyncio.Handle) -> None:
            started = time.thread_time()
            try:
                unwrapped(handle)
            finally:
                spent = time.thread_time() - started
                callback = handle._callback  # type: ignore[attr-defined]
                if _TRANSPORT in getattr(getattr(callback, "func", callback), "__qualname__", ""):
                    self.worst_transport_cpu_s = max(self.worst_transport_cpu_s, spent)
                else:
                    self.worst_cpu_s = max(self.worst_cpu_s, spent)

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.002)
            self.worst_s = max(self.worst_s, loop.time() - before - 0.002)

    async def stop(self) -> tuple[float, float]:
        asyncio.events.Handle._run = self._unwrapped  # type: ignore[method-assign]
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self.worst_s, self.worst_cpu_s


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What the hostile callers returned; the polite callers' Picks: latencies (s), outcomes."""

    hostile: list[T]
    polite_latencies: list[float]
    polite_outcomes: list[int]


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def beside_polite(
    picker: RunningPicker, hostile_call: Callable[[], Awaitable[T]], worker_cpu_min_s: float
) -> Outcome[T]:
    """`HOSTILE_CALLERS` runs of `hostile_call` at once beside `POLITE_CALLERS` callers
    picking a chat body until they end; asserts that the loop parsed, translated and
    scanned no hostile body (`BodyWork`), that no callback of the loop ran grossly long
    (`LOOP_STEP_LIMIT_S`) and that the parse worker spent over `worker_cpu_min_s`."""
    freeze_startup_heap()  # as `kinference serve` does once it is up
    try:
        return await _run(picker, hostile_call, worker_cpu_min_s)
    finally:
        gc.unfreeze()


async def _run(
    picker: RunningPicker, hostile_call: Callable[[], Awaitable[T]], worker_cpu_min_s: float
) -> Outcome[T]:
    client = picker.client
    work = BodyWork()
    probe = LagProbe()
    latencies: list[float] = []
    outcomes: list[int] = []

    async def polite_caller(stop: asyncio.Event) -> None:
        body = chat_body()
        while not stop.is_set():
            started = time.monotonic()
            pick = await client.pick((await client.push([body])).stream_id)
            latencies.append(time.monotonic() - started)
            outcomes.append(pick.outcome)
            await client.abort(pick.response_id)

    stop = asyncio.Event()
    polite = [asyncio.create_task(polite_caller(stop)) for _ in range(POLITE_CALLERS)]
    try:
        hostile = await asyncio.gather(*(hostile_call() for _ in range(HOSTILE_CALLERS)))
        stop.set()
        await asyncio.gather(*polite)
    finally:
        stop.set()
        worst, worst_cpu = await probe.stop()
        largest = work.stop()
    transport = probe.worst_transport_cpu_s
    print(f"worst loop lag {worst * 1000:.1f} ms (loop CPU: a callback {worst_cpu * 1000:.1f} "
          f"ms, gRPC's completions {transport * 1000:.1f} ms), polite picks {len(latencies)}, "
          f"largest on the loop {largest}")  # fmt: skip
    worker = picker.app.service.offload.worker_pid
    assert worker is not None, "the hostile calls never reached the parse worker"
    worker_cpu = process_cpu_s(worker)
    print(f"parse worker CPU {worker_cpu:.1f} s")
    assert largest["parse values"] <= LOOP_PARSE_VALUES, f"the loop's own body work: {largest}"
    assert largest["translate"] <= INLINE_PARSE_BYTES, f"the loop's own body work: {largest}"
    assert largest["unbounded scan"] <= INLINE_PARSE_BYTES, f"the loop's own body work: {largest}"
    assert worst_cpu < LOOP_STEP_LIMIT_S, f"the loop itself worked {worst_cpu * 1000:.0f} ms"
    assert worker_cpu > worker_cpu_min_s, f"the worker did {worker_cpu:.2f} s of the work"
    return Outcome(list(hostile), latencies, outcomes)
