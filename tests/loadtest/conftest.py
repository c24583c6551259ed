"""Fixtures and helpers for the simulated engine's tests: engines on free ports."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from loadtest.sim_engine import SimEngine, SimEngineConfig

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SETTLE_S = 15.0  # upper bound for states the engine reaches on its own; tests poll

EngineFactory = Callable[..., Awaitable[SimEngine]]


@pytest.fixture
async def sim() -> AsyncIterator[EngineFactory]:
    """Start engines with config overrides (fast by default); all stop at teardown."""
    started: list[SimEngine] = []

    async def start(**overrides: Any) -> SimEngine:
        options: dict[str, Any] = {"models": (MODEL,), "time_scale": 0.02}
        options.update(overrides)
        engine = SimEngine(SimEngineConfig(**options))
        await engine.start(host="127.0.0.1", port=0)
        started.append(engine)
        return engine

    yield start
    await asyncio.gather(*(engine.stop() for engine in started))  # each drains ~0.2 s


async def eventually(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.01)


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def events(text: str) -> list[str]:
    """The data payloads of an SSE body, in order."""
    return [line[len("data: ") :] for line in text.split("\n\n") if line.startswith("data: ")]


def prose(blocks: int, tag: str) -> str:
    """`blocks` 64-character blocks of text, distinct per tag."""
    return "".join(f"{tag} {i:04d} ".ljust(64, ".") for i in range(blocks))
