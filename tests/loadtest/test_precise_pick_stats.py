"""The precise Pick bench's figures: percentiles by nearest rank over the Picks themselves,
runs pooled per row, stalls kept per run, and the JSON that pools separate processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import bench_precise_pick
from loadtest.precise_pick_stats import Row, dump, load, per_run, pool, spread, table


def _row(mode: str, run: int, picks_ms: list[float], stalls: int = 0, lag_ms: float = 1.0) -> Row:
    row = Row(65536, "cold", 1, mode, run)
    row.samples = [ms / 1000 for ms in picks_ms]
    row.turns = [0] * len(picks_ms)
    row.with_push = [2 * s for s in row.samples]
    row.stalls, row.lag_s = stalls, lag_ms / 1000
    row.started, row.load = "2026-12-07T10:00:00Z", (0.5, 0.75)
    return row


def test_percentiles_are_nearest_ranks_of_the_picks() -> None:
    row = _row("precise", 0, [float(ms) for ms in range(100, 0, -1)])  # 1..100 ms, unsorted
    assert spread(row.samples) == "p50 50.00 ms p90 90.00 ms p99 99.00 ms max 100.00 ms"
    assert row.pct(0.99, push=True) == pytest.approx(198.0)
    few = _row("precise", 0, [1.0] * 31 + [9.0])
    assert few.pct(0.99) == pytest.approx(9.0)  # under 100 Picks, p99 is the slowest


def test_runs_pool_per_row_with_stalls_per_run() -> None:
    rows = [
        _row("approximate", 0, [1.0] * 60),
        _row("precise", 0, [2.0] * 59 + [7.0], stalls=2, lag_ms=14.0),
        _row("approximate", 1, [1.5] * 60),
        _row("precise", 1, [3.0] * 60, stalls=0, lag_ms=4.0),
        _row("precise", 2, [3.0] * 59 + [6.0], stalls=1, lag_ms=11.0),
    ]
    approximate, precise = pool(rows)
    assert approximate.key == (65536, "cold", 1, "approximate")
    assert len(approximate.samples) == 120 and len(precise.samples) == 180
    assert precise.over() == 2  # the 7 and 6 ms Picks
    assert precise.stalls() == "3 (2 of 3 runs; most 2)"
    assert precise.lag() == "14.0 (median run 11.0)"
    lines = table(rows).splitlines()
    assert len(lines) == 4
    assert "| 64 KiB | cold | 1 | precise | 3 | 180 | 3.00 / 3.00 / 6.00 / 7.00 | 2 |" in lines[3]
    assert "(= max" not in table(rows)
    assert "3.00 (= max, n < 100) / 3.00" in table(rows[3:4])
    assert per_run(rows).splitlines()[1] == (
        "64 KiB cold x1 precise, per run: Pick p99 (ms) 7.00, 3.00, 6.00;"
        " stalls > 10 ms 2, 0, 1; worst lag (ms) 14.0, 4.0, 11.0"
    )


def test_json_files_pool_as_one_run_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    dump([_row("precise", 0, [2.0] * 50), _row("precise", 1, [4.0] * 50)], {}, first)
    dump([_row("precise", 0, [8.0] * 50, stalls=1)], {"note": "x"}, second)
    rows = load([first, second])
    assert [r.run for r in rows] == [0, 1, 2]  # numbered on across files
    assert rows[2].samples == [0.008] * 50 and rows[2].load == (0.5, 0.75)
    assert rows[0] == _row("precise", 0, [2.0] * 50)
    assert bench_precise_pick.main(["--pool", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "| precise | 3 | 150 | 4.00 / 8.00 / 8.00 / 8.00 | 50 | 1 (1 of 3 runs; most 1) |" in out
