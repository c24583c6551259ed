"""The benchmark's requests: three kinds of conversation, Poisson arrivals, one seed.

- shared system prompts: one question under one of a few long system prompts;
- multi-turn chats: each turn re-sends the previous turns and their replies plus a new
  question, so every turn's prompt starts with the one before (from `loadtest.workloads`;
  `replay.py` puts the replies the engines really gave into the history);
- long-document QA: a few long documents, many single questions about each, the document
  first so that every question about it shares it as a prefix.

Conversations start at Poisson arrival times; a conversation's turns run in order, each an
exponential think time after the previous reply ended. The session arrival rate is the
request rate over the mean number of turns, so requests arrive at about `rate` per second.
Everything is a function of (spec, rate, seed): every router sees the same sequence.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from loadtest.pick_bodies import prose
from loadtest.workloads import Message, Session, Turn, WorkloadSpec, workload

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class BenchSpec:
    """Sizes of the workload; text lengths in characters, times in seconds."""

    chat_share: float = 0.5  # of the requests, turns of multi-turn chats
    doc_share: float = 0.25  # of the requests, questions about long documents
    documents: int = 4
    document_chars: int = 48_000  # ~12k tokens each: a miss costs ~0.6 s of prefill
    turns: tuple[int, int] = (2, 6)
    think_s: float = 0.5  # mean pause of a user between a reply and the next turn
    system_chars: int = 6_000
    question_chars: tuple[int, int] = (150, 500)
    reply_chars: tuple[int, int] = (200, 600)

    @classmethod
    def quick(cls) -> BenchSpec:
        """Shorter chats and replies, so a short run drains in seconds."""
        return cls(turns=(2, 3), think_s=0.25, reply_chars=(80, 240))


@dataclass(frozen=True)
class Conversation:
    """One user's requests: `turns` in order, the first at `arrival_s` after the start."""

    index: int
    kind: str  # "shared", "chat" or "doc"
    arrival_s: float
    turns: tuple[Turn, ...]
    think_s: tuple[float, ...] = field(default=())  # pause before turns 1.. (len(turns) - 1)


def _documents(spec: BenchSpec, rng: random.Random) -> list[str]:
    return [prose(rng, spec.document_chars) for _ in range(spec.documents)]


def doc_session(spec: BenchSpec, rng: random.Random, docs: list[str], index: int) -> Session:
    """One question about one document (picked uniformly: each gets many questions)."""
    document = rng.randrange(len(docs))
    messages: tuple[Message, ...] = (
        ("system", "Answer from the document below.\n\n" + docs[document]),
        ("user", prose(rng, rng.randint(*spec.question_chars))),
    )
    turn = Turn(index, 0, messages, prose(rng, rng.randint(*spec.reply_chars)))
    return Session(index, "doc", document, (turn,))


def _base_spec(spec: BenchSpec, requests: int) -> WorkloadSpec:
    """The chats and shared-prompt users of `loadtest.workloads`, sized to our share."""
    mean_turns = sum(spec.turns) / 2
    chats = max(round(requests * spec.chat_share / mean_turns), 1)
    shared = max(round(requests * (1 - spec.chat_share - spec.doc_share)), 0)
    return WorkloadSpec(
        system_chars=spec.system_chars,
        shared_users=shared,
        chats=chats,
        turns=spec.turns,
        question_chars=spec.question_chars,
        reply_chars=spec.reply_chars,
    )


def sessions(spec: BenchSpec, requests: int, seed: int) -> list[Session]:
    """About `requests` requests in sessions of the three kinds, shuffled by `seed`."""
    rng = random.Random(seed)
    base = workload(_base_spec(spec, requests), seed)
    docs = _documents(spec, rng)
    questions = max(round(requests * spec.doc_share), 0)
    mixed = base + [doc_session(spec, rng, docs, 0) for _ in range(questions)]
    rng.shuffle(mixed)
    return mixed


def conversations(spec: BenchSpec, requests: int, rate: float, seed: int) -> list[Conversation]:
    """The sessions with Poisson arrival times for about `rate` requests per second."""
    mixed = sessions(spec, requests, seed)
    total = sum(len(session.turns) for session in mixed)
    session_rate = rate * len(mixed) / total
    rng = random.Random(seed * 7919 + round(rate * 1000))
    now = 0.0
    result: list[Conversation] = []
    for index, session in enumerate(mixed):
        now += rng.expovariate(session_rate)
        pauses = tuple(rng.expovariate(1 / spec.think_s) for _ in session.turns[1:])
        result.append(Conversation(index, session.kind, now, session.turns, pauses))
    return result
