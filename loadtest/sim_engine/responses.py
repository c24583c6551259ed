"""OpenAI response bodies: whole ones, and the SSE chunks of a stream.

A stream's content chunks are built by pasting the JSON-escaped text between a prefix and
a suffix computed once per request: one `json.dumps` of a short string per chunk instead
of a dictionary encoded per token.
"""

from __future__ import annotations

import json
from typing import Any

from loadtest.engine_model import Admission
from loadtest.sim_engine.protocol import GenerateRequest
from loadtest.sim_engine.tokens import token_ids

DONE = b"data: [DONE]\n\n"
_COMPACT = (",", ":")


def usage(admission: Admission, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": admission.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": admission.prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": admission.cached_tokens},
    }


class Reply:
    """Shapes one request's answer (chat or text completion, whole or streamed)."""

    def __init__(self, request: GenerateRequest, request_id: str, created: int) -> None:
        self._chat = request.kind == "chat"
        self._include_usage = request.include_usage
        self._head = {
            "id": request_id,
            "object": "chat.completion.chunk" if self._chat else "text_completion",
            "created": created,
            "model": request.model,
        }
        head = json.dumps(self._head, separators=_COMPACT)[:-1]  # open for more members
        choice = '"delta":{"content":' if self._chat else '"text":'
        self._prefix = f'data: {head},"choices":[{{"index":0,{choice}'
        self._suffix = ("}" if self._chat else "") + ',"logprobs":null,"finish_reason":null}]}\n\n'

    def whole(self, text: str, finish_reason: str, counts: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming body."""
        if self._chat:
            choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
            obj = "chat.completion"
        else:
            choice, obj = {"text": text}, "text_completion"
        choice = {"index": 0, **choice, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head, "object": obj, "choices": [choice], "usage": counts}

    def opening(self) -> bytes:
        """What a stream sends before its first token: the assistant role, for chats."""
        if not self._chat:
            return b""
        delta = {"role": "assistant", "content": ""}
        return self._event({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})

    def chunk(self, text: str) -> bytes:
        return f"{self._prefix}{json.dumps(text)}{self._suffix}".encode()

    def closing(self, finish_reason: str, counts: dict[str, Any]) -> bytes:
        """The finishing chunk, usage, and `[DONE]`.

        With `stream_options.include_usage` the usage goes in a chunk of its own with no
        choices, as OpenAI sends it; without, it rides on the finishing chunk, so a caller
        that did not ask still learns its token counts.
        """
        end: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        end["delta" if self._chat else "text"] = {} if self._chat else ""
        if self._include_usage:
            return self._event(end) + self._event(None, counts) + DONE
        return self._event(end, counts) + DONE

    def _event(self, choice: dict[str, Any] | None, counts: Any = None) -> bytes:
        body: dict[str, Any] = {**self._head, "choices": [] if choice is None else [choice]}
        if counts is not None:
            body["usage"] = counts
        return f"data: {json.dumps(body, separators=_COMPACT)}\n\n".encode()


def rendered(request: GenerateRequest, request_id: str) -> dict[str, Any]:
    """vLLM's render answer for one prompt: the token ids the engine would run."""
    return {
        "request_id": request_id,
        "token_ids": token_ids(request.prompt),
        "sampling_params": {"max_tokens": request.max_tokens},
        "model": request.model,
        "stream": request.stream,
        "features": None,
    }
