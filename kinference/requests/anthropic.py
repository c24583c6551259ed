"""Prompt text of Anthropic Messages requests: top-level `system`, then the messages.

`system` and message `content` are a string or an array of content blocks. Blocks become:
text as is; image and document blocks by reference to their source (base64 data digested,
a URL as is, a file id as `<kind:id:...>`; a plain-text document's text as text); tool_use as
`<tool_use name>` + canonical JSON of its input; tool_result as `<tool_result>` + its
content; thinking as its text; any other block as canonical JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinference.requests.checks import as_dict, as_str, type_of, wrong
from kinference.requests.prompt import PromptBuilder


def add_system(builder: PromptBuilder, value: Any, where: str) -> None:
    builder.segment(_content(builder, value, where), "system")


def add_messages(builder: PromptBuilder, messages: list[Any], where: str) -> None:
    for index, item in enumerate(messages):
        at = f"{where}[{index}]"
        message = as_dict(item, at)
        role = as_str(message.get("role"), f"{at}.role")
        builder.message(role, _content(builder, message.get("content"), f"{at}.content"))


def _content(builder: PromptBuilder, content: Any, where: str) -> list[str]:
    if isinstance(content, str):
        return [builder.text(content)]
    if not isinstance(content, list):
        wrong(where, "a string or an array of content blocks", content)
    return [_block(builder, block, f"{where}[{index}]") for index, block in enumerate(content)]


def _block(builder: PromptBuilder, block: Any, where: str) -> str:
    block = as_dict(block, where)
    reader = _BLOCK_READERS.get(type_of(block, where))
    return builder.canonical(block) if reader is None else reader(builder, block, where)


def _text(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    return builder.text(as_str(block.get("text"), f"{where}.text"))


def _thinking(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    return builder.text(as_str(block.get("thinking"), f"{where}.thinking"))


def _image(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    return _source(builder, "image", block.get("source"), f"{where}.source")


def _document(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    return _source(builder, "file", block.get("source"), f"{where}.source")


def _tool_use(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    name = builder.name(as_str(block.get("name"), f"{where}.name"))
    return f"<tool_use {name}>{builder.canonical(block.get('input'))}"


def _tool_result(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    content = block.get("content")
    parts = [] if content is None else _content(builder, content, f"{where}.content")
    return "\n".join(["<tool_result>", *parts])


def _redacted_thinking(builder: PromptBuilder, block: dict[str, Any], where: str) -> str:
    return builder.media("redacted_thinking", as_str(block.get("data"), f"{where}.data"))


_BLOCK_READERS: dict[str, Callable[[PromptBuilder, dict[str, Any], str], str]] = {
    "text": _text,
    "thinking": _thinking,
    "redacted_thinking": _redacted_thinking,
    "image": _image,
    "document": _document,
    "tool_use": _tool_use,
    "server_tool_use": _tool_use,
    "tool_result": _tool_result,
}


def _source(builder: PromptBuilder, kind: str, source: Any, where: str) -> str:
    """An image or document source: base64, url, file, text or content."""
    source = as_dict(source, where)
    source_type = type_of(source, where)
    if source_type == "base64":
        return builder.media(kind, as_str(source.get("data"), f"{where}.data"))
    if source_type == "url":
        return builder.media(kind, as_str(source.get("url"), f"{where}.url"))
    if source_type == "file":
        return builder.file_id(kind, as_str(source.get("file_id"), f"{where}.file_id"))
    if source_type == "text":
        return builder.text(as_str(source.get("data"), f"{where}.data"))
    if source_type == "content":
        content = source.get("content")
        return "\n".join(_content(builder, content, f"{where}.content"))
    return builder.canonical(source)
