"""The remote gateway's one PickerSession stream: opened on first use, reopened after it
breaks, and not tried again for `RETRY_UNSUPPORTED_S` after a picker answered UNIMPLEMENTED
(the gateway then makes the Picker service's calls, kinference.gateway.remote)."""

from __future__ import annotations

import asyncio
import time

import grpc

from kinference.session_client import SessionClient, Unsent

RETRY_UNSUPPORTED_S = 60.0


class SessionLink:
    """Hands out the open stream, opening one when there is none (one opening at a time)."""

    def __init__(self, channel: grpc.aio.Channel, unsent: Unsent) -> None:
        self._channel = channel
        self._unsent = unsent
        self._current: SessionClient | None = None
        self._opening: asyncio.Task[SessionClient | None] | None = None
        self._unsupported_until = 0.0
        self._closed = False

    def current(self) -> SessionClient | None:
        """The open stream, if there is one (reports ride on it)."""
        current = self._current
        return current if current is not None and current.alive else None

    async def get(self) -> SessionClient | None:
        """The open stream, or a new one; None when the picker does not serve it.
        Raises `grpc.aio.AioRpcError` when the picker cannot be reached."""
        current = self.current()
        if current is not None or self._closed:
            return current
        if time.monotonic() < self._unsupported_until:
            return None
        if self._opening is None:
            self._opening = asyncio.create_task(self._open(), name="kinference-session-open")
        return await asyncio.shield(self._opening)

    async def _open(self) -> SessionClient | None:
        try:
            session = await SessionClient.open(self._channel, self._unsent)
            if session is None:
                self._unsupported_until = time.monotonic() + RETRY_UNSUPPORTED_S
            self._current = session
            return session
        finally:
            self._opening = None

    async def aclose(self, timeout_s: float) -> None:
        """Flush and end the stream (the picker answers what is under way first)."""
        self._closed = True
        if self._opening is not None:
            await asyncio.gather(self._opening, return_exceptions=True)
        if self._current is not None:
            await self._current.aclose(timeout_s)
