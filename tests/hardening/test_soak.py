"""The soak in smoke form (6 s, ~180 requests, against a real `kinference serve` with
Redis), and the statistics its verdict rests on."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from loadtest.faults.harness import parse_metrics
from loadtest.soak import SoakConfig, run
from loadtest.soak_stats import LagReading, Sample, slope_per_minute


async def test_a_short_soak_completes_every_request_and_drains(tmp_path: Path) -> None:
    out = tmp_path / "soak.csv"
    # 6 s at 30/s: ~180 requests, with the mix's 1 KiB to 4 MiB bodies (seed 1: 3 of 4 MiB
    # among the first 180; no 32 MiB one within 540 either), sampled each second.
    summary = await run(SoakConfig(minutes=0.1, rate=30, sample_s=1.0, redis=True, out=out))
    assert summary.requests > 100
    assert summary.failed == 0, summary.examples
    assert summary.completed + summary.skipped >= summary.requests
    assert summary.lag_probes > 0  # the server's loop-lag probe ran and was scraped
    assert summary.rss_first_mib > 0
    # The run ends only once buffered bytes are back to 0 (or fails waiting for it).
    assert summary.drained_s >= 0
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 5
    assert set(rows[0]) == set(Sample.header())
    assert all(float(row["rss_mib"]) > 0 for row in rows)


def test_the_slope_is_per_minute_and_ignores_level() -> None:
    times = [0.0, 30.0, 60.0, 90.0]
    assert slope_per_minute(times, [500.0, 500.5, 501.0, 501.5]) == 1.0
    assert slope_per_minute(times, [80.0, 80.0, 80.0, 80.0]) == 0.0
    assert slope_per_minute([1.0], [2.0]) == 0.0


LAG_TEXT = """\
# TYPE kinference_event_loop_lag_seconds histogram
kinference_event_loop_lag_seconds_bucket{{le="0.001"}} {a}
kinference_event_loop_lag_seconds_bucket{{le="0.01"}} {b}
kinference_event_loop_lag_seconds_bucket{{le="+Inf"}} {c}
kinference_event_loop_lag_seconds_sum {s}
kinference_event_loop_lag_seconds_count {c}
"""


def test_lag_quantiles_come_from_the_histogram_deltas() -> None:
    before = LagReading.of(parse_metrics(LAG_TEXT.format(a=90, b=100, c=100, s=0.05)))
    after = LagReading.of(parse_metrics(LAG_TEXT.format(a=188, b=200, c=200, s=0.15)))
    assert math.isclose(after.mean_ms_since(before), 1.0)
    assert after.p99_ms_since(before) == 10.0  # 98 of the 100 new probes under 1 ms
    assert after.p99_ms_since(before, q=0.9) == 1.0
    assert after.p99_ms_since(after) == 0.0  # no probe in between
    worse = LagReading.of(parse_metrics(LAG_TEXT.format(a=189, b=190, c=300, s=9.0)))
    assert worse.p99_ms_since(before) == math.inf
