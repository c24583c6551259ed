"""A simulated off-cluster provider speaking OpenAI chat completions or Anthropic Messages.

`SimProvider("openai")` answers `POST /v1/chat/completions`, `SimProvider("anthropic")`
`POST /v1/messages`, whole or streamed, each in its API's exact shapes (events, stop
reasons, usage, tool calls). Each is strict as the real APIs are: members of the other API
(`system` or `stop_sequences` on chat; `stream_options` or a system role on Messages), a
content part of the other API, or a missing `max_tokens` on Messages are a 400, so a request
that was not translated fails. The answer: with tools declared and no tool result yet, a
call of the first tool (every required property "Paris"); otherwise a short text naming how
many images the last user turn carried. `requests` keeps every body received; a key, when
set, is required as each API takes it (`Authorization: Bearer`; Anthropic: `x-api-key`,
with an `anthropic-version` header).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kinference.gateway.server import GatewayServer

Api = Literal["openai", "anthropic"]
_OPENAI_ONLY = frozenset({"stream_options", "n", "logprobs", "response_format", "user"})
_ANTHROPIC_ONLY = frozenset({"system", "stop_sequences", "top_k", "thinking", "metadata"})


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _answer(body: dict[str, Any], api: Api) -> tuple[str, dict[str, Any] | None]:
    """(text, tool call) for a request: a tool call when tools are declared and unused."""
    messages = body.get("messages") or []
    tools = body.get("tools") or []
    used = any(_has_tool_result(m, api) for m in messages)
    if tools and not used:
        tool = tools[0] if api == "anthropic" else tools[0]["function"]
        schema = tool.get("input_schema" if api == "anthropic" else "parameters") or {}
        arguments = {name: "Paris" for name in schema.get("required", [])}
        return "", {"name": tool["name"], "input": arguments}
    last: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    content = last.get("content")
    kind = "image" if api == "anthropic" else "image_url"
    images = sum(1 for p in content if p.get("type") == kind) if isinstance(content, list) else 0
    return f"Hello from the {api} provider: {images} images seen.", None


def _has_tool_result(message: dict[str, Any], api: Api) -> bool:
    if api == "openai":
        return message.get("role") == "tool"
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def _check(body: dict[str, Any], api: Api) -> None:
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise Refused(400, "messages: field required")
    foreign = _ANTHROPIC_ONLY if api == "openai" else _OPENAI_ONLY
    extra = sorted(foreign & set(body))
    if extra:
        raise Refused(400, f"{extra[0]}: Extra inputs are not permitted")
    if api == "anthropic" and not isinstance(body.get("max_tokens"), int):
        raise Refused(400, "max_tokens: Field required")
    allowed = {
        "openai": {"text", "image_url", "file"},
        "anthropic": {"text", "image", "tool_use", "tool_result", "document"},
    }[api]
    for message in body["messages"]:
        if api == "anthropic" and message.get("role") not in ("user", "assistant"):
            raise Refused(400, f"messages: unexpected role {message.get('role')!r}")
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part.get("type") not in allowed:
                raise Refused(400, f"messages: unknown content type {part.get('type')!r}")


class SimProvider:
    """One simulated provider on a free loopback port: `await start()`, then `url`."""

    def __init__(
        self, api: Api, *, api_key: str | None = None, chunk_delay_s: float = 0.001
    ) -> None:
        self.api = api
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self._delay = chunk_delay_s
        path = "/v1/chat/completions" if api == "openai" else "/v1/messages"
        self.app = Starlette(routes=[Route(path, self._serve, methods=["POST"])])
        self._server: GatewayServer | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = GatewayServer(self.app, "127.0.0.1:0")
        await self._server.start()
        self.url = f"http://127.0.0.1:{self._server.port}"

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()

    async def _serve(self, request: Request) -> Response:
        try:
            self._authorize(request)
            body = json.loads(await request.body())
            self.requests.append(body)
            _check(body, self.api)
        except Refused as exc:
            return JSONResponse(self._error(exc.status, str(exc)), exc.status)
        text, call = _answer(body, self.api)
        prompt_tokens = max(1, len(json.dumps(body["messages"])) // 4)
        words = text.split(" ") if text else []
        if body.get("stream"):
            events = self._events(body, words, call, prompt_tokens)
            return StreamingResponse(events, media_type="text/event-stream")
        return JSONResponse(self._whole(body, text, call, prompt_tokens, len(words) or 5))

    def _authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        if self.api == "anthropic":
            if request.headers.get("x-api-key") != self.api_key:
                raise Refused(401, "invalid x-api-key")
            if not request.headers.get("anthropic-version"):
                raise Refused(400, "anthropic-version: header is required")
            return
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            raise Refused(401, "Incorrect API key provided")

    def _error(self, status: int, message: str) -> dict[str, Any]:
        if self.api == "anthropic":
            kind = "authentication_error" if status == 401 else "invalid_request_error"
            return {"type": "error", "error": {"type": kind, "message": message}}
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }

    def _whole(
        self,
        body: dict[str, Any],
        text: str,
        call: dict[str, Any] | None,
        prompt: int,
        completion: int,
    ) -> dict[str, Any]:
        model = body.get("model", "")
        if self.api == "anthropic":
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            if call is not None:
                content.append(
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": call["name"],
                        "input": call["input"],
                    }
                )
            return {
                "id": "msg_sim01",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": "tool_use" if call else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if call is not None:
            message["tool_calls"] = [
                {
                    "id": "call_01",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["input"])},
                }
            ]
        return {
            "id": "chatcmpl-sim01",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if call else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    async def _events(
        self, body: dict[str, Any], words: list[str], call: dict[str, Any] | None, prompt: int
    ) -> AsyncIterator[bytes]:
        produce = self._anthropic_events if self.api == "anthropic" else self._openai_events
        for event in produce(body, words, call, prompt):
            await asyncio.sleep(self._delay)
            yield event

    @staticmethod
    def _anthropic_events(
        body: dict[str, Any], words: list[str], call: dict[str, Any] | None, prompt: int
    ) -> list[bytes]:
        def ev(name: str, payload: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()

        message = {
            "id": "msg_sim01",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 1},
        }
        out = [
            ev("message_start", {"type": "message_start", "message": message}),
            ev("ping", {"type": "ping"}),
        ]
        if call is not None:
            block = {"type": "tool_use", "id": "toolu_01", "name": call["name"], "input": {}}
            out.append(
                ev(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": block},
                )
            )
            arguments = json.dumps(call["input"])
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                out.append(
                    ev(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
        else:
            out.append(
                ev(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for index, word in enumerate(words):
                text = word if index == 0 else " " + word
                out.append(
                    ev(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": text},
                        },
                    )
                )
        out.append(ev("content_block_stop", {"type": "content_block_stop", "index": 0}))
        delta = {"stop_reason": "tool_use" if call else "end_turn", "stop_sequence": None}
        out.append(
            ev(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": {"output_tokens": len(words) or 5},
                },
            )
        )
        out.append(ev("message_stop", {"type": "message_stop"}))
        return out

    @staticmethod
    def _openai_events(
        body: dict[str, Any], words: list[str], call: dict[str, Any] | None, prompt: int
    ) -> list[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            payload = {
                "id": "chatcmpl-sim01",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model", ""),
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        out = [chunk({"role": "assistant", "content": ""})]
        if call is not None:
            arguments = json.dumps(call["input"])
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_01",
                                "type": "function",
                                "function": {"name": call["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for piece in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
        for index, word in enumerate(words):
            out.append(chunk({"content": word if index == 0 else " " + word}))
        out.append(chunk({}, "tool_calls" if call else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            completion = len(words) or 5
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            payload = {
                "id": "chatcmpl-sim01",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": body.get("model", ""),
                "choices": [],
                "usage": usage,
            }
            out.append(f"data: {json.dumps(payload)}\n\n".encode())
        out.append(b"data: [DONE]\n\n")
        return out
