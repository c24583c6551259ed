"""Workloads for the cluster simulation: OpenAI chat-completions requests grouped in sessions.

Two kinds of session, mixed in one shuffled list:

- shared system prompts: many users, each asking one question under one of a handful of long
  system prompts (picked with Zipf-like weights: a few products are popular);
- multi-turn chats: a conversation under one of those system prompts that grows turn by
  turn, each turn re-sending the whole history (earlier questions and the assistant's
  replies) plus a new question.

A session's turns must run in order, each after the previous one finished, as in a real chat.
The assistant's replies are part of the workload (what the simulated engine "generates"), so
the next turn's history is known up front. Text comes from `loadtest.pick_bodies` (seeded
English-like prose); everything is deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import cached_property

from loadtest.flows import Body
from loadtest.pick_bodies import _encode, prose, system_prompt

MODEL = "sim-model"
CHARS_PER_TOKEN = 4  # the engine model's and the picker's estimate for English prose
Message = tuple[str, str]  # (role, content)


@dataclass(frozen=True)
class Turn:
    """One request: the history so far plus a new question, and the reply it will get."""

    session: int  # index of its session in the workload
    turn: int  # 0 for the first request of the session
    messages: tuple[Message, ...]
    completion: str  # the reply the engine generates

    @property
    def completion_tokens(self) -> int:
        return math.ceil(len(self.completion) / CHARS_PER_TOKEN)

    @cached_property
    def prompt(self) -> str:
        """The text the engine prefills: a chat template over the messages.

        It ends with the assistant header (the generation prompt), so this prompt plus the
        completion is a prefix of the next turn's prompt, as with real chat templates.
        """
        rendered = [f"<|{role}|>\n{content}<|end|>\n" for role, content in self.messages]
        return "".join(rendered) + "<|assistant|>\n"

    def body(self) -> Body:
        """The request as a streamed chat-completions JSON body."""
        request = {
            "model": MODEL,
            "messages": [{"role": role, "content": content} for role, content in self.messages],
            "stream": True,
            "max_tokens": 1024,
        }
        return _encode(request)


@dataclass(frozen=True)
class Session:
    index: int
    kind: str  # "shared" (one question under a shared system prompt) or "chat"
    system: int  # which system prompt
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class WorkloadSpec:
    """Sizes of a workload; text lengths are in characters."""

    system_prompts: int = 4
    system_chars: int = 4096
    shared_users: int = 200  # sessions of one question
    chats: int = 100  # multi-turn sessions
    turns: tuple[int, int] = (3, 10)  # per chat, inclusive range
    question_chars: tuple[int, int] = (200, 800)
    reply_chars: tuple[int, int] = (300, 1200)

    @classmethod
    def for_requests(cls, requests: int, chat_share: float = 0.75) -> WorkloadSpec:
        """A spec of about `requests` requests, `chat_share` of them turns of chats."""
        spec = cls()
        mean_turns = sum(spec.turns) / 2
        chats = max(round(requests * chat_share / mean_turns), 1)
        shared = max(requests - round(chats * mean_turns), 0)
        return cls(shared_users=shared, chats=chats)


def system_prompts(spec: WorkloadSpec, seed: int) -> list[str]:
    return [
        system_prompt(spec.system_chars, seed=seed * 1000 + i) for i in range(spec.system_prompts)
    ]


def _popular(rng: random.Random, count: int) -> int:
    """An index in range(count), index i weighted 1/(i+1)."""
    return rng.choices(range(count), weights=[1 / (i + 1) for i in range(count)])[0]


def _text(rng: random.Random, bounds: tuple[int, int]) -> str:
    return prose(rng, rng.randint(*bounds))


def shared_prompt_session(
    spec: WorkloadSpec, rng: random.Random, prompts: list[str], index: int
) -> Session:
    system = _popular(rng, len(prompts))
    messages = (("system", prompts[system]), ("user", _text(rng, spec.question_chars)))
    turn = Turn(index, 0, messages, _text(rng, spec.reply_chars))
    return Session(index, "shared", system, (turn,))


def chat_session(spec: WorkloadSpec, rng: random.Random, prompts: list[str], index: int) -> Session:
    """A conversation whose turn t re-sends turns 0..t-1 with their replies."""
    system = _popular(rng, len(prompts))
    history: tuple[Message, ...] = (("system", prompts[system]),)
    turns: list[Turn] = []
    for number in range(rng.randint(*spec.turns)):
        messages = (*history, ("user", _text(rng, spec.question_chars)))
        turn = Turn(index, number, messages, _text(rng, spec.reply_chars))
        turns.append(turn)
        history = (*messages, ("assistant", turn.completion))
    return Session(index, "chat", system, tuple(turns))


def workload(spec: WorkloadSpec, seed: int) -> list[Session]:
    """Shared-prompt users and chats, shuffled; `Session.index` is the position in the list."""
    rng = random.Random(seed)
    prompts = system_prompts(spec, seed)
    kinds = ["shared"] * spec.shared_users + ["chat"] * spec.chats
    rng.shuffle(kinds)
    make = {"shared": shared_prompt_session, "chat": chat_session}
    return [make[kind](spec, rng, prompts, index) for index, kind in enumerate(kinds)]


def request_count(sessions: list[Session]) -> int:
    return sum(len(session.turns) for session in sessions)
