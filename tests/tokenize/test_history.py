"""A chat's messages over 1 MiB are decoded once per conversation (`history`): each turn
decodes only the messages it adds, and gets the values its whole span decodes to; a span
that does not continue a kept one as valid JSON is left to the whole decode."""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from kinference.bodies import Body
from kinference.tokenize.history import LEAD_BYTES, DecodedHistory
from tests.tokenize.files import WORDS


def _words(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(chars // 5 + 1))[:chars]


def _text(rng: random.Random, chars: int) -> str:
    """Words, and now and then what JSON escapes or writes as multibyte UTF-8."""
    extras = ["é", "日本", '"q"', "\\", "\n", "\t", "}", "]", ",", "\u2028", "😀"]
    return "".join(rng.choice(extras) if rng.random() < 0.1 else _words(rng, 8) for _ in
                   range(chars // 8 + 1))[:chars]  # fmt: skip


def _dump(rng: random.Random, messages: list[Any]) -> bytes:
    style = rng.choice([{}, {"indent": 2}, {"separators": (",", ":")}, {"ensure_ascii": False}])
    return (" " * rng.randrange(3) + json.dumps(messages, **style)).encode()  # type: ignore[arg-type]


def _body(rng: random.Random, span: bytes) -> tuple[Body, int, int]:
    """`span` inside a body cut at random places, and where it is."""
    raw = b'{"messages":' + span + b"}"
    cuts = sorted({rng.randrange(1, len(raw)) for _ in range(rng.randrange(4))})
    pieces: list[bytes | memoryview] = [
        raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)
    ]
    pieces = [memoryview(p) if rng.random() < 0.5 else p for p in pieces]
    return Body(pieces, reserved=len(raw)), 12, 12 + len(span)


def test_turns_get_their_whole_spans_values_and_decode_only_what_they_add() -> None:
    rng = random.Random(7)
    history = DecodedHistory()
    systems = [{"role": "system", "content": _text(rng, 2000)} for _ in range(2)]
    for conversation in range(12):
        messages: list[Any] = [systems[conversation % 2]]
        for turn in range(4):
            messages = [*messages, {"role": "user", "content": _text(rng, rng.randrange(1, 300))}]
            if rng.random() < 0.2:  # a message of another shape: parts, numbers, nesting
                messages.append({"role": "tool", "content": [{"type": "text", "n": [1.5, -2]}]})
            # The same formatting for a conversation's turns (a client's json.dumps).
            span = _dump(random.Random(conversation), messages)
            body, start, end = _body(rng, span)
            before = history.decoded_bytes
            decoded = history.messages(body, start, end)
            assert decoded == json.loads(span) == messages
            if turn:  # the history before it is not decoded again
                assert history.decoded_bytes - before < len(span) // 2
            messages = [*messages, {"role": "assistant", "content": _text(rng, 200)}]
    assert history.reused >= 12 * 3


def test_an_edited_or_broken_continuation_is_decoded_whole_or_left() -> None:
    rng = random.Random(11)
    history = DecodedHistory()
    first = [{"role": "system", "content": _text(rng, 3000)}, {"role": "user", "content": "hi"}]
    span = json.dumps(first).encode()
    assert history.messages(*_body(rng, span)) == first
    # The history edited before the kept end: another span, decoded whole.
    edited = [first[0], {"role": "user", "content": "hello"}, {"role": "user", "content": "x"}]
    assert history.messages(*_body(rng, json.dumps(edited).encode())) == edited
    # The same span again (a retry): the kept messages, not decoded again.
    before = history.decoded_bytes
    assert history.messages(*_body(rng, span)) == first
    assert history.decoded_bytes == before
    # What does not continue as valid JSON is left to the whole decode (which refuses it).
    for rest in (b", ]", b",]", b", {]", b" {}]", b", NaN]", b', {"a": 1}, ]', b", 1 2]"):
        broken = span[:-1] + rest
        with pytest.raises(msgspec.DecodeError):
            msgspec.json.decode(broken)
        assert history.messages(*_body(rng, broken)) is None
    # Valid continuations that are no message are decoded all the same.
    other = span[:-1] + b', 3, "x", null, [[]]]'
    assert history.messages(*_body(rng, other)) == json.loads(other)
    # A span no longer than its lead is not this module's.
    assert history.messages(*_body(rng, b"[" + b" " * (LEAD_BYTES - 2) + b"]")) is None


def test_the_kept_messages_are_bounded_in_nodes_and_bytes() -> None:
    rng = random.Random(5)
    history = DecodedHistory(max_nodes=6, max_bytes=40_000)
    for n in range(30):
        messages = [{"role": "system", "content": _words(rng, 9000)}]
        for turn in range(3):
            messages = [*messages, {"role": "user", "content": f"turn {turn} of {n}"}]
            span = json.dumps(messages).encode()
            assert history.messages(*_body(rng, span)) == messages
            assert len(history) <= 6 and history.held_bytes <= 40_000
    assert history.reused  # each conversation's later turns, while it was kept
    history = DecodedHistory(max_nodes=1000, max_bytes=1_000_000)
    system = {"role": "system", "content": _words(rng, 100_000)}
    for n in range(40):  # one system prompt shared: counted once, not per node
        messages = [system, {"role": "user", "content": f"question {n}"}]
        assert history.messages(*_body(rng, json.dumps(messages).encode())) == messages
    assert len(history) > 40 and history.held_bytes < 3 * 100_000
