"""OpenAI chat completion responses as Anthropic Messages responses.

For an Anthropic Messages client whose request was translated to a chat destination:

- whole: `chat.completion` -> `message` (text then tool_use content blocks, the tool call
  arguments parsed as `input`), `finish_reason` -> `stop_reason` (stop -> end_turn, length ->
  max_tokens, tool_calls -> tool_use, content_filter -> refusal; vLLM's matched
  `stop_reason` string -> stop_sequence), usage as input/output tokens (cached prompt
  tokens as `cache_read_input_tokens`);
- stream: `chat.completion.chunk` events -> message_start, then per content block
  content_block_start / content_block_delta (text_delta, input_json_delta) /
  content_block_stop, and at the end (the usage chunk, `[DONE]` or the end of the stream)
  message_delta with the stop reason and usage, and message_stop;
- errors: OpenAI's `{"error": {...}}` -> Anthropic's `{"type": "error", "error": {...}}`.
"""

from __future__ import annotations

import json
from typing import Any

from kinference.gateway.translate.events import Event, encode

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def whole(document: dict[str, Any]) -> dict[str, Any]:
    choice = (document.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": _arguments(function.get("arguments")),
            }
        )
    stop_reason, stop_sequence = _stop(choice)
    return {
        "id": _message_id(document),
        "type": "message",
        "role": "assistant",
        "model": document.get("model", ""),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(document.get("usage") or {}),
    }


def error(document: dict[str, Any], status: int) -> dict[str, Any]:
    inner = document.get("error")
    message = inner.get("message") if isinstance(inner, dict) else inner
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": str(message or document)}}


def _message_id(document: dict[str, Any]) -> str:
    given = str(document.get("id") or "")
    return given if given.startswith("msg_") else f"msg_{given}"


def _arguments(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return text if isinstance(text, dict) else {}
    try:
        return json.loads(text)
    except ValueError:
        return {"arguments": text}  # an engine's malformed JSON, kept rather than lost


def _stop(choice: dict[str, Any]) -> tuple[str | None, str | None]:
    finish = choice.get("finish_reason")
    matched = choice.get("stop_reason")  # vLLM: the stop string that ended the output
    if finish == "stop" and isinstance(matched, str):
        return "stop_sequence", matched
    return (_STOP_REASONS.get(finish, "end_turn") if finish else None), None


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "input_tokens": usage.get("prompt_tokens") or 0,
        "output_tokens": usage.get("completion_tokens") or 0,
    }
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if isinstance(cached, int):
        out["cache_read_input_tokens"] = cached
    return out


class StreamToAnthropic:
    """Chat completion chunks in, Anthropic Messages stream events out."""

    def __init__(self) -> None:
        self._started = False
        self._ended = False
        self._index = -1  # the content block open now, -1: none
        self._open: tuple[str, int] | None = None  # ("text", 0) or ("tool", openai index)
        self._stop: tuple[str | None, str | None] = (None, None)
        self._usage: dict[str, Any] = {}

    def event(self, event: Event) -> bytes:
        if self._ended:
            return b""
        if event.done:
            return self.end()
        chunk = event.json()
        if chunk is None:
            return b""
        out = [] if self._started else [self._message_start(chunk)]
        self._started = True
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                out.extend(self._choice(choice))
        return b"".join(out)

    def end(self) -> bytes:
        if self._ended or not self._started:
            return b""
        self._ended = True
        out = self._close()
        stop_reason, stop_sequence = self._stop
        delta = {"stop_reason": stop_reason or "end_turn", "stop_sequence": stop_sequence}
        usage = _usage(self._usage)
        out.append(
            encode({"type": "message_delta", "delta": delta, "usage": usage}, "message_delta")
        )
        out.append(encode({"type": "message_stop"}, "message_stop"))
        return b"".join(out)

    def _message_start(self, chunk: dict[str, Any]) -> bytes:
        message = {
            "id": _message_id(chunk),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return encode({"type": "message_start", "message": message}, "message_start")

    def _choice(self, choice: dict[str, Any]) -> list[bytes]:
        out: list[bytes] = []
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if text:
            out.extend(self._block(("text", 0), {"type": "text", "text": ""}))
            payload = {"type": "text_delta", "text": text}
            out.append(self._delta(payload))
        for call in delta.get("tool_calls") or ():
            out.extend(self._tool_call(call))
        if choice.get("finish_reason"):
            self._stop = _stop(choice)
        return out

    def _tool_call(self, call: dict[str, Any]) -> list[bytes]:
        key = ("tool", int(call.get("index", 0)))
        function = call.get("function") or {}
        out: list[bytes] = []
        if self._open != key:
            block = {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": {},
            }
            out.extend(self._block(key, block))
        arguments = function.get("arguments")
        if arguments:
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return out

    def _block(self, key: tuple[str, int], block: dict[str, Any]) -> list[bytes]:
        """Open the block for `key` unless it is the open one (closing the one before)."""
        if self._open == key:
            return []
        out = self._close()
        self._index += 1
        self._open = key
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        out.append(encode(start, "content_block_start"))
        return out

    def _delta(self, delta: dict[str, Any]) -> bytes:
        payload = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return encode(payload, "content_block_delta")

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [encode({"type": "content_block_stop", "index": self._index}, "content_block_stop")]
