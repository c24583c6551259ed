"""Anthropic Messages responses as OpenAI chat completion responses.

For an OpenAI chat client whose request was translated to an Anthropic destination:

- whole: `message` -> `chat.completion` (text blocks joined as `content`, tool_use blocks as
  `tool_calls` with JSON `arguments`, thinking as `reasoning_content`), `stop_reason` ->
  `finish_reason` (end_turn / stop_sequence / pause_turn -> stop, max_tokens -> length,
  tool_use -> tool_calls, refusal -> content_filter), usage as prompt / completion tokens
  (cache reads and writes counted in the prompt, reads as `cached_tokens`);
- stream: message_start -> a role chunk; text_delta / thinking_delta / tool_use starts and
  input_json_delta -> content, `reasoning_content` and `tool_calls` deltas; message_delta
  -> the finish_reason chunk; message_stop -> a usage chunk (`choices: []`, only for a
  client that asked for one) and `data: [DONE]`; ping is dropped;
- errors: `{"type": "error", "error": {...}}` -> `{"error": {"message", "type", ...}}`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kinference.gateway.translate.events import DONE, Event, encode

_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def whole(document: dict[str, Any]) -> dict[str, Any]:
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in document.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            text.append(block.get("text", ""))
        elif kind == "thinking":
            reasoning.append(block.get("thinking", ""))
        elif kind == "tool_use":
            calls.append(_call(block, len(calls), block.get("input", {})))
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in calls]
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": _finish(document.get("stop_reason")),
        "logprobs": None,
    }
    return {
        "id": _completion_id(document),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": document.get("model", ""),
        "choices": [choice],
        "usage": _usage(document.get("usage") or {}),
    }


def error(document: dict[str, Any], status: int) -> dict[str, Any]:
    inner = document.get("error")
    if not isinstance(inner, dict):
        inner = {"message": str(document)}
    kind = inner.get("type") or "api_error"
    message = inner.get("message") or kind
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _completion_id(document: dict[str, Any]) -> str:
    return f"chatcmpl-{document.get('id') or ''}"


def _call(block: dict[str, Any], index: int, arguments: Any) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "index": index,
        "id": block.get("id", ""),
        "type": "function",
        "function": {"name": block.get("name", ""), "arguments": text},
    }


def _finish(stop_reason: Any) -> str | None:
    if not stop_reason:
        return None
    return _FINISH_REASONS.get(str(stop_reason), "stop")


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + read + written
    completion = usage.get("output_tokens") or 0
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if read:
        out["prompt_tokens_details"] = {"cached_tokens": read}
    return out


class StreamToOpenAI:
    """Anthropic Messages stream events in, chat completion chunks out."""

    def __init__(self, *, usage_chunk: bool = False) -> None:
        self._usage_chunk = usage_chunk
        self._id = "chatcmpl-"
        self._model = ""
        self._created = int(time.time())
        self._usage: dict[str, Any] = {}
        self._tools: dict[int, int] = {}  # content block index -> tool call index
        self._ended = False

    def event(self, event: Event) -> bytes:
        payload = event.json()
        if payload is None or self._ended:
            return b""
        kind = payload.get("type") or event.name
        handler = _HANDLERS.get(kind)
        return handler(self, payload) if handler is not None else b""

    def end(self) -> bytes:
        return b""  # a stream cut short before message_stop ends as the upstream's did

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return encode(self._envelope([choice]))

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }

    def _start(self, payload: dict[str, Any]) -> bytes:
        message = payload.get("message") or {}
        self._id = _completion_id(message)
        self._model = message.get("model", "")
        self._usage = dict(message.get("usage") or {})
        return self._chunk({"role": "assistant", "content": ""})

    def _block_start(self, payload: dict[str, Any]) -> bytes:
        block = payload.get("content_block") or {}
        if block.get("type") != "tool_use":
            text = block.get("text") if block.get("type") == "text" else None
            return self._chunk({"content": text}) if text else b""
        index = self._tools.setdefault(int(payload.get("index", 0)), len(self._tools))
        call = _call(block, index, "")
        return self._chunk({"tool_calls": [call]})

    def _block_delta(self, payload: dict[str, Any]) -> bytes:
        delta = payload.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            return self._chunk({"content": delta.get("text", "")})
        if kind == "thinking_delta":
            return self._chunk({"reasoning_content": delta.get("thinking", "")})
        if kind == "input_json_delta":
            index = self._tools.get(int(payload.get("index", 0)), 0)
            call = {"index": index, "function": {"arguments": delta.get("partial_json", "")}}
            return self._chunk({"tool_calls": [call]})
        return b""  # signature_delta, citations

    def _message_delta(self, payload: dict[str, Any]) -> bytes:
        self._usage.update(payload.get("usage") or {})
        finish = _finish((payload.get("delta") or {}).get("stop_reason"))
        return self._chunk({}, finish) if finish else b""

    def _message_stop(self, payload: dict[str, Any]) -> bytes:
        self._ended = True
        if not self._usage_chunk:
            return DONE
        usage_chunk = {**self._envelope([]), "usage": _usage(self._usage)}
        return encode(usage_chunk) + DONE

    def _error(self, payload: dict[str, Any]) -> bytes:
        self._ended = True
        return encode(error(payload, 500))


_HANDLERS = {
    "message_start": StreamToOpenAI._start,
    "content_block_start": StreamToOpenAI._block_start,
    "content_block_delta": StreamToOpenAI._block_delta,
    "message_delta": StreamToOpenAI._message_delta,
    "message_stop": StreamToOpenAI._message_stop,
    "error": StreamToOpenAI._error,
}
