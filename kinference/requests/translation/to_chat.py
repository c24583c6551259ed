"""An Anthropic Messages request as an OpenAI chat completions request.

- `system` (text or text blocks) becomes a leading system message;
- user content blocks: text as text parts, images as `image_url` parts (base64 sources as
  data URLs), PDF/text documents as `file` parts or text; `tool_result` blocks become `tool`
  messages placed before the rest of that turn;
- assistant blocks: text joined into `content`, `tool_use` as `tool_calls` (input as JSON
  arguments); thinking blocks are dropped (no chat equivalent);
- `tools` as function tools (`input_schema` -> `parameters`), `tool_choice` auto / any /
  tool / none as "auto" / "required" / the named function / "none",
  `disable_parallel_tool_use` as `parallel_tool_calls: false`;
- `stop_sequences` -> `stop`, `metadata.user_id` -> `user`; streams ask for a usage chunk
  (`stream_options.include_usage`) so the translated stream can report usage;
- Anthropic-only members (`thinking`, `top_k`, `anthropic_version`, `service_tier`, ...) are
  dropped; `model`, `max_tokens`, `temperature`, `top_p`, `stream` carry over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_KEPT = ("model", "max_tokens", "temperature", "top_p", "stream")
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def messages_to_chat(values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {key: values[key] for key in _KEPT if key in values}
    messages: list[dict[str, Any]] = []
    system = values.get("system")
    if system:
        messages.append({"role": "system", "content": _text_of(system)})
    for message in values["messages"]:
        messages.extend(_message(message))
    out["messages"] = messages
    if values.get("stop_sequences"):
        out["stop"] = list(values["stop_sequences"])
    user = (values.get("metadata") or {}).get("user_id")
    if isinstance(user, str):
        out["user"] = user
    tools = [_tool(tool) for tool in values.get("tools") or () if _is_custom_tool(tool)]
    if tools:
        out["tools"] = tools
        _tool_choice(values.get("tool_choice"), out)
    if values.get("stream") is True:
        out["stream_options"] = {"include_usage": True}
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(block["text"] for block in content if block.get("type") == "text")


def _message(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    role, content = message["role"], message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content}]
    if role == "assistant":
        return [_assistant(content)]
    tool_messages = [_tool_result(block) for block in content if block["type"] == "tool_result"]
    parts = [part for block in content if (part := _user_part(block)) is not None]
    if parts:
        tool_messages.append({"role": role, "content": parts})
    return tool_messages


def _assistant(blocks: list[Mapping[str, Any]]) -> dict[str, Any]:
    text = "".join(block["text"] for block in blocks if block["type"] == "text")
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = [
        {
            "id": block["id"],
            "type": "function",
            "function": {"name": block["name"], "arguments": json.dumps(block.get("input", {}))},
        }
        for block in blocks
        if block["type"] == "tool_use"
    ]
    if calls:
        out["tool_calls"] = calls
    return out


def _tool_result(block: Mapping[str, Any]) -> dict[str, Any]:
    content = block.get("content", "")
    text = content if isinstance(content, str) else _text_of(content)
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _user_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _source_url(block["source"])}}
    if kind == "document":
        return _document(block["source"])
    return None  # tool_result (handled above), thinking, server-tool blocks


def _source_url(source: Mapping[str, Any]) -> str:
    if source["type"] == "base64":
        return f"data:{source['media_type']};base64,{source['data']}"
    if source["type"] == "url":
        return str(source["url"])
    raise ValueError(f"a {source['type']!r} image source has no chat equivalent")


def _document(source: Mapping[str, Any]) -> dict[str, Any]:
    if source["type"] == "text":
        return {"type": "text", "text": source["data"]}
    if source["type"] == "base64":
        data = f"data:{source['media_type']};base64,{source['data']}"
        return {"type": "file", "file": {"file_data": data, "filename": "document.pdf"}}
    raise ValueError(f"a {source['type']!r} document source has no chat equivalent")


def _is_custom_tool(tool: Mapping[str, Any]) -> bool:
    return tool.get("type") in (None, "custom") and "input_schema" in tool


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if not isinstance(choice, Mapping):
        return
    kind = choice.get("type")
    if kind == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif kind in _TOOL_CHOICES:
        out["tool_choice"] = _TOOL_CHOICES[kind]
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
