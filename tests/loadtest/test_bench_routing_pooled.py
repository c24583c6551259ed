"""The routing benchmark over several seeds: pooled rows, per-seed ranges, `--seeds`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadtest.routing_bench import main, pooled, ranges, report
from loadtest.routing_bench.fleets import Fleet, SimFleet
from loadtest.routing_bench.main import options_from, parse_args, run_all
from loadtest.routing_bench.replicas import Bench
from loadtest.routing_bench.runner import RunPlan
from loadtest.routing_bench.section import section
from loadtest.routing_bench.stats import RunStats, quantile


def _row(key: str, seed: int, ttfts: list[float], tok: float, hit: float = 0.5) -> RunStats:
    return RunStats(
        key, 6.0, len(ttfts), 0, hit, None, quantile(ttfts, 0.5), quantile(ttfts, 0.9),
        quantile(ttfts, 0.99), 1.0, tok, 1.2, 0.1, 10.0, key=key, load=float(seed),
        seed=seed, ttfts_ms=tuple(ttfts),
    )  # fmt: skip


# kinference: one slow request per seed (its per-seed p90 is 10 ms in one seed, 900 in the
# other); the peer: steady at 100 ms.
KIN = [
    _row("kinference", 1, [10.0] * 19 + [900.0], tok=400),
    _row("kinference", 2, [10.0] * 8 + [900.0] * 2, tok=420),
]
PEER = [
    _row("sglang", 1, [100.0] * 20, tok=410),
    _row("sglang", 2, [100.0] * 10, tok=410),
]


def test_pooled_percentiles_are_of_every_seeds_requests() -> None:
    row = pooled.pool(KIN)
    assert (KIN[0].ttft_p90_ms, KIN[1].ttft_p90_ms) == (10.0, 900.0)
    # 30 requests, 3 of them 900 ms: the nearest-rank p90 (the 27th) is 10 ms.
    assert row.ttft_p90_ms == 10.0 and row.ttft_p99_ms == 900.0 and row.ttft_p50_ms == 10.0
    assert row.requests == 30 and row.seconds == 20.0
    assert row.out_tok_per_s == pytest.approx(410.0)  # the mean
    assert row.load == 2.0 and row.key == "kinference" and len(row.ttfts_ms) == 30
    assert row.engine_hit_rate is None  # a seed without engine counters: none pooled
    with pytest.raises(ValueError, match="several routers"):
        pooled.pool([KIN[0], PEER[0]])
    with pytest.raises(ValueError, match="no TTFT samples"):
        pooled.pool([dataclasses.replace(KIN[0], ttfts_ms=())])


def test_rows_group_by_router_and_rate_and_split_by_seed() -> None:
    rows = pooled.pooled([KIN[0], PEER[0], KIN[1], PEER[1]])
    assert [(r.key, r.requests) for r in rows] == [("kinference", 30), ("sglang", 30)]
    runs = pooled.by_seed([KIN[1], PEER[1], KIN[0], PEER[0]])
    assert [[s.seed for s in run] for run in runs] == [[1, 1], [2, 2]]


def test_targets_on_pooled_rows_and_the_per_seed_count() -> None:
    lines = ranges.pooled_summary([*KIN, *PEER])
    text = "\n".join(lines)
    assert lines[0].startswith("Pooled over seeds 1, 2:")
    assert "- pooled: PASS at 6 req/s, lowest TTFT p90: 10 ms vs sglang 100 ms" in text
    assert "- 6 req/s, lowest TTFT p90: met in 1 of 2 seed(s)" in text
    assert "| kinference | 6 | 2 | 10 | 10\u2013900 |" in text  # the per-seed range


def test_seeds_split_over_files_pool_as_one_file(tmp_path: Path) -> None:
    both, first, second = (tmp_path / name for name in ("both.json", "1.json", "2.json"))
    report.dump([*KIN, *PEER], {"regime": "mixed"}, both)
    report.dump([KIN[0], PEER[0]], {"regime": "mixed"}, first)
    report.dump([KIN[1], PEER[1]], {"regime": "mixed"}, second)
    assert report.load(both)[1] == [*KIN, *PEER]  # the samples survive the JSON
    one = ranges.summary([both], pool=True)
    assert one == ranges.summary([first, second], pool=True)
    assert one.startswith("#### mixed: pooled over 2 run(s)")
    assert "- PASS at 6 req/s, lowest TTFT p90: 10 ms vs sglang 100 ms" in one
    assert "met in 1 of 2 run(s)" in one
    # Without --pooled, as before: the range only.
    assert ranges.summary([both]).startswith("#### mixed: range over 2 run(s)")
    # Figures written before the samples were kept load, and have nothing to pool.
    old = json.loads(first.read_text())
    for row in old["results"]:
        del row["seed"], row["ttfts_ms"]
    first.write_text(json.dumps(old))
    assert report.load(first)[1][0].ttfts_ms == ()


def test_seeds_option_and_single_seed_default() -> None:
    one = options_from(parse_args(["--quick", "--regime", "mixed", "--seed", "7"]))
    assert one.seeds == (7,)
    assert isinstance(one.fleet, SimFleet) and one.fleet.setup.seed == 7
    several = options_from(parse_args(["--quick", "--seeds", "1,2,3"]))
    assert several.seeds == (1, 2, 3)
    text = section(several, [*KIN, *PEER], 60.0)
    assert "seeds 1, 2, 3" in text and "Pooled over seeds 1, 2:" in text
    assert "| kinference | 6 |" in section(one, KIN[:1], 60.0)
    assert "Pooled" not in section(one, KIN[:1], 60.0)


async def test_run_all_runs_every_seed_as_its_own_seed_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[tuple[int, int, float, str, int]] = []

    async def fake_run(plan: RunPlan, fleet: Fleet, bench: Bench) -> RunStats:
        assert isinstance(fleet, SimFleet)
        first = plan.conversations[0].arrival_s
        ran.append((bench.seed, fleet.setup.seed, plan.rate, plan.router.key, hash(first)))
        return KIN[0]

    monkeypatch.setattr(main, "run", fake_run)
    args = ["--quick", "--routers", "kinference,least_inflight", "--rates", "6"]
    await run_all(options_from(parse_args([*args, "--seeds", "4,5"])))
    several = list(ran)
    ran.clear()
    for seed in ("4", "5"):
        await run_all(options_from(parse_args([*args, "--seed", seed])))
    assert several == ran
    assert [(s, f, k) for s, f, _, k, _ in several] == [
        (4, 4, "kinference"), (4, 4, "least_inflight"), (5, 5, "kinference"),
        (5, 5, "least_inflight"),
    ]  # fmt: skip
    assert several[0][4] != several[2][4]  # the seeds' arrivals differ
