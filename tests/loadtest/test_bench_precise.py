"""The precise-mode benchmarks' pieces: the stand-in publisher's payloads decode as vLLM's and
name blocks as we do; the Pick-latency run works end to end on small prompts; the mocker
benchmark's policy validates."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kinference.config import parse_policy
from kinference.kvcache.blocks import identities
from kinference.kvcache.index import BlockIndex
from kinference.kvevents.wire import decode_batch
from loadtest import bench_precise_pick
from loadtest.bench_precise_mocker import policy
from loadtest.kv_publisher import STEP_BLOCKS, payloads
from loadtest.tiny_model import write_model


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


@pytest.mark.timeout(300)
async def test_pick_latency_run_on_small_prompts(tmp_path: Path) -> None:
    files = write_model(tmp_path)
    args = argparse.Namespace(
        quick=True,
        sizes="4096",
        turn_gap_ms=0.0,
        modes="approximate,precise",
        workloads="",
        trace_stalls=False,
    )
    rows = await bench_precise_pick.measure(args, files)
    assert {(r.workload, r.inflight, r.mode) for r in rows} == {
        (w, i, m) for w, i in (("cold", 1), ("chat", 1), ("chat", 16))
        for m in ("approximate", "precise")
    }  # fmt: skip
    assert all(r.samples and r.pct(0.99) > 0 for r in rows)
    assert "| 4 KiB | chat | 16 |" in bench_precise_pick.table(rows)
