"""Reports and Aborts sent off the response path, in order per request.

A report must not hold back the bytes a client is waiting for, and an Abort for a client
that went away must still go out although the task serving it was cancelled. So each is a
task of its own, tracked here until done; `aclose` waits for the last ones at shutdown.
A failed report is logged and dropped: the picker reclaims by TTL what it never hears of.

With a picker that knows kinference's extensions, a first-token report waits up to
`FIRST_TOKEN_HOLD_S` for the final one and rides on it (`kinference-first-token` metadata):
one call instead of two for every response that finishes that soon (all whole ones).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc

from kinference import itl_layout
from kinference.client import PickerClient
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage
from kinference.v1 import picker_pb2 as pb

log = logging.getLogger(__name__)

AbortReason: TypeAlias = pb.AbortRequest.Reason.ValueType
# How long (seconds) a first-token report waits for the final one to ride on; later, it goes
# alone (the picker learns of a long stream's first token this much later, no more).
FIRST_TOKEN_HOLD_S = 0.02


class Reporter:
    """Runs report calls as tracked background tasks on the gateway's one picker client."""

    def __init__(self, client: PickerClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, call: Callable[[], Awaitable[Any]], what: str) -> asyncio.Task[None]:
        task = asyncio.create_task(self._run(call, what), name=f"kinference-gateway-{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, call: Callable[[], Awaitable[Any]], what: str) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await call()
        except grpc.aio.AioRpcError as error:
            # NOT_FOUND on Abort is normal: the request was already released.
            if error.code() != grpc.StatusCode.NOT_FOUND:
                log.warning("%s failed: %s %s", what, error.code().name, error.details())
        except TimeoutError:
            log.warning("%s timed out after %gs", what, self.timeout_s)
        except Exception:  # a report is best effort; the picker's TTL covers a lost one
            log.exception("%s failed", what)

    async def aclose(self) -> None:
        """Wait for every report still under way."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class RequestReports:
    """The reports of one picked request; each waits for the one before it."""

    def __init__(self, reporter: Reporter, response_id: int, *, merge_first: bool = False) -> None:
        """`merge_first`: the picker takes a first-token report inside the final one."""
        self._reporter = reporter
        self._response_id = response_id
        self._last: asyncio.Task[None] | None = None
        self._merge_first = merge_first
        # A first-token report waiting for the final one: (ttft ms, status, when held).
        self._held: tuple[int, int, float] | None = None
        self._hold: asyncio.TimerHandle | None = None

    @property
    def reporter(self) -> Reporter:
        return self._reporter

    def first_token(self, ttft_ms: int, upstream_status: int) -> None:
        if self._merge_first:
            self._take_held()  # a repeated report replaces the one held
            self._held = (ttft_ms, upstream_status, time.monotonic())
            loop = asyncio.get_running_loop()
            self._hold = loop.call_later(FIRST_TOKEN_HOLD_S, self._send_held)
            return
        self._send_first(ttft_ms, upstream_status)

    def _send_first(self, ttft_ms: int, upstream_status: int) -> None:
        client, response_id = self._reporter.client, self._response_id
        self._chain(lambda: client.first_token(response_id, ttft_ms, upstream_status), "first")

    def _send_held(self) -> None:
        self._hold = None
        held = self._take_held()
        if held is not None:
            self._send_first(held[0], held[1])

    def _take_held(self) -> tuple[int, int, float] | None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None
        held, self._held = self._held, None
        return held

    def final(self, usage: Usage, clock: TokenClock, fallback_model: str) -> None:
        client, response_id = self._reporter.client, self._response_id
        counts = clock.itl_bucket_counts
        assert not counts or itl_layout.LAYOUT == 1  # PickerClient.final_token sends layout 1
        held = self._take_held()
        first = None
        if held is not None:  # rides on the final report, dated when it came
            ttft_ms, status, at = held
            first = (ttft_ms, status, int((time.monotonic() - at) * 1000))

        async def send() -> None:
            await client.final_token(
                response_id,
                model=usage.model or fallback_model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cached_tokens=usage.cached_tokens,
                itl_bucket_counts=counts,
                first_token=first,
            )

        self._chain(send, "final")

    def abort(self, reason: AbortReason, detail: str) -> None:
        held = self._take_held()
        if held is not None:  # in order: the first token (an upstream's status), then Abort
            self._send_first(held[0], held[1])
        client, response_id = self._reporter.client, self._response_id
        self._chain(lambda: client.abort(response_id, reason, detail[:500]), "abort")

    def _chain(self, call: Callable[[], Awaitable[Any]], what: str) -> None:
        before = self._last

        async def in_order() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            await call()

        self._last = self._reporter.spawn(in_order, what)
