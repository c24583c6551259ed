"""The client's body on its way into PushBody: re-chunked to the spec's 1 MiB, size-capped.

The gateway enforces its own body limit (`KINFERENCE_GATEWAY_MAX_BODY_BYTES`, the picker's
default) rather than leave it to the picker alone: when the picker fails a PushBody while
the caller is still writing, grpc.aio can report INTERNAL instead of RESOURCE_EXHAUSTED
(grpc/grpc#36066), and the client would get a 502 for what is a 413. A body over the limit
resets the PushBody stream, so the picker discards what it got (spec).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from kinference.bodies import MAX_CHUNK_BYTES
from kinference.gateway.asked import UsageAsk
from kinference.gateway.errors import GatewayError


class BodyTooLarge(Exception):
    """The body grew past the gateway's limit while it was being pushed."""


class Upload:
    """One body being pushed; `chunks()` is the PushBody request stream."""

    def __init__(self, body: AsyncIterator[bytes], limit: int) -> None:
        self._body = body
        self.limit = limit
        self.too_large = False
        self.usage_ask = UsageAsk()

    def check_declared(self, declared: int | None) -> None:
        """Refuse at once a body whose Content-Length is over the limit."""
        if declared is not None and declared > self.limit:
            raise self.error()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, in chunks of at most 1 MiB (spec)."""
        total = 0
        feed = self.usage_ask.feed
        async for data in self._body:
            feed(data)
            total += len(data)
            if total > self.limit:
                self.too_large = True
                raise BodyTooLarge  # grpc.aio cancels the call: RST_STREAM to the picker
            if len(data) <= MAX_CHUNK_BYTES:
                if data:
                    yield data
                continue
            for start in range(0, len(data), MAX_CHUNK_BYTES):
                yield data[start : start + MAX_CHUNK_BYTES]

    def cut_short(self) -> bool:
        """True when the push failed because the body went over the limit, and not
        because the task serving the request is itself being cancelled."""
        task = asyncio.current_task()
        return self.too_large and (task is None or task.cancelling() == 0)

    def error(self) -> GatewayError:
        return GatewayError(
            413, "request_too_large", f"the body is over the gateway's {self.limit}-byte limit"
        )
