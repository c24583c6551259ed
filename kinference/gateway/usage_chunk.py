"""The stream usage chunk the picker asked for, hidden from a client that did not ask for it.

The picker's rewrite sets `stream_options.include_usage` on every OpenAI stream so that the
gateway can report tokens; OpenAI-compatible engines then end the stream with a chunk whose
`choices` is empty, which breaks client code reading `chunk.choices[0]`. The gateway meters
that chunk and, unless the client's own body asked for it (kinference.gateway.asked), does
not forward it. This is the last transform of the chain: a translated stream that ends up
OpenAI-shaped gets the same treatment.
"""

from __future__ import annotations

from kinference.gateway.hooks import Exchange, PassThrough
from kinference.gateway.sse import SseEvent


class HideAddedUsage(PassThrough):
    """Drops `{"choices": [], "usage": {...}}` events; every other event goes out as is."""

    def event(self, event: SseEvent) -> bytes:
        raw = event.raw
        if b'"usage"' not in raw and b"\\" not in raw:  # no such member, escaped or not:
            return raw  # no parse (a token's event, told by its shape, is not parsed at all)
        document = event.json()
        if document is not None and document.get("choices") == [] and "usage" in document:
            return b""
        return event.raw


def hide_added_usage(exchange: Exchange) -> HideAddedUsage | None:
    """The transform for a successful event stream whose client did not ask for usage."""
    if exchange.event_stream and exchange.status < 400 and not exchange.client_asked_usage:
        return HideAddedUsage()
    return None
