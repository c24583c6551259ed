"""The relay's response-transform hook: where a response is reshaped on its way to the client.

The gateway's own conventions and the API-shape translation (an Anthropic Messages client
served by an OpenAI chat destination, and the reverse) both plug in here, so the relay stays
one loop. A `TransformFactory` is asked once per dispatched request, after the upstream's
response head arrived; it answers None to relay the response untouched (the fast path:
no buffering, events forwarded as their received bytes) or a `ResponseTransform`:

- `headers(headers)`: the response headers to send (status stays the upstream's unless
  `status(...)` says otherwise); `content-length` is set by the relay itself;
- `whole(body)`: a non-streaming body, given once and complete (the relay buffers it);
- `event(event)`: one server-sent event, in order; returns the bytes to send for it
  (zero or more encoded events, `sse.encode_event` builds them; `event.raw` keeps it as is);
- `end()`: bytes to send after the upstream's last event (e.g. a closing event).

Metering (TTFT, ITL, usage for the picker's reports) always sees the upstream's own bytes,
before any transform. Factories run in order (`Transforms`); each sees what the one before
produced. A transform must not block: it runs on the event loop between two socket writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kinference.api.extensions import PickExtras
from kinference.gateway.sse import SseEvent, SseSplitter
from kinference.v1 import picker_pb2 as pb


@dataclass(frozen=True)
class Exchange:
    """What a transform may decide on: the client's request and where it went."""

    path: str  # the client's path, without the query
    request_headers: Mapping[str, str]  # the client's, names lower-case
    pick: pb.PickResponse
    status: int  # the upstream's
    content_type: str  # the upstream's, lower-case
    # Facts the gateway learnt from the client's body as it streamed by.
    client_asked_usage: bool = False
    # The extensions the picker sent back with Pick (kinference.api.extensions), typed.
    extras: PickExtras = field(default_factory=PickExtras)

    @property
    def event_stream(self) -> bool:
        return self.content_type.startswith("text/event-stream")


class ResponseTransform(Protocol):
    def status(self, status: int) -> int: ...

    def headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]: ...

    def whole(self, body: bytes) -> bytes: ...

    def event(self, event: SseEvent) -> bytes: ...

    def end(self) -> bytes: ...


TransformFactory = Callable[[Exchange], ResponseTransform | None]


class PassThrough:
    """A transform that changes nothing; subclass it and override what you change."""

    def status(self, status: int) -> int:
        return status

    def headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return headers

    def whole(self, body: bytes) -> bytes:
        return body

    def event(self, event: SseEvent) -> bytes:
        return event.raw

    def end(self) -> bytes:
        return b""


class Chain(PassThrough):
    """Transforms applied one after the other (each sees the output of the one before)."""

    def __init__(self, transforms: Sequence[ResponseTransform]) -> None:
        self._transforms = transforms

    def status(self, status: int) -> int:
        for transform in self._transforms:
            status = transform.status(status)
        return status

    def headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        for transform in self._transforms:
            headers = transform.headers(headers)
        return headers

    def whole(self, body: bytes) -> bytes:
        for transform in self._transforms:
            body = transform.whole(body)
        return body

    def event(self, event: SseEvent) -> bytes:
        events = [event]
        out = b""
        for index, transform in enumerate(self._transforms):
            out = b"".join([transform.event(one) for one in events])
            if index + 1 < len(self._transforms):
                events = SseSplitter().feed(out)
        return out

    def end(self) -> bytes:
        pending = b""
        for transform in self._transforms:
            events = SseSplitter().feed(pending) if pending else []
            pending = b"".join([transform.event(one) for one in events]) + transform.end()
        return pending


class Transforms:
    """The factories in order; `for_exchange` is what the relay asks."""

    def __init__(self, factories: Sequence[TransformFactory] = ()) -> None:
        self.factories = list(factories)

    def add(self, factory: TransformFactory) -> None:
        self.factories.append(factory)

    def for_exchange(self, exchange: Exchange) -> ResponseTransform | None:
        chosen = [t for f in self.factories if (t := f(exchange)) is not None]
        if not chosen:
            return None
        return chosen[0] if len(chosen) == 1 else Chain(chosen)
