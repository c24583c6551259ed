"""Jinja's `trim` filter answered for a stood-in long text (`stand_in`), so that templates
that trim their contents (Llama 3's `message['content'] | trim`, Llama 3.1's system
message) render with their long texts stood in too.

Only the real text's ends are read: when there is nothing to strip (the usual case) the
stand-in itself is the answer, and nothing is copied; else the answer stands in for the
stripped text, the one copy the whole render makes as well. A stand-in for a concatenation
(`(content + '\\n') | trim`) or a `chars` argument that is not a plain `str` is refused as
every other touch is (`Touched`: the whole render decides).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kinference.tokenize.stand_in import StandIn

_ENDS = 64  # characters read at each end of a long text to find what `strip` removes


def trim_filter(trim: Callable[..., Any]) -> Callable[..., Any]:
    """Jinja's `trim` as guarded for stand-ins (refusing them), answering for one whole
    long text as the module says."""

    @functools.wraps(trim)
    def trimmed(value: Any, chars: Any = None) -> Any:
        if not isinstance(value, StandIn) or not (chars is None or type(chars) is str):
            return trim(value, chars)
        return trimmed_stand_in(value, chars)

    return trimmed


def trimmed_stand_in(value: StandIn, chars: str | None = None) -> Any:
    """`value.real().strip(chars)`, without copying the text when nothing is stripped."""
    text = value.real()
    head, tail = text[:_ENDS], text[-_ENDS:]
    lead, trail = len(head) - len(head.lstrip(chars)), len(tail) - len(tail.rstrip(chars))
    if lead == trail == 0:
        return value
    if lead == len(head) or trail == len(tail):  # what is stripped runs past either end
        stripped = text.strip(chars)
    else:
        stripped = text[lead : len(text) - trail]
    return StandIn.of(stripped) if stripped else stripped
