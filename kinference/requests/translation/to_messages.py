"""An OpenAI chat completions request as an Anthropic Messages request.

- system and developer messages become the top-level `system` (their texts joined);
- user content: text parts as text blocks, `image_url` parts as image blocks (a data URL as
  a base64 source, any other URL as a url source);
- assistant messages: `content` as a text block, `tool_calls` as `tool_use` blocks (their
  JSON arguments as `input`);
- `tool` messages as `tool_result` blocks of a user turn (consecutive ones in one turn);
- `tools` (function tools) with `parameters` as `input_schema`; `tool_choice` "auto" /
  "required" / "none" / a named function as auto / any / none / tool;
  `parallel_tool_calls: false` as `disable_parallel_tool_use`;
- `max_completion_tokens` or `max_tokens` as `max_tokens`, which Anthropic requires
  (`DEFAULT_MAX_TOKENS` when the client gave neither); `stop` as `stop_sequences`;
  `temperature` capped at 1 (Anthropic's range is 0-1); `user` as `metadata.user_id`;
- OpenAI-only members (`stream_options`, `n`, `logprobs`, `response_format`, penalties,
  `seed`, ...) are dropped; `model`, `top_p` and `stream` carry over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Anthropic requires max_tokens; a chat client may leave it out.
DEFAULT_MAX_TOKENS = 4096
_KEPT = ("model", "top_p", "stream")
_SYSTEM_ROLES = frozenset({"system", "developer"})
_TOOL_CHOICES = {"auto": "auto", "required": "any", "none": "none"}


def chat_to_messages(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {key: values[key] for key in _KEPT if key in values}
    limit = values.get("max_completion_tokens") or values.get("max_tokens")
    out["max_tokens"] = limit if isinstance(limit, int) else DEFAULT_MAX_TOKENS
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in values["messages"]:
        if message["role"] in _SYSTEM_ROLES:
            system.append(_text(message.get("content")))
        else:
            _add_turn(turns, _turn(message))
    if system:
        out["system"] = "\n\n".join(system)
    out["messages"] = turns
    _sampling(values, out)
    tools = [_tool(tool) for tool in values.get("tools") or () if tool.get("type") == "function"]
    if tools:
        out["tools"] = tools
        choice = _tool_choice(values.get("tool_choice"), values.get("parallel_tool_calls"))
        if choice is not None:
            out["tool_choice"] = choice
    return out


def _sampling(values: Mapping[str, Any], out: dict[str, Any]) -> None:
    temperature = values.get("temperature")
    if isinstance(temperature, int | float):
        out["temperature"] = min(float(temperature), 1.0)
    stop = values.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_sequences"] = stop
    if isinstance(values.get("user"), str):
        out["metadata"] = {"user_id": values["user"]}


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def _turn(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message["role"]
    if role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": _text(message.get("content")),
        }
        return {"role": "user", "content": [block]}
    if role == "assistant":
        return {"role": "assistant", "content": _assistant_blocks(message)}
    content = message.get("content")
    if not isinstance(content, list):
        return {"role": "user", "content": content}
    return {"role": "user", "content": [_user_block(part) for part in content]}


def _add_turn(turns: list[dict[str, Any]], turn: dict[str, Any]) -> None:
    """Consecutive tool results go in one user turn, as Anthropic expects them."""
    last = turns[-1] if turns else None
    if (
        last is not None
        and last["role"] == turn["role"] == "user"
        and isinstance(last["content"], list)
        and isinstance(turn["content"], list)
        and all(block["type"] == "tool_result" for block in last["content"])
    ):
        last["content"].extend(turn["content"])
        return
    turns.append(turn)


def _assistant_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = _text(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call["function"]
        arguments = function.get("arguments") or "{}"
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": function["name"],
                "input": json.loads(arguments) if isinstance(arguments, str) else arguments,
            }
        )
    return blocks


def _user_block(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part["type"]
    if kind == "text":
        return {"type": "text", "text": part["text"]}
    if kind == "image_url":
        image = part["image_url"]
        url = image if isinstance(image, str) else image["url"]
        return {"type": "image", "source": _image_source(url)}
    raise ValueError(f"a {kind!r} content part has no Anthropic equivalent")


def _image_source(url: str) -> dict[str, Any]:
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header.removeprefix("data:").split(";")[0]
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool["function"]
    out: dict[str, Any] = {
        "name": function["name"],
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        out["description"] = function["description"]
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    out: dict[str, Any] | None = None
    if isinstance(choice, str) and choice in _TOOL_CHOICES:
        out = {"type": _TOOL_CHOICES[choice]}
    elif isinstance(choice, Mapping) and choice.get("type") == "function":
        out = {"type": "tool", "name": choice["function"]["name"]}
    if parallel is False:
        out = {**(out or {"type": "auto"}), "disable_parallel_tool_use": True}
    return out
