"""bench_gateway_streams' arithmetic: first content told from the role chunk, added TTFT."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import cast

import pytest

from kinference.gateway.http1 import HttpClient
from loadtest import bench_gateway_streams as streams
from loadtest.bench_gateway_streams import Slice, _has_content, prompt_body, table
from loadtest.gateway_systems import System

ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
TOKEN = b'data: {"choices":[{"delta":{"content":" lorem"}}]}\n\n'


def test_the_first_content_is_a_chunk_with_text_not_the_role_chunk() -> None:
    assert not _has_content(ROLE)
    assert _has_content(TOKEN)
    assert _has_content(ROLE + TOKEN)  # the opening and a first token in one read
    assert not _has_content(b'data: {"choices":[],"usage":{"prompt_tokens":3}}\n\n')


def test_every_prompt_shares_its_prefix_and_asks_for_a_stream_with_usage() -> None:
    first, second = (json.loads(prompt_body("notes", i, 50)) for i in (1, 2))
    assert first["messages"][0] == second["messages"][0] == {"role": "system", "content": "notes"}
    assert first["messages"][1] != second["messages"][1]
    assert first["stream"] and first["stream_options"] == {"include_usage": True}
    assert first["max_tokens"] == 50


def test_the_table_gives_what_each_system_adds_to_the_engine_per_rate() -> None:
    def slice_of(ttft_ms: float, head_ms: float) -> Slice:
        return Slice([head_ms / 1000] * 100, [ttft_ms / 1000] * 100, cpu_s=0.2, chunks=10250)

    results = {
        ("engine (direct)", 6.0): slice_of(12.0, 1.0),
        ("kinference", 6.0): slice_of(13.5, 2.5),
        ("engine (direct)", 18.0): slice_of(12.0, 1.0),
        ("kinference", 18.0): slice_of(14.0, 3.0),
    }
    lines = table(results)
    assert len(lines) == 2 + 4
    assert lines[2].startswith("| engine (direct) | 6 | 12.0 | 12.0 | 12.0 |  |  |  | 1.0 |")
    assert (
        "| kinference | 6 | 13.5 | 13.5 | 13.5 | 1.5 | 1.5 | 1.5 | 2.5 | 2.5 | 2.00 | 102.5 | "
        "100 (0) |" in lines
    )
    assert lines[5].startswith("| kinference | 18 | 14.0 | 14.0 | 14.0 | 2.0 | 2.0 | 2.0 |")


async def test_a_closed_loop_keeps_its_streams_in_flight_and_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--in-flight N`: N streams at a time, each followed by the next as it ends."""
    now = [0.0]
    running, most, sent = 0, 0, 0

    async def one(client: object, url: str, body: bytes, into: Slice) -> None:
        nonlocal running, most, sent
        running += 1
        sent += 1
        most = max(most, running)
        await asyncio.sleep(0)  # the others run while this one is "streaming"
        now[0] += 0.1  # the fake clock: 0.1 s per stream
        running -= 1

    monkeypatch.setattr(streams, "one_stream", one)
    monkeypatch.setattr(streams.time, "perf_counter", lambda: now[0])
    args = argparse.Namespace(duration=2.0, shared="notes", seed=1, max_tokens=8, sent=0)
    system = System("fake", "http://127.0.0.1:1")
    await streams.closed(cast(HttpClient, None), system, 4, args, Slice())
    assert most == 4
    assert sent == args.sent == 20 + 3  # the clock passes 2 s at the 20th; 3 more had begun
