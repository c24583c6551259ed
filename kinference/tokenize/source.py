"""What to tokenize, read off a parsed request and its body.

Chat completions give `messages` (and `tools`), completions give `prompt` (text or token
ids). Values too large to be parsed at Pick (over 1 MiB) are parsed here from their span,
which is why this runs on the tokenizer thread, not the event loop. The span's bytes go to
msgspec's decoder (`requests.decode.strict_loads`: the same values as `json.loads`, which
decides what it refuses): no `str` copy of the span first, and a 1 MiB chat's messages
decode in ~2.9 instead of ~3.9 ms, with the GIL held the whole time (docs/benchmarks.md,
h93: the loop's stalls at 1 MiB are its waits for that GIL). Other shapes (responses,
Anthropic messages, embeddings) have no engine chat template to apply here: None.
"""

from __future__ import annotations

import json
from typing import Any

from kinference.bodies import Body
from kinference.requests import InferenceRequest, LargeValue, Shape
from kinference.requests.decode import Refused, strict_loads
from kinference.tokenize.history import DecodedHistory
from kinference.tokenize.tokenizer import PromptText, Untokenizable


def prompt_text(
    request: InferenceRequest, body: Body, history: DecodedHistory | None = None
) -> PromptText | None:
    values = request.fields.values
    if request.shape is Shape.CHAT:
        messages = _value(values.get("messages"), body, history)
        tools = _value(values.get("tools"), body)
        if not isinstance(messages, list):
            raise Untokenizable("messages is not an array")
        return PromptText(messages=messages, tools=tools if isinstance(tools, list) else None)
    if request.shape is Shape.COMPLETION:
        prompt = _value(values.get("prompt"), body)
        if isinstance(prompt, str):
            return PromptText(prompt=prompt)
        if isinstance(prompt, list) and all(_token_id(t) for t in prompt):
            return PromptText(token_ids=tuple(prompt))
        raise Untokenizable("prompt is neither text nor one list of token ids")
    return None


def _value(value: Any, body: Body, history: DecodedHistory | None = None) -> Any:
    if isinstance(value, LargeValue):
        if history is not None:
            found = history.messages(body, value.start, value.end)
            if found is not None:
                return found
        raw = body.read_span(value.start, value.end)
        try:
            return strict_loads(raw)
        except Refused:
            pass
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise Untokenizable(f"a prompt field does not parse: {exc}") from None
    return value


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32
