"""Realistic chat bodies for the Pick latency benchmark, each distinct, sharing a system prompt.

Text is word salad drawn from an English-like vocabulary with a fixed seed (sentences and
paragraphs of natural lengths), so the JSON scanner and the prompt extractor see what they
see in production: mostly ASCII prose with the odd escape (quotes, newlines, a non-ASCII
word now and then).

- small bodies (a few KiB): the shared system prompt and one distinct user question;
- large bodies (about 1 MiB): the shared system prompt, then a long conversation of user and
  assistant turns of ~16 KiB each (pasted documents, long answers). Every turn stays below
  the 64 KiB at which the extractor stops copying text, so prefix hashing reads its full
  budget (the first 64 KiB of prompt text) on every Pick. The first user turn carries the
  request's own tag, so no two requests share more than the system prompt.
"""

from __future__ import annotations

import json
import random

from loadtest.flows import CHUNK_BYTES, Body

MODEL = "bench-model"
TURN_CHARS = 16 * 1024

_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "an",
    "have",
    "which",
    "not",
    "but",
    "all",
    "were",
    "can",
    "we",
    "their",
    "more",
    "has",
    "been",
    "one",
    "will",
    "also",
    "would",
    "there",
    "when",
    "model",
    "request",
    "worker",
    "latency",
    "cache",
    "prefix",
    "token",
    "budget",
    "queue",
    "router",
    "policy",
    "tenant",
    "inference",
    "cluster",
    "gateway",
    "endpoint",
    "engine",
    "scheduler",
    "batch",
    "stream",
    "response",
    "prompt",
    "document",
    "section",
    "contract",
    "clause",
    "invoice",
    "customer",
    "support",
    "analysis",
    "report",
    "summary",
    "quarterly",
    "revenue",
    "growth",
    "margin",
    "forecast",
    "pipeline",
    "deployment",
    "kubernetes",
    "service",
    "pod",
    "memory",
    "throughput",
    "benchmark",
    "regression",
    "baseline",
    "variance",
    "percentile",
    "distribution",
    "café",
    "naïve",
    "résumé",
)


def prose(rng: random.Random, chars: int) -> str:
    """About `chars` characters of sentences and paragraphs."""
    parts: list[str] = []
    size = 0
    while size < chars:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 24))]
        sentence = " ".join(words).capitalize() + rng.choice((". ", ". ", "? ", '! "Quoted." '))
        if rng.random() < 0.12:
            sentence += "\n\n"
        parts.append(sentence)
        size += len(sentence)
    return "".join(parts)[:chars]


def system_prompt(chars: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "You are the assistant of the analytics team. " + prose(rng, chars)


def _encode(request: dict[str, object]) -> Body:
    raw = json.dumps(request, ensure_ascii=False).encode()
    chunks = tuple(raw[i : i + CHUNK_BYTES] for i in range(0, len(raw), CHUNK_BYTES))
    return Body(chunks=chunks, length=len(raw))


class BodyFactory:
    """Distinct bodies of about `size` bytes; the text is generated once and reused."""

    def __init__(self, size: int, seed: int = 7) -> None:
        self.size = size
        rng = random.Random(seed)
        self._system = system_prompt(min(8192, max(size // 2, 256)))
        self._turns: list[str] = []
        if size > 64 * 1024:
            history = size - len(self._system) - 4 * 1024
            turns = max(history // (TURN_CHARS + 512), 1)  # room for JSON escapes
            self._turns = [prose(rng, TURN_CHARS) for _ in range(turns)]
        # The last user message pads the body to exactly `size` bytes (when it can).
        self._question = prose(rng, size)
        length = 64
        for _ in range(8):
            self._cut = length
            missing = size - self.body(0).length
            if missing == 0 or length + missing < 16:
                break
            length += missing

    def body(self, index: int) -> Body:
        """The `index`th body: distinct from its first user turn on."""
        tag = f"Request {index:08d}. "
        messages: list[dict[str, str]] = [{"role": "system", "content": self._system}]
        for turn, text in enumerate(self._turns):
            role = "user" if turn % 2 == 0 else "assistant"
            content = (tag if turn == 0 else "") + text
            messages.append({"role": role, "content": content})
        first = not self._turns
        question = self._question[: self._cut]
        messages.append({"role": "user", "content": (tag if first else "") + question})
        request = {
            "model": MODEL,
            "messages": messages,
            "stream": True,
            "max_tokens": 512,
            "temperature": 0.2,
        }
        return _encode(request)
