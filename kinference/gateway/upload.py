"""The client's body on its way into PushBody: re-chunked to the spec's 1 MiB, capped in
size and in time.

The gateway enforces its own body limit (`KINFERENCE_GATEWAY_MAX_BODY_BYTES`, the picker's
default) rather than leave it to the picker alone: when the picker fails a PushBody while
the caller is still writing, grpc.aio can report INTERNAL instead of RESOURCE_EXHAUSTED
(grpc/grpc#36066), and the client would get a 502 for what is a 413. A body over the limit
resets the PushBody stream, so the picker discards what it got (spec).

A body still arriving `time_limit_s` after its push began is cut the same way, with a 408
(`KINFERENCE_GATEWAY_BODY_TOTAL_TIMEOUT_S`): the picker's idle timeout bounds the silence
between two chunks only (as nginx's `client_body_timeout`), so a body trickled a byte at a
time just under it held its connection, and its partial bytes in the picker's budget, for
ever. Checked as each piece arrives (a body that stops altogether is the idle timeout's).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from kinference.bodies import MAX_CHUNK_BYTES
from kinference.gateway.asked import UsageAsk
from kinference.gateway.errors import GatewayError


class BodyCut(Exception):
    """The gateway stopped pushing the body: over its size or its time limit."""


class BodyTooLarge(BodyCut):
    """The body grew past the gateway's limit while it was being pushed."""


class BodyTooSlow(BodyCut):
    """The body was still arriving past the gateway's time limit."""


class Upload:
    """One body being pushed; `chunks()` is the PushBody request stream. `time_limit_s`
    None leaves its time unbounded."""

    def __init__(
        self, body: AsyncIterator[bytes], limit: int, time_limit_s: float | None = None
    ) -> None:
        self._body = body
        self.limit = limit
        self.time_limit_s = time_limit_s
        self.too_large = False
        self.too_slow = False
        self.usage_ask = UsageAsk()

    def check_declared(self, declared: int | None) -> None:
        """Refuse at once a body whose Content-Length is over the limit."""
        if declared is not None and declared > self.limit:
            raise self.error()

    def whole(self, data: bytes) -> list[bytes]:
        """A body that arrived whole, as the chunks `chunks()` would have yielded; raises
        `BodyTooLarge` as it would (no time limit: it is all here)."""
        self.usage_ask.feed(data)
        if len(data) > self.limit:
            self.too_large = True
            raise BodyTooLarge
        return _cut(data)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, in chunks of at most 1 MiB (spec)."""
        total = 0
        feed = self.usage_ask.feed
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.time_limit_s or float("inf"))
        async for data in self._body:
            if loop.time() > deadline:
                self.too_slow = True
                raise BodyTooSlow  # cancels the push, as for a body too large
            feed(data)
            total += len(data)
            if total > self.limit:
                self.too_large = True
                raise BodyTooLarge  # grpc.aio cancels the call: RST_STREAM to the picker
            for chunk in _cut(data):
                yield chunk

    @property
    def cut(self) -> bool:
        """Whether the gateway stopped the push (size or time)."""
        return self.too_large or self.too_slow

    def cut_short(self) -> bool:
        """True when the push failed because the body went over a limit, and not
        because the task serving the request is itself being cancelled."""
        task = asyncio.current_task()
        return self.cut and (task is None or task.cancelling() == 0)

    def error(self) -> GatewayError:
        if self.too_slow:
            return GatewayError(
                408,
                "request_timeout",
                f"the body did not arrive within the gateway's {self.time_limit_s:g} s",
            )
        return GatewayError(
            413, "request_too_large", f"the body is over the gateway's {self.limit}-byte limit"
        )


def _cut(data: bytes) -> list[bytes]:
    """`data` in chunks of at most 1 MiB (spec); none for no bytes."""
    if len(data) <= MAX_CHUNK_BYTES:
        return [data] if data else []
    return [data[start : start + MAX_CHUNK_BYTES] for start in range(0, len(data), MAX_CHUNK_BYTES)]
