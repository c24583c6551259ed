"""The simulated tokenizer: prompts as text, token ids for render, generated text.

A token is `CHARS_PER_TOKEN` characters, the cost model's estimate, so a prompt's token
count, its render ids and its prefix-cache blocks all agree. Chat messages are rendered
through a fixed template; an assistant reply re-sent in the next turn renders to exactly
the text the engine generated after the previous prompt, so a chat's next turn finds its
history in the prefix cache, as with a real engine.
"""

from __future__ import annotations

import json
import math
import random
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

CHARS_PER_TOKEN = 4
VOCAB_SIZE = 128256  # Llama 3's, so render ids look like a real tokenizer's
_RING_TOKENS = 4096  # generated text is cut from a ring of this many seeded tokens
_WORDS = (  # three letters and a space: one token each
    "the and for are but not you all any can had her was one our out day get has him his "
    "how man new now old see two way who boy did its let put say she too use end far few "
    "run big set try ask own why men top low"
)
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def token_count(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def token_ids(text: str) -> list[int]:
    """Deterministic ids, one per `CHARS_PER_TOKEN` characters: equal prefixes, equal ids."""
    data = text.encode()
    if len(data) == len(text):  # ASCII: byte offsets are character offsets
        return [
            zlib.crc32(data[i : i + CHARS_PER_TOKEN]) % VOCAB_SIZE
            for i in range(0, len(data), CHARS_PER_TOKEN)
        ]
    return [
        zlib.crc32(text[i : i + CHARS_PER_TOKEN].encode()) % VOCAB_SIZE
        for i in range(0, len(text), CHARS_PER_TOKEN)
    ]


def text_of_ids(ids: Sequence[int]) -> str:
    """A prompt given as token ids, as text of exactly one token per id."""
    return "".join(map(_id_text, ids))


def _id_text(token: int) -> str:
    digits = ""
    for _ in range(CHARS_PER_TOKEN):
        token, digit = divmod(token, len(_DIGITS))
        digits += _DIGITS[digit]
    return digits


def render_chat(messages: Sequence[Mapping[str, Any]], tools: Any = None) -> str:
    """The prompt text of a chat: tools, then each message, then the assistant's turn."""
    parts = [] if tools is None else [f"<|tools|>\n{_canonical(tools)}\n"]
    for message in messages:
        parts.append(f"<|{message.get('role', 'user')}|>\n{_content(message)}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "".join(
            part["text"]
            if isinstance(part, dict) and part.get("type") == "text" and "text" in part
            else _canonical(part)
            for part in content
        )
    else:
        text = "" if content is None else _canonical(content)
    calls = message.get("tool_calls")
    return text if calls is None else text + _canonical(calls)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Vocabulary:
    """Seeded generated text: each completion is a run of tokens cut from a fixed ring."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self._rng = rng
        choices = _WORDS.split()
        words = [" " + rng.choice(choices) for _ in range(_RING_TOKENS)]
        self._ring = "".join(words)

    def completion(self, tokens: int) -> str:
        """`tokens` tokens of text (`CHARS_PER_TOKEN` characters each); draws one offset."""
        start = self._rng.randrange(_RING_TOKENS) * CHARS_PER_TOKEN
        end = start + tokens * CHARS_PER_TOKEN
        ring = self._ring
        if end <= len(ring):
            return ring[start:end]
        return (ring * (end // len(ring) + 1))[start:end]
