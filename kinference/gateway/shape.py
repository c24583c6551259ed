"""A stream's content chunk told without parsing it, from the shape of one that was parsed.

An OpenAI-style stream sends its tokens as events that differ only in the text: the same
`id`, `model`, `created`, choice index and the rest around one `"content":"..."` string.
Once one such event has been parsed, its bytes before and after that string are the shape;
a later event made of those same bytes around another JSON string with at least one
character is a content event whose parse would find the same document but for the text
(same keys, same model, no usage), so the meter can count its token without parsing it.

The shape is taken only from bytes that leave no doubt: no backslash anywhere (so no escaped
key or quote), one `"content":` key, its value a string that decodes to the delta's text.
A matching event's string must hold no quote, backslash or control byte and be valid UTF-8
(what every JSON parser accepts as a string without escapes); anything else is parsed.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_KEY = b'"content":'
_QUOTE = 0x22
_NOT_PLAIN = re.compile(rb'[\x00-\x1f"\\]')  # what a string without escapes cannot hold
# The members whose presence makes the meter look at an event (kinference.gateway.usage):
# in the shape they are absent or null, so a matching event has nothing for it either.
_OBSERVED = ("usage", "response", "message")


class ContentShape:
    """The bytes around a content event's text: `prefix` + JSON string + `suffix`."""

    __slots__ = ("_least", "prefix", "suffix")

    def __init__(self, prefix: bytes, suffix: bytes) -> None:
        self.prefix = prefix
        self.suffix = suffix
        self._least = len(prefix) + len(suffix) + 3  # a string of one character at least

    def matches(self, data: bytes) -> bool:
        """Whether `data` (an event's payload) is this shape around a plain, non-empty
        JSON string."""
        end = len(data) - len(self.suffix)
        if len(data) < self._least or not data.startswith(self.prefix):
            return False
        start = len(self.prefix)
        if data[start] != _QUOTE or data[end - 1] != _QUOTE or not data.endswith(self.suffix):
            return False
        if _NOT_PLAIN.search(data, start + 1, end - 1):
            return False
        if data.isascii():
            return True
        try:
            data[start + 1 : end - 1].decode()
        except UnicodeDecodeError:
            return False
        return True


def learned(data: bytes, document: dict[str, Any]) -> ContentShape | None:
    """The shape of `data`, a content event's payload parsed into `document`, when its bytes
    leave no doubt (see the module's docstring); else None."""
    text = _delta_text(document)
    if text is None or b"\\" in data or data.count(_KEY) != 1:
        return None
    start = data.index(_KEY) + len(_KEY)
    end = data.find(b'"', start + 1) + 1
    if data[start] != _QUOTE or end <= start:
        return None
    try:
        same = orjson.loads(data[start:end]) == text  # the key found is the delta's
    except orjson.JSONDecodeError:
        same = False
    return ContentShape(data[:start], data[end:]) if same else None


def _delta_text(document: dict[str, Any]) -> str | None:
    """The one choice's delta text, when that and nothing the meter reads is there."""
    if any(document.get(key) is not None for key in _OBSERVED):
        return None
    choices = document.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta")
    text = delta.get("content") if isinstance(delta, dict) else None
    return text if isinstance(text, str) and text else None
