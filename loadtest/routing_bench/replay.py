"""Replay conversations through a driver: arrivals on schedule, turns in order, real replies.

A chat's next turn re-sends the replies the engine actually generated (as a chat client
does), so its history is in the cache of the engine that answered, and nowhere else. A
request that fails is recorded with its error and its conversation stops (a user whose
request failed does not send the follow-up); the run goes on. With a window, no request
is sent after it ends (the users leave; what is under way finishes): a run lasts its
window plus the longest request, not until the last multi-turn chat has ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from loadtest.routing_bench.drivers import Driver
from loadtest.routing_bench.workload import MODEL, Conversation
from loadtest.workloads import Message, Turn


@dataclass(frozen=True)
class Sample:
    """One request's result; times in seconds, measured by the load generator."""

    kind: str
    arrival_s: float  # when it was sent, from the run's start
    ttft_s: float
    total_s: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    engine: str  # "" when the driver cannot know
    error: str = ""
    route_s: float = 0.0  # Push + Pick + Pull (kinference), part of the TTFT
    conversation: int = -1  # the conversation's index and the turn's number in it: the
    turn: int = -1  # same request under every router (the workload is seeded)
    response_id: str = ""  # as the engine named it ("chatcmpl-sim<seed>-<n>": which engine)
    chunk_s: tuple[float, ...] = ()  # each content chunk's time from the send (`throughput`)

    def line(self, router: str, rate: float, seed: int = 0) -> str:
        """One JSON line of `--requests`: this request as `router` served it at `rate`,
        in the run of `seed`."""
        fields = {"router": router, "rate": rate, "seed": seed, **dataclasses.asdict(self)}
        return json.dumps(fields, separators=(",", ":"))


def chunk_times(ttft_s: float, gaps_s: list[float]) -> tuple[float, ...]:
    """Each content chunk's time from the send (0.1 ms steps): the first at the TTFT."""
    return tuple(round(t, 4) for t in itertools.accumulate(gaps_s, initial=ttft_s))


def turn_messages(turn: Turn, replies: list[str]) -> list[dict[str, str]]:
    """The turn's messages with each earlier assistant reply replaced by the real one."""
    messages: list[Message] = list(turn.messages)
    assistant = [i for i, (role, _) in enumerate(messages) if role == "assistant"]
    for index, reply in zip(assistant, replies, strict=True):
        messages[index] = ("assistant", reply)
    return [{"role": role, "content": content} for role, content in messages]


def request_body(turn: Turn, replies: list[str]) -> bytes:
    """A streamed chat-completions body asking for the turn's reply length."""
    request = {
        "model": MODEL,
        "messages": turn_messages(turn, replies),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": turn.completion_tokens,
    }
    return json.dumps(request, separators=(",", ":")).encode()


class Replay:
    """Runs every conversation at its arrival time; `samples` fills as requests finish."""

    def __init__(
        self,
        driver: Driver,
        on_done: Callable[[Sample], None] | None = None,
        window_s: float | None = None,
    ) -> None:
        self.driver = driver
        self.samples: list[Sample] = []
        self._on_done = on_done
        self._window_s = window_s  # no request starts later than this after the start
        self._start = 0.0

    async def run(self, conversations: list[Conversation]) -> float:
        """Every conversation to its end; returns the seconds from start to the last reply."""
        self._start = time.perf_counter()
        tasks = [asyncio.create_task(self._conversation(c)) for c in conversations]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return time.perf_counter() - self._start

    async def _conversation(self, conversation: Conversation) -> None:
        if self._window_s is not None and conversation.arrival_s >= self._window_s:
            return  # its user comes after the window: never sent, so not waited for either
        await self._sleep_until(conversation.arrival_s)
        replies: list[str] = []
        for number in range(len(conversation.turns)):
            if not await self._pause(conversation.think_s[number - 1] if number else 0.0):
                return
            sample, reply = await self._request(conversation, number, replies)
            self.samples.append(sample)
            if self._on_done is not None:
                self._on_done(sample)
            if sample.error:
                return
            replies.append(reply)

    async def _request(
        self, conversation: Conversation, number: int, replies: list[str]
    ) -> tuple[Sample, str]:
        kind, turn = conversation.kind, conversation.turns[number]
        arrival = time.perf_counter() - self._start
        try:
            outcome = await self.driver.send(request_body(turn, replies))
        except Exception as error:  # recorded, counted and shown in the report
            failed = Sample(
                kind, arrival, 0.0, 0.0, 0, 0, 0, "", f"{type(error).__name__}: {error}",
                conversation=conversation.index, turn=number,
            )  # fmt: skip
            return failed, ""
        result = outcome.stream
        sample = Sample(
            kind,
            arrival,
            result.ttft_s,
            result.total_s,
            result.prompt_tokens,
            result.cached_tokens,
            result.completion_tokens,
            outcome.engine,
            route_s=outcome.pick_s,
            conversation=conversation.index,
            turn=number,
            response_id=result.response_id,
            chunk_s=chunk_times(result.ttft_s, result.gaps_s),
        )
        return sample, result.text

    async def _pause(self, seconds: float) -> bool:
        """Think for `seconds`; False when the window closes first (the user leaves)."""
        if self._window_s is None:
            await asyncio.sleep(seconds)
            return True
        left = self._start + self._window_s - time.perf_counter()
        await asyncio.sleep(max(min(seconds, left), 0.0))
        return seconds < left

    async def _sleep_until(self, offset_s: float) -> None:
        delay = self._start + offset_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
