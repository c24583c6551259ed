"""One inference request through the gateway: the flow, the relayed response and the
client's hang-up.

The flow (kinference.gateway.flow) pushes the body to the picker as it arrives, picks, and
returns the upstream's response as a `Relay`; this module streams that response to the
client over ASGI and records the request's metrics. A client that hangs up after its body
arrived cancels the request (its Abort goes to the picker from the relay's `finish`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from kinference.gateway import errors
from kinference.gateway.asgi import Gateway, Receive, Scope, Send, send_error
from kinference.gateway.errors import GatewayError
from kinference.gateway.flow import Incoming
from kinference.gateway.http1 import UpstreamError
from kinference.gateway.joined import CUT, WRITE
from kinference.gateway.relay import Relay
from kinference.gateway.timing import TokenClock
from kinference.gateway.usage import Usage

log = logging.getLogger(__name__)

# Seconds after its body arrived from which a request watches for its client hanging up.
WATCH_AFTER_S = 0.05


class ClientDisconnect(Exception):
    """The client went away before its body was complete."""


class Exchange:
    """One inference request: the flow, the relayed response and the client's hang-up."""

    def __init__(
        self, gateway: Gateway, scope: Scope, receive: Receive, send: Send, route: str
    ) -> None:
        self.gateway = gateway
        self.scope = scope
        self.receive = receive
        self.send = send
        self.route = route
        self.started = time.perf_counter()
        self.model = "none"
        self._task = asyncio.current_task()
        self._watcher: asyncio.Future[Any] | None = None
        self._watch_timer: asyncio.TimerHandle | None = None
        self._done = False
        self.gone = False
        self._first: bytes | None = None  # a first body piece `_whole` took, not whole

    async def run(self) -> None:
        try:
            await self._serve(self.gateway.ids.of(self.scope))
        except asyncio.CancelledError:
            if not self.gone or self._task is None:
                raise
            self._task.uncancel()  # our own cancellation: the client hung up
        finally:
            self._done = True
            if self._watch_timer is not None:
                self._watch_timer.cancel()
            if self._watcher is not None:
                self._watcher.cancel()

    async def _serve(self, request_id: str) -> None:
        scope = self.scope
        incoming = Incoming(
            method=scope["method"],
            path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body=self._body(),
            request_id=request_id,
            whole=self._whole,
            on_finish=self._finished,
        )
        try:
            relay = await self.gateway.flow.run(incoming)
        except GatewayError as error:
            await self._error(error, request_id)
            return
        except ClientDisconnect:  # the client went away mid-upload; nobody reads this
            self.gateway.metrics.answered(self.route, "none", 499, self._elapsed())
            return
        self.model = self.gateway.metrics.models.label(relay.model, True)
        await self._relay(relay, request_id)

    async def _relay(self, relay: Relay, request_id: str) -> None:
        try:
            try:
                await relay.start()
            except UpstreamError:  # nothing sent yet: the error JSON (finish counts the 502)
                error = errors.upstream_failed("the upstream failed mid-response")
                await send_error(self.send, error, request_id, path=self.scope["path"])
                return
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in relay.headers]
            headers.append((b"x-request-id", request_id.encode()))
            send = self.send
            await send({"type": "http.response.start", "status": relay.status, "headers": headers})
            if (direct := self.scope.get("extensions", {}).get(WRITE)) is not None:
                relay.direct = direct["write"]  # a stream's pieces written as they come
            ended = False
            try:
                async for chunk in relay.body():
                    ended = relay.ending  # the last chunk and the end of the body: one write
                    await send(
                        {"type": "http.response.body", "body": chunk, "more_body": not ended}
                    )
            except UpstreamError as exc:
                await self._cut_short(relay, exc, request_id)
                return
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            relay.finish()

    async def _cut_short(self, relay: Relay, exc: UpstreamError, request_id: str) -> None:
        """The upstream failed after the response's head went out (its Abort and the 502 in
        the metrics come from `relay.finish`). A stream at an event's end ends with an error
        event in the API's shape; any other body is cut short (the connection closes without
        the body's end, so the client cannot take it for whole); one line is logged."""
        path = self.scope["path"]
        log.warning("request %s: upstream failed mid-response: %s %s", request_id,
                    type(exc).__name__, exc)  # fmt: skip
        if relay.between_events:
            event = errors.upstream_failed("the upstream failed mid-stream").event(path)
            await self.send({"type": "http.response.body", "body": event, "more_body": False})
            return
        extension = self.scope.get("extensions", {}).get(CUT)
        if extension is None:
            raise exc  # a server without the extension closes the connection itself
        extension["cut"]()

    async def _whole(self) -> bytes | None:
        """The body, when its first message is all of it (a body that came with its head:
        nearly every request); else None, and `_body` yields it all, that message first."""
        message = await self.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        body: bytes = message.get("body", b"")
        if message.get("more_body", False):
            self._first = body
            return None
        self._watch()
        return body

    async def _body(self) -> AsyncIterator[bytes]:
        receive = self.receive
        if self._first is not None:
            first, self._first = self._first, None
            if first:
                yield first
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect
            body = message.get("body", b"")
            more = message.get("more_body", False)
            if not more:
                self._watch()
            if body:
                yield body
            if not more:
                return

    def _watch(self) -> None:
        """From the end of the body on, a client that hangs up cancels the request: once it
        has been under way for `WATCH_AFTER_S` (a request answered sooner never pays for the
        watching task; a hang-up before then is noticed then)."""
        loop = asyncio.get_running_loop()
        self._watch_timer = loop.call_later(WATCH_AFTER_S, self._start_watching)

    def _start_watching(self) -> None:
        self._watch_timer = None
        if self._done:
            return
        self._watcher = asyncio.ensure_future(self.receive())
        self._watcher.add_done_callback(self._hung_up)

    def _hung_up(self, watcher: asyncio.Future[Any]) -> None:
        if self._done or watcher.cancelled() or self._task is None:
            return
        self.gone = True
        self._task.cancel()

    async def _error(self, error: GatewayError, request_id: str) -> None:
        await send_error(self.send, error, request_id, path=self.scope["path"])
        self.gateway.metrics.answered(self.route, self.model, error.status, self._elapsed())

    def _finished(self, status: int, usage: Usage | None, clock: TokenClock) -> None:
        self.gateway.metrics.relayed(
            self.route, self.model, status, self._elapsed(), usage=usage, clock=clock
        )

    def _elapsed(self) -> float:
        return time.perf_counter() - self.started
