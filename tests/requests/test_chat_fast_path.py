"""The chat messages' fast path (`chat._add_messages` with `PromptBuilder.plain_messages`)
gives what the general path (`chat._add_message`, one message at a time) gives: the same
segments, completeness, counts and estimate, and the same errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinference.requests import chat
from kinference.requests.digest import text_digest
from kinference.requests.fields import MalformedRequest
from kinference.requests.prompt import LONG_TEXT_BYTES, Prompt, PromptBuilder

_SHORT = LONG_TEXT_BYTES // 4  # longer strings take `_long`'s path
_LONG = "é" * (LONG_TEXT_BYTES // 2 + 1)  # over LONG_TEXT_BYTES of UTF-8, few characters

_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "hi", "x" * _SHORT, "x" * (_SHORT + 1), _LONG, "<text:5:ab>", "\n"]),
)
_roles = st.one_of(st.sampled_from(["system", "developer", "user", "assistant", "tool"]), _text)
_part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.just("https://x/a.png")}),
)
_call = st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries({"name": _text,
                                                                     "arguments": _text})}
)  # fmt: skip
_content = st.one_of(_text, st.none(), st.lists(_part, max_size=3), st.integers())
_message = st.one_of(
    st.fixed_dictionaries({"role": _roles, "content": _content}),
    st.fixed_dictionaries({"role": _roles, "content": _content, "tool_calls": st.lists(_call)}),
    st.fixed_dictionaries({"role": _roles, "content": _content, "function_call": _call}),
    st.fixed_dictionaries({"content": _text}),  # no role
    st.fixed_dictionaries({"role": st.integers(), "content": _text}),
    st.just("not a message"),
)


def _builder(markers: bool, gap: bool) -> PromptBuilder:
    builder = PromptBuilder()
    if markers:
        builder.add_markers({"hi": text_digest("x" * (LONG_TEXT_BYTES + 1))})
    if gap:
        builder.missing("a part is missing", 100)
    return builder


def _outcome(add: Any, messages: list[Any], markers: bool, gap: bool) -> Prompt | str:
    builder = _builder(markers, gap)
    try:
        add(builder, messages)
    except MalformedRequest as exc:
        return f"error: {exc}"
    prompt, estimate = builder.build()
    return prompt if estimate == prompt.fixed_tokens + -(-prompt.text_chars // 4) else "bad"


def _fast(builder: PromptBuilder, messages: list[Any]) -> None:
    chat.add_leading_system(builder, messages, "messages")
    chat.add_conversation(builder, messages, "messages")


def _general(builder: PromptBuilder, messages: list[Any]) -> None:
    leading = chat._leading_system_count(messages, "messages")
    for index in range(leading):
        chat._add_message(builder, messages[index], "messages", index)
    for index in range(leading, len(messages)):
        chat._add_message(builder, messages[index], "messages", index)


@settings(max_examples=200, deadline=None)
@given(st.lists(_message, max_size=8), st.booleans(), st.booleans())
def test_fast_path_equals_the_general_one(messages: list[Any], markers: bool, gap: bool) -> None:
    assert _outcome(_fast, messages, markers, gap) == _outcome(_general, messages, markers, gap)


@pytest.mark.parametrize(
    ("role", "content"),
    [("user", "hi"), ("user", "x" * _SHORT), ("x" * _SHORT, "hi"), ("u", ""), ("é", "€😀")],
)
@pytest.mark.parametrize("gap", [False, True])
def test_plain_messages_are_messages_of_one_text(role: str, content: str, gap: bool) -> None:
    fast, general = _builder(False, gap), _builder(False, gap)
    assert fast.takes_plain()
    fast.plain_messages([f"{role}: {content}"] * 2, 2 * len(content))
    for _ in range(2):
        general.message(role, [general.text(content)])
    assert fast.build() == general.build()


def test_a_builder_with_markers_takes_no_plain_messages() -> None:
    assert not _builder(True, False).takes_plain()
