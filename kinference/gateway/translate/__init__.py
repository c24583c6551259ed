"""Responses translated back to the client's API shape (Anthropic Messages <-> OpenAI chat).

When the picker rewrote a request for a destination speaking the other API (its Pick
metadata says `kinference-translated: WRITTEN:SENT`), the response comes back in SENT's
shape. `translator_for` gives the transform that turns it into WRITTEN's: headers, a whole
body (success or error), each server-sent event, and the end of the stream. Pure: no I/O,
nothing kept but the state of one stream.
"""

from __future__ import annotations

import json
from typing import Any

from kinference.gateway.hooks import Exchange
from kinference.gateway.translate import to_anthropic, to_openai
from kinference.gateway.translate.events import Event
from kinference.requests.shapes import Shape

MAX_WHOLE_BYTES = 32 * 1024 * 1024  # a whole body larger than this is relayed as it is
_DROPPED = frozenset({"content-length", "content-type", "content-encoding", "etag"})


class Translator:
    """One response, from the destination's API (`sent`) to the client's (`written`)."""

    def __init__(
        self, written: Shape, status: int, event_stream: bool, *, usage_asked: bool = False
    ) -> None:
        self._to_anthropic = written is Shape.ANTHROPIC_MESSAGES
        self._status = status
        self._event_stream = event_stream
        self._stream = to_anthropic.StreamToAnthropic() if self._to_anthropic else None
        self._stream_openai = (
            None if self._to_anthropic else to_openai.StreamToOpenAI(usage_chunk=usage_asked)
        )

    def status(self, status: int) -> int:
        return status

    def headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        kept = [(name, value) for name, value in headers if name.lower() not in _DROPPED]
        kind = "text/event-stream" if self._event_stream else "application/json"
        return [*kept, ("content-type", kind)]

    def whole(self, body: bytes) -> bytes:
        if len(body) > MAX_WHOLE_BYTES:
            return body
        try:
            document: Any = json.loads(body)
        except ValueError:
            return body  # not JSON (an engine's plain-text error): as it came
        if not isinstance(document, dict):
            return body
        return json.dumps(self._document(document), separators=(",", ":")).encode()

    def event(self, event: Event) -> bytes:
        if self._stream is not None:
            return self._stream.event(event)
        assert self._stream_openai is not None
        return self._stream_openai.event(event)

    def end(self) -> bytes:
        if self._stream is not None:
            return self._stream.end()
        assert self._stream_openai is not None
        return self._stream_openai.end()

    def _document(self, document: dict[str, Any]) -> dict[str, Any]:
        failed = self._status >= 400 or document.get("type") == "error" or "error" in document
        if self._to_anthropic:
            if failed:
                return to_anthropic.error(document, self._status)
            return to_anthropic.whole(document)
        return to_openai.error(document, self._status) if failed else to_openai.whole(document)


def translate_response(exchange: Exchange) -> Translator | None:
    """The response transform of the relay's hook (kinference.gateway.hooks): a Translator
    when the picker translated the request (its `kinference-translated` extension)."""
    extras = exchange.extras
    return translator_for(
        extras.translated,
        exchange.status,
        exchange.event_stream,
        usage_asked=extras.usage_asked,
    )


def translator_for(
    translated: tuple[Shape, Shape] | None,
    status: int,
    event_stream: bool,
    *,
    usage_asked: bool = False,
) -> Translator | None:
    """The translator for a response whose request was translated, else None.
    `usage_asked`: an OpenAI client asked for the stream's usage chunk."""
    if translated is None:
        return None
    written, sent = translated
    if {written, sent} != {Shape.CHAT, Shape.ANTHROPIC_MESSAGES}:
        return None
    return Translator(written, status, event_stream, usage_asked=usage_asked)


__all__ = ["MAX_WHOLE_BYTES", "Translator", "translate_response", "translator_for"]
