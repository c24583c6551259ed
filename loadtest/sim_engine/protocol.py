"""OpenAI request bodies in, validated: what to generate, or an OpenAI-style error.

Errors carry the JSON body OpenAI and vLLM answer with:
`{"error": {"message", "type", "param", "code"}}`. Messages never quote the request body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from loadtest.sim_engine.config import SimEngineConfig
from loadtest.sim_engine.tokens import render_chat, text_of_ids, token_count

Kind = Literal["chat", "completion"]


class ApiError(Exception):
    """An OpenAI-style error answer."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": kind, "param": param, "code": code}}


def unauthorized() -> ApiError:
    return ApiError(401, "Incorrect API key provided.", code="invalid_api_key")


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """A validated chat or text completion request."""

    kind: Kind
    model: str
    prompt: str  # the prompt as the engine sees it (chat messages rendered)
    prompt_tokens: int
    max_tokens: int
    explicit_max: bool  # the request set the length: finish_reason "length", else "stop"
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with only usage


def parse_request(kind: Kind, raw: bytes, config: SimEngineConfig) -> GenerateRequest:
    """Validate a request body; ApiError (400 or 404) says what is wrong."""
    body = _json_object(raw)
    model = _model(body, config)
    prompt = render_chat(_messages(body), body.get("tools")) if kind == "chat" else _prompt(body)
    prompt_tokens = token_count(prompt)
    max_tokens = _max_tokens(body, kind)
    length = config.default_max_tokens if max_tokens is None else max_tokens
    if prompt_tokens + length > config.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {config.max_model_len} tokens; the "
            f"request asks for {prompt_tokens} prompt and {length} completion tokens.",
            param="messages" if kind == "chat" else "prompt",
        )
    if body.get("n", 1) != 1:
        raise ApiError(400, "The simulated engine generates one choice (n=1).", param="n")
    options = body.get("stream_options")
    return GenerateRequest(
        kind=kind,
        model=model,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        max_tokens=length,
        explicit_max=max_tokens is not None,
        stream=bool(body.get("stream", False)),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
    )


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _model(body: Mapping[str, Any], config: SimEngineConfig) -> str:
    model = body.get("model", config.models[0])  # vLLM serves its model when none is named
    if not isinstance(model, str):
        raise ApiError(400, "`model` must be a string.", param="model")
    if model not in config.models:
        raise ApiError(
            404, f"The model `{model}` does not exist.", code="model_not_found", param="model"
        )
    return model


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "`messages` must be a non-empty list.", param="messages")
    if not all(isinstance(message, dict) for message in messages):
        raise ApiError(400, "Every message must be an object.", param="messages")
    return messages


def _prompt(body: Mapping[str, Any]) -> str:
    """A text prompt, one prompt in a list, or one prompt of token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(_is_int(t) and t >= 0 for t in prompt):
        return text_of_ids(prompt)
    raise ApiError(
        400, "`prompt` must be a string or token ids (one prompt per request).", param="prompt"
    )


def _max_tokens(body: Mapping[str, Any], kind: Kind) -> int | None:
    name = "max_tokens"
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        name = "max_completion_tokens"
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ApiError(400, f"`{name}` must be an integer >= 1.", param=name)
    return int(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
