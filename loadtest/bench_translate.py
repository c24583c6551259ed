"""What API translation costs per request, beside the same request untranslated.

    python -m loadtest.bench_translate [--rounds 2000]

Request side (the picker, at Pick): `rewrite` of a chat request with a system prompt, two
turns and a tool, as is (model set, usage asked) and translated to Anthropic Messages; and
an Anthropic request translated to chat. Response side (the gateway): a 16-token chat stream
(role chunk, 16 content chunks, finish, usage, [DONE]) translated to Anthropic events, and
the Anthropic stream of the same answer translated to chat chunks; each event parsed once, as
the relay's splitter does. Prints microseconds per request and the ratio to the untranslated
rewrite, all measured in this run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from kinference.bodies import Body
from kinference.gateway.translate import translator_for
from kinference.requests import RewritePlan, Shape, parse_request, rewrite

CHAT = {
    "model": "m",
    "stream": True,
    "messages": [
        {"role": "system", "content": "You are terse. " * 20},
        {"role": "user", "content": "What is the weather in Paris? " * 10},
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": "Please hurry."},
    ],
    "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}],
}
ANTHROPIC = {
    "model": "m",
    "max_tokens": 64,
    "stream": True,
    "system": "You are terse. " * 20,
    "messages": [
        {"role": "user", "content": "What is the weather in Paris? " * 10},
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": "Please hurry."},
    ],
    "tools": [{"name": "w", "input_schema": {"type": "object"}}],
}


class Event:
    """A parsed server-sent event, as the relay hands it to a transform."""

    def __init__(self, name: str, data: bytes) -> None:
        self.name, self.data = name, data

    def json(self) -> dict[str, Any] | None:
        if self.data == b"[DONE]":
            return None
        document: dict[str, Any] = json.loads(self.data)
        return document

    @property
    def done(self) -> bool:
        return self.data == b"[DONE]"


def chat_stream() -> list[tuple[str, bytes]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps({"id": "c", "model": "m", "choices": [choice]}).encode()

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": f" word{i}"}) for i in range(16)]
    events += [chunk({}, "stop")]
    usage = {"prompt_tokens": 90, "completion_tokens": 16}
    events += [json.dumps({"id": "c", "choices": [], "usage": usage}).encode(), b"[DONE]"]
    return [("", data) for data in events]


def anthropic_stream() -> list[tuple[str, bytes]]:
    message = {"id": "msg", "model": "m", "usage": {"input_tokens": 90, "output_tokens": 1}}
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    payloads = [{"type": "message_start", "message": message}, start]
    payloads += [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": f" w{i}"},
        }
        for i in range(16)
    ]
    payloads += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 16},
        },
        {"type": "message_stop"},
    ]
    return [(p["type"], json.dumps(p).encode()) for p in payloads]


def per_call_us(work: Callable[[], object], rounds: int) -> float:
    for _ in range(min(rounds, 200)):
        work()
    started = time.perf_counter()
    for _ in range(rounds):
        work()
    return (time.perf_counter() - started) / rounds * 1e6


def rewriting(doc: dict[str, Any], sent: Shape | None, path: str) -> Callable[[], object]:
    data = json.dumps(doc).encode()
    plan = RewritePlan(model="served", include_usage=True, sent_shape=sent)

    def work() -> object:
        body = Body([data], reserved=len(data))
        return rewrite(body, parse_request(body, path=path), plan)

    return work


def streaming(written: Shape, events: list[tuple[str, bytes]]) -> Callable[[], object]:
    other = Shape.CHAT if written is Shape.ANTHROPIC_MESSAGES else Shape.ANTHROPIC_MESSAGES

    def work() -> object:
        translator = translator_for((written, other), 200, event_stream=True)
        assert translator is not None
        out = [translator.event(Event(name, data)) for name, data in events]
        return out, translator.end()

    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    base = per_call_us(rewriting(CHAT, None, "/v1/chat/completions"), rounds)
    chat_path, messages_path = "/v1/chat/completions", "/v1/messages"
    cases = [
        ("parse + rewrite, chat -> Messages", rewriting(CHAT, Shape.ANTHROPIC_MESSAGES, chat_path)),
        ("parse + rewrite, Messages -> chat", rewriting(ANTHROPIC, Shape.CHAT, messages_path)),
        ("16-token stream, chat -> Messages", streaming(Shape.ANTHROPIC_MESSAGES, chat_stream())),
        ("16-token stream, Messages -> chat", streaming(Shape.CHAT, anthropic_stream())),
    ]  # fmt: skip
    rows = [("parse + rewrite, chat as is (baseline)", base)]
    rows += [(label, per_call_us(work, rounds)) for label, work in cases]
    print(f"{'per request':44} {'us':>8} {'x baseline':>11}")
    for label, us in rows:
        print(f"{label:44} {us:8.1f} {us / base:11.2f}")


if __name__ == "__main__":
    main()
