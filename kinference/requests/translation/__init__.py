"""Request bodies rewritten from one API shape to another (Anthropic Messages <-> OpenAI chat).

`translate(values, to)` maps the top-level members of a parsed request to those of the same
request in the other API; `kinference.requests.rewrite` splices the result into the body.
The response comes back translated by the gateway (`kinference.gateway.translate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kinference.requests.shapes import Shape
from kinference.requests.translation.to_chat import messages_to_chat
from kinference.requests.translation.to_messages import DEFAULT_MAX_TOKENS, chat_to_messages

# The pairs a rewrite can translate, (written as, sent as).
TRANSLATIONS = frozenset(
    {(Shape.ANTHROPIC_MESSAGES, Shape.CHAT), (Shape.CHAT, Shape.ANTHROPIC_MESSAGES)}
)


class Untranslatable(ValueError):
    """The request cannot be expressed in the destination's API; the text says why."""


def translate(values: Mapping[str, Any], written: Shape, sent: Shape) -> dict[str, Any]:
    """The top-level members of the request as `sent` expects them; raises Untranslatable."""
    try:
        if (written, sent) == (Shape.ANTHROPIC_MESSAGES, Shape.CHAT):
            return messages_to_chat(values)
        if (written, sent) == (Shape.CHAT, Shape.ANTHROPIC_MESSAGES):
            return chat_to_messages(values)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise Untranslatable(f"cannot translate to {sent.value}: {exc}") from None
    raise Untranslatable(f"no translation from {written.value} to {sent.value}")


__all__ = ["DEFAULT_MAX_TOKENS", "TRANSLATIONS", "Untranslatable", "translate"]
