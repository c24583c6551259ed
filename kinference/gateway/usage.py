"""Reads a response as it streams by: content events (for timing), usage and served model.

Server-sent events are split into events as bytes arrive; each `data:` payload is parsed
(they are small) to tell content from role-only or usage-only chunks and to pick up `usage`,
which the picker's rewrite asks for on streams (`stream_options.include_usage`). A plain
JSON response is kept up to `MAX_JSON_BYTES` and parsed at the end. Shapes understood:
OpenAI chat, completions, embeddings and responses; Anthropic messages.

Without usage, the completion tokens are the content events counted (about one token each)
and the prompt tokens are unknown (0). A count the reports cannot carry (not an integer in
0..2**32-1, the spec's uint32: `true`, `1e3`, 2**40) is taken as absent, and a served model
name over `MAX_MODEL_CHARS` (the longest a policy may hold) as unknown: before, a count
past uint32 failed the report to a remote picker (the request held as load until its TTL,
a traceback per response) and was counted as given in process and in the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kinference.config.fields import MAX_MODEL_CHARS
from kinference.gateway.shape import ContentShape, learned
from kinference.gateway.sse import SseEvent, SseSplitter, json_object
from kinference.gateway.timing import TokenClock

MAX_JSON_BYTES = 8 * 1024 * 1024  # a non-streaming response larger than this is not parsed
MAX_COUNT = 2**32 - 1  # the largest token count a report carries (uint32)
_DELTA_KEYS = ("content", "reasoning_content", "reasoning", "tool_calls", "refusal")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens")
_COMPLETION_KEYS = ("completion_tokens", "output_tokens")
# The members `_observe` reads besides `model`: an event with none of them has nothing for it.
_NOTHING_TO_OBSERVE = frozenset({"usage", "response", "message"})


@dataclass
class Usage:
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    from_response: bool = False  # False: counted by the gateway, not reported upstream


class ResponseMeter:
    """Feed it every response byte in order; `feed` says when the first token went by."""

    def __init__(self, *, event_stream: bool, clock: TokenClock) -> None:
        self.clock = clock
        self.usage = Usage()
        self._event_stream = event_stream
        self._pending = bytearray()  # JSON: the body so far
        self._splitter = SseSplitter()
        self._broken = False  # too large to follow: stop parsing, keep timing what we can
        self.shape: ContentShape | None = None  # the stream's content events, once learnt
        # The stream's own end went by (OpenAI `data: [DONE]`, a terminal `_END_EVENTS`):
        # the response is whole whatever happens to the connection after it.
        self.ended = False

    def feed(self, chunk: bytes) -> bool:
        """Account for `chunk`; True when it carried the response's first token."""
        if not chunk:
            return False
        if not self._event_stream:
            first = self.clock.ttft_ms is None
            self.clock.first_byte()
            self._keep_json(chunk)
            return first
        return self._feed_events(chunk)

    def finish(self) -> Usage:
        """The usage once the response ended; falls back to counted events."""
        if not self._event_stream and not self._broken and self._pending:
            document = json_object(bytes(self._pending))
            if document is not None:
                self._observe(document)
        if not self.usage.from_response:
            self.usage.completion_tokens = self.clock.tokens
        return self.usage

    def _keep_json(self, chunk: bytes) -> None:
        if self._broken:
            return
        if len(self._pending) + len(chunk) > MAX_JSON_BYTES:
            self._broken = True
            self._pending.clear()
            return
        self._pending += chunk

    def _feed_events(self, chunk: bytes) -> bool:
        first = False
        for event in self._splitter.feed(chunk):
            first = self.event(event) or first
        return first

    def event(self, event: SseEvent) -> bool:
        """Account for one server-sent event; True when it carried the first token."""
        document = event.json()
        if document is None:
            self.ended |= event.done
            return False
        # Once the model is known, only a usage can change anything (most events: neither).
        if not self.usage.model or not _NOTHING_TO_OBSERVE.isdisjoint(document):
            self._observe(document)
        if _has_content(document):
            if self.shape is None and not event.name and event.data is not None:
                self.shape = learned(event.data, document)
            return self.clock.token()
        self.ended |= event.name in _END_EVENTS  # looked at only past content events
        return False

    def shaped(self, data: bytes) -> bool | None:
        """For an unnamed event's payload: a content event of the stream's own shape
        (kinference.gateway.shape) has its token counted without a parse (True when it was
        the first); None when `data` is not one (then `event` it)."""
        shape = self.shape
        if shape is None or not shape.matches(data):
            return None
        return self.clock.token()

    def _observe(self, event: dict[str, Any]) -> None:
        for holder in (event, event.get("response"), event.get("message")):
            if not isinstance(holder, dict):
                continue
            model = holder.get("model")
            if not self.usage.model and isinstance(model, str) and len(model) <= MAX_MODEL_CHARS:
                self.usage.model = model
            if isinstance(holder.get("usage"), dict):
                self._apply(holder["usage"])

    def _apply(self, usage: dict[str, Any]) -> None:
        """Merge one usage object; Anthropic streams split it over two events."""
        prompt = _first_int(usage, _PROMPT_KEYS)
        completion = _first_int(usage, _COMPLETION_KEYS)
        cached = _cached(usage)
        if prompt is not None:
            self.usage.prompt_tokens = prompt
        if completion is not None:
            self.usage.completion_tokens = completion
        if cached is not None:
            self.usage.cached_tokens = cached
        self.usage.from_response |= prompt is not None or completion is not None


# Named events that end a stream whole: Anthropic's, and the Responses API's terminal ones
# (which send no `[DONE]`).
_END_EVENTS = frozenset(
    {"message_stop", "response.completed", "response.failed", "response.incomplete"}
)


def _has_content(event: dict[str, Any]) -> bool:
    choices = event.get("choices")
    if isinstance(choices, list):
        return any(map(_choice_has_content, choices))  # no generator: once per event
    kind = event.get("type")
    return isinstance(kind, str) and (kind.endswith(".delta") or kind == "content_block_delta")


def _choice_has_content(choice: object) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    return isinstance(delta, dict) and any(map(delta.get, _DELTA_KEYS))


def _first_int(usage: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = usage.get(key)
        if type(value) is int and 0 <= value <= MAX_COUNT:  # not a bool, fits a report
            return value
    return None


def _cached(usage: dict[str, Any]) -> int | None:
    for details in ("prompt_tokens_details", "input_tokens_details"):
        holder = usage.get(details)
        if isinstance(holder, dict):
            value = _first_int(holder, ("cached_tokens",))
            if value is not None:
                return value
    return _first_int(usage, ("cache_read_input_tokens",))
