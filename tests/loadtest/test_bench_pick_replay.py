"""The Pick replay times the real Pick on the routing benchmark's bodies over 8 workers."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kinference.requests import offload, process
from loadtest.bench_pick_replay import ENDPOINTS, bodies, render, replay


def test_the_bodies_are_the_routing_workload_in_sending_order() -> None:
    sent = bodies(60, seed=1)
    assert len(sent) >= 50
    prompts = [json.loads(body)["messages"] for body in sent]
    # Documents of ~48 KB and chats whose later turns re-send their history.
    assert max(len(body) for body in sent) > 40_000
    assert any(len(messages) > 2 for messages in prompts)


async def test_a_round_picks_every_body_over_the_eight_endpoints() -> None:
    sent = bodies(60, seed=1)
    spent, after = await replay(sent, warm=10)
    assert len(spent) == len(after) == len(sent) - 10
    assert all(value > 0 for value in spent)
    assert "mean per round lowest" in render([(spent, after)], len(sent))
    assert len(ENDPOINTS) == 8


def _children() -> set[int]:
    """This process's live child processes (a started parse worker is one)."""
    tasks = Path(f"/proc/{os.getpid()}/task").iterdir()
    return {int(pid) for task in tasks for pid in (task / "children").read_text().split()}


async def test_a_round_leaves_no_parse_worker_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its App was never closed: the parse worker it started for the documents stayed up,
    and its pipes' transports were collected in a later test of the same process (a
    ResourceWarning failing that test, e.g. test_bench_picker_parts's). Whether a round
    starts a worker depends on the machine's speed (a chunk's scan goes to it past
    LOOP_SCAN_S on the loop): here every chunk's does."""
    monkeypatch.setattr(offload, "LOOP_SCAN_S", 0.0)
    started: list[int] = []
    start = process._Running.start

    async def recorded(command: Sequence[str]) -> Any:
        running = await start(command)
        started.append(running.popen.pid)
        return running

    monkeypatch.setattr(process._Running, "start", staticmethod(recorded))
    await replay(bodies(60, seed=1), warm=0)
    assert started
    assert _children() & set(started) == set()
