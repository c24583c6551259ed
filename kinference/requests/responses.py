"""Prompt text of OpenAI Responses requests: `instructions`, a prompt template, `input`.

`input` is a string (one user message) or an array of items. Each item is one segment:
messages as `role: parts`, function and custom tool calls as `assistant: <tool_call name>...`,
their outputs as `tool: ...`, reasoning items by their summary, item references as
`<item:id>`, and any item type we do not know as canonical JSON under its type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinference.requests.checks import as_dict, as_list, as_str, type_of, wrong
from kinference.requests.prompt import PromptBuilder

_TEXT_PARTS = {
    "input_text": "text",
    "output_text": "text",
    "text": "text",
    "summary_text": "text",
    "reasoning_text": "text",
    "refusal": "refusal",
}


def add_instructions(builder: PromptBuilder, value: Any, where: str) -> None:
    builder.segment([builder.text(as_str(value, where))], "system")


def add_previous_response(builder: PromptBuilder, value: Any, where: str) -> None:
    """The turns before this one are stored with the provider, not in the body."""
    stored = as_str(value, where)
    builder.stored("previous_response", stored, f'the prompt continues "{where}" {stored[:64]!r}')


def add_conversation(builder: PromptBuilder, value: Any, where: str) -> None:
    """A stored conversation, by id or `{"id": ...}`: its items are not in the body."""
    if isinstance(value, dict):
        stored = as_str(value.get("id"), f"{where}.id")
    else:
        stored = as_str(value, where)
    builder.stored("conversation", stored, f'the prompt continues "{where}" {stored[:64]!r}')


def add_prompt_template(builder: PromptBuilder, value: Any, where: str) -> None:
    """A stored prompt (`{"id", "version", "variables"}`): known only by what names it."""
    builder.segment([builder.canonical(as_dict(value, where))], "prompt")


def add_input(builder: PromptBuilder, value: Any, where: str) -> None:
    if isinstance(value, str):
        builder.message("user", [builder.text(value)])
        return
    for index, item in enumerate(as_list(value, where)):
        _add_item(builder, item, f"{where}[{index}]")


def _add_item(builder: PromptBuilder, item: Any, where: str) -> None:
    item = as_dict(item, where)
    kind = item.get("type", "message")  # an easy input message may leave out its type
    if not isinstance(kind, str):
        wrong(f"{where}.type", "a string", kind)
    adder = _ITEM_ADDERS.get(kind)
    if adder is None:
        builder.message(kind, [builder.canonical(item)])
    else:
        adder(builder, item, where)


def _message(builder: PromptBuilder, item: dict[str, Any], where: str) -> None:
    role = as_str(item.get("role"), f"{where}.role")
    builder.message(role, _content(builder, item.get("content"), f"{where}.content"))


def _tool_call(builder: PromptBuilder, item: dict[str, Any], where: str) -> None:
    name = builder.name(as_str(item.get("name"), f"{where}.name"))
    given = item.get("arguments", item.get("input"))  # function calls / custom tool calls
    text = builder.text(given) if isinstance(given, str) else builder.canonical(given)
    builder.message("assistant", [f"<tool_call {name}>{text}"])


def _tool_output(builder: PromptBuilder, item: dict[str, Any], where: str) -> None:
    builder.message("tool", _content(builder, item.get("output"), f"{where}.output"))


def _reasoning(builder: PromptBuilder, item: dict[str, Any], where: str) -> None:
    summary = item.get("summary")
    parts = [] if summary is None else _content(builder, summary, f"{where}.summary")
    builder.message("reasoning", parts)


def _reference(builder: PromptBuilder, item: dict[str, Any], where: str) -> None:
    builder.message("reference", [f"<item:{builder.name(as_str(item.get('id'), f'{where}.id'))}>"])


_ITEM_ADDERS: dict[str, Callable[[PromptBuilder, dict[str, Any], str], None]] = {
    "message": _message,
    "function_call": _tool_call,
    "custom_tool_call": _tool_call,
    "function_call_output": _tool_output,
    "custom_tool_call_output": _tool_output,
    "reasoning": _reasoning,
    "item_reference": _reference,
}


def _content(builder: PromptBuilder, content: Any, where: str) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [builder.text(content)]
    if not isinstance(content, list):
        wrong(where, "a string, an array or null", content)
    return [_part(builder, part, f"{where}[{index}]") for index, part in enumerate(content)]


def _part(builder: PromptBuilder, part: Any, where: str) -> str:
    part = as_dict(part, where)
    kind = type_of(part, where)
    if kind in _TEXT_PARTS:
        field = _TEXT_PARTS[kind]
        return builder.text(as_str(part.get(field), f"{where}.{field}"))
    if kind == "input_image":
        return _media(builder, "image", part, ("image_url",), where)
    if kind == "input_file":
        return _media(builder, "file", part, ("file_data", "file_url"), where)
    if kind == "input_audio":
        audio = as_dict(part.get("input_audio"), f"{where}.input_audio")
        return builder.media("audio", as_str(audio.get("data"), f"{where}.input_audio.data"))
    return builder.canonical(part)


def _media(
    builder: PromptBuilder, kind: str, part: dict[str, Any], sources: tuple[str, ...], where: str
) -> str:
    """A part given by URL or inline data under one of `sources`, or by `file_id`."""
    for field in sources:
        if part.get(field) is not None:
            return builder.media(kind, as_str(part[field], f"{where}.{field}"))
    if part.get("file_id") is not None:
        return builder.file_id(kind, as_str(part["file_id"], f"{where}.file_id"))
    return builder.canonical(part)
