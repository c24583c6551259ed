"""Prompt text of OpenAI chat completions, completions and embeddings requests.

A chat message becomes one segment, `role: ` then its parts joined by newlines: text as is,
media parts by reference (`<image:...>`, `<audio:...>`, `<video:...>`, `<file:...>`), tool
calls as `<tool_call name>arguments`, and any part type we do not know as canonical JSON (so
it still tells prompts apart). Leading system and developer messages come before the tools,
the other messages after them (see `extract`).

Completion prompts and embeddings inputs are raw text or token ids: one segment per prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kinference.requests.checks import as_dict, as_list, as_str, token_ids, type_of, wrong
from kinference.requests.prompt import SURELY_SHORT_CHARS, PromptBuilder

_SYSTEM_ROLES = ("system", "developer")
_URL_PARTS = {"image_url": "image", "video_url": "video", "audio_url": "audio"}


def add_leading_system(builder: PromptBuilder, messages: list[Any], where: str) -> None:
    """The system and developer messages that open the conversation."""
    _add_messages(builder, messages, where, 0, _leading_system_count(messages, where))


def add_conversation(builder: PromptBuilder, messages: list[Any], where: str) -> None:
    """The messages after the leading system and developer ones."""
    _add_messages(builder, messages, where, _leading_system_count(messages, where), len(messages))


def add_text_inputs(builder: PromptBuilder, value: str | list[Any], where: str) -> None:
    """A completions `prompt` or embeddings `input`: text, token ids, or an array of either."""
    if isinstance(value, str):
        builder.segment([builder.text(value)])
    elif value and type(value[0]) is int:  # one prompt given as token ids
        builder.segment([builder.token_ids(token_ids(value, where))])
    else:
        for index, item in enumerate(value):
            if isinstance(item, str):
                builder.segment([builder.text(item)])
            elif isinstance(item, list):
                builder.segment([builder.token_ids(token_ids(item, f"{where}[{index}]"))])
            else:
                wrong(f"{where}[{index}]", "a string or an array of token ids", item)


def _leading_system_count(messages: list[Any], where: str) -> int:
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _SYSTEM_ROLES:
            return index  # _add_message says what is wrong with a non-object
    return len(messages)


def _add_messages(
    builder: PromptBuilder, messages: list[Any], where: str, start: int, stop: int
) -> None:
    """Messages `start` to `stop`. The hot loop of a chat Pick: a run of plain messages (a
    role and one string of content, both short: most of them) is formed here and handed to
    the builder at once (`PromptBuilder.plain_messages`: the same segments and counts as
    `_add_message`'s path gives them); anything else takes that path, in order."""
    if not builder.takes_plain():  # markers to resolve: each message on its own
        for index in range(start, stop):
            _add_message(builder, messages[index], where, index)
        return
    short = SURELY_SHORT_CHARS
    run: list[str] = []  # the plain messages' segments not yet handed over
    chars = 0  # their content's characters
    for index in range(start, stop):
        message = messages[index]
        if type(message) is dict:
            role, content = message.get("role"), message.get("content")
            if (
                type(role) is str
                and type(content) is str
                and len(content) <= short
                and len(role) <= short
                and "tool_calls" not in message
                and "function_call" not in message
            ):
                run.append(f"{role}: {content}")
                chars += len(content)
                continue
        if run:
            builder.plain_messages(run, chars)
            run, chars = [], 0
        _add_message(builder, message, where, index)
    if run:
        builder.plain_messages(run, chars)


def _add_message(builder: PromptBuilder, message: Any, where: str, index: int) -> None:
    # Paths in error messages are formatted on error only.
    if not isinstance(message, dict):
        wrong(f"{where}[{index}]", "an object", message)
    role = message.get("role")
    if not isinstance(role, str):
        wrong(f"{where}[{index}].role", "a string", role)
    content = message.get("content")
    if isinstance(content, str):
        parts = [builder.text(content)]
    else:
        parts = _content(builder, content, f"{where}[{index}].content")
    if "tool_calls" in message or "function_call" in message:
        parts.extend(_calls(builder, message, f"{where}[{index}]"))
    builder.message(role, parts)


def _calls(builder: PromptBuilder, message: dict[str, Any], where: str) -> list[str]:
    parts = []
    calls = message.get("tool_calls")
    if calls is not None:
        for index, call in enumerate(as_list(calls, f"{where}.tool_calls")):
            parts.append(_tool_call(builder, call, f"{where}.tool_calls[{index}]"))
    if message.get("function_call") is not None:  # the deprecated single call
        parts.append(_function(builder, message["function_call"], f"{where}.function_call"))
    return parts


def _content(builder: PromptBuilder, content: Any, where: str) -> list[str]:
    if content is None:  # an assistant message with tool calls only
        return []
    if not isinstance(content, list):
        wrong(where, "a string, an array or null", content)
    return [_part(builder, part, f"{where}[{index}]") for index, part in enumerate(content)]


def _part(builder: PromptBuilder, part: Any, where: str) -> str:
    part = as_dict(part, where)
    kind = type_of(part, where)
    if kind in _URL_PARTS:
        return _url_part(builder, _URL_PARTS[kind], part.get(kind), f"{where}.{kind}")
    reader = _PART_READERS.get(kind)
    return builder.canonical(part) if reader is None else reader(builder, part, where)


def _url_part(builder: PromptBuilder, kind: str, value: Any, where: str) -> str:
    """`{"url": ...}`, or the URL string itself as some clients send it."""
    if isinstance(value, str):
        return builder.media(kind, value)
    return builder.media(kind, as_str(as_dict(value, where).get("url"), f"{where}.url"))


def _text(builder: PromptBuilder, part: dict[str, Any], where: str) -> str:
    return builder.text(as_str(part.get("text"), f"{where}.text"))


def _refusal(builder: PromptBuilder, part: dict[str, Any], where: str) -> str:
    return builder.text(as_str(part.get("refusal"), f"{where}.refusal"))


def _input_audio(builder: PromptBuilder, part: dict[str, Any], where: str) -> str:
    audio = as_dict(part.get("input_audio"), f"{where}.input_audio")
    return builder.media("audio", as_str(audio.get("data"), f"{where}.input_audio.data"))


def _file(builder: PromptBuilder, part: dict[str, Any], where: str) -> str:
    file = as_dict(part.get("file"), f"{where}.file")
    if file.get("file_data") is not None:
        return builder.media("file", as_str(file["file_data"], f"{where}.file.file_data"))
    if file.get("file_id") is not None:
        return builder.file_id("file", as_str(file["file_id"], f"{where}.file.file_id"))
    return builder.canonical(file)


_PART_READERS: dict[str, Callable[[PromptBuilder, dict[str, Any], str], str]] = {
    "text": _text,
    "refusal": _refusal,
    "input_audio": _input_audio,
    "file": _file,
}


def _tool_call(builder: PromptBuilder, call: Any, where: str) -> str:
    call = as_dict(call, where)
    if "function" not in call:  # custom tools and whatever comes next
        return builder.canonical(call)
    return _function(builder, call["function"], f"{where}.function")


def _function(builder: PromptBuilder, function: Any, where: str) -> str:
    function = as_dict(function, where)
    name = builder.name(as_str(function.get("name"), f"{where}.name"))
    arguments = function.get("arguments")
    text = builder.text(arguments) if isinstance(arguments, str) else builder.canonical(arguments)
    return f"<tool_call {name}>{text}"
