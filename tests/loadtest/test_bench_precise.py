"""The precise-mode benchmarks' pieces: the stand-in publisher's payloads decode as vLLM's and
name blocks as we do; the Pick-latency run works end to end on small prompts; the mocker
benchmark's policy validates."""

from __future__ import annotations

import argparse
import asyncio
import itertools
from pathlib import Path
from typing import cast

import pytest

from kinference.config import parse_policy
from kinference.kvcache.blocks import identities
from kinference.kvcache.index import BlockIndex
from kinference.kvevents.wire import decode_batch
from loadtest import bench_precise_pick
from loadtest.bench_precise_mocker import policy
from loadtest.kv_publisher import STEP_BLOCKS, payloads
from loadtest.precise_pick_stats import Row, load, pool, table
from loadtest.tiny_model import write_model
from tests.virtual_time import run_virtual


def test_payload_is_a_vllm_batch_of_the_full_blocks() -> None:
    tokens = list(range(16 * (STEP_BLOCKS + 3) + 5))
    batches = [decode_batch(p) for p in payloads(tokens, 16)]
    assert len(batches) == 2
    index = BlockIndex()
    for batch in batches:
        index.apply(0, batch.events)
    assert index.longest(identities(tokens, 16), [0]) == {0: STEP_BLOCKS + 3}


def test_mocker_policy_validates(tmp_path: Path) -> None:
    write_model(tmp_path)
    for mode in ("approximate", "precise"):
        pool = parse_policy(policy(mode, ["127.0.0.1:18000"], tmp_path)).pools[0]
        assert pool.prefix.mode == mode


def _args(**overrides: object) -> argparse.Namespace:
    """The bench's command line at `--quick` on 4 KiB prompts, back to back."""
    options: dict[str, object] = {
        "quick": True,
        "sizes": "4096",
        "turn_gap_ms": 0.0,
        "cold_gap_ms": 0.0,
        "modes": "approximate,precise",
        "workloads": "",
        "trace_stalls": False,
        "picker_nice": None,
        "repeat": 1,
        "json": None,
    }
    return argparse.Namespace(**{**options, **overrides})


@pytest.mark.timeout(300)
async def test_pick_latency_run_on_small_prompts(tmp_path: Path) -> None:
    files = write_model(tmp_path)
    dumped = tmp_path / "picks.json"
    rows = await bench_precise_pick.measure(_args(json=dumped), files)
    assert {(r.workload, r.inflight, r.mode) for r in rows} == {
        (w, i, m) for w, i in (("cold", 1), ("chat", 1), ("chat", 16), ("chat-spread", 16))
        for m in ("approximate", "precise")
    }  # fmt: skip
    assert all(r.samples and r.pct(0.99) > 0 for r in rows)
    assert "| 4 KiB | chat | 16 | precise | 1 |" in table(rows)
    assert load([dumped]) == rows  # every run's Picks, as measured


@pytest.mark.timeout(300)
async def test_a_repeated_row_runs_again_with_a_fresh_picker(tmp_path: Path) -> None:
    files = write_model(tmp_path)
    args = _args(modes="precise", workloads="coldx1", repeat=2)
    rows = await bench_precise_pick.measure(args, files)
    assert [(r.workload, r.run) for r in rows] == [("cold", 0), ("cold", 1)]
    assert [len(p.samples) for p in pool(rows)] == [2 * len(rows[0].samples)]


def test_by_turn_sets_first_turns_apart() -> None:
    row = Row(4096, "chat", 16, "precise")
    row.samples = [0.001 * (i % 10 + 1) for i in range(100)] + [0.02, 0.03]
    row.turns = [1 + i % 5 for i in range(100)] + [0, 0]
    line = bench_precise_pick.by_turn(row)
    assert "first turns p50 30.00 max 30.00 ms" in line
    assert "later turns p50 6.00 max 10.00 ms" in line
    assert "2 of the slowest 2 first turns" in line
    row.turns = [0] * len(row.samples)  # single-prompt rows (cold): nothing to set apart
    assert bench_precise_pick.by_turn(row) == ""


def test_a_spread_wave_starts_its_conversations_in_turn_and_a_burst_at_once() -> None:
    """`chat-spread` starts conversation i of a wave i/inflight of a gap after the first
    (the loop's timers fire in deadline order); `chat` starts the whole wave together.
    On virtual time: a stall of the loaded machine's loop cannot make a burst look spread."""
    run_virtual(_waves())


async def _waves() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.firsts: list[tuple[str, float]] = []

        async def pick(self, prompt: str) -> tuple[float, float]:
            self.firsts.append((prompt, asyncio.get_running_loop().time()))
            return 0.0, 0.0

    conversations = [[f"c{i}"] for i in range(4)]
    for workload, spread in (("chat-spread", True), ("chat", False)):
        recorder = Recorder()
        row = Row(4096, workload, 4, "precise")
        bench = cast(bench_precise_pick.Bench, recorder)
        prompts = cast(list[list[bench_precise_pick.Prompt]], conversations)
        await bench_precise_pick.replay(bench, row, prompts, gap_s=0.04)
        assert [p for p, _ in recorder.firsts] == ["c0", "c1", "c2", "c3"]
        elapsed = recorder.firsts[-1][1] - recorder.firsts[0][1]
        assert elapsed == (pytest.approx(0.03) if spread else 0.0)  # 3 of 4 of the gap
        assert len(row.samples) == 4
    recorder, row = Recorder(), Row(4096, "cold", 1, "precise")
    await bench_precise_pick.replay(
        cast(bench_precise_pick.Bench, recorder), row, prompts, wave_gap_s=0.05
    )
    times = [at for _, at in recorder.firsts]
    assert [b - a for a, b in itertools.pairwise(times)] == [pytest.approx(0.05)] * 3  # cold gaps
