"""The prompt of a request, field by field in prompt order, for each shape.

Order: system or instructions, then tools (canonical JSON), then the conversation or input.
Per shape:

- CHAT: leading system/developer messages, `tools`, `functions`, the other messages;
- COMPLETION: `prompt`;  EMBEDDINGS: `input`;
- RESPONSES: `instructions`, `tools`, `previous_response_id` or `conversation` (turns
  stored with the provider: a reference, and the prompt is incomplete), `prompt` (a stored
  template, by reference), `input`;
- ANTHROPIC_MESSAGES: `system`, `tools`, `messages`.

Fields over the strict-parse size were loaded through their skeleton (`large`) before; one
that could not be is a gap: the prompt is incomplete from there on, and its size still counts
in the token estimate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kinference.bodies import Body
from kinference.requests import anthropic, chat, responses
from kinference.requests.checks import as_list
from kinference.requests.fields import Fields, LargeValue
from kinference.requests.large import Unextractable, load_large
from kinference.requests.prompt import Prompt, PromptBuilder
from kinference.requests.shapes import Shape

Adder = Callable[[PromptBuilder, Any, str], None]

PROMPT_FIELDS = ("system", "instructions", "tools", "functions", "prompt", "messages", "input")


@dataclass(slots=True)
class Loaded:
    """Top-level values with huge prompt fields loaded, and why some could not be."""

    values: dict[str, Any]
    builder: PromptBuilder = field(default_factory=PromptBuilder)
    gaps: dict[str, str] = field(default_factory=dict)


def load_prompt_fields(body: Body, fields: Fields) -> Loaded:
    """The values, with every LargeValue prompt field replaced by its parsed skeleton."""
    if fields.open_at < 0:  # parsed whole: no LargeValue anywhere (the usual, hot case)
        return Loaded(fields.values)
    large = [name for name in PROMPT_FIELDS if isinstance(fields.values.get(name), LargeValue)]
    if not large:  # the usual case: nothing to load, nothing copied
        return Loaded(fields.values)
    loaded = Loaded(dict(fields.values))
    for name in large:
        try:
            result = load_large(body, fields.values[name], fields.long_strings, name)
        except Unextractable as exc:
            loaded.gaps[name] = str(exc)
            continue
        loaded.values[name] = result.value
        loaded.builder.add_markers(result.markers)
    return loaded


def extract_prompt(shape: Shape, loaded: Loaded) -> tuple[Prompt, int]:
    """The prompt and its token estimate; raises MalformedRequest on a malformed part."""
    builder, missed = loaded.builder, set()
    for name, adder in _STEPS[shape]:
        value = loaded.values.get(name)
        if value is None or name in missed:
            continue
        if isinstance(value, LargeValue):
            missed.add(name)
            reason = loaded.gaps.get(name, f'"{name}" could not be extracted')
            builder.missing(reason, value.end - value.start)
            continue
        adder(builder, value, name)
    return builder.build()


def has_tools(values: dict[str, Any]) -> bool:
    """Whether the request declares tools (`tools`, or the deprecated `functions`)."""
    for name in ("tools", "functions"):
        value = values.get(name)
        if isinstance(value, LargeValue) or (isinstance(value, list) and value):
            return True
    return False


def _add_tools(builder: PromptBuilder, value: Any, where: str) -> None:
    tools = as_list(value, where)
    if tools:
        builder.segment([builder.canonical(tools)], where)


_STEPS: dict[Shape, tuple[tuple[str, Adder], ...]] = {
    Shape.CHAT: (
        ("messages", chat.add_leading_system),
        ("tools", _add_tools),
        ("functions", _add_tools),
        ("messages", chat.add_conversation),
    ),
    Shape.COMPLETION: (("prompt", chat.add_text_inputs),),
    Shape.EMBEDDINGS: (("input", chat.add_text_inputs),),
    Shape.RESPONSES: (
        ("instructions", responses.add_instructions),
        ("tools", _add_tools),
        ("previous_response_id", responses.add_previous_response),
        ("conversation", responses.add_conversation),
        ("prompt", responses.add_prompt_template),
        ("input", responses.add_input),
    ),
    Shape.ANTHROPIC_MESSAGES: (
        ("system", anthropic.add_system),
        ("tools", _add_tools),
        ("messages", anthropic.add_messages),
    ),
}
